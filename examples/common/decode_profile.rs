//! Where a one-stream decode step goes. Every packed weight matrix of the model's GGUF is
//! multiplied by one token's activations with the kernels the engine uses, in model order (so
//! each is read from memory, as in a real step, not from a warm cache), and timed by
//! projection; the sampler is timed on a vocabulary-wide row, greedy and at temperature 1;
//! memory bandwidth is measured in the same run, so bytes per token can be set against it.
//! What the whole step takes beyond these parts is attention, norms, RoPE, the residual adds
//! and the engine's own work. Included with `#[path]` by `bench_engine`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use kiln::engine::sampling_params::SamplingParams;
use kiln::executor::sampler::{SamplingContext, sample};
use kiln::kernels::{PackedMatrix, matmul_packed};
use kiln::model::gguf::GgufFile;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// One part of a decode step.
pub struct Part {
    pub name: String,
    pub seconds_per_token: f64,
    /// Weight bytes the part reads per token (kiln's repacked matrices).
    pub bytes: u64,
}

pub struct DecodeProfile {
    pub parts: Vec<Part>,
    /// Memory read bandwidth on all cores, GB/s.
    pub bandwidth_gb_s: f64,
}

/// The projection a tensor belongs to (`blk.3.attn_q.weight` → `attn_q`); the output head
/// is `output`, or `token_embd` when the model ties it to the embeddings.
fn group(name: &str, tied_head: bool) -> Option<String> {
    let stem = name.strip_suffix(".weight")?;
    if stem == "output" || (tied_head && stem == "token_embd") {
        return Some("output head".into());
    }
    let (_, part) = stem.strip_prefix("blk.")?.split_once('.')?;
    Some(part.to_owned())
}

pub fn profile(model: &Path, passes: usize) -> anyhow::Result<DecodeProfile> {
    let file = GgufFile::open(model)?;
    let tied_head = file.tensor_info("output.weight").is_none();
    let mut matrices = Vec::new();
    for info in file.tensors() {
        let Some(name) = group(&info.name, tied_head) else {
            continue;
        };
        if info.shape.len() != 2 {
            continue;
        }
        let (rows, cols) = (info.shape[0], info.shape[1]);
        let Some(packed) = PackedMatrix::from_ggml(info.ty, file.tensor_bytes(&info.name)?, rows, cols) else {
            continue;
        };
        // What kiln reads: the repacked matrix (f32 scales), not the file's f16-scaled blocks.
        matrices.push((name, packed.size_bytes() as u64, packed));
    }
    let widest = matrices.iter().map(|(_, _, m)| m.cols).max().unwrap_or(0);
    let x: Vec<f32> = (0..widest).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
    let mut parts: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for pass in 0..=passes {
        for (name, bytes, matrix) in &matrices {
            let start = Instant::now();
            std::hint::black_box(matmul_packed(&x[..matrix.cols], 1, matrix));
            let part = parts.entry(name.clone()).or_default();
            if pass > 0 {
                // Pass 0 warms the code paths; its times are dropped.
                part.0 += start.elapsed().as_secs_f64() / passes as f64;
            } else {
                part.1 += bytes;
            }
        }
    }
    let mut parts: Vec<Part> = parts
        .into_iter()
        .map(|(name, (seconds_per_token, bytes))| Part {
            name,
            seconds_per_token,
            bytes,
        })
        .collect();
    let vocab = matrices
        .iter()
        .find(|(n, _, _)| n == "output head")
        .map_or(49152, |(_, _, m)| m.rows);
    for (name, temperature) in [("sampling, greedy", 0.0), ("sampling, temperature 1", 1.0)] {
        parts.push(Part {
            name: name.into(),
            seconds_per_token: sampling_seconds(vocab, temperature, passes.max(5)),
            bytes: 0,
        });
    }
    Ok(DecodeProfile {
        parts,
        bandwidth_gb_s: read_bandwidth(),
    })
}

/// Median seconds to sample one token from a `vocab`-wide row.
fn sampling_seconds(vocab: usize, temperature: f32, runs: usize) -> f64 {
    let params = SamplingParams {
        temperature,
        ..SamplingParams::default()
    };
    let ctx = SamplingContext {
        params: &params,
        output_token_ids: &[],
        prompt_token_ids: None,
        num_generated: 0,
        end_of_generation: &[],
    };
    let row: Vec<f32> = (0..vocab).map(|i| ((i * 7919) % 1000) as f32 / 100.0).collect();
    let mut rng = StdRng::seed_from_u64(7);
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let mut logits = row.clone();
            let start = Instant::now();
            std::hint::black_box(sample(&mut logits, &ctx, &mut rng));
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// GB/s of summing a 512 MiB buffer of integers on every core (median of 5).
fn read_bandwidth() -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let data: Vec<u64> = (0..64u64 << 20).map(|i| i % 7).collect();
    let chunk = data.len().div_ceil(threads);
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            std::thread::scope(|scope| {
                for part in data.chunks(chunk) {
                    scope.spawn(move || std::hint::black_box(part.iter().fold(0u64, |a, &b| a.wrapping_add(b))));
                }
            });
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (data.len() * 8) as f64 / times[2] / 1e9
}
