//! Weight sources: a GGUF file, or a Hugging Face folder of safetensors files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

use super::arch::{LLAMA_HF_NAMES, WeightLayout};
use super::error::ModelError;
use super::gguf::GgufFile;
use super::weights::{HostTensor, WeightSource};
use crate::kernels::{GgmlType, PackedMatrix};

/// Tensors of a GGUF file, dequantised to f32 on request.
pub struct GgufWeights {
    file: GgufFile,
    path: PathBuf,
}

impl GgufWeights {
    pub fn new(file: GgufFile, path: PathBuf) -> Self {
        file.log_widened_types();
        Self { file, path }
    }
}

impl WeightSource for GgufWeights {
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        if self.file.tensor_info(name).is_none() {
            return Ok(None);
        }
        let t = self.file.tensor_f32(name)?;
        self.file.release_tensor(name);
        Ok(Some(HostTensor {
            shape: t.shape,
            data: t.data,
        }))
    }

    fn packed(&self, name: &str) -> Result<Option<PackedMatrix>, ModelError> {
        let Some(info) = self.file.tensor_info(name) else {
            return Ok(None);
        };
        let &[rows, cols] = info.shape.as_slice() else {
            return Ok(None);
        };
        let bytes = self.file.tensor_bytes(name)?;
        let packed = PackedMatrix::from_ggml(info.ty, bytes, rows, cols);
        self.file.release_tensor(name);
        Ok(packed)
    }

    fn stored_type(&self, name: &str) -> Option<GgmlType> {
        self.file.tensor_info(name).map(|info| info.ty)
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.file.tensor_info(name).is_some()
    }

    fn qk_rows_interleaved(&self) -> bool {
        true
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Maps `model.layers.3.self_attn.q_proj.weight` to `blk.3.attn_q.weight` with Llama's table.
pub fn hf_name_to_gguf(name: &str) -> Option<String> {
    remap_hf_name(LLAMA_HF_NAMES, name)
}

/// Maps a Hugging Face parameter name to its GGUF name with an architecture's table.
pub fn remap_hf_name(table: &[(&str, &str)], name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix("model.layers.") {
        let (layer, param) = rest.split_once('.')?;
        layer.parse::<usize>().ok()?;
        let (_, gguf) = table.iter().find(|(hf, _)| *hf == param)?;
        return Some(format!("blk.{layer}.{gguf}"));
    }
    table.iter().find(|(hf, _)| *hf == name).map(|(_, g)| g.to_string())
}

/// All `*.safetensors` files of a folder, memory-mapped, indexed by GGUF name.
pub struct SafetensorsWeights {
    files: Vec<(PathBuf, memmap2::Mmap)>,
    /// GGUF name → (file index, original name).
    index: HashMap<String, (usize, String)>,
    /// Added to norm weights (Gemma's `1 + w`), so both formats hold the gain itself.
    norm_offset: f32,
    dir: PathBuf,
}

impl SafetensorsWeights {
    pub fn open(dir: &Path, layout: WeightLayout) -> Result<Self, ModelError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ModelError::Io { path, source }
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io(dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        paths.sort();
        if paths.is_empty() {
            return Err(ModelError::InvalidFile {
                path: dir.to_path_buf(),
                message: "no *.safetensors files".into(),
            });
        }
        let mut files = Vec::new();
        let mut index = HashMap::new();
        for path in paths {
            let file = std::fs::File::open(&path).map_err(io(&path))?;
            // SAFETY: the file is opened read-only and the map lives as long as the loader.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io(&path))?;
            let names = SafeTensors::read_metadata(&map)
                .map_err(|e| ModelError::InvalidFile {
                    path: path.clone(),
                    message: e.to_string(),
                })?
                .1
                .tensors()
                .into_keys()
                .collect::<Vec<_>>();
            for name in names {
                if let Some(gguf) = remap_hf_name(layout.hf_names, &name) {
                    index.insert(gguf, (files.len(), name));
                }
            }
            files.push((path, map));
        }
        Ok(Self {
            files,
            index,
            norm_offset: layout.hf_norm_offset,
            dir: dir.to_path_buf(),
        })
    }
}

impl WeightSource for SafetensorsWeights {
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        let Some((file, original)) = self.index.get(name) else {
            return Ok(None);
        };
        let (path, map) = &self.files[*file];
        let invalid = |message: String| ModelError::InvalidFile {
            path: path.clone(),
            message,
        };
        let st = SafeTensors::deserialize(map).map_err(|e| invalid(e.to_string()))?;
        let view = st.tensor(original).map_err(|e| invalid(e.to_string()))?;
        let bytes = view.data();
        let mut data: Vec<f32> = match view.dtype() {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(invalid(format!("tensor `{original}` has unsupported dtype {other:?}")));
            }
        };
        if self.norm_offset != 0.0 && name.ends_with("norm.weight") {
            data.iter_mut().for_each(|v| *v += self.norm_offset);
        }
        Ok(Some(HostTensor {
            shape: view.shape().to_vec(),
            data,
        }))
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn qk_rows_interleaved(&self) -> bool {
        false
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::hf_name_to_gguf;

    #[test]
    fn hf_names_map_to_gguf_names() {
        assert_eq!(
            hf_name_to_gguf("model.layers.12.mlp.down_proj.weight").as_deref(),
            Some("blk.12.ffn_down.weight")
        );
        assert_eq!(
            hf_name_to_gguf("model.embed_tokens.weight").as_deref(),
            Some("token_embd.weight")
        );
        assert_eq!(hf_name_to_gguf("model.layers.x.mlp.down_proj.weight"), None);
        assert_eq!(hf_name_to_gguf("model.rotary_emb.inv_freq"), None);
    }
}
