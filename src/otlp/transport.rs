//! Transport glue: the blocking HTTP client, and kiln's headers applied after the exporter's
//! own environment read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use reqwest::header::{HeaderName, HeaderValue};
use tonic::metadata::{Ascii, MetadataKey, MetadataValue};

use super::{OtlpConfig, OtlpError};

/// reqwest's blocking client starts its own runtime; building it on a thread that is inside
/// a tokio runtime panics, so it is built on a short-lived thread of its own.
pub(crate) fn blocking_client(cfg: &OtlpConfig) -> Result<reqwest::blocking::Client, OtlpError> {
    let timeout = cfg.timeout;
    let err = |reason: String| OtlpError::HttpClient {
        endpoint: cfg.endpoint.clone(),
        reason,
    };
    std::thread::Builder::new()
        .name("kiln-otlp-client".to_owned())
        .spawn(move || reqwest::blocking::Client::builder().timeout(timeout).build())
        .map_err(|e| err(e.to_string()))?
        .join()
        .map_err(|_| err("the thread building it panicked".to_owned()))?
        .map_err(|e| err(e.to_string()))
}

pub(crate) fn http_headers(headers: &[(String, String)]) -> Result<Vec<(HeaderName, HeaderValue)>, OtlpError> {
    let err = |key: &str, reason| OtlpError::Header {
        key: key.to_owned(),
        reason,
    };
    headers
        .iter()
        .map(|(k, v)| {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| err(k, "invalid name"))?;
            let value = HeaderValue::from_str(v).map_err(|_| err(k, "invalid value"))?;
            Ok((name, value))
        })
        .collect()
}

type GrpcHeader = (MetadataKey<Ascii>, MetadataValue<Ascii>);

pub(crate) fn grpc_headers(headers: &[(String, String)]) -> Result<Vec<GrpcHeader>, OtlpError> {
    let err = |key: &str, reason| OtlpError::Header {
        key: key.to_owned(),
        reason,
    };
    headers
        .iter()
        .map(|(k, v)| {
            let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|_| err(k, "invalid gRPC metadata name (binary `-bin` keys unsupported)"))?;
            let value = MetadataValue::try_from(v.as_str()).map_err(|_| err(k, "invalid value"))?;
            Ok((key, value))
        })
        .collect()
}

/// The exporter re-reads `OTEL_EXPORTER_OTLP_HEADERS` and lets it override headers given
/// in code; setting kiln's headers last, on each request, makes `--otlp-header` win.
#[derive(Debug)]
pub(crate) struct HeadersLast {
    pub(crate) client: reqwest::blocking::Client,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
}

type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'a>>;

impl HttpClient for HeadersLast {
    // The `async_trait` signature, written out (the trait is declared with `#[async_trait]`).
    fn send_bytes<'life0, 'async_trait>(&'life0 self, mut request: Request<Bytes>) -> SendFuture<'async_trait>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        for (k, v) in &self.headers {
            request.headers_mut().insert(k.clone(), v.clone());
        }
        self.client.send_bytes(request)
    }
}

/// The gRPC twin of `HeadersLast`: tonic runs interceptors after the env-derived metadata.
#[derive(Clone)]
pub(crate) struct GrpcHeaders(pub(crate) Arc<[GrpcHeader]>);

impl tonic::service::Interceptor for GrpcHeaders {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        for (k, v) in self.0.iter() {
            req.metadata_mut().insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

/// What an exporter of either signal is built on: kiln's blocking HTTP client with the
/// configured headers, or those headers as gRPC metadata and the private current-thread
/// runtime that tonic needs.
pub(crate) enum Transport {
    Http(HeadersLast),
    Grpc(GrpcHeaders, tokio::runtime::Runtime),
}

impl Transport {
    pub(crate) fn of(cfg: &OtlpConfig) -> Result<Self, OtlpError> {
        match cfg.protocol {
            super::OtlpProtocol::HttpProtobuf => Ok(Transport::Http(HeadersLast {
                client: blocking_client(cfg)?,
                headers: http_headers(&cfg.headers)?,
            })),
            super::OtlpProtocol::Grpc => {
                let headers = GrpcHeaders(grpc_headers(&cfg.headers)?.into());
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(OtlpError::Runtime)?;
                Ok(Transport::Grpc(headers, runtime))
            }
        }
    }
}

/// Builds a gRPC exporter inside `runtime` (tonic spawns its channel's worker when the
/// channel is built) and hands the runtime back beside it. On failure the runtime is shut
/// down in the background: a plain drop would panic when kiln builds this inside its own
/// runtime.
pub(crate) fn build_in_runtime<E>(
    runtime: tokio::runtime::Runtime,
    build: impl FnOnce() -> Result<E, opentelemetry_otlp::ExporterBuildError>,
) -> Result<(E, tokio::runtime::Runtime), opentelemetry_otlp::ExporterBuildError> {
    let built = {
        let _in_runtime = runtime.enter();
        build()
    };
    match built {
        Ok(exporter) => Ok((exporter, runtime)),
        Err(e) => {
            runtime.shutdown_background();
            Err(e)
        }
    }
}
