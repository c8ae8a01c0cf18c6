//! The access log: one `info` line per finished request under the `kiln::access` target,
//! written when the response is done (a stream's last chunk sent, or its client gone), with
//! the request id, trace id, route, status and, for generation requests, the model (and the
//! LoRA adapter, `lora_name`, when the request went through one), token
//! counts, finish reason, queue time, TTFT and end-to-end latency, so log lines, spans and
//! metrics join on ids. `--log-format json` makes it (and every other line) one JSON object.
//! Probes (`/health`, `/ready`, `/metrics`) are not logged unless `--access-log-probes`.
//!
//! This middleware also owns the request's identity: it reads `X-Request-Id` and the W3C
//! `traceparent`/`tracestate` into a [`RequestLog`] for the handler, and echoes the request id
//! in the response's `X-Request-Id`.
//!
//! The path and the user agent are the client's bytes: they are logged with `?` (Rust's
//! `Debug` escaping; JSON escaping in json format), so a CR or LF in them prints as `\r` or
//! `\n` and can never start a log line of its own. A client request id is kept only when it is
//! visible ASCII.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue, USER_AGENT};
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage, web};
use bytes::Bytes;

use super::request_log::RequestLog;

/// The access log's switches (app data; absent: defaults).
#[derive(Debug, Clone, Copy, Default)]
pub struct AccessLogSettings {
    /// Log `/health`, `/ready` and `/metrics` too.
    pub probes: bool,
}

const PROBES: [&str; 4] = ["/health", "/ready", "/metrics", "/metrics/"];

/// Middleware: identity in, `X-Request-Id` out, one access line when the response is done.
pub async fn access_log(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<LoggedBody>, Error> {
    let log = Arc::new(RequestLog::from_headers(req.headers()));
    req.extensions_mut().insert(Arc::clone(&log));
    let probes = req.app_data::<web::Data<AccessLogSettings>>().is_some_and(|s| s.probes);
    let enabled =
        tracing::enabled!(target: "kiln::access", tracing::Level::INFO) && (probes || !PROBES.contains(&req.path()));
    let line = enabled.then(|| AccessLine {
        started: Instant::now(),
        method: req.method().to_string(),
        path: req.uri().to_string(),
        route: None,
        status: 0,
        user_agent: req
            .headers()
            .get(USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default(),
        log: Arc::clone(&log),
    });
    let result = next.call(req).await;
    let mut res = match result {
        Ok(res) => res,
        Err(err) => {
            if let Some(mut line) = line {
                line.status = err.as_response_error().status_code().as_u16();
                line.write();
            }
            return Err(err);
        }
    };
    // Requests that did not set one (no generation) get a fresh id, logged and echoed.
    let request_id = log
        .request_id()
        .unwrap_or_else(|| log.request_id_or(&uuid::Uuid::new_v4().simple().to_string()));
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        res.headers_mut().insert(HeaderName::from_static("x-request-id"), value);
    }
    let line = line.map(|mut line| {
        line.status = res.status().as_u16();
        line.route = res.request().match_pattern();
        line
    });
    Ok(res.map_body(|_, body| LoggedBody {
        body: Some(body.boxed()),
        line,
    }))
}

/// What one access line needs once the response is done.
struct AccessLine {
    started: Instant,
    method: String,
    path: String,
    /// The route pattern (`None` for unknown paths).
    route: Option<String>,
    status: u16,
    user_agent: String,
    log: Arc<RequestLog>,
}

impl AccessLine {
    fn write(self) {
        let outcome = self.log.outcome();
        let o = outcome.as_ref();
        tracing::info!(
            target: "kiln::access",
            request_id = self.log.request_id().as_deref(),
            trace_id = self.log.trace_id().as_deref(),
            // A method is an HTTP token: no control characters can reach here.
            method = %self.method,
            route = self.route.as_deref(),
            path = ?self.path,
            status = self.status,
            model = o.map(|o| o.model.as_str()),
            lora_name = o.and_then(|o| o.lora_name.as_deref()),
            prompt_tokens = o.map(|o| o.prompt_tokens as u64),
            completion_tokens = o.map(|o| o.completion_tokens as u64),
            finish_reason = o.map(|o| o.finish_reason.as_str()),
            queue_s = o.and_then(|o| o.queue_s),
            ttft_s = o.and_then(|o| o.ttft_s),
            e2e_s = o.and_then(|o| o.e2e_s),
            ms = self.started.elapsed().as_secs_f64() * 1e3,
            user_agent = ?self.user_agent,
            "request"
        );
    }
}

/// The response body, which writes the access line when dropped: after the last chunk or
/// when the client goes away, and after the inner body (whose choices report the outcome).
pub struct LoggedBody {
    body: Option<BoxBody>,
    line: Option<AccessLine>,
}

impl MessageBody for LoggedBody {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> BodySize {
        self.body.as_ref().map_or(BodySize::None, |b| b.size())
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        match &mut self.get_mut().body {
            Some(body) => Pin::new(body).poll_next(cx),
            None => Poll::Ready(None),
        }
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        drop(self.body.take());
        if let Some(line) = self.line.take() {
            let log = Arc::clone(&line.log);
            log.when_outcome_known(Box::new(move || line.write()));
        }
    }
}
