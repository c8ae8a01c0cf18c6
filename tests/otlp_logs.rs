//! With the collector down, repeated failed exports produce one kiln warning and nothing
//! at WARN or ERROR from the SDK or the transport crates. Its own test binary, because it
//! installs a process-wide tracing subscriber (the reader's thread logs to the global one).

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kiln::otlp::{OtlpConfig, OtlpProtocol, metrics_endpoint_from_base};
use kiln::stats::exporter::{TelemetryConfig, build_telemetry_with_readers};
use kiln::stats::otlp_push::build_otlp_reader;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

type Events = Arc<Mutex<Vec<(Level, String, String)>>>;

/// Keeps (level, target, fields) of every event, whatever its level.
struct Capture(Events);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let meta = event.metadata();
        if let Ok(mut events) = self.0.lock() {
            events.push((*meta.level(), meta.target().to_owned(), fields.0));
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_down_collector_yields_one_warning_per_minute_and_no_sdk_noise() {
    let events: Events = Arc::default();
    tracing::subscriber::set_global_default(Capture(events.clone())).unwrap();
    for protocol in [OtlpProtocol::HttpProtobuf, OtlpProtocol::Grpc] {
        events.lock().unwrap().clear();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let base = format!("http://127.0.0.1:{port}");
        let mut cfg = OtlpConfig::new(metrics_endpoint_from_base(&base, protocol), protocol);
        cfg.timeout = Duration::from_millis(300);
        cfg.interval = Duration::from_secs(3600);
        let reader = build_otlp_reader(&cfg, Default::default()).unwrap();
        let config = TelemetryConfig {
            service_instance_id: "logs".to_owned(),
            ..TelemetryConfig::default()
        };
        let t = build_telemetry_with_readers(&config, vec![reader]).unwrap();
        let provider = t.provider.as_ref().unwrap();
        for _ in 0..5 {
            // Each flush is one export, done on the reader's thread before it returns.
            provider.force_flush().unwrap();
        }
        let events = events.lock().unwrap().clone();
        let loud: Vec<_> = events.iter().filter(|(l, _, _)| *l <= Level::WARN).collect();
        assert_eq!(loud.len(), 1, "{protocol}: {loud:#?}");
        let (_, target, fields) = loud[0];
        assert_eq!(target, "kiln::otlp", "{protocol}");
        assert!(fields.contains("suppressed=0"), "{fields}");
        assert!(fields.contains(&format!("127.0.0.1:{port}")), "{fields}");
        drop(t);
    }
}
