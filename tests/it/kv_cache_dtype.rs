//! The 16-bit KV cache (`--kv-cache-dtype auto`, float16) and the 8-bit one (`fp8`): a
//! prompt's first chunk attends over its own K/V as computed, so its logits equal a float32
//! cache's; only the steps after it read rounded values, and those stay close (fp8's error is
//! measured here and stated in docs/02).

use std::path::Path;
use std::time::Instant;

use kiln::config::KvCacheDtype;
use kiln::executor::Executor;
use kiln::testing::real_model::{greedy_reference, model_path};
use kiln::testing::{direct_engine, greedy_request, run_to_completion};

use crate::arch_parity::{fixture, read_reference};
use crate::reference_parity::ids;

/// First-step logits and the next step's, for one prompt, with the cache stored as `dtype`.
fn two_steps(model: &Path, prompt: Vec<u32>, dtype: KvCacheDtype) -> (Vec<f32>, Vec<f32>) {
    let (mut scheduler, mut runner) = direct_engine(model, |c| {
        c.engine.kv_cache_memory = "8MiB".into();
        c.engine.kv_cache_dtype = dtype;
        c.engine.enable_prefix_caching = false;
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

fn first_prompt(arch: &str) -> (std::path::PathBuf, Vec<u32>) {
    let dir = fixture(arch);
    let reference = read_reference(&dir);
    (
        dir.join(format!("{arch}-f32.gguf")),
        ids(&reference["f32"][0]["prompt_ids"]),
    )
}

/// Largest |fp8 − float32| of a tiny model's second-step logits (magnitude 1-20): E4M3's
/// relative step is 128x float16's, and so was the error. Measured 2026-12-08: Llama 3.56,
/// Gemma 3 0.65, Qwen2 4.53 (float16: up to 2e-2).
const FP8_TINY_BOUND: f32 = 6.0;

#[test]
fn an_fp8_cache_gives_a_prompt_the_float32_first_step_and_a_bounded_second() {
    let mut moved = Vec::new();
    for arch in ["llama", "gemma3", "qwen2"] {
        let (model, prompt) = first_prompt(arch);
        let (f32_first, f32_second) = two_steps(&model, prompt.clone(), KvCacheDtype::Float32);
        let (first, second) = two_steps(&model, prompt, KvCacheDtype::Fp8);
        assert_eq!(first, f32_first, "{arch}: first-step logits");
        moved.push((arch, max_abs_difference(&second, &f32_second)));
    }
    eprintln!("fp8 moved the second step's logits by {moved:?}");
    for (arch, moved) in moved {
        assert!(moved <= FP8_TINY_BOUND, "{arch}: second-step logits moved {moved}");
        assert!(moved > 0.0, "{arch}: the second step read the 8-bit cache");
    }
}

/// The default model's reference prompts, greedy, fp8 against float32: the first-decode-step
/// logit error (measured 2026-12-07: at most 0.71, logits of magnitude 10-30) and how many
/// generated tokens agree up to each case's first difference (measured: 108 of 166).
const FP8_REAL_STEP_BOUND: f32 = 1.5;

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn an_fp8_cache_keeps_the_default_model_close_to_float32() {
    let cases = greedy_reference()["cases"].as_array().expect("cases").clone();
    let greedy = |dtype: KvCacheDtype| {
        let (mut scheduler, mut runner) = direct_engine(&model_path(), |c| {
            c.engine.kv_cache_dtype = dtype;
            c.engine.enable_prefix_caching = false;
        })
        .expect("engine");
        for case in &cases {
            let name = case["name"].as_str().expect("name");
            let len = case["greedy_ids"].as_array().expect("greedy").len() as u32;
            let request = greedy_request(name, ids(&case["prompt_ids"]), len, true);
            scheduler.add(request, Instant::now()).expect("admitted");
        }
        run_to_completion(&mut scheduler, &mut runner).tokens
    };
    let (exact, fp8) = (greedy(KvCacheDtype::Float32), greedy(KvCacheDtype::Fp8));
    let (mut same, mut total, mut worst) = (0usize, 0usize, 0.0f32);
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let (a, b) = (&exact[name], &fp8[name]);
        let agree = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        eprintln!(
            "{name}: {agree} of {} greedy tokens agree before the first difference",
            a.len()
        );
        same += agree;
        total += a.len();
        let prompt = ids(&case["prompt_ids"]);
        let (f32_first, f32_second) = two_steps(&model_path(), prompt.clone(), KvCacheDtype::Float32);
        let (first, second) = two_steps(&model_path(), prompt, KvCacheDtype::Fp8);
        assert_eq!(first, f32_first, "{name}: first-step logits");
        let moved = max_abs_difference(&second, &f32_second);
        eprintln!("{name}: first decode step's logits moved {moved}");
        worst = worst.max(moved);
    }
    eprintln!(
        "fp8 against float32: {same} of {total} greedy tokens agree (up to each case's first difference); worst first-decode-step logit error {worst}"
    );
    assert!(worst <= FP8_REAL_STEP_BOUND, "first-decode-step logits moved {worst}");
    assert!(
        same * 2 >= total,
        "only {same} of {total} greedy tokens agree with float32"
    );
}
