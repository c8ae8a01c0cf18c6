//! SGLang's `GET /health_generate`: healthy only if the engine generates a token now, which
//! the routers use as a deeper health check than `/health`. One token from a one-token
//! prompt; a client that leaves aborts it as any request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::{HttpResponse, web};
use tokio::sync::mpsc::unbounded_channel;

use crate::api::AppState;
use crate::api::choice_output::engine_error;
use crate::api::errors::ApiError;
use crate::engine::events::TokenEvent;
use crate::engine::messages::{AbortReason, Generate};
use crate::engine::request::NewRequest;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::Operation;

/// How long the probe's token may take (queued behind a full batch included).
const DEADLINE: Duration = Duration::from_secs(20);

/// Aborts the probe if its handler is dropped before the token comes.
struct AbortOnDrop<'a> {
    state: &'a AppState,
    id: String,
    done: bool,
}

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.state.engine.abort(self.id.clone(), AbortReason::ClientGone);
        }
    }
}

pub async fn health_generate(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let id = format!("health-generate-{}", uuid::Uuid::new_v4().simple());
    let params = SamplingParams {
        max_tokens: Some(1),
        temperature: 0.0,
        ignore_eos: true,
        ..Default::default()
    };
    let (tx, mut rx) = unbounded_channel();
    let request = NewRequest {
        id: id.clone(),
        // Token 0 is in every vocabulary.
        prompt_token_ids: vec![0],
        params: Arc::new(params),
        seed: None,
        operation: Operation::TextCompletion,
        arrival: Instant::now(),
        trace: None,
        lora: None,
    };
    state
        .engine
        .submit(Generate { request, events: tx })
        .await
        .map_err(engine_error)?;
    let mut guard = AbortOnDrop {
        state: state.get_ref(),
        id,
        done: false,
    };
    let outcome = tokio::time::timeout(DEADLINE, async {
        while let Some(event) = rx.recv().await {
            match event {
                TokenEvent::Finished { .. } => return Ok(()),
                TokenEvent::Failed { error } => return Err(engine_error(error)),
                TokenEvent::Token { .. } | TokenEvent::PromptLogprobs(_) => {}
            }
        }
        Err(ApiError::Unavailable("the engine dropped the health probe".into()))
    })
    .await;
    let result = match outcome {
        Ok(result) => result,
        Err(_) => Err(ApiError::Unavailable(format!(
            "the engine generated no token within {} s",
            DEADLINE.as_secs()
        ))),
    };
    guard.done = result.is_ok();
    result.map(|()| HttpResponse::Ok().finish())
}
