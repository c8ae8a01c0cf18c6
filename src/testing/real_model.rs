//! Where tests find the real default model and the project's reference outputs: from
//! `KILN_TEST_MODEL` and `KILN_SHARED_DIR`, which `.ci/run` exports. The tests that need them
//! are `#[ignore]`d; run, they fail rather than skip when the files are missing.

use std::path::{Path, PathBuf};

/// The default model's GGUF, named by `KILN_TEST_MODEL`; panics when unset or not a file.
#[track_caller]
pub fn model_path() -> PathBuf {
    let Some(path) = std::env::var_os("KILN_TEST_MODEL") else {
        panic!("KILN_TEST_MODEL must name the default model's GGUF (.ci/run fetches it and sets it)");
    };
    let path = PathBuf::from(path);
    assert!(path.is_file(), "KILN_TEST_MODEL={} is not a file", path.display());
    path
}

/// The project's shared folder: `KILN_SHARED_DIR`, else `../shared` beside the repository
/// (where it sits for a developer; a clone elsewhere, as CI makes, is pointed at it).
pub fn shared_dir() -> PathBuf {
    std::env::var_os("KILN_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"))
}

/// `reference/smollm2-greedy.json` from the shared folder, computed by an independent
/// implementation (transformers, float32) on the default model; panics when missing.
#[track_caller]
pub fn greedy_reference() -> serde_json::Value {
    let path = shared_dir().join("reference/smollm2-greedy.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => panic!(
            "{}: {e} (set KILN_SHARED_DIR to the shared folder; .ci/run does)",
            path.display()
        ),
    };
    match serde_json::from_str(&text) {
        Ok(json) => json,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}
