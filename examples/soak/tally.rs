//! What the client saw, summed, and the checks of the server's counters against it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::traffic::{Outcome, Spec};

/// Everything the client saw, summed.
#[derive(Default)]
pub struct Tally {
    pub by_kind: BTreeMap<&'static str, u64>,
    pub ok: u64,
    pub finish: BTreeMap<String, u64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub rejected_429: u64,
    pub other_4xx: u64,
    pub server_5xx: u64,
    pub connection_errors: u64,
    pub bad_responses: u64,
    pub errors: BTreeMap<String, u64>,
    pub aborted: u64,
    pub aborted_streaming: u64,
    /// Aborted streams that had seen a token: surely prefilled, and will end once.
    pub aborted_started: u64,
    pub aborted_started_prompt_tokens: u64,
    pub aborted_prompt_tokens: u64,
    pub aborted_max_tokens: u64,
    pub aborted_chunks: u64,
}

impl Tally {
    pub fn add(&mut self, spec: &Spec, prompt_tokens: u64, outcome: Outcome) {
        *self.by_kind.entry(spec.kind).or_default() += 1;
        match outcome {
            Outcome::Completed {
                finish,
                prompt_tokens,
                completion_tokens,
            } => {
                self.ok += 1;
                *self.finish.entry(finish).or_default() += 1;
                self.prompt_tokens += prompt_tokens;
                self.completion_tokens += completion_tokens;
            }
            Outcome::Rejected => self.rejected_429 += 1,
            Outcome::ClientError(s, m) => {
                self.other_4xx += 1;
                *self.errors.entry(format!("HTTP {s}: {m}")).or_default() += 1;
            }
            Outcome::ServerError(s, m) => {
                self.server_5xx += 1;
                *self.errors.entry(format!("HTTP {s}: {m}")).or_default() += 1;
            }
            Outcome::ConnectionError(e) => {
                self.connection_errors += 1;
                *self.errors.entry(e).or_default() += 1;
            }
            Outcome::BadResponse(e) => {
                self.bad_responses += 1;
                *self.errors.entry(e).or_default() += 1;
            }
            Outcome::Aborted { chunks } => {
                self.aborted += 1;
                self.aborted_streaming += u64::from(spec.stream);
                self.aborted_prompt_tokens += prompt_tokens;
                self.aborted_max_tokens += spec.max_tokens;
                self.aborted_chunks += chunks;
                if chunks > 0 {
                    self.aborted_started += 1;
                    self.aborted_started_prompt_tokens += prompt_tokens;
                }
            }
        }
    }

    pub fn total(&self) -> u64 {
        self.by_kind.values().sum()
    }
}

/// One server-vs-client comparison: `server - client` must lie in `extra_allowed`.
fn check(name: &str, client: u64, server: f64, extra_allowed: (u64, u64)) -> Value {
    let extra = server - client as f64;
    let pass = extra >= extra_allowed.0 as f64 && extra <= extra_allowed.1 as f64;
    json!({"check": name, "client": client, "server": server, "extra": extra,
           "extra_allowed": [extra_allowed.0, extra_allowed.1], "pass": pass})
}

/// Every server-vs-client check; `delta(name)`: a counter's growth over the soak (the
/// `vllm:` prefix left out).
pub fn counter_checks(t: &Tally, delta: &dyn Fn(&str) -> f64) -> Vec<Value> {
    let seen = |reason: &str| t.finish.get(reason).copied().unwrap_or(0);
    let reasons = ["stop", "length", "abort", "error"];
    let client_other = t.ok - seen("stop") - seen("length");
    vec![
        check(
            "finished stop",
            seen("stop"),
            delta("request_success_total{stop}"),
            (0, t.aborted),
        ),
        check(
            "finished length",
            seen("length"),
            delta("request_success_total{length}"),
            (0, t.aborted),
        ),
        check(
            "finished abort",
            0,
            delta("request_success_total{abort}"),
            (0, t.aborted),
        ),
        check("finished error", 0, delta("request_success_total{error}"), (0, 0)),
        check(
            "finished, any reason",
            t.ok,
            reasons
                .iter()
                .map(|r| delta(&format!("request_success_total{{{r}}}")))
                .sum(),
            (t.aborted_started, t.aborted),
        ),
        // A completion the client saw end otherwise (abort, error) has no place in the checks above.
        check("completed, neither stop nor length", client_other, 0.0, (0, 0)),
        check(
            "prompt tokens",
            t.prompt_tokens,
            delta("prompt_tokens_total"),
            (t.aborted_started_prompt_tokens, t.aborted_prompt_tokens),
        ),
        check(
            "generation tokens",
            t.completion_tokens,
            delta("generation_tokens_total"),
            (t.aborted_chunks, t.aborted_max_tokens),
        ),
    ]
}
