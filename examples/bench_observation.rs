//! The cost of one latency observation through the stats path: `RecordStep` messages carrying
//! inter-token latencies go to a `StatsActor` wired as `kiln serve` wires it (the Prometheus
//! reader, plus an OTLP push reader when asked for), and the time per observation is printed
//! and written as JSON. The same run with telemetry disabled gives the actor's own cost
//! (mailbox and message), which the `net` figure subtracts.
//!
//! ```text
//! cargo run --release --features testing --example bench_observation -- \
//!     [--observations 2000000] [--per-step 512] [--repeats 5] [--traced-every 0] \
//!     [--push none|explicit|exponential] [--output-json FILE]
//! ```
//! The push reader is kiln's OTLP reader (`build_otlp_reader`) pointed at a closed port with
//! an hour's interval: never collected during the run, it reads the histograms from the
//! store at export time, so recording costs what it costs without push.

#[path = "common/cpu_info.rs"]
mod cpu_info;

use std::time::{Duration, Instant};

use actix::Actor;
use clap::Parser;
use kiln::engine::trace_context::TraceContext;
use kiln::otlp::{OtlpConfig, OtlpProtocol};
use kiln::stats::actor::{RecordStep, StatsActor, StatsActorConfig};
use kiln::stats::data::{IterationStats, Observation, SchedulerStats};
use kiln::stats::exporter::{TelemetryConfig, build_telemetry_with_readers};
use kiln::stats::otlp_push::build_otlp_reader;
use kiln::stats::push_histograms::HistogramAggregation;
use serde_json::json;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 2_000_000)]
    observations: usize,
    /// Latencies per `RecordStep` (a 512-stream decode step carries 512).
    #[arg(long, default_value_t = 512)]
    per_step: usize,
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Every k-th observation carries a trace (an exemplar candidate); 0: none.
    #[arg(long, default_value_t = 0)]
    traced_every: usize,
    #[arg(long, value_enum, default_value_t = Push::None)]
    push: Push,
    #[arg(long)]
    output_json: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Push {
    None,
    Explicit,
    Exponential,
}

/// Pre-built steps: latencies spread over 0.5 ms .. 2 s (every ITL bucket, many native ones).
fn steps(args: &Args) -> Vec<RecordStep> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut n = 0usize;
    let count = args.observations.div_ceil(args.per_step);
    (0..count)
        .map(|_| {
            let latencies = (0..args.per_step)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    n += 1;
                    let seconds = 0.0005 * 4000f64.powf((x >> 11) as f64 / (1u64 << 53) as f64);
                    let traced = args.traced_every > 0 && n.is_multiple_of(args.traced_every);
                    let trace = traced.then_some(TraceContext {
                        trace_id: [(n % 251) as u8; 16],
                        span_id: [(n % 241) as u8; 8],
                    });
                    Observation::new(seconds, trace)
                })
                .collect();
            RecordStep {
                scheduler: SchedulerStats::default(),
                iteration: IterationStats {
                    num_generation_tokens: args.per_step as u64,
                    num_batched_tokens: args.per_step as u64,
                    inter_token_latency_s: latencies,
                    ..IterationStats::default()
                },
                engine: 0,
            }
        })
        .collect()
}

/// Seconds to record every step once, on a fresh actor.
fn run(args: &Args, enabled: bool) -> f64 {
    let cfg = TelemetryConfig {
        enabled,
        model_name: "bench".to_owned(),
        push_histograms: match args.push {
            Push::Exponential => HistogramAggregation::Exponential,
            _ => HistogramAggregation::Explicit,
        },
        ..TelemetryConfig::default()
    };
    let readers = match args.push {
        Push::None => Vec::new(),
        _ => {
            let mut otlp = OtlpConfig::new("http://127.0.0.1:9/v1/metrics", OtlpProtocol::HttpProtobuf);
            otlp.interval = Duration::from_secs(3600);
            otlp.timeout = Duration::from_millis(200);
            vec![build_otlp_reader(&otlp, Default::default()).expect("the reader builds")]
        }
    };
    let telemetry = build_telemetry_with_readers(&cfg, readers).expect("telemetry builds");
    let steps = steps(args);
    let seconds = actix::System::new().block_on(async {
        let stats = StatsActor::new(telemetry.instruments.clone(), StatsActorConfig { log_interval: None }).start();
        let start = Instant::now();
        // `do_send` queues past the mailbox's capacity, as the scheduler's sends do; the
        // mailbox is FIFO, so the answer to the last step comes after every step is recorded.
        let mut steps = steps;
        let last = steps.pop().expect("at least one step");
        for step in steps {
            stats.do_send(step);
        }
        stats.send(last).await.expect("the actor answers");
        start.elapsed().as_secs_f64()
    });
    drop(telemetry);
    seconds
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    let n = args.observations.div_ceil(args.per_step) * args.per_step;
    let mut on = Vec::new();
    let mut off = Vec::new();
    for _ in 0..args.repeats {
        off.push(run(&args, false) * 1e9 / n as f64);
        on.push(run(&args, true) * 1e9 / n as f64);
    }
    let (on_ns, off_ns) = (median(on.clone()), median(off.clone()));
    println!(
        "{n} observations, {} per step, push {:?}, traced every {}: {on_ns:.1} ns/observation \
         (telemetry off: {off_ns:.1}; net {:.1})",
        args.per_step,
        args.push,
        args.traced_every,
        on_ns - off_ns
    );
    if let Some(path) = &args.output_json {
        let report = json!({
            "benchmark": "bench_observation",
            "cpu": cpu_info::cpu_info(),
            "observations": n,
            "per_step": args.per_step,
            "push": format!("{:?}", args.push).to_lowercase(),
            "traced_every": args.traced_every,
            "ns_per_observation": {"median": on_ns, "runs": on},
            "telemetry_off_ns_per_observation": {"median": off_ns, "runs": off},
            "net_ns_per_observation": on_ns - off_ns,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report).expect("json")).expect("write JSON");
    }
}
