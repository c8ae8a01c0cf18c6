//! Prometheus native histograms end to end, against the real Prometheus (2.42, Debian) with
//! `--enable-feature=native-histograms`: it asks kiln for the protobuf exposition, stores the
//! latency histograms as native series, and PromQL's native functions answer from them. A
//! second Prometheus without the feature scrapes the same kiln in text and still finds the
//! classic `_bucket` series the dashboards read. Latencies come from the fake executor, whose
//! steps take a time proportional to their tokens, so the test controls their spread.

use std::io::Read as _;
use std::time::{Duration, Instant};

use kiln::executor::fake::FakeBehaviour;
use serde_json::json;

use crate::common::prometheus_server::PrometheusServer;
use crate::common::wait::wait_until;
use crate::common::{Tiny, metric_value, start_fake};

/// Schema 3: neighbouring native bucket bounds differ by this factor.
const BUCKET_RATIO: f64 = 1.090_507_732_665_257_7; // 2^(1/8)
/// What the client's own measurement may add to the server's TTFT (HTTP, SSE framing,
/// scheduling on a loaded 2-CPU machine), in seconds.
const CLIENT_OVERHEAD_S: f64 = 0.05;
const REQUESTS: usize = 30;

/// Streams a completion of `prompt_len` prompt tokens and returns the client-measured time to
/// its first token: until the first SSE event arrives.
fn client_ttft(t: &Tiny, prompt_len: usize) -> f64 {
    let prompt: Vec<u32> = (0..prompt_len).map(|i| 5 + (i % 40) as u32).collect();
    let body = json!({"prompt": prompt, "max_tokens": 2, "ignore_eos": true, "stream": true});
    let started = Instant::now();
    let mut resp = t
        .client
        .post(t.server.url("/v1/completions"))
        .json(&body)
        .send()
        .expect("completion");
    assert_eq!(resp.status().as_u16(), 200, "{prompt_len} tokens");
    let mut seen = Vec::new();
    let mut chunk = [0u8; 256];
    let mut ttft = None;
    loop {
        let n = resp.read(&mut chunk).expect("read the stream");
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&chunk[..n]);
        if ttft.is_none() && seen.windows(2).any(|w| w == b"\n\n") {
            ttft = Some(started.elapsed().as_secs_f64());
        }
    }
    assert!(String::from_utf8_lossy(&seen).contains("[DONE]"));
    ttft.expect("a first event")
}

/// The nearest-rank `q` quantile of `values`.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((q * sorted.len() as f64).ceil() as usize).max(1) - 1]
}

#[test]
#[ignore = "needs the prometheus server (KILN_TEST_PROMETHEUS); .ci/run provides it"]
fn prometheus_reads_native_histograms_whose_quantiles_match_the_clients() {
    let t = start_fake(
        FakeBehaviour {
            token_delay: Duration::from_millis(5),
            ..Default::default()
        },
        |_| {},
    );
    let target = [t.server.addr.to_string()];
    let native = PrometheusServer::start_with_native_histograms("kiln", &target);
    let classic = PrometheusServer::start("kiln", &target);
    let client = &t.client;
    for prometheus in [&native, &classic] {
        prometheus.wait_ready(client);
        wait_until("a healthy scrape", || {
            prometheus.scalar(client, "up{job=\"kiln\"}") == Some(1.0)
        });
    }
    // A first request creates the series; the measured ones then all fall inside the rate.
    client_ttft(&t, 8);
    let count_query = "histogram_count(vllm:time_to_first_token_seconds)";
    wait_until("the first native sample", || {
        native.scalar(client, count_query) == Some(1.0)
    });

    // Prompts of 20 to 223 tokens (the tiny model holds 256): TTFTs from about 0.1 s to
    // 1.1 s, spread over many buckets.
    let ttfts: Vec<f64> = (0..REQUESTS).map(|i| client_ttft(&t, 20 + 7 * i)).collect();
    let total = (REQUESTS + 1) as f64;
    wait_until("every request in the native series", || {
        native.scalar(client, count_query) == Some(total)
    });

    // The quantile Prometheus estimates from the native buckets lands within one schema-3
    // bucket of the client's own, after the client's overhead.
    let p90 = native
        .scalar(
            client,
            "histogram_quantile(0.9, rate(vllm:time_to_first_token_seconds[1m]))",
        )
        .expect("a native p90");
    let measured = quantile(&ttfts, 0.9);
    eprintln!("native p90 {p90:.4} s, the client's {measured:.4} s");
    assert!(
        p90 <= measured * BUCKET_RATIO && p90 >= (measured - CLIENT_OVERHEAD_S) / BUCKET_RATIO,
        "native p90 {p90:.4} s against the client's {measured:.4} s (all: {ttfts:?})"
    );

    // histogram_count and histogram_sum agree with the counters and with kiln's own figures.
    let success = native
        .scalar(client, "sum(vllm:request_success_total)")
        .expect("success counter");
    let e2e_count = native
        .scalar(client, "histogram_count(vllm:e2e_request_latency_seconds)")
        .expect("native e2e count");
    assert_eq!((success, e2e_count), (total, total));
    let text = t.get_text("/metrics").1;
    let kiln_sum = metric_value(&text, "vllm:time_to_first_token_seconds_sum", "").expect("text sum");
    let native_sum = native
        .scalar(client, "histogram_sum(vllm:time_to_first_token_seconds)")
        .expect("native sum");
    assert!(
        (native_sum - kiln_sum).abs() <= 1e-9 * kiln_sum,
        "native sum {native_sum} against the text exposition's {kiln_sum}"
    );
    let client_sum: f64 = ttfts.iter().sum();
    assert!(native_sum >= client_sum - total * CLIENT_OVERHEAD_S - 1.0 && native_sum <= client_sum + 1.0);
    // Native series have no `_bucket` series of their own in this Prometheus.
    assert!(
        native
            .query(client, "vllm:time_to_first_token_seconds_bucket")
            .is_empty()
    );

    // The Prometheus without native histograms scrapes text: the classic buckets are there,
    // and a dashboard's classic quantile still answers.
    wait_until("the classic count", || {
        classic.scalar(client, "vllm:time_to_first_token_seconds_count") == Some(total)
    });
    assert!(classic.query(client, "vllm:time_to_first_token_seconds_bucket").len() > 5);
    let classic_p90 = classic
        .scalar(
            client,
            "histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))",
        )
        .expect("a classic p90");
    assert!(classic_p90 > 0.0 && classic_p90.is_finite(), "{classic_p90}");
}
