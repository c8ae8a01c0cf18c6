//! The access log: one `debug` line per request under the `kiln::access` target (turn it on
//! with `RUST_LOG=info,kiln::access=debug`), with method, path, status, duration and user
//! agent. The path and the user agent are the client's bytes: they are logged with `?`
//! (Rust's `Debug` escaping), so a CR or LF in them prints as `\r` or `\n` and can never
//! start a log line of its own.

use std::time::Instant;

use actix_web::Error;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::USER_AGENT;
use actix_web::middleware::Next;

/// Middleware: logs each request once its response head is ready (a stream's length is not
/// known then; the HTTP metrics measure whole responses).
pub async fn access_log(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    if !tracing::enabled!(target: "kiln::access", tracing::Level::DEBUG) {
        return next.call(req).await;
    }
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().to_string();
    let user_agent = req
        .headers()
        .get(USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let result = next.call(req).await;
    let status = match &result {
        Ok(res) => res.status(),
        Err(err) => err.as_response_error().status_code(),
    };
    tracing::debug!(
        target: "kiln::access",
        // A method is an HTTP token: no control characters can reach here.
        method = %method,
        path = ?path,
        status = status.as_u16(),
        ms = started.elapsed().as_secs_f64() * 1e3,
        user_agent = ?user_agent,
        "request"
    );
    result
}
