//! Test support shared by unit tests, integration tests and examples: a tiny random-weight
//! Llama written as a real GGUF file, and a real server running on a background thread.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use actix::Addr;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::Config;
use crate::executor::Executor;
use crate::kernels::GgmlType;
use crate::model::gguf::GgufValue;
use crate::model::gguf::GgufWriter;
use crate::model::tokenizer::tiny_test_vocab;
use crate::scheduler::actor::SchedulerActor;
use crate::server::{PreparedEngine, start};

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
        }
    }
}

/// Writes a random-weight Llama (tensors in F32, F16, Q8_0, Q4_0 and Q4_1) with a byte-level
/// vocabulary and a ChatML template to `dir/tiny-llama.gguf`.
pub fn write_tiny_model(dir: &Path, spec: TinyModelSpec) -> std::io::Result<PathBuf> {
    let (tokens, merges, types) = tiny_test_vocab();
    let vocab = tokens.len();
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
        .add_metadata("tokenizer.ggml.tokens", GgufValue::string_array(tokens))
        .add_metadata("tokenizer.ggml.merges", GgufValue::string_array(merges))
        .add_metadata(
            "tokenizer.ggml.token_type",
            GgufValue::Array(types.into_iter().map(GgufValue::I32).collect()),
        )
        .add_metadata("tokenizer.ggml.bos_token_id", 1u32)
        .add_metadata("tokenizer.ggml.eos_token_id", 2u32)
        .add_metadata("tokenizer.ggml.add_bos_token", false)
        .add_metadata("tokenizer.chat_template", TINY_CHAT_TEMPLATE);
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

/// A server on a free loopback port, on its own thread with its own actix system; stopped
/// when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub scheduler: Addr<SchedulerActor>,
    registry: prometheus::Registry,
    handle: actix_web::dev::ServerHandle,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Serves `prepared` with `config` (its port is replaced by a free one).
    pub fn start<E: Executor>(mut config: Config, prepared: PreparedEngine<E>) -> anyhow::Result<Self> {
        config.server.host = "127.0.0.1".into();
        config.server.port = 0;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                match start(&config, prepared).await {
                    Ok(running) => {
                        let handle = running.server.handle();
                        let registry = running.telemetry.registry.clone();
                        let _ = tx.send(Ok((running.addr, running.scheduler.clone(), registry, handle)));
                        let _ = running.server.await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        });
        let (addr, scheduler, registry, handle) = rx.recv()??;
        Ok(Self {
            addr,
            scheduler,
            registry,
            handle,
            thread: Some(thread),
        })
    }

    /// The registry `/metrics` renders (benchmarks time the render without HTTP).
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let stop = self.handle.stop(false);
        actix_web::rt::System::new().block_on(stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a direct run of the engine produced.
#[derive(Debug, Default)]
pub struct EngineRun {
    /// Each request's generated tokens.
    pub tokens: std::collections::HashMap<String, Vec<u32>>,
    pub preemptions: u64,
    /// The most requests swapped out at once.
    pub max_swapped: usize,
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
}

/// Drives a scheduler and an executor directly (no actors) until every request finished.
pub fn run_to_completion(scheduler: &mut crate::scheduler::Scheduler, executor: &mut impl Executor) -> EngineRun {
    use crate::engine::events::TokenEvent;
    let mut run = EngineRun::default();
    while scheduler.has_work() {
        let batch = scheduler.schedule(std::time::Instant::now());
        let output = match executor.execute(&batch) {
            Ok(output) => output,
            Err(e) => panic!("executor failed: {e}"),
        };
        let step = scheduler.update_from_output(&batch, output, std::time::Instant::now());
        run.preemptions += step.scheduler_stats.num_preemptions;
        run.max_swapped = run.max_swapped.max(step.scheduler_stats.num_swapped);
        run.prefix_cache_queries += step.scheduler_stats.prefix_cache_queries;
        run.prefix_cache_hits += step.scheduler_stats.prefix_cache_hits;
        for (id, event) in step.events {
            if let TokenEvent::Token { id: token, .. } = event {
                run.tokens.entry(id).or_default().push(token);
            }
        }
    }
    run
}

/// A greedy (temperature 0) request for direct engine runs.
pub fn greedy_request(id: &str, prompt: Vec<u32>, max_tokens: u32, ignore_eos: bool) -> crate::scheduler::NewRequest {
    crate::scheduler::NewRequest {
        id: id.to_string(),
        prompt_token_ids: prompt,
        params: crate::engine::sampling_params::SamplingParams {
            temperature: 0.0,
            max_tokens,
            ignore_eos,
            ..Default::default()
        },
        operation: crate::engine::types::Operation::TextCompletion,
        arrival: std::time::Instant::now(),
    }
}

/// A scheduler and the real executor for the model at `path` (no actors), with a 256 MiB KV
/// cache and a 0.5 GiB swap pool unless `tweak` says otherwise.
pub fn direct_engine(
    path: &Path,
    tweak: impl FnOnce(&mut Config),
) -> anyhow::Result<(crate::scheduler::Scheduler, crate::executor::model_runner::ModelRunner)> {
    let mut config = Config::default();
    config.model.path = path.display().to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    config.engine.swap_space_gib = 0.5;
    tweak(&mut config);
    let prepared = crate::server::prepare_model(&config, crate::model::loader::open_model(path)?)?;
    Ok((
        crate::scheduler::Scheduler::new(prepared.scheduler, prepared.end_of_generation),
        prepared.executor,
    ))
}
