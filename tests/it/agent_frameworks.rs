//! The agent, extraction and evaluation frameworks users build on, each driven as its users
//! drive it against kiln on the real default model: instructor, pydantic-ai,
//! langchain-openai, litellm, openai-agents and lm-eval (scripts in tests/python/clients/).
//! Needs `KILN_TEST_MODEL` and `KILN_TEST_CLIENTS_PYTHON` (a Python with the pinned
//! frameworks); `.ci/run` sets both.

use std::process::Command;

use kiln::config::Config;
use kiln::testing::TestServer;

use crate::openai_client::serve_real_model;

/// Runs `tests/python/clients/SCRIPT` against `server` with `KILN_TEST_CLIENTS_PYTHON`;
/// panics with its output when it fails.
fn run_client(script: &str, server: &TestServer) {
    let python = std::env::var("KILN_TEST_CLIENTS_PYTHON").expect("KILN_TEST_CLIENTS_PYTHON");
    let path = format!("{}/tests/python/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(python)
        .arg(path)
        .arg(server.url("/v1"))
        // No framework may reach out (telemetry, model price lists, hubs).
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
        .output()
        .expect("run python");
    assert!(
        output.status.success(),
        "{script} failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The default model behind the template that knows tools, with the Hermes parser, so that
/// `tool_choice: auto` is served too.
fn with_tools(c: &mut Config) {
    c.model.chat_template = crate::tool_calling::TOOLS_TEMPLATE.into();
    c.model.enable_auto_tool_choice = true;
    c.model.tool_call_parser = Some(kiln::config::ToolCallParser::Hermes);
}

#[test]
#[ignore = "needs the real model and the frameworks' venv; .ci/run provides them"]
fn instructor_extracts_pydantic_models() {
    run_client("instructor_check.py", &serve_real_model(|_| {}));
}

#[test]
#[ignore = "needs the real model and the frameworks' venv; .ci/run provides them"]
fn pydantic_ai_agents_get_typed_output() {
    run_client("pydantic_ai_check.py", &serve_real_model(|_| {}));
}

#[test]
#[ignore = "needs the real model and the frameworks' venv; .ci/run provides them"]
fn langchain_binds_tools_and_structures_output() {
    run_client("langchain_check.py", &serve_real_model(|_| {}));
}

#[test]
#[ignore = "needs the real model and the frameworks' venv; .ci/run provides them"]
fn litellm_calls_tools_and_formats_responses() {
    run_client("litellm_check.py", &serve_real_model(|_| {}));
}

#[test]
#[ignore = "needs the real model and the frameworks' venv; .ci/run provides them"]
fn an_openai_agents_agent_calls_a_function_tool() {
    run_client("openai_agents_check.py", &serve_real_model(with_tools));
}

#[test]
#[ignore = "needs the real model and the frameworks' venv; .ci/run provides them"]
fn lm_eval_runs_a_local_task_through_both_endpoints() {
    run_client(
        "lm_eval_check.py",
        &serve_real_model(|c| c.server.enable_tokenizer_info_endpoint = true),
    );
}
