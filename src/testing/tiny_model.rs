//! A tiny random-weight Llama written as a real GGUF file (tensors in every supported
//! format, a byte-level vocabulary, a ChatML template): a stand-in for a real model that the
//! tests and the telemetry benchmarks generate in a moment.

use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::kernels::GgmlType;
use crate::model::gguf::GgufValue;
use crate::model::gguf::GgufWriter;
use crate::tokenizer::tiny_test_vocab;

/// ChatML, as SmolLM2 ships it (with its default system prompt).
pub const TINY_CHAT_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a tiny test model<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Shape of the tiny model.
#[derive(Debug, Clone, Copy)]
pub struct TinyModelSpec {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub layers: usize,
    pub ffn: usize,
    pub context: usize,
    pub seed: u64,
    /// Rows of the (tied) embedding; `None`: one per token of the vocabulary. More rows pad the
    /// vocabulary as some models do; fewer make a model whose tokenizer outruns its embedding.
    pub embedding_rows: Option<usize>,
    /// The `tokenizer.chat_template` written into the file (a hostile one, for the render
    /// limits' tests).
    pub chat_template: &'static str,
    /// `tokenizer.ggml.add_bos_token`: whether prompts start with BOS (`<|im_start|>`, id 1).
    pub add_bos: bool,
}

impl Default for TinyModelSpec {
    fn default() -> Self {
        Self {
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            layers: 2,
            ffn: 128,
            context: 256,
            seed: 7,
            embedding_rows: None,
            chat_template: TINY_CHAT_TEMPLATE,
            add_bos: false,
        }
    }
}

/// Writes a random-weight Llama (tensors in F32, F16, Q8_0, Q4_0 and Q4_1) with a byte-level
/// vocabulary and the spec's chat template (ChatML by default) to `dir/tiny-llama.gguf`.
pub fn write_tiny_model(dir: &Path, spec: TinyModelSpec) -> std::io::Result<PathBuf> {
    let (tokens, merges, types) = tiny_test_vocab();
    let vocab = spec.embedding_rows.unwrap_or(tokens.len());
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let mut random = |n: usize, scale: f32| -> Vec<f32> { (0..n).map(|_| rng.random_range(-scale..scale)).collect() };
    let head_dim = spec.hidden / spec.heads;
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama")
        .add_metadata("general.name", "tiny-llama")
        .add_metadata("llama.block_count", spec.layers as u32)
        .add_metadata("llama.context_length", spec.context as u32)
        .add_metadata("llama.embedding_length", spec.hidden as u32)
        .add_metadata("llama.feed_forward_length", spec.ffn as u32)
        .add_metadata("llama.attention.head_count", spec.heads as u32)
        .add_metadata("llama.attention.head_count_kv", spec.kv_heads as u32)
        .add_metadata("llama.rope.freq_base", 10000.0f32)
        .add_metadata("llama.rope.dimension_count", head_dim as u32)
        .add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
        .add_metadata("llama.vocab_size", vocab as u32)
        .add_metadata("tokenizer.ggml.model", "gpt2")
        .add_metadata("tokenizer.ggml.pre", "smollm")
        .add_metadata("tokenizer.ggml.tokens", GgufValue::string_array(tokens))
        .add_metadata("tokenizer.ggml.merges", GgufValue::string_array(merges))
        .add_metadata(
            "tokenizer.ggml.token_type",
            GgufValue::Array(types.into_iter().map(GgufValue::I32).collect()),
        )
        .add_metadata("tokenizer.ggml.bos_token_id", 1u32)
        .add_metadata("tokenizer.ggml.eos_token_id", 2u32)
        .add_metadata("tokenizer.ggml.add_bos_token", spec.add_bos)
        .add_metadata("tokenizer.chat_template", spec.chat_template);
    // Large enough logits that greedy choices are well separated.
    w.add_tensor_f32(
        "token_embd.weight",
        &[vocab, spec.hidden],
        &random(vocab * spec.hidden, 1.0),
        GgmlType::Q8_0,
    )?;
    w.add_tensor_f32(
        "output_norm.weight",
        &[spec.hidden],
        &vec![1.0; spec.hidden],
        GgmlType::F32,
    )?;
    let kv = spec.kv_heads * head_dim;
    for l in 0..spec.layers {
        let name = |p: &str| format!("blk.{l}.{p}.weight");
        w.add_tensor_f32(
            &name("attn_norm"),
            &[spec.hidden],
            &vec![1.0; spec.hidden],
            GgmlType::F32,
        )?;
        w.add_tensor_f32(
            &name("ffn_norm"),
            &[spec.hidden],
            &vec![1.0; spec.hidden],
            GgmlType::F32,
        )?;
        let s = 0.3;
        w.add_tensor_f32(
            &name("attn_q"),
            &[spec.hidden, spec.hidden],
            &random(spec.hidden * spec.hidden, s),
            GgmlType::F16,
        )?;
        w.add_tensor_f32(
            &name("attn_k"),
            &[kv, spec.hidden],
            &random(kv * spec.hidden, s),
            GgmlType::F16,
        )?;
        w.add_tensor_f32(
            &name("attn_v"),
            &[kv, spec.hidden],
            &random(kv * spec.hidden, s),
            GgmlType::F32,
        )?;
        w.add_tensor_f32(
            &name("attn_output"),
            &[spec.hidden, spec.hidden],
            &random(spec.hidden * spec.hidden, s),
            GgmlType::Q8_0,
        )?;
        w.add_tensor_f32(
            &name("ffn_gate"),
            &[spec.ffn, spec.hidden],
            &random(spec.ffn * spec.hidden, s),
            GgmlType::Q4_0,
        )?;
        w.add_tensor_f32(
            &name("ffn_up"),
            &[spec.ffn, spec.hidden],
            &random(spec.ffn * spec.hidden, s),
            GgmlType::Q4_1,
        )?;
        w.add_tensor_f32(
            &name("ffn_down"),
            &[spec.hidden, spec.ffn],
            &random(spec.ffn * spec.hidden, s),
            GgmlType::Q8_0,
        )?;
    }
    let path = dir.join("tiny-llama.gguf");
    w.write_to(&path)?;
    Ok(path)
}
