//! The README's first command and its first requests, run as a user would: `kiln serve` with
//! no flags but a port (the default model from the cache `KILN_CACHE_DIR` names, as `.ci/run`
//! fetched it), then the README's curl block and its Python block, exactly as written but
//! for the port. Needs `KILN_CACHE_DIR` and `KILN_TEST_PYTHON`.

use std::fs::File;
use std::process::{Child, Command, Stdio};

use super::common::process::free_port;
use super::common::tool;
use super::common::wait::wait_for;

/// The README's code block of `lang` under the heading `## A first request`.
fn quickstart_block(readme: &str, lang: &str) -> String {
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("A first request"))
        .expect("README has a section `A first request`");
    let fence = format!("```{lang}\n");
    let start = section.find(&fence).unwrap_or_else(|| panic!("no ```{lang} block")) + fence.len();
    let len = section[start..].find("```").expect("closed block");
    section[start..start + len].to_string()
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs the default model in KILN_CACHE_DIR and KILN_TEST_PYTHON"]
fn the_readme_first_command_and_requests_work_as_written() {
    let cache = tool("KILN_CACHE_DIR");
    let python = tool("KILN_TEST_PYTHON");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    let port = free_port();
    let log_dir = tempfile::tempdir().expect("tempdir");
    let log = log_dir.path().join("kiln.log");
    let _server = Server(
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["serve", "--port", &port.to_string()])
            .env("KILN_CACHE_DIR", &cache)
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("log file"))
            .spawn()
            .expect("kiln serve starts"),
    );
    let ready = format!("http://127.0.0.1:{port}/ready");
    wait_for(
        "kiln serve on the default model to become ready",
        || match reqwest::blocking::get(&ready) {
            Ok(r) if r.status() == 200 => Ok(()),
            Ok(r) => Err(format!("/ready {}", r.status())),
            Err(e) => Err(format!(
                "{e}; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )),
        },
    );
    let at_port = |block: String| block.replace("127.0.0.1:8000", &format!("127.0.0.1:{port}"));

    // The curl block, with curl made to fail on an HTTP error instead of printing it.
    let curl = at_port(quickstart_block(&readme, "sh")).replace("curl ", "curl -sS --fail ");
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &curl])
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the README's curl commands failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "\"object\":\"list\"",
        "\"object\":\"text_completion\"",
        "chat.completion.chunk",
        "data: [DONE]",
        "vllm:num_requests_running",
    ] {
        assert!(stdout.contains(expected), "no {expected} in the curl output:\n{stdout}");
    }

    // The Python block; what it prints is the answer its comment promises.
    let script = at_port(quickstart_block(&readme, "python"));
    let promised = script
        .lines()
        .find_map(|l| {
            l.split_once("print(")
                .and_then(|(_, rest)| rest.split_once("# "))
                .map(|(_, c)| c.trim().to_string())
        })
        .expect("the print line says what it prints");
    let out = Command::new(python)
        .args(["-c", &script])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "the README's Python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), promised);
}
