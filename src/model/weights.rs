//! Turns named host tensors (from GGUF or safetensors) into the burn [`Llama`].
//!
//! Both formats are addressed by GGUF's tensor names; the Hugging Face loader maps its keys
//! onto them with one remap table (`hf::HF_TO_GGUF`).

use std::path::{Path, PathBuf};

use burn::tensor::{Tensor, TensorData, backend::Backend};

use super::config::LlamaConfig;
use super::error::ModelError;
use super::llama::{DecoderLayer, Llama};
use super::rope::RotaryEmbedding;

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
    /// Whether Q/K rows are stored permuted for interleaved RoPE (llama.cpp's convention).
    fn qk_rows_interleaved(&self) -> bool;
    /// The file named in errors.
    fn path(&self) -> &Path;
}

/// Builds the model on `device` from `source`.
pub fn build_llama<B: Backend>(
    config: &LlamaConfig,
    source: &dyn WeightSource,
    device: &B::Device,
) -> Result<Llama<B>, ModelError> {
    let loader = Loader {
        config,
        source,
        path: source.path().to_path_buf(),
    };
    let c = config;
    let embed = loader.matrix("token_embd.weight", c.vocab_size, c.hidden_size)?;
    let lm_head = match source.tensor("output.weight")? {
        Some(t) => loader.check("output.weight", t, c.vocab_size, c.hidden_size)?,
        None => embed.clone(),
    };
    let layers = (0..c.num_layers)
        .map(|i| loader.layer::<B>(i, device))
        .collect::<Result<Vec<_>, _>>()?;
    let final_norm = loader.vector("output_norm.weight", c.hidden_size)?;
    Ok(Llama {
        config: c.clone(),
        embed: to_tensor(embed, device),
        layers,
        final_norm: vec_tensor(final_norm, device),
        lm_head: to_tensor(transpose(&lm_head), device),
        rope: RotaryEmbedding::new(c.head_dim, c.rope_theta, c.max_position_embeddings, device),
        device: device.clone(),
    })
}

struct Loader<'a> {
    config: &'a LlamaConfig,
    source: &'a dyn WeightSource,
    path: PathBuf,
}

impl Loader<'_> {
    fn layer<B: Backend>(&self, i: usize, device: &B::Device) -> Result<DecoderLayer<B>, ModelError> {
        let c = self.config;
        let name = |part: &str| format!("blk.{i}.{part}.weight");
        let q_dim = c.num_heads * c.head_dim;
        let mut q = self.matrix(&name("attn_q"), q_dim, c.hidden_size)?;
        let mut k = self.matrix(&name("attn_k"), c.kv_dim(), c.hidden_size)?;
        let v = self.matrix(&name("attn_v"), c.kv_dim(), c.hidden_size)?;
        if self.source.qk_rows_interleaved() {
            q = unpermute_rows(&q, c.num_heads);
            k = unpermute_rows(&k, c.num_kv_heads);
        }
        let o = self.matrix(&name("attn_output"), c.hidden_size, q_dim)?;
        let gate = self.matrix(&name("ffn_gate"), c.intermediate_size, c.hidden_size)?;
        let up = self.matrix(&name("ffn_up"), c.intermediate_size, c.hidden_size)?;
        let down = self.matrix(&name("ffn_down"), c.hidden_size, c.intermediate_size)?;
        Ok(DecoderLayer {
            attn_norm: vec_tensor(self.vector(&name("attn_norm"), c.hidden_size)?, device),
            qkv: to_tensor(transpose(&stack_rows(&[q, k, v])), device),
            attn_out: to_tensor(transpose(&o), device),
            ffn_norm: vec_tensor(self.vector(&name("ffn_norm"), c.hidden_size)?, device),
            gate_up: to_tensor(transpose(&stack_rows(&[gate, up])), device),
            down: to_tensor(transpose(&down), device),
        })
    }

    fn required(&self, name: &str) -> Result<HostTensor, ModelError> {
        self.source.tensor(name)?.ok_or_else(|| ModelError::MissingTensor {
            path: self.path.clone(),
            name: name.to_string(),
        })
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<HostTensor, ModelError> {
        let t = self.required(name)?;
        self.check(name, t, rows, cols)
    }

    fn check(&self, name: &str, t: HostTensor, rows: usize, cols: usize) -> Result<HostTensor, ModelError> {
        if t.shape != [rows, cols] {
            return Err(ModelError::ShapeMismatch {
                path: self.path.clone(),
                name: name.to_string(),
                expected: vec![rows, cols],
                found: t.shape,
            });
        }
        Ok(t)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let t = self.required(name)?;
        if t.shape.iter().product::<usize>() != len || t.data.len() != len {
            return Err(ModelError::ShapeMismatch {
                path: self.path.clone(),
                name: name.to_string(),
                expected: vec![len],
                found: t.shape,
            });
        }
        Ok(t.data)
    }
}

/// Undoes llama.cpp's Q/K row permutation: within each head, GGUF row `2j + t` holds
/// Hugging Face row `t * head_dim / 2 + j`.
pub fn unpermute_rows(t: &HostTensor, heads: usize) -> HostTensor {
    let (rows, cols) = (t.shape[0], t.shape[1]);
    let head_dim = rows / heads;
    let half = head_dim / 2;
    let mut data = vec![0.0; t.data.len()];
    for h in 0..heads {
        for j in 0..half {
            for parity in 0..2 {
                let src = h * head_dim + 2 * j + parity;
                let dst = h * head_dim + parity * half + j;
                data[dst * cols..(dst + 1) * cols].copy_from_slice(&t.data[src * cols..(src + 1) * cols]);
            }
        }
    }
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

fn vec_tensor<B: Backend>(v: Vec<f32>, device: &B::Device) -> Tensor<B, 1> {
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), device)
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
