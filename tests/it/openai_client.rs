//! The official `openai` Python client against kiln serving the real default model.
//! Needs `KILN_TEST_MODEL` and `KILN_TEST_PYTHON` (a Python with `openai`); `.ci/run` sets both.

use std::process::Command;

use kiln::config::Config;
use kiln::model::loader::open_model;
use kiln::server::prepare_model;
use kiln::testing::TestServer;
use kiln::testing::real_model::model_path;

#[test]
#[ignore = "needs the real model and the openai client; .ci/run provides them"]
fn the_official_openai_client_gets_correct_answers() {
    let model = model_path();
    let python = std::env::var("KILN_TEST_PYTHON").expect("KILN_TEST_PYTHON");
    let mut config = Config::default();
    config.model.path = model.display().to_string();
    config.engine.kv_cache_memory = "256MiB".into();
    let files = open_model(&model).expect("open model");
    let mut prepared = prepare_model(&config, files).expect("prepare");
    prepared.served.name = kiln::model::fetch::DEFAULT_MODEL_NAME.to_string();
    let server = TestServer::start(config, prepared).expect("server");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/openai_client_check.py");
    let output = Command::new(python)
        .arg(script)
        .arg(server.url("/v1"))
        .output()
        .expect("run python");
    assert!(
        output.status.success(),
        "openai client checks failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
