//! The operations of `api::worker_contract` (what routers call on a worker) and `/live`, as
//! `operations` documents the rest. Bodies are free-form objects: each is the shape a router
//! parses (see the handlers), not a type of kiln's.

#![allow(dead_code)]

use crate::api::errors::ErrorBody;
use crate::api::lora_admin::{LoadLoraAdapterRequest, UnloadLoraAdapterRequest};
use crate::api::openai_types::{ChatCompletionRequest, CompletionRequest};

#[utoipa::path(
    get,
    path = "/live",
    tag = "service",
    responses((status = 200, description = "The process runs (while the model loads too)"))
)]
pub fn live() {}

#[utoipa::path(
    get,
    path = "/get_load",
    tag = "routers",
    responses(
        (status = 200, description = "SGLang's load: `load` (requests running, waiting and swapped), \
            `num_reqs`, `num_waiting_reqs`, `num_tokens`", body = Object),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading or the engine is not running", body = ErrorBody)
    )
)]
pub fn get_load() {}

#[utoipa::path(
    get,
    path = "/v1/loads",
    tag = "routers",
    responses(
        (status = 200, description = "SGLang's per-rank load: `dp_rank_count`, `loads`, `aggregate`", body = Object),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading or the engine is not running", body = ErrorBody)
    )
)]
pub fn loads() {}

#[utoipa::path(
    get,
    path = "/get_server_info",
    tag = "routers",
    responses(
        (status = 200, description = "SGLang's server info: `dp_size`, `block_size`, `max_model_len`, ...", body = Object),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn get_server_info() {}

#[utoipa::path(
    get,
    path = "/server_info",
    tag = "routers",
    responses(
        (status = 200, description = "vLLM's server info: the settings under `vllm_config`", body = Object),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn server_info() {}

#[utoipa::path(
    get,
    path = "/get_model_info",
    tag = "routers",
    responses(
        (status = 200, description = "SGLang's model info: `model_path`, `is_generation`", body = Object),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn get_model_info() {}

#[utoipa::path(
    get,
    path = "/health_generate",
    tag = "routers",
    responses(
        (status = 200, description = "The engine generated a token"),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 429, description = "The queue is full", body = ErrorBody),
        (status = 500, description = "The engine failed", body = ErrorBody),
        (status = 503, description = "Loading, not running, or no token in time", body = ErrorBody)
    )
)]
pub fn health_generate() {}

#[utoipa::path(
    post,
    path = "/flush_cache",
    tag = "routers",
    responses(
        (status = 200, description = "SGLang's: the prefix cache is empty", body = String, content_type = "text/plain"),
        (status = 400, description = "Requests are running: nothing was flushed", body = ErrorBody),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading or the engine is not running", body = ErrorBody)
    )
)]
pub fn flush_cache() {}

#[utoipa::path(
    post,
    path = "/reset_prefix_cache",
    tag = "routers",
    responses(
        (status = 200, description = "vLLM's: the prefix cache is empty"),
        (status = 400, description = "Requests are running: nothing was reset", body = ErrorBody),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 503, description = "The model is loading or the engine is not running", body = ErrorBody)
    )
)]
pub fn reset_prefix_cache() {}

#[utoipa::path(
    post,
    path = "/v1/completions/render",
    tag = "routers",
    request_body(content = CompletionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "vLLM's render: per prompt, `token_ids` as the server computes \
            them and `sampling_params` with `max_tokens` fitted", body = [Object]),
        (status = 400, description = "Invalid parameters, as for generation", body = ErrorBody),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 404, description = "Another model was named", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn render_completion() {}

#[utoipa::path(
    post,
    path = "/v1/chat/completions/render",
    tag = "routers",
    request_body(content = ChatCompletionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "vLLM's render: `token_ids` of the templated prompt as the server \
            computes them and `sampling_params` with `max_tokens` fitted", body = Object),
        (status = 400, description = "Invalid parameters, as for generation", body = ErrorBody),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 404, description = "Another model was named", body = ErrorBody),
        (status = 503, description = "The model is loading (with `Retry-After`)", body = ErrorBody)
    )
)]
pub fn render_chat() {}

#[utoipa::path(
    post,
    path = "/v1/load_lora_adapter",
    tag = "lora",
    request_body(
        content = LoadLoraAdapterRequest,
        content_type = "application/json",
        examples(("peft" = (summary = "A PEFT adapter folder", value = json!({
            "lora_name": "my-adapter", "lora_path": "/adapters/my-adapter"
        }))))
    ),
    responses(
        (status = 200, description = "vLLM's: `Success: LoRA adapter '<name>' added successfully.`; \
            requests may name it from now on", body = String, content_type = "text/plain"),
        (status = 400, description = "A field is missing, the name is taken, `--max-cpu-loras` \
            adapters are loaded, or the adapter does not load (rank above `--max-lora-rank`, a \
            corrupt or missing file, shapes or targets the base model cannot take): `param` names \
            the field", body = ErrorBody),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 404, description = "`lora_path` holds no adapter", body = ErrorBody),
        (status = 413, description = "The body is over the size limit", body = ErrorBody),
        (status = 503, description = "The model is loading or the engine is not running", body = ErrorBody)
    )
)]
pub fn load_lora_adapter() {}

#[utoipa::path(
    post,
    path = "/v1/unload_lora_adapter",
    tag = "lora",
    request_body(
        content = UnloadLoraAdapterRequest,
        content_type = "application/json",
        examples(("by_name" = (summary = "An adapter by name", value = json!({"lora_name": "my-adapter"}))))
    ),
    responses(
        (status = 200, description = "vLLM's: `Success: LoRA adapter '<name>' removed successfully.`; \
            requests already queued or running under it finish, later ones get 404", body = String,
            content_type = "text/plain"),
        (status = 400, description = "Neither `lora_name` nor `lora_int_id` was given", body = ErrorBody),
        (status = 401, description = "No API key or a wrong one (when the server has keys)", body = ErrorBody),
        (status = 404, description = "No such adapter is loaded", body = ErrorBody),
        (status = 413, description = "The body is over the size limit", body = ErrorBody),
        (status = 503, description = "The model is loading or the engine is not running", body = ErrorBody)
    )
)]
pub fn unload_lora_adapter() {}
