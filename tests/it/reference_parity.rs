//! The real default model against `../shared/reference/smollm2-greedy.json`, computed by an
//! independent implementation (transformers, float32) on the same dequantised weights.
//! Needs the model: `.ci/run` fetches it and sets `KILN_TEST_MODEL`.

use std::path::Path;
use std::time::Instant;

use kiln::model::loader::open_model;
use kiln::scheduler::NewRequest;
use kiln::testing::real_model::{greedy_reference, model_path};
use kiln::testing::{direct_engine, greedy_request, run_to_completion};
use serde_json::Value;

/// Largest allowed |kiln − reference| for a first-step logit. Both run f32 on the same
/// weights; summation order differs (measured: at most 3e-5 on logits of magnitude 10–30).
const LOGIT_TOLERANCE: f32 = 1e-3;

fn cases() -> Vec<Value> {
    greedy_reference()["cases"].as_array().expect("cases").clone()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn greedy(id: &str, prompt: Vec<u32>, max_tokens: u32) -> NewRequest {
    greedy_request(id, prompt, max_tokens, false)
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn tokenizer_reproduces_every_reference_prompt() {
    let files = open_model(&model_path()).expect("open model");
    for case in cases() {
        let text = case["text"].as_str().expect("text");
        let encoded = files.tokenizer.encode(text, false).expect("encode");
        assert_eq!(
            encoded.get_ids(),
            ids(&case["prompt_ids"]).as_slice(),
            "case {}",
            case["name"]
        );
        let decoded = files
            .tokenizer
            .decode(&ids(&case["greedy_ids"]), false)
            .expect("decode");
        assert_eq!(
            decoded,
            case["greedy_text"].as_str().expect("greedy_text"),
            "case {}",
            case["name"]
        );
    }
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn greedy_generation_reproduces_the_stable_prefixes_alone_and_batched() {
    greedy_prefixes_match_alone_and_batched(&model_path(), &cases(), GreedyShape::SMOLLM2);
}

/// Where a reference file keeps a case's stable prefix length, and how many tokens to generate.
#[derive(Clone, Copy)]
pub struct GreedyShape {
    /// The case's field holding the number of leading greedy tokens both sides must agree on.
    pub stable_field: &'static str,
    /// `None`: as many tokens as the reference generated.
    pub max_tokens: Option<u32>,
    /// Whether generation runs past an end-of-sequence token.
    pub ignore_eos: bool,
}

impl GreedyShape {
    /// The shape of `../shared/reference/` and the tiny/Q4_K_M references made like it.
    pub const SMOLLM2: GreedyShape = GreedyShape {
        stable_field: "stable_prefix_tokens",
        max_tokens: Some(32),
        ignore_eos: false,
    };
}

/// Each case's stable greedy prefix, each case alone, and then all at once (prompts of
/// different lengths share every batch) with the same tokens as alone.
pub fn greedy_prefixes_match_alone_and_batched(model: &Path, cases: &[Value], shape: GreedyShape) {
    let (mut scheduler, mut runner) = direct_engine(model, |_| {}).expect("engine");
    let request = |case: &Value| {
        let name = case["name"].as_str().expect("name");
        let generated = case["greedy_ids"].as_array().expect("greedy").len() as u32;
        greedy_request(
            name,
            ids(&case["prompt_ids"]),
            shape.max_tokens.unwrap_or(generated),
            shape.ignore_eos,
        )
    };
    let mut alone = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        scheduler.add(request(case), Instant::now()).expect("admitted");
        let out = run_to_completion(&mut scheduler, &mut runner).tokens;
        let stable = case[shape.stable_field].as_u64().expect("stable") as usize;
        let expected = ids(&case["greedy_ids"]);
        assert_eq!(&out[name][..stable], &expected[..stable], "case {name}");
        alone.push(out[name].clone());
    }
    // All cases at once: prompts of different lengths share every batch.
    for case in cases {
        scheduler.add(request(case), Instant::now()).expect("admitted");
    }
    let batched = run_to_completion(&mut scheduler, &mut runner).tokens;
    for (case, alone) in cases.iter().zip(&alone) {
        let name = case["name"].as_str().expect("name");
        assert_eq!(&batched[name], alone, "case {name}: batched output differs from alone");
    }
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn first_step_logits_match_the_reference_top10() {
    first_logits_match_top10(&model_path(), &cases(), LOGIT_TOLERANCE);
}

/// Each case's first-step logits at the reference's top ten tokens, within `tolerance`.
/// Every case is computed from its own tokens: with the prefix cache on, a case sharing a
/// chat template's opening with an earlier one would read that prefix from the 16-bit cache,
/// rounded (docs/02), and this test is about the model's arithmetic.
pub fn first_logits_match_top10(model: &Path, cases: &[Value], tolerance: f32) {
    let (mut scheduler, mut runner) = direct_engine(model, |c| c.engine.enable_prefix_caching = false).expect("engine");
    for case in cases {
        let name = case["name"].as_str().expect("name");
        scheduler
            .add(greedy(name, ids(&case["prompt_ids"]), 1), Instant::now())
            .expect("admitted");
        let batch = scheduler.schedule(Instant::now());
        let logits = runner.logits(&batch);
        let mut worst = 0.0f32;
        for pair in case["first_step_top10"].as_array().expect("top10") {
            let token = pair[0].as_u64().expect("token") as usize;
            let reference = pair[1].as_f64().expect("logit") as f32;
            worst = worst.max((logits[token] - reference).abs());
        }
        assert!(worst <= tolerance, "case {name}: max |Δlogit| {worst} > {tolerance}");
        // Finish the request so the next case starts from an empty cache.
        let output = kiln::executor::Executor::execute(&mut runner, &batch).expect("step");
        scheduler.update_from_output(&batch, output, Instant::now());
        assert!(!scheduler.has_work());
    }
}
