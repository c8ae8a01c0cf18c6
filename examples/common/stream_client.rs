//! One streamed OpenAI completion as a benchmark client sees it: time to first token, the
//! gaps between tokens, usage. Shared by bench_serving and bench_mixed_load so both time a
//! stream the same way (a chunk counts when any choice carries text or chat content).

use std::io::{BufRead, BufReader};
use std::time::Instant;

use serde_json::Value;

/// One request's client-side timings.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// At least one token arrived and the stream ended cleanly.
    pub ok: bool,
    /// Why a failed request failed (HTTP status, connection or stream error).
    pub error: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Seconds to the first token (0 when none came).
    pub ttft: f64,
    pub itls: Vec<f64>,
    pub e2e: f64,
}

/// POSTs `body` (which must ask for `"stream": true`, and for usage in the last chunk if
/// the token counts matter) to `url` and times the stream until `[DONE]`.
pub fn stream(client: &reqwest::blocking::Client, url: &str, body: &Value) -> Outcome {
    let start = Instant::now();
    let mut outcome = Outcome::default();
    let resp = match client.post(url).json(body).send() {
        Ok(resp) => resp,
        Err(e) => {
            outcome.error = Some(format!("request: {e}"));
            return outcome;
        }
    };
    if !resp.status().is_success() {
        outcome.error = Some(format!("HTTP {}", resp.status().as_u16()));
        return outcome;
    }
    let mut last: Option<Instant> = None;
    for line in BufReader::new(resp).lines() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                outcome.error = Some(format!("stream: {e}"));
                return outcome;
            }
        };
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            outcome.input_tokens = usage["prompt_tokens"].as_u64().unwrap_or(0);
            outcome.output_tokens = usage["completion_tokens"].as_u64().unwrap_or(0);
        }
        if !carries_text(&chunk) {
            continue;
        }
        let now = Instant::now();
        match last {
            None => outcome.ttft = now.duration_since(start).as_secs_f64(),
            Some(prev) => outcome.itls.push(now.duration_since(prev).as_secs_f64()),
        }
        last = Some(now);
    }
    outcome.e2e = start.elapsed().as_secs_f64();
    outcome.ok = last.is_some();
    if !outcome.ok {
        outcome.error = Some("stream ended without a token".into());
    }
    outcome
}

/// Whether any choice of a completions or chat chunk has non-empty text.
fn carries_text(chunk: &Value) -> bool {
    chunk["choices"].as_array().is_some_and(|choices| {
        choices.iter().any(|c| {
            c["text"]
                .as_str()
                .or_else(|| c["delta"]["content"].as_str())
                .is_some_and(|t| !t.is_empty())
        })
    })
}
