//! Shared setup for integration tests: a real server on the tiny random-weight model.

#![allow(dead_code)]

pub mod first_logits;
pub mod oteltap;
pub mod pki;
pub mod process;
pub mod prometheus_server;
pub mod timed;
pub mod wait;

use std::path::PathBuf;
use std::time::Duration;

use kiln::config::Config;
use kiln::executor::fake::{FakeBehaviour, FakeExecutor};
use kiln::executor::model_runner::ModelRunner;
use kiln::model::loader::open_model;
use kiln::server::{prepare_engine, prepare_model};
use kiln::testing::{TestServer, TinyModelSpec, write_tiny_model};
use serde_json::Value;

pub struct Tiny {
    pub server: TestServer,
    pub client: reqwest::blocking::Client,
    _dir: tempfile::TempDir,
    pub model_path: PathBuf,
}

/// Starts kiln on a freshly written tiny model; `tweak` adjusts the config first.
pub fn start_tiny(tweak: impl FnOnce(&mut Config)) -> Tiny {
    start_tiny_spec(TinyModelSpec::default(), tweak)
}

/// [`start_tiny`] on a tiny model of the given spec (e.g. with another chat template).
pub fn start_tiny_spec(spec: TinyModelSpec, tweak: impl FnOnce(&mut Config)) -> Tiny {
    let dir = tempfile::tempdir().expect("tempdir");
    let model_path = write_tiny_model(dir.path(), spec).expect("tiny model");
    start_model(dir, model_path, tweak)
}

/// Starts kiln on the model at `model_path` (a fixture; `dir` is kept alive with the server);
/// `tweak` adjusts the config first.
pub fn start_model(dir: tempfile::TempDir, model_path: PathBuf, tweak: impl FnOnce(&mut Config)) -> Tiny {
    let mut config = test_config(&model_path);
    tweak(&mut config);
    let files = open_model(&model_path).expect("open model");
    let prepared: kiln::server::PreparedEngine<ModelRunner> = prepare_model(&config, files).expect("prepare");
    let server = TestServer::start(config, prepared).expect("server starts");
    Tiny {
        server,
        client: client(),
        _dir: dir,
        model_path,
    }
}

/// Starts kiln with the tiny model's tokenizer and template but the fake executor (which
/// can be slowed down, so requests are reliably still running or queued when observed).
pub fn start_fake(behaviour: FakeBehaviour, tweak: impl FnOnce(&mut Config)) -> Tiny {
    start_fake_engines(vec![behaviour], tweak)
}

/// [`start_fake`] with one engine per behaviour (`--data-parallel-size` their number), so a
/// fault can be injected into one engine alone.
pub fn start_fake_engines(behaviours: Vec<FakeBehaviour>, tweak: impl FnOnce(&mut Config)) -> Tiny {
    let (dir, model_path, config) = tiny_setup(TinyModelSpec::default(), |c| {
        c.engine.num_gpu_blocks_override = 64;
        c.engine.data_parallel_size = behaviours.len();
        tweak(c)
    });
    let files = open_model(&model_path).expect("open tiny model");
    let vocab = files.config.vocab_size as u32;
    let mut executors = behaviours.into_iter().map(|b| FakeExecutor::new(vocab, b));
    let first = executors.next().expect("at least one engine");
    let mut prepared = prepare_engine(&config, files, "tiny-llama".into(), first).expect("prepare");
    prepared.other_executors = executors.collect();
    prepared.memory = vec![prepared.memory[0].clone(); 1 + prepared.other_executors.len()];
    let server = TestServer::start(config, prepared).expect("server starts");
    Tiny {
        server,
        client: client(),
        _dir: dir,
        model_path,
    }
}

fn tiny_setup(spec: TinyModelSpec, tweak: impl FnOnce(&mut Config)) -> (tempfile::TempDir, PathBuf, Config) {
    let dir = tempfile::tempdir().expect("tempdir");
    let model_path = write_tiny_model(dir.path(), spec).expect("tiny model");
    let mut config = test_config(&model_path);
    tweak(&mut config);
    (dir, model_path, config)
}

/// The configuration every test server starts from: `model_path`, a small KV cache, and no
/// periodic throughput log in the way.
fn test_config(model_path: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.model.path = model_path.display().to_string();
    config.engine.kv_cache_memory = "16MiB".into();
    config.telemetry.log_interval_s = 60.0;
    config
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

impl Tiny {
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = self
            .client
            .post(self.server.url(path))
            .json(body)
            .send()
            .expect("request");
        let status = resp.status().as_u16();
        (status, resp.json().unwrap_or(Value::Null))
    }

    pub fn get_text(&self, path: &str) -> (u16, String) {
        let resp = self.client.get(self.server.url(path)).send().expect("request");
        (resp.status().as_u16(), resp.text().expect("body"))
    }

    /// Posts a streaming request and returns every `data:` payload (including `[DONE]`).
    pub fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let resp = self
            .client
            .post(self.server.url(path))
            .json(body)
            .send()
            .expect("request");
        assert_eq!(resp.status().as_u16(), 200);
        let text = resp.text().expect("body");
        text.split("\n\n")
            .filter_map(|event| event.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }

    /// Polls `/load` until `done` holds; panics at the deadline with the last load seen.
    pub fn wait_for_load(&self, done: impl Fn(&Value) -> bool) -> Value {
        fetch_until(
            "/load",
            || serde_json::from_str(&self.get_text("/load").1).expect("load json"),
            done,
        )
    }
}

/// Scrapes until `done` holds (the stats actor records asynchronously); panics at the
/// deadline with the last exposition seen.
pub fn scrape_until(t: &Tiny, done: impl Fn(&str) -> bool) -> String {
    fetch_until("/metrics", || t.get_text("/metrics").1, |text: &String| done(text))
}

/// Fetches `what` until `done` holds (see [`wait::wait_for`]); panics at the deadline with
/// the last value seen, so a condition that never holds fails the test where it waits.
fn fetch_until<T: std::fmt::Display>(what: &str, mut fetch: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> T {
    wait::wait_for(what, || {
        let value = fetch();
        if done(&value) { Ok(value) } else { Err(value) }
    })
}

/// The value of a metric series in Prometheus text (first line whose series matches).
pub fn metric_value(exposition: &str, name: &str, label_fragment: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let series = l.rsplit_once(' ').map_or("", |(s, _)| s);
            (series == name || series.starts_with(&format!("{name}{{"))) && series.contains(label_fragment)
        })
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

/// The sum of `name`'s samples whose series holds `label_fragment` (every other label summed
/// over).
pub fn metric_sum(exposition: &str, name: &str, label_fragment: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| series.starts_with(&format!("{name}{{")) && series.contains(label_fragment))
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum()
}

/// The path of an external tool (or the CI venv's Python) that `.ci/run` exports as `var`;
/// a test that needs it fails when it is missing.
pub fn tool(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| panic!("set {var}"))
}
