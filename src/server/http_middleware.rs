//! HTTP semantic-convention metrics as an actix-web middleware.
//!
//! The middleware only measures and `do_send`s plain messages to the `StatsActor`; it
//! never waits on it. A request is "done" when its response body has been sent (or
//! dropped), not when the handler returns: an SSE completion that streams for a minute
//! counts as one active request with a one-minute duration. For that the response body
//! is wrapped in `MeteredBody`, which also counts the bytes actually written.
//!
//! Wrap it outermost (`.wrap(Compress::default()).wrap(HttpMetrics::new(stats))`, the
//! last `wrap` is the outer one) so body sizes are the bytes on the wire, as semconv asks.
//!
//! Labels never take a client-chosen value: the route is the matched pattern or absent,
//! the method is one of nine or `_OTHER`.

use std::future::{Ready, ready};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Instant;

use actix::Addr;
use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::{Method, header};
use actix_web::web::Bytes;
use futures_util::future::LocalBoxFuture;

use crate::api::errors::ApiError;
use crate::api::sse::StreamFailure;
use crate::stats::actor::{HttpRequestFinished, HttpRequestStarted, RecordHttp, StatsActor};

/// The `http.request.method` value: known methods as they are, anything else `_OTHER`.
pub fn normalise_method(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => "_OTHER",
    }
}

/// `error.type` for a response: the status code for 5xx (semconv), none otherwise.
fn error_type_for(status: u16) -> Option<String> {
    (status >= 500).then(|| status.to_string())
}

/// The middleware factory: `App::new().wrap(HttpMetrics::new(stats_addr))`.
#[derive(Clone)]
pub struct HttpMetrics {
    stats: Addr<StatsActor>,
}

impl HttpMetrics {
    pub fn new(stats: Addr<StatsActor>) -> Self {
        Self { stats }
    }
}

impl<S, B> Transform<S, ServiceRequest> for HttpMetrics
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<MeteredBody>;
    type Error = actix_web::Error;
    type Transform = HttpMetricsService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(HttpMetricsService {
            service: Rc::new(service),
            stats: self.stats.clone(),
        }))
    }
}

pub struct HttpMetricsService<S> {
    service: Rc<S>,
    stats: Addr<StatsActor>,
}

impl<S, B> Service<ServiceRequest> for HttpMetricsService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<MeteredBody>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let mut in_flight = InFlight::start(self.stats.clone(), normalise_method(req.method()), content_length(&req));
        let fut = self.service.call(req);
        Box::pin(async move {
            match fut.await {
                Ok(res) => {
                    // The pattern is known only after routing, so read it from the response.
                    in_flight.route = res.request().match_pattern();
                    in_flight.status = Some(res.status().as_u16());
                    in_flight.generation_started = res
                        .response()
                        .error()
                        .and_then(|e| e.as_error::<ApiError>())
                        .is_some_and(ApiError::after_generation_started);
                    in_flight.stream_failure = res.response().extensions().get::<StreamFailure>().cloned();
                    Ok(res.map_body(|_, body| MeteredBody {
                        inner: body.boxed(),
                        in_flight: Some(in_flight),
                    }))
                }
                Err(err) => {
                    // An inner middleware failed; the app turns `err` into this status. The
                    // request was moved into the service, so the route is not known here.
                    let status = err.as_response_error().status_code().as_u16();
                    in_flight.status = Some(status);
                    in_flight.finish();
                    Err(err)
                }
            }
        })
    }
}

/// Request size as declared; chunked uploads (no Content-Length) count 0.
fn content_length(req: &ServiceRequest) -> u64 {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One request between entry and the end of its response. Sends `HttpRequestStarted` on
/// creation and exactly one `RecordHttp` + `HttpRequestFinished` when finished or dropped,
/// so `active_requests` comes back down on every path: success, error, panic, disconnect.
struct InFlight {
    stats: Addr<StatsActor>,
    method: &'static str,
    start: Instant,
    request_body_bytes: u64,
    route: Option<String>,
    status: Option<u16>,
    response_body_bytes: u64,
    /// The error response came from the engine, after generation started.
    generation_started: bool,
    /// Set by a stream that fails after its 200 (read when the body has ended).
    stream_failure: Option<StreamFailure>,
    done: bool,
}

impl InFlight {
    fn start(stats: Addr<StatsActor>, method: &'static str, request_body_bytes: u64) -> Self {
        stats.do_send(HttpRequestStarted { method });
        Self {
            stats,
            method,
            start: Instant::now(),
            request_body_bytes,
            route: None,
            status: None,
            response_body_bytes: 0,
            generation_started: false,
            stream_failure: None,
            done: false,
        }
    }

    fn finish(&mut self) {
        self.finish_with(None);
    }

    fn finish_with(&mut self, failure: Option<&str>) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let error_type = self
            .status
            .and_then(error_type_for)
            .or_else(|| failure.map(str::to_owned));
        self.stats.do_send(RecordHttp {
            route: self.route.take(),
            method: self.method,
            status: self.status,
            duration: self.start.elapsed(),
            request_body_bytes: self.request_body_bytes,
            response_body_bytes: self.response_body_bytes,
            error_type,
            generation_started: self.generation_started,
            stream_failure: self.stream_failure.as_ref().and_then(StreamFailure::code),
        });
        self.stats.do_send(HttpRequestFinished { method: self.method });
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Dropped before the response was complete: unwinding from a handler panic, or the
        // client went away (actix drops the pending future or the body).
        if self.status.is_none() && std::thread::panicking() {
            self.finish_with(Some("panic"));
        } else if self.status.is_none() {
            self.finish_with(Some("cancelled"));
        } else {
            self.finish();
        }
    }
}

/// The response body, counting bytes and recording the request when it ends or is dropped.
pub struct MeteredBody {
    inner: BoxBody,
    in_flight: Option<InFlight>,
}

impl MessageBody for MeteredBody {
    type Error = <BoxBody as MessageBody>::Error;

    fn size(&self) -> BodySize {
        self.inner.size()
    }

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(f) = this.in_flight.as_mut() {
                    f.response_body_bytes += chunk.len() as u64;
                }
            }
            Poll::Ready(None) => {
                if let Some(mut f) = this.in_flight.take() {
                    f.finish();
                }
            }
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::actor::{Barrier, StatsActor, StatsActorConfig};
    use crate::stats::exporter::test_support::{config, samples, value};
    use crate::stats::exporter::{Telemetry, build_telemetry, render_metrics};
    use actix::Actor as _;
    use actix_web::test as atest;
    use actix_web::{App, HttpResponse, web};
    use futures_util::FutureExt as _;

    #[test]
    fn methods_are_normalised() {
        assert_eq!(normalise_method(&Method::GET), "GET");
        assert_eq!(normalise_method(&Method::PATCH), "PATCH");
        assert_eq!(normalise_method(&Method::from_bytes(b"FOO").unwrap()), "_OTHER");
        assert_eq!(normalise_method(&Method::from_bytes(b"get").unwrap()), "_OTHER");
    }

    #[test]
    fn only_5xx_is_an_error() {
        assert_eq!(error_type_for(200), None);
        assert_eq!(error_type_for(404), None);
        assert_eq!(error_type_for(503).as_deref(), Some("503"));
    }

    fn setup() -> (Telemetry, Addr<StatsActor>) {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let cfg = StatsActorConfig { log_interval: None };
        let stats = StatsActor::new(t.instruments.clone(), cfg).start();
        (t, stats)
    }

    macro_rules! app {
        ($stats:expr) => {
            atest::init_service(
                App::new()
                    .wrap(HttpMetrics::new($stats.clone()))
                    .route(
                        "/v1/models/{id}",
                        web::get()
                            .to(|id: web::Path<String>| async move { HttpResponse::Ok().body(format!("model {id}")) }),
                    )
                    .route("/echo", web::post().to(|body: Bytes| async move { body }))
                    .route(
                        "/boom",
                        web::get().to(|| async { HttpResponse::ServiceUnavailable().finish() }),
                    )
                    .route(
                        "/stream",
                        web::get().to(|| async {
                            let chunks = ["data: a\n\n", "data: bb\n\n", "data: [DONE]\n\n"]
                                .map(|c| Ok::<_, actix_web::Error>(Bytes::from_static(c.as_bytes())));
                            HttpResponse::Ok().streaming(futures_util::stream::iter(chunks))
                        }),
                    )
                    .route(
                        "/panic",
                        web::get().to(|| async {
                            if true {
                                panic!("handler panic (expected by the test)");
                            }
                            HttpResponse::Ok().finish()
                        }),
                    ),
            )
            .await
        };
    }

    fn http_series(text: &str) -> Vec<&str> {
        text.lines().filter(|l| l.starts_with("http_server_")).collect()
    }

    fn request(method: &[u8], path: &str) -> atest::TestRequest {
        atest::TestRequest::default()
            .method(Method::from_bytes(method).unwrap())
            .uri(path)
    }

    #[actix_web::test]
    async fn unknown_paths_and_methods_add_no_series() {
        let (t, stats) = setup();
        let app = app!(stats);
        for (method, path) in [
            (&b"GET"[..], "/v1/models/abc123"),
            (b"GET", "/boom"),
            (b"GET", "/nope/0"),
            (b"FOO", "/nope/1"),
        ] {
            atest::call_and_read_body(&app, request(method, path).to_request()).await;
        }
        stats.send(Barrier).await.unwrap();
        let before = render_metrics(&t.registry).unwrap();

        // Pseudo-random paths and methods a scanner might send.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..50 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let method: &[u8] = [&b"GET"[..], b"FOO", b"PROPFIND", b"BREW"][i % 4];
            let path = format!("/scan/{x:x}/{i}?q={x}");
            atest::call_and_read_body(&app, request(method, &path).to_request()).await;
        }
        atest::call_and_read_body(&app, request(b"GET", "/v1/models/other-id").to_request()).await;
        stats.send(Barrier).await.unwrap();
        let after = render_metrics(&t.registry).unwrap();

        assert_eq!(http_series(&before).len(), http_series(&after).len());
        assert!(!after.contains("/scan/") && !after.contains("/nope"));
        assert!(!after.contains("abc123") && !after.contains("other-id"));
        assert!(after.contains("http_request_method=\"_OTHER\""));
        assert!(!after.contains("FOO") && !after.contains("BREW"));
        let count = "http_server_request_duration_seconds_count";
        let matched = [("http_route", "/v1/models/{id}"), ("http_request_method", "GET")];
        assert_eq!(value(&after, count, &matched), Some(2.0));
        // Unmatched: no http_route at all, 404, not an error.
        let unmatched: Vec<_> = samples(&after, count)
            .into_iter()
            .filter(|l| !l.contains("http_route"))
            .collect();
        assert_eq!(unmatched.len(), 2, "GET and _OTHER: {unmatched:?}");
        assert!(
            unmatched
                .iter()
                .all(|l| l.contains("http_response_status_code=\"404\""))
        );
        assert!(unmatched.iter().all(|l| !l.contains("error_type")));
        let boom = [("http_route", "/boom"), ("error_type", "503")];
        assert_eq!(value(&after, count, &boom), Some(1.0));
        for method in ["GET", "_OTHER"] {
            let labels = [("http_request_method", method)];
            let active = value(&after, "http_server_active_requests", &labels);
            assert_eq!(active, Some(0.0), "{method}");
        }
    }

    #[actix_web::test]
    async fn body_sizes_are_the_bytes_sent_also_when_streaming() {
        let (t, stats) = setup();
        let app = app!(stats);
        let req = atest::TestRequest::post()
            .uri("/echo")
            .set_payload("hello, kiln")
            .to_request();
        assert_eq!(atest::call_and_read_body(&app, req).await, "hello, kiln");
        let body = atest::call_and_read_body(&app, request(b"GET", "/stream").to_request()).await;
        stats.send(Barrier).await.unwrap();
        let text = render_metrics(&t.registry).unwrap();
        let echo = [("http_route", "/echo")];
        let stream = [("http_route", "/stream")];
        let req_size = "http_server_request_body_size_bytes_sum";
        let resp_size = "http_server_response_body_size_bytes_sum";
        assert_eq!(value(&text, req_size, &echo), Some(11.0));
        assert_eq!(value(&text, resp_size, &echo), Some(11.0));
        assert_eq!(value(&text, resp_size, &stream), Some(body.len() as f64));
        assert_eq!(value(&text, req_size, &stream), Some(0.0));
    }

    #[actix_web::test]
    async fn cancelled_and_panicking_requests_still_come_back_down() {
        let (t, stats) = setup();
        let app = app!(stats);
        // The client goes away before the handler answers: actix drops the future.
        drop(app.call(request(b"GET", "/v1/models/x").to_request()));
        let panicked = std::panic::AssertUnwindSafe(app.call(request(b"GET", "/panic").to_request()))
            .catch_unwind()
            .await;
        assert!(panicked.is_err());
        stats.send(Barrier).await.unwrap();
        let text = render_metrics(&t.registry).unwrap();
        let count = "http_server_request_duration_seconds_count";
        for error in ["cancelled", "panic"] {
            let lines: Vec<_> = samples(&text, count)
                .into_iter()
                .filter(|l| l.contains(&format!("error_type=\"{error}\"")))
                .collect();
            assert_eq!(lines.len(), 1, "{error}: {text}");
            assert!(!lines[0].contains("status_code"), "no response was sent");
            assert!(lines[0].ends_with(" 1"));
        }
        let active = [("http_request_method", "GET")];
        assert_eq!(value(&text, "http_server_active_requests", &active), Some(0.0));
    }
}
