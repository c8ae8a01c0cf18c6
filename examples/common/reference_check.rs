//! The engine on this machine's device against a greedy reference in the format of
//! `../shared/reference/smollm2-greedy.json` (cases with `prompt_ids`, `greedy_ids`,
//! `stable_prefix_tokens` and `first_step_top10`): greedy tokens equal on each stable
//! prefix, first-step logits within a stated tolerance. `bench_engine --reference FILE` runs
//! it before benchmarking, so a device where the numbers are wrong reports no speed.

use std::path::Path;
use std::time::Instant;

use kiln::executor::Executor;
use kiln::testing::{direct_engine, greedy_request, run_to_completion};
use serde_json::{Value, json};

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).map(|x| x as u32).collect())
        .unwrap_or_default()
}

/// Checks every case; the report says, per case, the tokens that matched and the largest
/// first-step logit difference. `Err` when any case fails.
pub fn check(model: &Path, reference: &Path, logit_tolerance: f32) -> anyhow::Result<Value> {
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(reference)?)?;
    let cases = reference["cases"].as_array().cloned().unwrap_or_default();
    anyhow::ensure!(!cases.is_empty(), "the reference has no cases");
    let (mut scheduler, mut runner) = direct_engine(model, |_| {})?;
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap_or("case").to_owned();
        let prompt = ids(&case["prompt_ids"]);
        let expected = ids(&case["greedy_ids"]);
        let stable = (case["stable_prefix_tokens"].as_u64().unwrap_or(0) as usize).min(expected.len());

        scheduler.add(greedy_request(&name, prompt.clone(), 1, false), Instant::now())?;
        let batch = scheduler.schedule(Instant::now());
        let logits = runner.logits(&batch);
        let worst = case["first_step_top10"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|pair| {
                let token = pair[0].as_u64().unwrap_or(0) as usize;
                (logits[token] - pair[1].as_f64().unwrap_or(f64::NAN) as f32).abs()
            })
            .fold(0.0f32, f32::max);
        let output = runner.execute(&batch)?;
        scheduler.update_from_output(&batch, output, Instant::now());

        scheduler.add(
            greedy_request(&name, prompt, expected.len() as u32, false),
            Instant::now(),
        )?;
        let generated = run_to_completion(&mut scheduler, &mut runner)
            .tokens
            .remove(&name)
            .unwrap_or_default();
        let matched = generated.iter().zip(&expected).take_while(|(a, b)| a == b).count();
        println!(
            "| {name} | {matched} of {stable} stable tokens | max |Δlogit| {worst:.2e} (tolerance {logit_tolerance:.0e}) |"
        );
        if matched < stable || worst.is_nan() || worst > logit_tolerance {
            failures.push(name.clone());
        }
        report.push(
            json!({"case": name, "stable_prefix_tokens": stable, "matched_tokens": matched,
            "max_first_step_logit_diff": worst}),
        );
    }
    anyhow::ensure!(failures.is_empty(), "reference parity failed for {failures:?}");
    Ok(json!({"logit_tolerance": logit_tolerance, "cases": report}))
}
