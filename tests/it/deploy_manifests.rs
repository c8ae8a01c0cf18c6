//! `deploy/kubernetes/` validated offline (tests/kubernetes/validate_manifests.py): core kinds
//! (the router's ServiceAccount, Role and RoleBinding included) with `kubernetes-validate --strict`, PodMonitor and ScaledObject with the npm packages'
//! CRD validators under Node, InferencePool against the Gateway API Inference Extension's
//! CRD, and the Deployment's drain timing against kiln's own. Broken copies must fail, so
//! the validators are shown to bite. `.ci/run` sets `KILN_TEST_PYTHON` (a venv with
//! kubernetes-validate) and `KILN_TEST_NODE`.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln::config::Config;
use kiln::lifecycle::ABORT_FLUSH;

use crate::common::tool;

const MANIFESTS: [&str; 7] = [
    "deployment.yaml",
    "router.yaml",
    "service.yaml",
    "poddisruptionbudget.yaml",
    "podmonitor.yaml",
    "scaledobject.yaml",
    "inferencepool.yaml",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the validator on `files`; (success, output).
fn validate(files: &[PathBuf]) -> (bool, String) {
    let grace = Config::default().server.shutdown_grace_period_s;
    let out = Command::new(tool("KILN_TEST_PYTHON"))
        .arg(repo().join("tests/kubernetes/validate_manifests.py"))
        .args(["--node", &tool("KILN_TEST_NODE")])
        .args(["--grace-s", &grace.to_string()])
        .args(["--flush-s", &ABORT_FLUSH.as_secs_f64().to_string()])
        .args(files)
        .output()
        .expect("run validate_manifests.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A copy of one manifest with `from` replaced by `to` (which must occur).
fn broken(dir: &Path, name: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("deploy/kubernetes").join(name)).expect("manifest");
    assert!(text.contains(from), "{name} no longer contains {from:?}");
    let path = dir.join(format!("broken-{}-{name}", from.len()));
    std::fs::write(&path, text.replacen(from, to, 1)).expect("write");
    path
}

#[test]
#[ignore = "needs kubernetes-validate (KILN_TEST_PYTHON) and node (KILN_TEST_NODE); .ci/run provides them"]
fn the_kubernetes_manifests_validate_strictly_offline() {
    let files: Vec<PathBuf> = MANIFESTS
        .iter()
        .map(|m| repo().join("deploy/kubernetes").join(m))
        .collect();
    let (ok, out) = validate(&files);
    assert!(ok, "{out}");
    for kind in [
        "Deployment kiln",
        "Service kiln",
        "PodDisruptionBudget kiln",
        "PodMonitor kiln",
        "ScaledObject kiln",
        "InferencePool kiln",
        "ServiceAccount kiln-router",
        "Role kiln-router",
        "RoleBinding kiln-router",
        "Deployment kiln-router",
        "Service kiln-router",
        "PodMonitor kiln-router",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with("ok ") && l.ends_with(kind)),
            "{kind} not validated:\n{out}"
        );
    }
}

#[test]
#[ignore = "needs kubernetes-validate (KILN_TEST_PYTHON) and node (KILN_TEST_NODE); .ci/run provides them"]
fn each_validator_rejects_a_broken_manifest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let cases = [
        // An unknown field: only strict validation catches it.
        (
            broken(
                d,
                "deployment.yaml",
                "  revisionHistoryLimit: 3",
                "  revisionHistoryLimits: 3",
            ),
            "revisionHistoryLimits",
        ),
        // Liveness on /health, which is 503 while a large model loads: the pod would restart.
        (
            broken(d, "deployment.yaml", "path: /live", "path: /health"),
            "liveness probe is not GET /live",
        ),
        // A grace period shorter than preStop + kiln's drain and flush.
        (
            broken(
                d,
                "deployment.yaml",
                "terminationGracePeriodSeconds: 40",
                "terminationGracePeriodSeconds: 31",
            ),
            "terminationGracePeriodSeconds 31",
        ),
        (
            broken(d, "service.yaml", "  type: ClusterIP", "  type: [ClusterIP]"),
            "Service kiln",
        ),
        (
            broken(d, "podmonitor.yaml", "interval: 5s", "interval: 5 seconds"),
            "interval",
        ),
        (broken(d, "scaledobject.yaml", "    name: kiln\n", "\n"), "name"),
        (
            broken(
                d,
                "inferencepool.yaml",
                "  targetPorts:",
                "  targetPort:\n    - number: 1\n  targetPorts:",
            ),
            "targetPort",
        ),
        (
            broken(
                d,
                "inferencepool.yaml",
                "    - number: 8000",
                "    - number: 8000\n    - number: 8000",
            ),
            "port number must be unique",
        ),
    ];
    for (path, expected) in cases {
        let (ok, out) = validate(std::slice::from_ref(&path));
        assert!(!ok, "{} passed:\n{out}", path.display());
        assert!(
            out.lines().any(|l| l.starts_with("FAIL") && l.contains(expected)),
            "{} failed without naming {expected:?}:\n{out}",
            path.display()
        );
    }
    // The router is checked against kiln's Deployment, so each broken copy goes with it.
    let router_cases = [
        (
            broken(d, "router.yaml", "serviceAccountName:", "serviceAccountNames:"),
            "serviceAccountNames",
        ),
        (
            broken(
                d,
                "router.yaml",
                "app.kubernetes.io/name=kiln\n",
                "app.kubernetes.io/name=kilns\n",
            ),
            "does not select kiln's pods",
        ),
        (
            broken(
                d,
                "router.yaml",
                "--service-discovery-port=8000",
                "--service-discovery-port=80",
            ),
            "not kiln's http port",
        ),
        (
            broken(d, "router.yaml", "path: /readiness", "path: /health"),
            "readiness probe is not GET /readiness",
        ),
        (
            broken(
                d,
                "router.yaml",
                r#"verbs: ["get", "list", "watch"]"#,
                r#"verbs: ["get", "list", "watch", "delete"]"#,
            ),
            "are not read-only pods",
        ),
    ];
    let kiln = repo().join("deploy/kubernetes/deployment.yaml");
    for (path, expected) in router_cases {
        let (ok, out) = validate(&[kiln.clone(), path.clone()]);
        assert!(!ok, "{} passed:\n{out}", path.display());
        assert!(
            out.lines().any(|l| l.starts_with("FAIL") && l.contains(expected)),
            "{} failed without naming {expected:?}:\n{out}",
            path.display()
        );
    }
}

/// The image carries the default model where the Deployment's `--model` looks for it, so a
/// pod never fetches it; both use kiln's own default model file name.
#[test]
fn the_deployment_serves_the_model_the_containerfile_puts_in_the_image() {
    use kiln::model::fetch::{DEFAULT_MODEL_NAME, GGUF_NAME};
    let read = |p: &str| std::fs::read_to_string(repo().join(p)).expect(p);
    let containerfile = read("Containerfile");
    let deployment = read("deploy/kubernetes/deployment.yaml");
    let in_image = format!("/opt/kiln/models/{GGUF_NAME}");
    assert!(
        containerfile.contains(&format!("/out/models/{GGUF_NAME} /opt/kiln/models/")),
        "the Containerfile does not copy {GGUF_NAME} into the image"
    );
    assert!(containerfile.contains("fetch-model --cache-dir /out/models"));
    assert!(containerfile.contains("cargo build --release --locked --bin kiln"));
    assert!(
        deployment.contains(&format!("--model={in_image}")),
        "deployment.yaml: --model is not {in_image}"
    );
    assert!(deployment.contains(&format!("--served-model-name={DEFAULT_MODEL_NAME}")));
}
