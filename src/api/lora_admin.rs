//! vLLM's run-time adapter endpoints, served only with `--allow-runtime-lora-updating`
//! (vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING`): `POST /v1/load_lora_adapter`
//! `{"lora_name", "lora_path"}` and `POST /v1/unload_lora_adapter` `{"lora_name"}` or
//! `{"lora_int_id"}`, answered as vLLM answers: 200 with a line of text, or an error with
//! vLLM's status (400 for a bad body, a duplicate name or an adapter that does not load; 404
//! for a path with no adapter, or an unknown adapter to unload).
//!
//! Unloading lets the requests already queued or running under the adapter finish (vLLM's
//! engine keeps its adapters in an LRU cache, so in-flight requests finish there too); new
//! requests naming it get 404 from then on. `--max-cpu-loras` caps the adapters served: a
//! load beyond it is refused (vLLM instead evicts the least recently used adapter from its
//! cache and reloads it from disk when named again).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use actix_web::http::Method;
use actix_web::{HttpResponse, web};
use serde::Deserialize;
use utoipa::ToSchema;

use super::errors::ApiError;
use super::{AppState, ServedAdapter};
use crate::model::config::ModelConfig;
use crate::model::lora::{LoraError, load_adapter};
use crate::stats::lora_adapters::{AdapterChange, RecordAdapterChange};

/// What loading an adapter at run time needs to know about the base model and the limits.
#[derive(Debug)]
pub struct LoraLoader {
    pub model: ModelConfig,
    pub max_lora_rank: usize,
    /// `--max-cpu-loras` (0 resolved): adapters served at once.
    pub max_adapters: usize,
    /// The next adapter's id: ids are never reused, so a prefix cached under an unloaded
    /// adapter can never match a later one.
    next_id: AtomicU32,
    /// One load or unload at a time (a duplicate name is checked and inserted as one).
    changing: tokio::sync::Mutex<()>,
}

impl LoraLoader {
    /// `first_id`: one past the start-up adapters' ids.
    pub fn new(model: ModelConfig, max_lora_rank: usize, max_adapters: usize, first_id: u32) -> Self {
        Self {
            model,
            max_lora_rank,
            max_adapters,
            next_id: AtomicU32::new(first_id),
            changing: tokio::sync::Mutex::new(()),
        }
    }
}

/// vLLM's `LoadLoRAAdapterRequest`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct LoadLoraAdapterRequest {
    /// The name requests give in `model` (not the base model's, not a served adapter's).
    #[serde(default)]
    pub lora_name: String,
    /// A PEFT folder (`adapter_config.json` and `adapter_model.safetensors`) or a GGUF
    /// LoRA file, on the server's file system.
    #[serde(default)]
    pub lora_path: String,
}

/// vLLM's `UnloadLoRAAdapterRequest`: the adapter by name or by id.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UnloadLoraAdapterRequest {
    #[serde(default)]
    pub lora_name: Option<String>,
    /// The adapter's id (start-up adapters from 1, in `--lora-modules` order).
    #[serde(default)]
    pub lora_int_id: Option<u32>,
}

fn engine_gone() -> ApiError {
    ApiError::Unavailable("the engine is not running".into())
}

/// vLLM's 404 for a path that holds no adapter; every other load failure is a 400 naming
/// what is wrong (the file, the rank, the shapes).
fn load_error(error: LoraError, path: &str) -> ApiError {
    match error {
        LoraError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound && !Path::new(path).exists() => {
            ApiError::AdapterNotFound(format!("No adapter found for {path}"))
        }
        other => ApiError::invalid("lora_path", other.to_string()),
    }
}

pub async fn load_lora_adapter(
    state: web::Data<AppState>,
    loader: web::Data<LoraLoader>,
    body: web::Json<LoadLoraAdapterRequest>,
) -> Result<HttpResponse, ApiError> {
    let mut load_seconds = None;
    let loaded = load(&state, &loader, body.into_inner(), &mut load_seconds).await;
    let change = if loaded.is_ok() {
        AdapterChange::Loaded
    } else {
        AdapterChange::Failed
    };
    state.stats.do_send(RecordAdapterChange { change, load_seconds });
    loaded
}

/// Loads the adapter; `load_seconds` is set once its files were read (loaded or not).
async fn load(
    state: &AppState,
    loader: &web::Data<LoraLoader>,
    body: LoadLoraAdapterRequest,
    load_seconds: &mut Option<f64>,
) -> Result<HttpResponse, ApiError> {
    let LoadLoraAdapterRequest { lora_name, lora_path } = body;
    if lora_name.is_empty() || lora_path.is_empty() {
        return Err(ApiError::invalid(
            if lora_name.is_empty() { "lora_name" } else { "lora_path" },
            "Both 'lora_name' and 'lora_path' must be provided.",
        ));
    }
    let _one_at_a_time = loader.changing.lock().await;
    let catalog = &state.model.adapters;
    if catalog.find(&lora_name).is_some() || lora_name == state.model.name {
        return Err(ApiError::invalid(
            "lora_name",
            format!("The lora adapter '{lora_name}' has already been loaded."),
        ));
    }
    if catalog.len() >= loader.max_adapters {
        return Err(ApiError::invalid(
            "lora_name",
            format!(
                "{} LoRA adapters are loaded, the most --max-cpu-loras allows; unload one first",
                catalog.len()
            ),
        ));
    }
    let id = loader.next_id.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let reading = loader.clone();
    let (name, path) = (lora_name.clone(), PathBuf::from(&lora_path));
    let read = web::block(move || load_adapter(id, &name, &path, &reading.model, reading.max_lora_rank)).await;
    *load_seconds = Some(started.elapsed().as_secs_f64());
    let adapter = read
        .map_err(|e| ApiError::EngineError(format!("loading the adapter failed: {e}")))?
        .map_err(|e| load_error(e, &lora_path))?;
    let rank = adapter.rank;
    if !state.engine.load_lora(Arc::new(adapter)).await {
        return Err(engine_gone());
    }
    *load_seconds = Some(started.elapsed().as_secs_f64());
    catalog.insert(ServedAdapter {
        name: lora_name.clone(),
        id,
        path: lora_path.clone(),
    });
    tracing::info!(adapter = %lora_name, id, rank, path = %lora_path,
        seconds = started.elapsed().as_secs_f64(), "LoRA adapter loaded at run time");
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body(format!("Success: LoRA adapter '{lora_name}' added successfully.")))
}

pub async fn unload_lora_adapter(
    state: web::Data<AppState>,
    loader: web::Data<LoraLoader>,
    body: web::Json<UnloadLoraAdapterRequest>,
) -> Result<HttpResponse, ApiError> {
    let UnloadLoraAdapterRequest { lora_name, lora_int_id } = body.into_inner();
    let lora_name = lora_name.filter(|n| !n.is_empty());
    if lora_name.is_none() && lora_int_id.is_none() {
        return Err(ApiError::invalid(
            "lora_name",
            "either 'lora_name' and 'lora_int_id' needs to be provided.",
        ));
    }
    let _one_at_a_time = loader.changing.lock().await;
    let Some(adapter) = state.model.adapters.remove(lora_name.as_deref(), lora_int_id) else {
        let named = lora_name.unwrap_or_else(|| lora_int_id.unwrap_or_default().to_string());
        return Err(ApiError::AdapterNotFound(format!(
            "The lora adapter '{named}' cannot be found."
        )));
    };
    if !state.engine.unload_lora(adapter.id).await {
        return Err(engine_gone());
    }
    tracing::info!(adapter = %adapter.name, id = adapter.id, "LoRA adapter unloaded");
    state.stats.do_send(RecordAdapterChange {
        change: AdapterChange::Unloaded,
        load_seconds: None,
    });
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body(format!(
            "Success: LoRA adapter '{}' removed successfully.",
            adapter.name
        )))
}

/// Registers both endpoints (the caller adds the [`LoraLoader`] as app data); another
/// method is a 405 naming the allowed one, as on every route.
pub fn routes(cfg: &mut web::ServiceConfig) {
    macro_rules! resource {
        ($path:expr, $method:expr, $handler:expr) => {
            web::resource($path)
                .route(web::route().method($method).to($handler))
                .default_service(web::to(super::routes::method_not_allowed))
        };
    }
    cfg.service(resource!("/v1/load_lora_adapter", Method::POST, load_lora_adapter))
        .service(resource!("/v1/unload_lora_adapter", Method::POST, unload_lora_adapter));
}
