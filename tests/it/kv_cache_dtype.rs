//! The 16-bit KV cache (`--kv-cache-dtype auto`, float16): a prompt's first chunk attends over
//! its own K/V as computed, so its logits equal a float32 cache's; only the steps after it
//! read rounded values, and those stay close.

use std::path::Path;
use std::time::Instant;

use kiln::config::KvCacheDtype;
use kiln::executor::Executor;
use kiln::testing::{direct_engine, greedy_request};

use crate::arch_parity::{fixture, read_reference};

/// First-step logits and the next step's, for one prompt, with the cache stored as `dtype`.
fn two_steps(model: &Path, prompt: Vec<u32>, dtype: KvCacheDtype) -> (Vec<f32>, Vec<f32>) {
    let (mut scheduler, mut runner) = direct_engine(model, |c| {
        c.engine.kv_cache_memory = "8MiB".into();
        c.engine.kv_cache_dtype = dtype;
    })
    .expect("engine");
    scheduler
        .add(greedy_request("r", prompt, 2, true), Instant::now())
        .expect("admitted");
    let first = scheduler.schedule(Instant::now());
    let first_logits = runner.logits(&first);
    let output = runner.execute(&first).expect("first step");
    scheduler.update_from_output(&first, output, Instant::now());
    let second = scheduler.schedule(Instant::now());
    let second_logits = runner.logits(&second);
    (first_logits, second_logits)
}

fn max_abs_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn a_16_bit_cache_gives_a_prompt_the_float32_first_step_and_a_close_second() {
    for arch in ["llama", "gemma3", "qwen2"] {
        let dir = fixture(arch);
        let reference = read_reference(&dir);
        let prompt: Vec<u32> = reference["f32"][0]["prompt_ids"]
            .as_array()
            .expect("cases")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect();
        let model = dir.join(format!("{arch}-f32.gguf"));
        let (f32_first, f32_second) = two_steps(&model, prompt.clone(), KvCacheDtype::Float32);
        for dtype in [KvCacheDtype::Auto, KvCacheDtype::Float16, KvCacheDtype::Bfloat16] {
            let (first, second) = two_steps(&model, prompt.clone(), dtype);
            // Same rows, same kernel, same order: not close, equal.
            assert_eq!(first, f32_first, "{arch} {dtype:?}: first-step logits");
            // The second step reads the prompt's K/V rounded. Logits here are of magnitude
            // 1-20; float16 moved them by up to 2e-2 and bfloat16 by about 8x that.
            let bound = if dtype == KvCacheDtype::Bfloat16 { 0.25 } else { 0.05 };
            let moved = max_abs_difference(&second, &f32_second);
            assert!(moved <= bound, "{arch} {dtype:?}: second-step logits moved {moved}");
            assert!(moved > 0.0, "{arch} {dtype:?}: the second step read a rounded cache");
        }
    }
}
