//! OTLP push against real receivers, recorded through the stats actor as kiln does.
//!
//! Ignored by default: they need receiver binaries, found through environment variables
//! (`.ci/run` installs both in `.ci/venv` and sets them). By hand, from the repository:
//!
//! ```text
//! python3 -m venv .ci/venv && .ci/venv/bin/pip install oteltap==1.0.0 rotel==0.0.1a15
//! KILN_TEST_OTELTAP=$PWD/.ci/venv/bin/oteltap \
//! KILN_TEST_ROTEL=$(ls $PWD/.ci/venv/lib/python3*/site-packages/rotel/rotel-agent) \
//!   cargo test --release --features testing --test it otlp_push -- --ignored
//! ```
//!
//! oteltap receives http/protobuf only and exits 0 once a metric matching `--await-metric`
//! arrives, printing each received metric as NDJSON. rotel (a Rust collector) receives both
//! protocols; with `--debug-log metrics --debug-log-verbosity detailed` it prints every
//! export, resource attributes included, which is what these tests read.

use std::fs::File;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::common::process::free_port;
use crate::common::wait::wait_until;
use actix::Actor as _;
use kiln::engine::intervals::RequestIntervals;
use kiln::engine::trace_context::TraceContext;
use kiln::engine::types::{FinishReason, Operation};
use kiln::otlp::{OtlpConfig, OtlpProtocol, OtlpTemporality, metrics_endpoint_from_base};
use kiln::stats::actor::{RecordHttp, RecordStep, StatsActor, StatsActorConfig};
use kiln::stats::data::{FinishedRequestStats, IterationStats, SchedulerStats};
use kiln::stats::exporter::{Telemetry, TelemetryConfig, build_telemetry_with_readers};
use kiln::stats::instruments::Instruments;
use kiln::stats::otlp_push::build_otlp_reader;

const PROTOCOLS: [OtlpProtocol; 2] = [OtlpProtocol::HttpProtobuf, OtlpProtocol::Grpc];

fn receiver_path(var: &str) -> PathBuf {
    let path = std::env::var_os(var).unwrap_or_else(|| panic!("set {var} to the receiver binary"));
    PathBuf::from(path)
}

/// A receiver process writing to `out`; killed (by its own handle) when dropped.
struct Receiver {
    child: Child,
    out: PathBuf,
}

impl Receiver {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(mut cmd: Command, out: PathBuf) -> Receiver {
    let file = File::create(&out).unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    Receiver { child, out }
}

/// rotel on `port` for `protocol` (the other listener on a throwaway port), printing metrics.
fn start_rotel(dir: &Path, name: &str, protocol: OtlpProtocol, port: u16) -> Receiver {
    let (grpc, http) = match protocol {
        OtlpProtocol::Grpc => (port, free_port()),
        OtlpProtocol::HttpProtobuf => (free_port(), port),
    };
    let mut cmd = Command::new(receiver_path("KILN_TEST_ROTEL"));
    cmd.arg("start")
        .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{grpc}")])
        .args(["--otlp-http-endpoint", &format!("127.0.0.1:{http}")])
        .args(["--exporter", "blackhole", "--debug-log", "metrics"])
        .args(["--debug-log-verbosity", "detailed"])
        .arg("--pid-file")
        .arg(dir.join(format!("{name}.pid")))
        .arg("--log-file")
        .arg(dir.join(format!("{name}.log")));
    let rotel = spawn(cmd, dir.join(format!("{name}.out")));
    wait_until("rotel to listen", || TcpStream::connect(("127.0.0.1", port)).is_ok());
    rotel
}

pub(super) fn telemetry_config(instance: &str) -> TelemetryConfig {
    TelemetryConfig {
        model_name: "smollm2".to_owned(),
        service_name: "kiln-otlp-test".to_owned(),
        service_instance_id: instance.to_owned(),
        ..TelemetryConfig::default()
    }
}

fn push(protocol: OtlpProtocol, port: u16, instance: &str, tweak: impl FnOnce(&mut OtlpConfig)) -> Telemetry {
    let base = format!("http://127.0.0.1:{port}");
    let mut cfg = OtlpConfig::new(metrics_endpoint_from_base(&base, protocol), protocol);
    cfg.interval = Duration::from_millis(300);
    cfg.timeout = Duration::from_secs(2);
    tweak(&mut cfg);
    let reader = build_otlp_reader(&cfg, Default::default()).unwrap();
    build_telemetry_with_readers(&telemetry_config(instance), vec![reader]).unwrap()
}

fn finished(trace: Option<TraceContext>) -> FinishedRequestStats {
    FinishedRequestStats {
        finish_reason: FinishReason::Stop,
        operation: Operation::Chat,
        error_type: None,
        prompt_tokens: 3,
        generation_tokens: 5,
        max_tokens: 64,
        n: 1,
        num_preemptions: 0,
        intervals: RequestIntervals {
            e2e_s: 1.25,
            queue_s: Some(0.05),
            time_to_first_token_s: Some(0.2),
            prefill_s: Some(0.15),
            decode_s: Some(1.0),
            inference_s: Some(1.15),
            time_per_output_token_s: Some(0.25),
        },
        trace,
        constraint_kind: None,
        lora: None,
    }
}

/// One engine step (2 running, `prompt_tokens` prefilled, one request finished) and one
/// HTTP request, sent to the stats actor; returns once the actor handled both.
fn record(instruments: &Arc<Instruments>, prompt_tokens: u64) {
    record_traced(instruments, prompt_tokens, None);
}

/// [`record`], the finished request carrying `trace` (its latencies become exemplars).
pub(super) fn record_traced(instruments: &Arc<Instruments>, prompt_tokens: u64, trace: Option<TraceContext>) {
    let instruments = instruments.clone();
    actix::System::new().block_on(async move {
        let config = StatsActorConfig { log_interval: None };
        let stats = StatsActor::new(Some(instruments), config).start();
        let step = RecordStep {
            engine: 0,
            scheduler: SchedulerStats {
                num_running: 2,
                num_waiting: 1,
                kv_cache_usage: 0.5,
                ..SchedulerStats::default()
            },
            iteration: IterationStats {
                num_prompt_tokens: prompt_tokens,
                num_generation_tokens: 5,
                num_batched_tokens: 8,
                finished: vec![finished(trace)],
                ..IterationStats::default()
            },
        };
        stats.send(step).await.unwrap();
        let http = RecordHttp {
            route: Some("/v1/chat/completions".to_owned()),
            method: "POST",
            status: Some(200),
            duration: Duration::from_millis(1250),
            request_body_bytes: 120,
            response_body_bytes: 480,
            error_type: None,
            generation_started: false,
            stream_failure: None,
        };
        stats.send(http).await.unwrap();
    });
}

/// One export as rotel prints it: the resource lines and, per metric, its detail lines.
struct Export {
    resource: String,
    metrics: Vec<(String, String)>,
}

fn exports(output: &str) -> Vec<Export> {
    let mut out = Vec::new();
    for block in output.split("ResourceMetrics #").skip(1) {
        let (resource, rest) = block.split_once("ScopeMetrics #").unwrap_or((block, ""));
        let metrics = rest
            .split("Metric #")
            .skip(1)
            .filter_map(|m| {
                let name = m.lines().find_map(|l| l.trim().strip_prefix("-> Name: "))?;
                Some((name.trim().to_owned(), m.to_owned()))
            })
            .collect();
        out.push(Export {
            resource: resource.to_owned(),
            metrics,
        });
    }
    out
}

impl Export {
    fn metric(&self, name: &str) -> Option<&str> {
        self.metrics.iter().find(|(n, _)| n == name).map(|(_, m)| m.as_str())
    }
}

const DELIVERED: [&str; 3] = [
    "vllm:num_requests_running",
    "gen_ai.server.request.duration",
    "http.server.request.duration",
];

/// Whether some export carries the recorded engine gauge (2), GenAI and HTTP instruments.
fn delivered(output: &str) -> bool {
    exports(output).iter().any(|e| {
        e.metric(DELIVERED[0])
            .is_some_and(|m| m.contains("Value: 2") && m.contains("model_name: Str(smollm2)"))
            && DELIVERED[1..].iter().all(|n| e.metric(n).is_some())
    })
}

#[test]
#[ignore = "needs oteltap (KILN_TEST_OTELTAP)"]
fn http_protobuf_reaches_oteltap_started_after_kiln() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let t = push(OtlpProtocol::HttpProtobuf, port, "oteltap-1", |_| {});
    record(t.instruments.as_ref().unwrap(), 3);
    // Collector absent: this export fails (quietly), the reader keeps its schedule.
    t.provider.as_ref().unwrap().force_flush().unwrap();
    let mut cmd = Command::new(receiver_path("KILN_TEST_OTELTAP"));
    cmd.env("PYTHONUNBUFFERED", "1")
        .args(["--port", &port.to_string()])
        .args(["--await-metric", "^vllm:num_requests_running$"]);
    let mut tap = spawn(cmd, dir.path().join("oteltap.out"));
    let mut status = None;
    wait_until("oteltap to receive vllm:num_requests_running", || {
        status = tap.child.try_wait().unwrap();
        status.is_some()
    });
    let out = tap.output();
    assert!(status.is_some_and(|s| s.success()), "oteltap failed:\n{out}");
    // Every metric oteltap received is one NDJSON line; the batch holding the match came whole.
    let names: Vec<String> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|m| m.get("name")?.as_str().map(str::to_owned))
        .collect();
    for name in DELIVERED {
        assert!(names.iter().any(|n| n == name), "{name} missing:\n{out}");
    }
    t.shutdown().unwrap();
}

#[test]
#[ignore = "needs rotel (KILN_TEST_ROTEL)"]
fn both_protocols_deliver_engine_genai_http_and_the_resource() {
    let dir = tempfile::tempdir().unwrap();
    for protocol in PROTOCOLS {
        let port = free_port();
        let name = format!("deliver-{}", protocol.as_str().replace('/', "-"));
        let rotel = start_rotel(dir.path(), &name, protocol, port);
        let t = push(protocol, port, &name, |_| {});
        record(t.instruments.as_ref().unwrap(), 3);
        wait_until(&format!("{protocol} delivery"), || delivered(&rotel.output()));
        let out = rotel.output();
        let export = exports(&out).into_iter().find(|e| e.metric(DELIVERED[0]).is_some());
        let resource = export.map(|e| e.resource).unwrap_or_default();
        for attr in [
            "service.name: Str(kiln-otlp-test)".to_owned(),
            format!("service.instance.id: Str({name})"),
        ] {
            assert!(resource.contains(&attr), "{protocol}: {attr} missing in\n{resource}");
        }
        t.shutdown().unwrap();
    }
}

/// `Value: N` of each export of `name`, in arrival order (one data point per export here).
fn values(output: &str, name: &str) -> Vec<String> {
    exports(output)
        .iter()
        .filter_map(|e| e.metric(name))
        .filter_map(|m| m.lines().find_map(|l| l.trim().strip_prefix("Value: ")))
        .map(str::to_owned)
        .collect()
}

#[test]
#[ignore = "needs rotel (KILN_TEST_ROTEL)"]
fn delta_temporality_sends_what_changed_since_the_last_export() {
    let dir = tempfile::tempdir().unwrap();
    for protocol in PROTOCOLS {
        let port = free_port();
        let name = format!("delta-{}", protocol.as_str().replace('/', "-"));
        let rotel = start_rotel(dir.path(), &name, protocol, port);
        // An interval longer than the test: exports happen at the flushes only.
        let t = push(protocol, port, &name, |c| {
            c.temporality = OtlpTemporality::Delta;
            c.interval = Duration::from_secs(3600);
        });
        let provider = t.provider.as_ref().unwrap();
        let instruments = t.instruments.as_ref().unwrap();
        record(instruments, 3);
        provider.force_flush().unwrap();
        record(instruments, 2);
        provider.force_flush().unwrap();
        wait_until(&format!("{protocol}: two exports"), || {
            values(&rotel.output(), "vllm:prompt_tokens").len() >= 2
        });
        let out = rotel.output();
        assert_eq!(values(&out, "vllm:prompt_tokens"), ["3", "2"], "{protocol}:\n{out}");
        let all = exports(&out);
        let counter = all[0].metric("vllm:prompt_tokens").unwrap_or_default();
        assert!(counter.contains("AGGREGATION_TEMPORALITY_DELTA"), "{counter}");
        // Gauges stay cumulative: set once at startup, still in the second export.
        assert_eq!(values(&out, "vllm:cache_config_info"), ["1", "1"], "{protocol}");
        t.shutdown().unwrap();
    }
}

#[test]
#[ignore = "needs rotel (KILN_TEST_ROTEL)"]
fn export_resumes_when_the_collector_starts_late_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    for protocol in PROTOCOLS {
        let port = free_port();
        let name = format!("late-{}", protocol.as_str().replace('/', "-"));
        let t = push(protocol, port, &name, |_| {});
        record(t.instruments.as_ref().unwrap(), 3);
        // Collector absent: a failed export, and the reader keeps running.
        t.provider.as_ref().unwrap().force_flush().unwrap();
        let first = start_rotel(dir.path(), &format!("{name}-1"), protocol, port);
        wait_until(&format!("{protocol}: late delivery"), || delivered(&first.output()));
        drop(first);
        // Same port, new process: tonic must drop its dead connection and reconnect.
        let second = start_rotel(dir.path(), &format!("{name}-2"), protocol, port);
        wait_until(&format!("{protocol}: delivery after restart"), || {
            delivered(&second.output())
        });
        t.shutdown().unwrap();
    }
}
