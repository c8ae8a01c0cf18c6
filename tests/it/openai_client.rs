//! The official `openai` Python client against kiln serving the real default model.
//! Needs `KILN_TEST_MODEL` and `KILN_TEST_PYTHON` (a Python with `openai`); `.ci/run` sets both.

use std::process::Command;

use kiln::config::Config;
use kiln::model::loader::open_model;
use kiln::server::prepare_model;
use kiln::testing::TestServer;
use kiln::testing::real_model::model_path;

/// A server on the real default model, configured further by `tweak`.
pub(crate) fn serve_real_model(tweak: impl FnOnce(&mut Config)) -> TestServer {
    let model = model_path();
    let mut config = Config::default();
    config.model.path = model.display().to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    tweak(&mut config);
    let files = open_model(&model).expect("open model");
    let mut prepared = prepare_model(&config, files).expect("prepare");
    prepared.served.name = kiln::model::fetch::DEFAULT_MODEL_NAME.to_string();
    TestServer::start(config, prepared).expect("server")
}

/// Runs `tests/python/SCRIPT` (which drives the official openai client) against
/// `base_url` with `KILN_TEST_PYTHON`; panics with its output when it fails, else returns
/// its stdout.
pub(crate) fn run_openai_script(script: &str, base_url: &str) -> String {
    let python = std::env::var("KILN_TEST_PYTHON").expect("KILN_TEST_PYTHON");
    let path = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(python)
        .arg(path)
        .arg(base_url)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{script} failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
#[ignore = "needs the real model and the openai client; .ci/run provides them"]
fn the_official_openai_client_gets_correct_answers() {
    let server = serve_real_model(|_| {});
    run_openai_script("openai_client_check.py", &server.url("/v1"));
}
