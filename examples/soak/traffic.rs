//! The client side of the soak: what each request is, how it is sent and dropped, and how
//! it ended as the client saw it.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use reqwest::blocking::Client;
use serde_json::{Value, json};

/// When the client walks away from a request, if at all.
#[derive(Clone, Copy)]
pub enum Abort {
    Never,
    /// Drop the stream after this many text chunks.
    AfterChunks(u64),
    /// Give up on a plain request after this long.
    After(Duration),
}

/// One request to send.
pub struct Spec {
    pub kind: &'static str,
    pub chat: bool,
    pub stream: bool,
    pub prompt: usize,
    pub max_tokens: u64,
    pub ignore_eos: bool,
    pub seed: u64,
    pub abort: Abort,
}

/// How one request ended, as the client saw it.
pub enum Outcome {
    Completed {
        finish: String,
        prompt_tokens: u64,
        completion_tokens: u64,
    },
    Rejected,
    /// Status and the error message.
    ClientError(u16, String),
    ServerError(u16, String),
    /// Dropped by the client; `chunks` text chunks had arrived.
    Aborted {
        chunks: u64,
    },
    ConnectionError(String),
    /// A 200 whose body was not a whole completion.
    BadResponse(String),
}

const WORDS: [&str; 16] = [
    "the", "river", "stone", "quiet", "market", "lamp", "winter", "garden", "signal", "paper", "orbit", "copper",
    "harbor", "maple", "engine", "violet",
];
/// Prompts in the pool (each learnt once per endpoint by the warm-up).
const PROMPTS: usize = 8;

/// The prompt pool, and each prompt's token count per endpoint (learnt by a warm-up).
pub struct Prompts {
    pub texts: Vec<String>,
    /// `[completions, chat]` token counts per prompt.
    pub tokens: Vec<[u64; 2]>,
}

/// The path and JSON body of `spec` on `prompt`.
fn body(model: &str, prompt: &str, spec: &Spec) -> (&'static str, Value) {
    let (path, mut body) = if spec.chat {
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": prompt}]}),
        )
    } else {
        ("/v1/completions", json!({"prompt": prompt}))
    };
    body["model"] = json!(model);
    body["max_tokens"] = json!(spec.max_tokens);
    body["temperature"] = json!(0.8);
    body["seed"] = json!(spec.seed);
    body["ignore_eos"] = json!(spec.ignore_eos);
    if spec.stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    (path, body)
}

/// Sends `spec` and waits for its end, or walks away where `spec.abort` says.
pub fn send(client: &Client, base: &str, model: &str, prompts: &Prompts, spec: &Spec) -> Outcome {
    let (path, body) = body(model, &prompts.texts[spec.prompt], spec);
    let mut request = client.post(format!("{base}{path}")).json(&body);
    if let Abort::After(limit) = spec.abort {
        request = request.timeout(limit);
    }
    let resp = match request.send() {
        Ok(resp) => resp,
        Err(e) if e.is_timeout() => return Outcome::Aborted { chunks: 0 },
        Err(e) => return Outcome::ConnectionError(format!("request: {e}")),
    };
    let status = resp.status().as_u16();
    let message = |resp: reqwest::blocking::Response| {
        let v: Value = resp.json().unwrap_or_default();
        let m = v["error"]["message"].as_str().unwrap_or("").to_string();
        m.chars().take(80).collect::<String>()
    };
    match status {
        200 => {}
        429 => return Outcome::Rejected,
        400..=499 => return Outcome::ClientError(status, message(resp)),
        500..=599 => return Outcome::ServerError(status, message(resp)),
        _ => return Outcome::BadResponse(format!("HTTP {status}")),
    }
    if spec.stream {
        return read_stream(resp, spec.abort);
    }
    match resp.json::<Value>() {
        Ok(v) => completed(&v["choices"][0]["finish_reason"], &v["usage"]),
        Err(e) if e.is_timeout() => Outcome::Aborted { chunks: 0 },
        Err(e) => Outcome::ConnectionError(format!("body: {e}")),
    }
}

/// A completed response from its `finish_reason` and `usage`.
fn completed(finish: &Value, usage: &Value) -> Outcome {
    match (
        finish.as_str(),
        usage["prompt_tokens"].as_u64(),
        usage["completion_tokens"].as_u64(),
    ) {
        (Some(finish), Some(prompt_tokens), Some(completion_tokens)) => Outcome::Completed {
            finish: finish.to_string(),
            prompt_tokens,
            completion_tokens,
        },
        _ => Outcome::BadResponse("no finish_reason or usage".into()),
    }
}

/// Reads server-sent events to `[DONE]`, or drops the stream at `AfterChunks` if the
/// request has not finished by then.
fn read_stream(resp: reqwest::blocking::Response, abort: Abort) -> Outcome {
    let (mut chunks, mut finish, mut usage) = (0u64, Value::Null, Value::Null);
    for line in BufReader::new(resp).lines() {
        let line = match line {
            Ok(line) => line,
            Err(e) => return Outcome::ConnectionError(format!("stream: {e}")),
        };
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            return completed(&finish, &usage);
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            return Outcome::BadResponse("unparsable chunk".into());
        };
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            usage = u.clone();
        }
        let choice = &chunk["choices"][0];
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
        let text = choice["text"].as_str().or_else(|| choice["delta"]["content"].as_str());
        if text.is_some_and(|t| !t.is_empty()) {
            chunks += 1;
        }
        if let Abort::AfterChunks(n) = abort
            && chunks >= n
            && finish.is_null()
        {
            return Outcome::Aborted { chunks };
        }
    }
    Outcome::ConnectionError("stream ended before [DONE]".into())
}

/// A worker's next request: the mix of kinds, lengths and abort points.
/// `max_tokens`: the most a request asks for.
pub fn draw(rng: &mut StdRng, max_tokens: u64) -> Spec {
    let (kind, chat, stream, abort) = match rng.random_range(0..100) {
        0..20 => ("completion", false, false, Abort::Never),
        20..45 => ("completion_stream", false, true, Abort::Never),
        45..60 => ("chat", true, false, Abort::Never),
        60..80 => ("chat_stream", true, true, Abort::Never),
        80..90 => {
            let after = rng.random_range(1..=(max_tokens / 2).max(1));
            ("abort_stream", rng.random(), true, Abort::AfterChunks(after))
        }
        _ => {
            let after = Duration::from_millis(rng.random_range(20..=400));
            ("abort_waiting", rng.random(), false, Abort::After(after))
        }
    };
    let aborting = !matches!(abort, Abort::Never);
    Spec {
        kind,
        chat,
        stream,
        prompt: rng.random_range(0..PROMPTS),
        // Aborted requests ask for the most, without EOS, so they are still running when dropped.
        max_tokens: if aborting {
            max_tokens
        } else {
            rng.random_range(1..=max_tokens)
        },
        ignore_eos: aborting || rng.random_bool(0.5),
        seed: rng.random_range(0..1 << 31),
        abort,
    }
}

/// A burst request: short, so a burst is over soon and the refusals are what it measures.
pub fn burst_spec(rng: &mut StdRng) -> Spec {
    Spec {
        kind: "burst",
        chat: rng.random(),
        stream: rng.random(),
        prompt: rng.random_range(0..PROMPTS),
        max_tokens: rng.random_range(1..=8),
        ignore_eos: true,
        seed: rng.random_range(0..1 << 31),
        abort: Abort::Never,
    }
}

/// The pool of prompts, with token counts from one `max_tokens: 1` request each.
/// `prompt_words`: the longest prompt, in words.
pub fn warm_up(
    client: &Client,
    base: &str,
    model: &str,
    prompt_words: usize,
    rng: &mut StdRng,
) -> anyhow::Result<Prompts> {
    let texts: Vec<String> = (0..PROMPTS)
        .map(|_| {
            let n = rng.random_range(1..=prompt_words.max(1));
            (0..n)
                .map(|_| WORDS[rng.random_range(0..16)])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let mut prompts = Prompts {
        tokens: vec![[0; 2]; texts.len()],
        texts,
    };
    for i in 0..PROMPTS {
        for chat in [false, true] {
            let spec = Spec {
                kind: "warm_up",
                chat,
                stream: false,
                prompt: i,
                max_tokens: 1,
                ignore_eos: true,
                seed: 0,
                abort: Abort::Never,
            };
            match send(client, base, model, &prompts, &spec) {
                Outcome::Completed { prompt_tokens, .. } => prompts.tokens[i][usize::from(chat)] = prompt_tokens,
                _ => anyhow::bail!("warm-up request {i} (chat: {chat}) did not complete"),
            }
        }
    }
    Ok(prompts)
}
