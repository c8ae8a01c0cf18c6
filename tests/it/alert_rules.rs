//! `deploy/prometheus/kiln-rules.yaml`: `promtool check rules` and the unit tests in
//! `kiln-rules.test.yaml` pass, and a rule with a changed threshold fails them, so the tests
//! pin what each alert does. `.ci/run` sets `KILN_TEST_PROMTOOL`.

use std::path::Path;
use std::process::Command;

const RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/kiln-rules.yaml");
const TESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/kiln-rules.test.yaml");

/// Runs `promtool ARGS` in `dir`; (success, output).
fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let binary = std::env::var("KILN_TEST_PROMTOOL").expect("set KILN_TEST_PROMTOOL");
    let out = Command::new(binary)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The rules (with `edit` applied) and their tests in a fresh folder.
fn rules_in(edit: impl Fn(String) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = std::fs::read_to_string(RULES).expect("rules");
    std::fs::write(dir.path().join("kiln-rules.yaml"), edit(rules)).expect("write rules");
    std::fs::copy(TESTS, dir.path().join("kiln-rules.test.yaml")).expect("copy tests");
    dir
}

#[test]
#[ignore = "needs promtool (KILN_TEST_PROMTOOL); .ci/run provides it"]
fn the_alert_rules_check_and_pass_their_unit_tests() {
    let dir = rules_in(|r| r);
    let (ok, out) = promtool(dir.path(), &["check", "rules", "kiln-rules.yaml"]);
    assert!(ok && out.contains("SUCCESS: 17 rules found"), "{out}");
    let (ok, out) = promtool(dir.path(), &["test", "rules", "kiln-rules.test.yaml"]);
    assert!(ok && out.contains("SUCCESS"), "{out}");
}

#[test]
#[ignore = "needs promtool (KILN_TEST_PROMTOOL); .ci/run provides it"]
fn a_changed_threshold_fails_the_rule_unit_tests() {
    let edits: [(&str, &str); 8] = [
        (
            "job_model:vllm_time_to_first_token_seconds:p95_5m > 2",
            "job_model:vllm_time_to_first_token_seconds:p95_5m > 5",
        ),
        ("(vllm:kv_cache_usage_perc) > 0.95", "(vllm:kv_cache_usage_perc) > 0.98"),
        (
            "job:http_server_requests_5xx:ratio_rate5m > 0.05",
            "job:http_server_requests_5xx:ratio_rate5m > 0.5",
        ),
        (
            "job:http_server_requests_429:ratio_rate5m > 0.10",
            "job:http_server_requests_429:ratio_rate5m > 0.5",
        ),
        (
            "increase(kiln_engine_restarts_total[15m]) > 0",
            "increase(kiln_engine_restarts_total[15m]) > 1",
        ),
        (
            "(deriv(vllm:num_requests_waiting[10m])) > 0",
            "(deriv(vllm:num_requests_waiting[10m])) > 5",
        ),
        (
            "kiln_otlp_export_failures:ratio_rate5m > 0.5",
            "kiln_otlp_export_failures:ratio_rate5m > 1",
        ),
        (
            "(increase(kiln_otlp_spans_dropped_total[10m])) > 0",
            "(increase(kiln_otlp_spans_dropped_total[10m])) > 1000",
        ),
    ];
    for (from, to) in edits {
        let dir = rules_in(|r| {
            assert!(r.contains(from), "the rules no longer contain {from}");
            r.replacen(from, to, 1)
        });
        let (ok, out) = promtool(dir.path(), &["test", "rules", "kiln-rules.test.yaml"]);
        assert!(!ok && out.contains("FAILED"), "`{to}` still passes:\n{out}");
    }
}
