//! Sends one OTLP metrics request over kiln's transport: http/protobuf on the blocking client
//! (kiln's headers on every request), or grpc with tonic's `MetricsServiceClient` on the
//! transport's private current-thread runtime. Called on the metric reader's own thread,
//! never inside a runtime (the grpc runtime is entered with `block_on` here).

use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use prost::Message as _;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use super::env::with_env_headers;
use super::transport::{GrpcHeaders, HeadersLast, Transport};
use super::{OtlpConfig, OtlpError, OtlpSignal};

/// Why one export failed (logged, rate-limited, by the exporter).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("sending the request: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the collector answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the collector answered {0}")]
    Grpc(#[from] tonic::Status),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

type GrpcClient = MetricsServiceClient<InterceptedService<Channel, GrpcHeaders>>;

/// One metrics endpoint and the client that reaches it.
pub(crate) enum MetricsSender {
    Http {
        client: HeadersLast,
        endpoint: String,
    },
    Grpc {
        /// Boxed: tonic's client is four times the size of the HTTP variant.
        client: Box<GrpcClient>,
        /// `Option` only so `Drop` can shut it down without waiting.
        runtime: Option<tokio::runtime::Runtime>,
        timeout: Duration,
    },
}

impl MetricsSender {
    /// The endpoint's client, with the headers of the environment under kiln's own.
    pub(crate) fn new(cfg: &OtlpConfig) -> Result<Self, OtlpError> {
        let cfg = with_env_headers(cfg, OtlpSignal::Metrics)?;
        match Transport::of(&cfg)? {
            Transport::Http(client) => Ok(Self::Http {
                client,
                endpoint: cfg.endpoint.clone(),
            }),
            Transport::Grpc(headers, runtime) => {
                let channel = {
                    // tonic spawns the channel's worker when it is built: inside the runtime.
                    let _in_runtime = runtime.enter();
                    Channel::from_shared(cfg.endpoint.clone())
                        .map(|endpoint| endpoint.timeout(cfg.timeout).connect_lazy())
                };
                let channel = match channel {
                    Ok(channel) => channel,
                    Err(e) => {
                        runtime.shutdown_background();
                        return Err(OtlpError::Endpoint {
                            endpoint: cfg.endpoint.clone(),
                            reason: e.to_string(),
                        });
                    }
                };
                Ok(Self::Grpc {
                    client: Box::new(MetricsServiceClient::with_interceptor(channel, headers)),
                    runtime: Some(runtime),
                    timeout: cfg.timeout,
                })
            }
        }
    }

    /// Sends `request`; at most about the configured timeout.
    pub(crate) fn send(&self, request: ExportMetricsServiceRequest) -> Result<(), SendError> {
        match self {
            Self::Http { client, endpoint } => {
                let mut post = client
                    .client
                    .post(endpoint)
                    .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(request.encode_to_vec());
                for (name, value) in &client.headers {
                    post = post.header(name.clone(), value.clone());
                }
                let response = post.send()?;
                let status = response.status();
                if status.is_success() {
                    return Ok(());
                }
                let mut body = response.text().unwrap_or_default();
                body.truncate(body.floor_char_boundary(200));
                Err(SendError::Status {
                    status: status.as_u16(),
                    body,
                })
            }
            Self::Grpc {
                client,
                runtime,
                timeout,
            } => {
                let runtime = runtime.as_ref().expect("present until dropped");
                let mut client = (**client).clone();
                runtime.block_on(async {
                    match tokio::time::timeout(*timeout, client.export(request)).await {
                        Ok(answer) => answer.map(drop).map_err(SendError::from),
                        Err(_) => Err(SendError::Timeout(*timeout)),
                    }
                })
            }
        }
    }
}

impl Drop for MetricsSender {
    /// Dropping a runtime waits for its tasks, which panics inside an async context (the
    /// provider may be dropped on an actix thread); the background shutdown does not wait.
    fn drop(&mut self) {
        if let Self::Grpc { runtime, .. } = self
            && let Some(rt) = runtime.take()
        {
            rt.shutdown_background();
        }
    }
}
