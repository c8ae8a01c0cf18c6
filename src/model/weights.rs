//! Turns named host tensors (from GGUF or safetensors) into the burn [`Model`].
//!
//! Both formats are addressed by GGUF's tensor names; the Hugging Face loader maps its keys
//! onto them with the architecture's remap table ([`WeightLayout::hf_names`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::tensor::{Tensor, TensorData, backend::Backend};

use super::arch::{self, WeightLayout};
use super::config::ModelConfig;
use super::decoder::{DecoderLayer, NormWeight};
use super::embedding::Embedding;
use super::error::ModelError;
use super::projection::Projection;
use super::rope::RotaryEmbedding;
use super::transformer::Model;
use crate::kernels::{GgmlType, PackedMatrix};

/// A row-major f32 tensor in host memory; projections are `[out, in]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Where weights come from.
pub trait WeightSource {
    /// The tensor with the given GGUF-style name, or `None` when the file lacks it.
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, ModelError>;
    /// The tensor in quantised blocks the CPU kernel multiplies directly, or `None` when it
    /// is stored some other way (or the file lacks it).
    fn packed(&self, _name: &str) -> Result<Option<PackedMatrix>, ModelError> {
        Ok(None)
    }
    /// The ggml type the tensor is stored in, when the source is a GGUF file.
    fn stored_type(&self, _name: &str) -> Option<GgmlType> {
        None
    }
    /// Whether the file has the tensor (without reading it).
    fn has_tensor(&self, name: &str) -> bool;
    /// Whether Q/K rows are stored permuted for interleaved RoPE (llama.cpp's convention).
    fn qk_rows_interleaved(&self) -> bool;
    /// The file named in errors.
    fn path(&self) -> &Path;
}

/// How weights are laid out on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Keep projections stored in Q4_0/Q4_1/Q8_0 blocks packed for the CPU kernel instead of
    /// widening them to f32 (the values, and so the parity with the reference, are the same).
    pub keep_quantized: bool,
}

impl Default for LoadOptions {
    /// Packed on the CPU, where decode is bound by bytes read; f32 on CUDA, where burn's
    /// kernels run and the host-side kernel would force a copy per projection.
    fn default() -> Self {
        Self {
            keep_quantized: !cfg!(feature = "cuda"),
        }
    }
}

/// One row block of a fused projection: a GGUF tensor name, its rows, and the heads whose
/// Q/K rows llama.cpp permuted (`None` for tensors it leaves alone).
struct Part {
    name: String,
    rows: usize,
    permuted_heads: Option<usize>,
}

/// Builds the model of `config.architecture` on `device` from `source`.
pub fn build_model<B: Backend>(
    config: &ModelConfig,
    source: &dyn WeightSource,
    options: LoadOptions,
    device: &B::Device,
) -> Result<Model<B>, ModelError> {
    let architecture = arch::by_name(config.architecture).ok_or_else(|| ModelError::Unsupported {
        path: source.path().to_path_buf(),
        message: format!(
            "architecture `{}` (supported: {})",
            config.architecture,
            arch::supported_names()
        ),
    })?;
    let loader = Loader {
        config,
        source,
        options,
        layout: architecture.layout(),
        path: source.path().to_path_buf(),
    };
    let c = config;
    let head_name = if source.has_tensor("output.weight") {
        "output.weight"
    } else {
        "token_embd.weight"
    };
    let lm_head = loader.projection::<B>(&[Part::plain(head_name, c.vocab_size)], c.hidden_size, device)?;
    let tied_head = match &lm_head {
        Projection::Packed(matrix) if head_name == "token_embd.weight" => Some(Arc::clone(matrix)),
        _ => None,
    };
    let embed = loader.embedding(tied_head, device)?;
    let layers = (0..c.num_layers)
        .map(|i| loader.layer::<B>(i, device))
        .collect::<Result<Vec<_>, _>>()?;
    let final_norm = loader.vector("output_norm.weight", c.hidden_size)?;
    let local_rope = c
        .features
        .local_rope_theta
        .map(|theta| RotaryEmbedding::new(c.head_dim, theta, c.max_position_embeddings, device));
    Ok(Model {
        config: c.clone(),
        embed,
        layers,
        final_norm: NormWeight::new(final_norm, device),
        lm_head,
        rope: RotaryEmbedding::scaled(
            c.head_dim,
            c.rope_theta,
            &c.rope_scaling,
            c.max_position_embeddings,
            device,
        ),
        local_rope,
        device: device.clone(),
        adapters: Vec::new(),
    })
}

impl Part {
    fn plain(name: &str, rows: usize) -> Part {
        Part {
            name: name.to_string(),
            rows,
            permuted_heads: None,
        }
    }
}

struct Loader<'a> {
    config: &'a ModelConfig,
    source: &'a dyn WeightSource,
    options: LoadOptions,
    layout: WeightLayout,
    path: PathBuf,
}

impl Loader<'_> {
    fn layer<B: Backend>(&self, i: usize, device: &B::Device) -> Result<DecoderLayer<B>, ModelError> {
        let (c, f, layout) = (self.config, &self.config.features, self.layout);
        let name = |part: &str| format!("blk.{i}.{part}.weight");
        let (q_dim, kv_dim, ffn) = (c.q_dim(), c.kv_dim(), c.intermediate_size);
        let interleaved = layout.gguf_qk_interleaved && self.source.qk_rows_interleaved();
        let permuted = |name: String, rows: usize, heads: usize| Part {
            name,
            rows,
            permuted_heads: interleaved.then_some(heads),
        };
        let qkv = if layout.fused_qkv {
            vec![Part::plain(&name("attn_qkv"), q_dim + 2 * kv_dim)]
        } else {
            vec![
                permuted(name("attn_q"), q_dim, c.num_heads),
                permuted(name("attn_k"), kv_dim, c.num_kv_heads),
                Part::plain(&name("attn_v"), kv_dim),
            ]
        };
        let gate_up = if layout.fused_gate_up {
            vec![Part::plain(&name("ffn_up"), 2 * ffn)]
        } else {
            vec![Part::plain(&name("ffn_gate"), ffn), Part::plain(&name("ffn_up"), ffn)]
        };
        let norm =
            |part: &str, len: usize| Ok::<_, ModelError>(NormWeight::new(self.vector(&name(part), len)?, device));
        let qkv_bias = if f.qkv_bias {
            let bias = |part: &str, rows: usize, heads: usize| {
                let values = self.vector(&format!("blk.{i}.{part}.bias"), rows)?;
                Ok::<_, ModelError>(match interleaved && part != "attn_v" {
                    true => unpermuted_row_order(rows, heads)
                        .into_iter()
                        .map(|r| values[r])
                        .collect(),
                    false => values,
                })
            };
            let mut values = bias("attn_q", q_dim, c.num_heads)?;
            values.extend(bias("attn_k", kv_dim, c.num_kv_heads)?);
            values.extend(bias("attn_v", kv_dim, c.num_kv_heads)?);
            Some(NormWeight::new(values, device))
        } else {
            None
        };
        let qk_norm = match f.qk_norm {
            true => Some((norm("attn_q_norm", c.head_dim)?, norm("attn_k_norm", c.head_dim)?)),
            false => None,
        };
        let (post_attn_norm, post_ffn_norm) = match f.post_norms {
            true => (
                Some(norm("post_attention_norm", c.hidden_size)?),
                Some(norm("post_ffw_norm", c.hidden_size)?),
            ),
            false => (None, None),
        };
        let window = c.layer_window(i);
        Ok(DecoderLayer {
            attn_norm: norm("attn_norm", c.hidden_size)?,
            qkv: self.projection(&qkv, c.hidden_size, device)?,
            qkv_bias,
            qk_norm,
            attn_out: self.projection(&[Part::plain(&name("attn_output"), c.hidden_size)], q_dim, device)?,
            post_attn_norm,
            ffn_norm: norm("ffn_norm", c.hidden_size)?,
            gate_up: self.projection(&gate_up, c.hidden_size, device)?,
            down: self.projection(&[Part::plain(&name("ffn_down"), c.hidden_size)], ffn, device)?,
            post_ffn_norm,
            window,
            local_rope: window.is_some() && f.local_rope_theta.is_some(),
        })
    }

    /// The parts' rows stacked into one projection from `cols` inputs: packed when the
    /// options and the file allow, else widened to f32 and transposed for burn's matmul.
    fn projection<B: Backend>(
        &self,
        parts: &[Part],
        cols: usize,
        device: &B::Device,
    ) -> Result<Projection<B>, ModelError> {
        if self.options.keep_quantized
            && let Some(packed) = self.packed_parts(parts, cols)?
        {
            return Ok(Projection::Packed(Arc::new(packed)));
        }
        let dense = parts
            .iter()
            .map(|part| {
                let t = self.matrix(&part.name, part.rows, cols)?;
                Ok(match part.permuted_heads {
                    Some(heads) => unpermute_rows(&t, heads),
                    None => t,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Projection::Dense(to_tensor(transpose(&stack_rows(&dense)), device)))
    }

    /// The token embedding: the tied head's packed blocks, or the table's own, on the packed
    /// path when the file stores it in a packed type; else widened to an f32 tensor.
    fn embedding<B: Backend>(
        &self,
        tied_head: Option<Arc<PackedMatrix>>,
        device: &B::Device,
    ) -> Result<Embedding<B>, ModelError> {
        let (name, c) = ("token_embd.weight", self.config);
        if self.options.keep_quantized
            && let Some(source) = self.source.stored_type(name)
        {
            let matrix = match tied_head {
                Some(head) => Some(head),
                None => self
                    .packed_parts(&[Part::plain(name, c.vocab_size)], c.hidden_size)?
                    .map(Arc::new),
            };
            if let Some(matrix) = matrix {
                return Ok(Embedding::Packed { matrix, source });
            }
        }
        let table = self.matrix(name, c.vocab_size, c.hidden_size)?;
        Ok(Embedding::Dense(to_tensor(table, device)))
    }

    /// `None` when any part is not stored in packable blocks, or they differ in format.
    fn packed_parts(&self, parts: &[Part], cols: usize) -> Result<Option<PackedMatrix>, ModelError> {
        let mut packed = Vec::with_capacity(parts.len());
        for part in parts {
            let Some(m) = self.source.packed(&part.name)? else {
                return Ok(None);
            };
            if (m.rows, m.cols) != (part.rows, cols) {
                return Err(self.shape_mismatch(&part.name, vec![part.rows, cols], vec![m.rows, m.cols]));
            }
            packed.push(match part.permuted_heads {
                Some(heads) => m.reorder_rows(&unpermuted_row_order(m.rows, heads)),
                None => m,
            });
        }
        if packed.len() == 1 {
            // One part as it is: stacking would copy it (the tied head's 189 MB on Gemma 3),
            // and the freed original stays in the allocator's heap.
            return Ok(packed.pop());
        }
        Ok(PackedMatrix::stack(&packed))
    }

    fn shape_mismatch(&self, name: &str, expected: Vec<usize>, found: Vec<usize>) -> ModelError {
        ModelError::ShapeMismatch {
            path: self.path.clone(),
            name: name.to_string(),
            expected,
            found,
        }
    }

    fn required(&self, name: &str) -> Result<HostTensor, ModelError> {
        self.source.tensor(name)?.ok_or_else(|| ModelError::MissingTensor {
            path: self.path.clone(),
            name: name.to_string(),
        })
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<HostTensor, ModelError> {
        let t = self.required(name)?;
        if t.shape != [rows, cols] {
            return Err(self.shape_mismatch(name, vec![rows, cols], t.shape));
        }
        Ok(t)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let t = self.required(name)?;
        if t.shape.iter().product::<usize>() != len || t.data.len() != len {
            return Err(self.shape_mismatch(name, vec![len], t.shape));
        }
        Ok(t.data)
    }
}

/// Undoes llama.cpp's Q/K row permutation: within each head, GGUF row `2j + t` holds
/// Hugging Face row `t * head_dim / 2 + j`. Returns, for each output row, its source row.
pub fn unpermuted_row_order(rows: usize, heads: usize) -> Vec<usize> {
    let head_dim = rows / heads;
    let half = head_dim / 2;
    let mut order = vec![0; rows];
    for h in 0..heads {
        for j in 0..half {
            for parity in 0..2 {
                order[h * head_dim + parity * half + j] = h * head_dim + 2 * j + parity;
            }
        }
    }
    order
}

/// [`unpermuted_row_order`] applied to a dense `[rows, cols]` tensor.
pub fn unpermute_rows(t: &HostTensor, heads: usize) -> HostTensor {
    let cols = t.shape[1];
    let data = unpermuted_row_order(t.shape[0], heads)
        .into_iter()
        .flat_map(|src| t.data[src * cols..(src + 1) * cols].iter().copied())
        .collect();
    HostTensor {
        shape: t.shape.clone(),
        data,
    }
}

fn stack_rows(parts: &[HostTensor]) -> HostTensor {
    let cols = parts[0].shape[1];
    let rows = parts.iter().map(|p| p.shape[0]).sum();
    let mut data = Vec::with_capacity(rows * cols);
    for p in parts {
        data.extend_from_slice(&p.data);
    }
    HostTensor {
        shape: vec![rows, cols],
        data,
    }
}

/// `[rows, cols]` → `[cols, rows]`, in cache-friendly tiles.
pub fn transpose(t: &HostTensor) -> HostTensor {
    let (rows, cols) = (t.shape[0], t.shape[1]);
    let mut data = vec![0.0; rows * cols];
    const TILE: usize = 32;
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    data[c * rows + r] = t.data[r * cols + c];
                }
            }
        }
    }
    HostTensor {
        shape: vec![cols, rows],
        data,
    }
}

fn to_tensor<B: Backend>(t: HostTensor, device: &B::Device) -> Tensor<B, 2> {
    Tensor::from_data(TensorData::new(t.data, [t.shape[0], t.shape[1]]), device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permutation() {
        // llama.cpp: reshape(heads, 2, half, cols).swapaxes(1, 2) — HF row t*half+j → 2j+t.
        let (heads, head_dim, cols) = (2, 4, 3);
        let rows = heads * head_dim;
        let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
        let half = head_dim / 2;
        let mut gguf = vec![0.0; hf.len()];
        for h in 0..heads {
            for t in 0..2 {
                for j in 0..half {
                    let src = h * head_dim + t * half + j;
                    let dst = h * head_dim + 2 * j + t;
                    gguf[dst * cols..(dst + 1) * cols].copy_from_slice(&hf[src * cols..(src + 1) * cols]);
                }
            }
        }
        let back = unpermute_rows(
            &HostTensor {
                shape: vec![rows, cols],
                data: gguf,
            },
            heads,
        );
        assert_eq!(back.data, hf);
    }

    #[test]
    fn transpose_round_trips() {
        let t = HostTensor {
            shape: vec![37, 70],
            data: (0..37 * 70).map(|x| x as f32).collect(),
        };
        let tt = transpose(&t);
        assert_eq!(tt.shape, vec![70, 37]);
        assert_eq!(tt.data[5 * 37 + 3], t.data[3 * 70 + 5]);
        assert_eq!(transpose(&tt), t);
    }
}
