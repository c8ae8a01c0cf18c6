//! Spans leave the process off the hot path: request handlers `try_send` finished spans into
//! a bounded queue (full: the span is dropped and counted, never waited for), and one thread
//! of kiln's own takes whatever is queued, up to a batch, and exports it over OTLP
//! (http/protobuf or grpc), counting each export by result. A dead or slow collector costs
//! serving nothing: the thread waits on it, the queue fills, new spans are dropped.
//!
//! The thread owns the exporter: for grpc a private current-thread tokio runtime (tonic needs
//! a reactor) in which every export runs, bounded by the configured timeout; for
//! http/protobuf reqwest's blocking client, driven by `futures_executor::block_on`. Failures
//! are logged at most once a minute (like metric push); the counters carry the rest.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};

use super::config::TracesConfig;
use crate::otlp::transport::{Transport, build_in_runtime};
use crate::otlp::{FailureLog, OtlpError, check_endpoint};
use crate::stats::span_exports::SpanExportCounters;

/// At most this many spans per export call.
const MAX_BATCH: usize = 512;

enum Message {
    Span(Box<SpanData>),
    /// Export what is queued, then stop.
    Shutdown,
}

/// The sending side of the span queue, shared by every request handler.
pub struct SpanQueue {
    sender: SyncSender<Message>,
    counters: Arc<SpanExportCounters>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl SpanQueue {
    /// Builds the exporter (a bad endpoint or header stops startup) and starts its thread.
    pub fn start(cfg: &TracesConfig, resource: Resource, counters: Arc<SpanExportCounters>) -> Result<Self, OtlpError> {
        check_endpoint(&cfg.otlp.endpoint)?;
        let (sender, receiver) = sync_channel(cfg.queue_size);
        let (built_tx, built_rx) = sync_channel(1);
        let otlp = cfg.otlp.clone();
        let thread_counters = Arc::clone(&counters);
        let worker = std::thread::Builder::new()
            .name("kiln-span-export".to_owned())
            .spawn(move || match Exporter::new(&otlp, resource) {
                Ok(exporter) => {
                    let _ = built_tx.send(Ok(()));
                    exporter.run(&receiver, &thread_counters);
                }
                Err(e) => {
                    let _ = built_tx.send(Err(e));
                }
            })
            .map_err(|e| OtlpError::HttpClient {
                endpoint: cfg.otlp.endpoint.clone(),
                reason: format!("starting the span export thread: {e}"),
            })?;
        built_rx.recv().unwrap_or_else(|_| {
            Err(OtlpError::HttpClient {
                endpoint: cfg.otlp.endpoint.clone(),
                reason: "the span export thread died while starting".to_owned(),
            })
        })?;
        Ok(Self {
            sender,
            counters,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// Queues finished spans without ever blocking; those that do not fit are counted.
    pub fn push(&self, spans: Vec<SpanData>) {
        for span in spans {
            match self.sender.try_send(Message::Span(Box::new(span))) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => self.counters.spans_dropped(1),
            }
        }
    }

    /// Exports what is queued and stops the thread, waiting at most `timeout`.
    pub fn shutdown(&self, timeout: Duration) {
        let Some(worker) = self.worker.lock().ok().and_then(|mut w| w.take()) else {
            return;
        };
        let deadline = Instant::now() + timeout;
        // The queue may be full behind a slow collector: retry until the deadline.
        let mut message = Message::Shutdown;
        loop {
            match self.sender.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    message = m;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(_) => return,
            }
        }
        while !worker.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if worker.is_finished() {
            let _ = worker.join();
        }
    }
}

/// The OTLP exporter and what it needs on the export thread.
struct Exporter {
    inner: SpanExporter,
    /// grpc only: tonic's channel lives here; every export is `block_on` on it.
    runtime: Option<tokio::runtime::Runtime>,
    endpoint: String,
    timeout: Duration,
}

impl Exporter {
    fn new(cfg: &crate::otlp::OtlpConfig, resource: Resource) -> Result<Self, OtlpError> {
        let build_err = |source| OtlpError::Build {
            protocol: cfg.protocol,
            endpoint: cfg.endpoint.clone(),
            source,
        };
        let (mut inner, runtime) = match Transport::of(cfg)? {
            Transport::Http(client) => {
                let exporter = SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(cfg.endpoint.clone())
                    .with_timeout(cfg.timeout)
                    .with_http_client(client)
                    .build()
                    .map_err(build_err)?;
                (exporter, None)
            }
            Transport::Grpc(headers, runtime) => {
                let (exporter, runtime) = build_in_runtime(runtime, || {
                    SpanExporter::builder()
                        .with_tonic()
                        .with_protocol(Protocol::Grpc)
                        .with_endpoint(cfg.endpoint.clone())
                        .with_timeout(cfg.timeout)
                        .with_interceptor(headers)
                        .build()
                })
                .map_err(build_err)?;
                (exporter, Some(runtime))
            }
        };
        inner.set_resource(&resource);
        Ok(Self {
            inner,
            runtime,
            endpoint: cfg.endpoint.clone(),
            timeout: cfg.timeout,
        })
    }

    /// Exports batches until told to stop or every sender is gone.
    fn run(self, receiver: &Receiver<Message>, counters: &SpanExportCounters) {
        let mut failures = FailureLog::default();
        let mut stopping = false;
        while !stopping {
            let Ok(first) = receiver.recv() else { break };
            let mut batch = Vec::new();
            let mut next = Some(first);
            while let Some(message) = next.take() {
                match message {
                    Message::Span(span) => batch.push(*span),
                    Message::Shutdown => stopping = true,
                }
                if batch.len() < MAX_BATCH && !stopping {
                    next = receiver.try_recv().ok();
                }
            }
            if batch.is_empty() {
                continue;
            }
            match self.export(batch) {
                Ok(()) => {
                    counters.export_succeeded();
                    if failures.success().is_some() {
                        tracing::info!(target: "kiln::otlp", endpoint = %self.endpoint, "OTLP span export works again");
                    }
                }
                Err(error) => {
                    counters.export_failed();
                    if let Some(suppressed) = failures.failure(Instant::now()) {
                        tracing::warn!(target: "kiln::otlp", endpoint = %self.endpoint, %error, suppressed,
                            "OTLP span export failed; spans of that batch are lost, warning at most once a minute");
                    }
                }
            }
        }
        if let Some(rt) = self.runtime {
            rt.shutdown_background();
        }
    }

    fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        match &self.runtime {
            Some(rt) => rt.block_on(async {
                tokio::time::timeout(self.timeout, self.inner.export(batch))
                    .await
                    .unwrap_or(Err(OTelSdkError::Timeout(self.timeout)))
            }),
            None => futures_executor::block_on(self.inner.export(batch)),
        }
    }
}
