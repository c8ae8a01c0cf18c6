//! Issue 31, item 3 on a real server: the choices of an `n > 1` request compute their prompt
//! once (they share its KV blocks and copy the partial one), on the tiny model's real
//! executor, with the prefix cache off and on; KV usage shows one prompt plus the tails.

use std::time::Duration;

use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_fake, start_model, start_tiny};

/// 180 tokens: 11 full blocks of 16 and 4 tokens in a 12th, so the siblings copy one block.
fn prompt() -> Vec<u32> {
    (0..180).map(|k| 3 + (k * 7) % 250).collect()
}

fn counter(text: &str, name: &str) -> f64 {
    metric_value(text, name, "").unwrap_or(0.0)
}

/// The tokens each choice generated, in choice order.
fn choice_tokens(body: &Value) -> Vec<Vec<Value>> {
    let mut choices = body["choices"].as_array().expect("choices").clone();
    choices.sort_by_key(|c| c["index"].as_u64());
    choices
        .iter()
        .map(|c| c["logprobs"]["tokens"].as_array().expect("tokens").clone())
        .collect()
}

fn complete(t: &Tiny, prompt: &[u32], n: u32, max_tokens: u32) -> Value {
    let (status, body) = t.post(
        "/v1/completions",
        &json!({"prompt": prompt, "n": n, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": true, "logprobs": 0}),
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// Prompt tokens, those computed (not cached) and iteration tokens (computed and
/// generated), once the stats actor has recorded `requests` finished requests.
fn counts_after(t: &Tiny, requests: f64) -> (f64, f64, f64) {
    let finished = |m: &str| metric_value(m, "vllm:request_success_total", "finished_reason=\"length\"");
    let text = scrape_until(t, |m| finished(m).unwrap_or(0.0) >= requests);
    let computed = metric_value(&text, "vllm:prompt_tokens_by_source_total", "source=\"local_compute\"");
    (
        counter(&text, "vllm:prompt_tokens_total"),
        computed.expect("prompt tokens by source"),
        counter(&text, "vllm:iteration_tokens_total_sum"),
    )
}

fn n4_computes_the_prompt_once(t: &Tiny, prompt: &[u32], max_tokens: u32) {
    let one = complete(t, prompt, 1, max_tokens);
    let (prompt_after_one, computed_after_one, iteration_after_one) = counts_after(t, 1.0);
    let four = complete(t, prompt, 4, max_tokens);
    let (prompt_after_four, computed_after_four, iteration_after_four) = counts_after(t, 5.0);

    let expected = &choice_tokens(&one)[0];
    assert_eq!(expected.len(), max_tokens as usize);
    for (c, tokens) in choice_tokens(&four).iter().enumerate() {
        assert_eq!(tokens, expected, "greedy choice {c} differs from the n=1 run");
    }
    let p = prompt.len() as f64;
    assert_eq!(prompt_after_one, p);
    // Each choice counts its prompt (METRICS.md's per-request rule); what three of them
    // took from the first is counted as cached, so the computed tokens show one prefill.
    assert_eq!(prompt_after_four - prompt_after_one, 4.0 * p);
    assert_eq!(four["usage"]["prompt_tokens"], json!(prompt.len()));
    // Iteration tokens are the prompt tokens computed plus the tokens generated (vLLM's
    // definition): one prefill (less what the prefix cache, when on, kept from the n=1
    // run), plus the last prompt token of each sibling, then every choice's tokens.
    let generated = f64::from(max_tokens);
    let cached = four["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_f64()
        .expect("cached");
    assert_eq!(iteration_after_one, p + generated);
    assert_eq!(
        iteration_after_four - iteration_after_one,
        p - cached + 3.0 + 4.0 * generated,
        "the n=4 request ran one prefill ({cached} prompt tokens cached)"
    );
    assert_eq!(computed_after_one, p);
    assert_eq!(
        computed_after_four - computed_after_one,
        p - cached + 3.0,
        "local_compute: one prompt, plus each sibling's last token"
    );
}

#[test]
fn four_greedy_choices_compute_the_prompt_once_and_match_one() {
    for caching in [false, true] {
        let t = start_tiny(|c| {
            c.engine.enable_prefix_caching = caching;
            c.engine.block_size = 16;
        });
        n4_computes_the_prompt_once(&t, &prompt(), 24);
    }
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn on_the_real_model_four_greedy_choices_match_one() {
    let model = std::env::var("KILN_TEST_MODEL").expect("set KILN_TEST_MODEL");
    let dir = tempfile::tempdir().expect("tempdir");
    let t = start_model(dir, model.into(), |c| {
        c.engine.kv_cache_memory = "64MiB".into();
        c.engine.block_size = 16;
    });
    // 700 tokens of ordinary words: several prefill chunks, and a partial last block.
    let prompt: Vec<u32> = (0..700).map(|k| 1000 + (k * 37) % 5000).collect();
    n4_computes_the_prompt_once(&t, &prompt, 16);
}

#[test]
fn kv_usage_while_four_choices_decode_is_one_prompt_plus_their_tails() {
    let slow = FakeBehaviour {
        step_delay: Duration::from_millis(20),
        ..Default::default()
    };
    let t = start_fake(slow, |c| {
        c.engine.block_size = 16;
        c.engine.num_gpu_blocks_override = 64;
    });
    let client = t.client.clone();
    let url = t.server.url("/v1/completions");
    let body = json!({"prompt": prompt(), "n": 4, "max_tokens": 40, "ignore_eos": true});
    let request = std::thread::spawn(move || client.post(url).json(&body).send().expect("request").status());
    // All four decoding, some way into their tails.
    let text = scrape_until(&t, |m| {
        metric_value(m, "vllm:num_requests_running", "") == Some(4.0)
            && counter(m, "vllm:generation_tokens_total") >= 4.0 * 20.0
    });
    assert_eq!(request.join().expect("request thread").as_u16(), 200);
    let used = metric_value(&text, "vllm:kv_cache_usage_perc", "").expect("usage") * 64.0;
    let generated = counter(&text, "vllm:generation_tokens_total") / 4.0 + 4.0;
    // The prompt's 12 blocks once; each choice's tail after the 11 shared full blocks
    // (from token 176 on) in blocks of its own. Four copies of the prompt would be 48+.
    let tail_blocks = ((180.0 - 176.0 + generated) / 16.0_f64).ceil();
    let bound = 11.0 + 4.0 * tail_blocks;
    assert!(used <= bound, "{used} blocks in use, bound {bound}");
    assert!(used >= 12.0, "{used} blocks in use");
}

/// Swap-out bytes and preemptions so far.
fn swaps_and_preemptions(text: &str) -> (f64, f64) {
    let out = metric_value(
        text,
        "vllm:kv_offload_total_bytes_total",
        "transfer_type=\"GPU_to_CPU\"",
    );
    (out.unwrap_or(0.0), counter(text, "vllm:num_preemptions_total"))
}

#[test]
fn four_choices_sharing_their_prompt_swap_under_kv_pressure_and_match_one_unpressured() {
    use kiln::config::PreemptionMode;
    let max_tokens = 40;
    let expected = {
        let t = start_tiny(|c| c.engine.block_size = 16);
        choice_tokens(&complete(&t, &prompt(), 1, max_tokens)).remove(0)
    };
    for caching in [false, true] {
        // Each choice ends at 220 tokens (14 blocks); sharing the prompt's 11 full blocks the
        // four need 11 + 4 × 3 = 23 blocks at the end, more than the 18 there are: choices are
        // preempted while they all hold shared blocks, and swap (the host pool has room).
        let t = start_tiny(|c| {
            c.engine.block_size = 16;
            c.engine.num_gpu_blocks_override = 18;
            c.engine.preemption_mode = PreemptionMode::Swap;
            c.engine.swap_space_gib = 0.05;
            c.engine.enable_prefix_caching = caching;
        });
        let four = complete(&t, &prompt(), 4, max_tokens);
        for (c, tokens) in choice_tokens(&four).iter().enumerate() {
            assert_eq!(
                tokens, &expected,
                "caching {caching}: choice {c} differs from the unpressured run"
            );
        }
        let text = scrape_until(&t, |m| {
            metric_value(m, "vllm:request_success_total", "finished_reason=\"length\"").unwrap_or(0.0) >= 4.0
        });
        let (swapped_bytes, preemptions) = swaps_and_preemptions(&text);
        assert!(
            preemptions > 0.0,
            "caching {caching}: the budget should force preemption"
        );
        assert!(
            swapped_bytes > 0.0,
            "caching {caching}: shared choices should swap, not recompute"
        );
        assert_eq!(metric_value(&text, "vllm:kv_cache_usage_perc", ""), Some(0.0));
    }
}
