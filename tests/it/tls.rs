//! HTTPS and key sources against the real `kiln` binary, with a PKI generated at test time:
//! the official `openai` client and a real Prometheus work over HTTPS, plain HTTP to the
//! TLS port fails cleanly, client certificates are none / optional / required, and keys come
//! from `--api-key-file`, `KILN_API_KEY` or `VLLM_API_KEY`.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::pki::{HttpsClient, Pki};
use crate::common::process::{KilnProcess, Launch, free_port};
use crate::common::prometheus_server::PrometheusServer;
use crate::common::tool;
use crate::common::wait::wait_until;

const KEY: &str = "sk-tls-test-5be1";

fn tls_launch(pki: &Pki) -> Launch {
    Launch::default()
        .arg("--ssl-keyfile", pki.server_key.to_str().expect("utf-8"))
        .arg("--ssl-certfile", pki.server_cert.to_str().expect("utf-8"))
}

/// A short completion's status, over HTTPS when `https` is given.
fn completion_status(kiln: &KilnProcess, https: Option<&HttpsClient>, key: Option<&str>) -> u16 {
    let body = json!({"prompt": "a", "max_tokens": 2});
    if let Some(https) = https {
        return https
            .request(kiln.port, "POST", "/v1/completions", key, Some(&body))
            .expect("https completion")
            .0;
    }
    let mut req = kiln.client.post(kiln.url("/v1/completions")).json(&body);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    req.send().expect("completion").status().as_u16()
}

#[test]
#[ignore = "needs the openai client (KILN_TEST_PYTHON) and prometheus (KILN_TEST_PROMETHEUS); .ci/run provides them"]
fn the_openai_client_and_prometheus_work_over_https_and_plain_http_fails_cleanly() {
    let pki = Pki::generate();
    let key_file = pki.dir.path().join("keys");
    std::fs::write(&key_file, format!("# kiln keys\n{KEY}\n")).expect("key file");
    let metrics_port = free_port();
    let metrics_listen = format!("127.0.0.1:{metrics_port}");
    let kiln = tls_launch(&pki)
        .arg("--api-key-file", key_file.to_str().expect("utf-8"))
        .arg("--metrics-listen", &metrics_listen)
        .https(HttpsClient::new(&pki.ca, None))
        .start();

    // The official client: the right key works (plain and streamed), a wrong one raises
    // AuthenticationError; the CA is the test's, so the certificate is really checked.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/openai_access_check.py");
    let output = Command::new(tool("KILN_TEST_PYTHON"))
        .arg(script)
        .arg(kiln.url("/v1"))
        .arg(KEY)
        .arg(&pki.ca)
        .output()
        .expect("run python");
    assert!(
        output.status.success(),
        "openai client over https:\nstdout:\n{}\nstderr:\n{}\nkiln:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        kiln.logs()
    );

    // Plain HTTP to the TLS port: an error, promptly, and the server serves on.
    let plain = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let started = Instant::now();
    let result = plain.get(format!("http://127.0.0.1:{}/health", kiln.port)).send();
    assert!(result.is_err(), "plain http got an answer: {result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "plain http hung: {:?}",
        started.elapsed()
    );
    assert_eq!(kiln.status_of("/health"), Some(200));

    // /metrics moved to its own listener (also HTTPS); the public port no longer has it.
    let https = kiln.https.as_ref().expect("https");
    let (public, _) = https
        .request(kiln.port, "GET", "/metrics", Some(KEY), None)
        .expect("send");
    assert_eq!(public, 404, "/metrics is off the public port");

    // A real Prometheus scrapes the metrics listener over HTTPS, checking the certificate.
    let prometheus = PrometheusServer::start_with(
        "kiln",
        std::slice::from_ref(&metrics_listen),
        &format!(
            "    scheme: https\n    tls_config:\n      ca_file: {}\n",
            pki.ca.display()
        ),
    );
    let port = prometheus.port;
    let query = |q: &str| -> Option<f64> {
        let resp: Value = plain
            .get(format!("http://127.0.0.1:{port}/api/v1/query"))
            .query(&[("query", q)])
            .send()
            .ok()?
            .json()
            .ok()?;
        resp["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    };
    // The python checks ran 2 successful requests (one completion, one chat).
    wait_until("Prometheus to scrape kiln over https", || {
        query("sum(vllm:request_success_total{job=\"kiln\"})").is_some_and(|v| v >= 2.0)
    });
    assert_eq!(query("up{job=\"kiln\"}"), Some(1.0));
}

#[test]
fn client_certificates_are_checked_when_required_and_accepted_when_optional() {
    let pki = Pki::generate();
    let ca = pki.ca.to_str().expect("utf-8");
    let with_identity = HttpsClient::new(&pki.ca, Some((&pki.client_cert, &pki.client_key)));
    let without = HttpsClient::new(&pki.ca, None);

    let required = tls_launch(&pki)
        .arg("--ssl-ca-certs", ca)
        .arg("--ssl-cert-reqs", "2")
        .https(with_identity.clone())
        .start();
    assert_eq!(completion_status(&required, Some(&with_identity), None), 200);
    let refused = without.request(required.port, "GET", "/health", None, None);
    assert!(refused.is_err(), "no client certificate, yet: {refused:?}");

    let optional = tls_launch(&pki)
        .arg("--ssl-ca-certs", ca)
        .arg("--ssl-cert-reqs", "optional")
        .https(without.clone())
        .start();
    assert_eq!(completion_status(&optional, Some(&with_identity), None), 200);
    assert_eq!(completion_status(&optional, Some(&without), None), 200);
}

#[test]
fn keys_come_from_a_file_kiln_api_key_or_vllm_api_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("keys");
    std::fs::write(&key_file, "\n# one key a line\nsk-from-file\n").expect("key file");
    let cases = [
        (
            Launch::default().arg("--api-key-file", key_file.to_str().expect("utf-8")),
            "sk-from-file",
        ),
        (
            Launch::default().env("KILN_API_KEY", "sk-from-kiln-env"),
            "sk-from-kiln-env",
        ),
        (
            Launch::default().env("VLLM_API_KEY", "sk-from-vllm-env"),
            "sk-from-vllm-env",
        ),
    ];
    for (launch, key) in cases {
        let kiln = launch.start();
        assert_eq!(completion_status(&kiln, None, None), 401, "{key}: no key");
        assert_eq!(
            completion_status(&kiln, None, Some("sk-other")),
            401,
            "{key}: wrong key"
        );
        assert_eq!(completion_status(&kiln, None, Some(key)), 200, "{key}: right key");
        assert!(!kiln.logs().contains(key), "{key}: a key reached the log");
    }
}
