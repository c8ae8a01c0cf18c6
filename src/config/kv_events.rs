//! `[kv_events]` / `--kv-events-config`: vLLM's `KVEventsConfig`, same keys, same JSON, same
//! defaults, so a deployment's vLLM flag works unchanged on kiln.

use serde::{Deserialize, Deserializer, Serialize};

use super::{ConfigError, invalid};

/// Its flag takes the whole section as vLLM's JSON (`Config::kv_events`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvEventsConfig {
    /// Publish the prefix cache's block stores, evictions and clears.
    pub enable_kv_cache_events: bool,
    /// "zmq" or "null"; empty: "zmq" when enabled (vLLM's default).
    #[serde(deserialize_with = "null_as_empty")]
    pub publisher: String,
    /// PUB socket: an endpoint with `*` (or `::`) binds, any other connects (vLLM's rule).
    pub endpoint: String,
    /// ROUTER socket serving replays of buffered batches; empty: none.
    #[serde(deserialize_with = "null_as_empty")]
    pub replay_endpoint: String,
    /// Batches (one per engine step with events) kept for replay.
    pub buffer_steps: usize,
    /// vLLM's PUB high-water mark; kiln's ZeroMQ queues up to 100000 messages per subscriber
    /// whatever this says (accepted so vLLM's JSON is).
    pub hwm: usize,
    /// Batches waiting for the publisher thread; past it new batches are dropped and counted.
    pub max_queue_size: usize,
    /// First frame of every message, e.g. `kv@<pod>@<model>` as llm-d expects.
    pub topic: String,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            enable_kv_cache_events: false,
            publisher: String::new(),
            endpoint: "tcp://*:5557".into(),
            replay_endpoint: String::new(),
            buffer_steps: 10_000,
            hwm: 100_000,
            max_queue_size: 100_000,
            topic: String::new(),
        }
    }
}

/// JSON's `null` (vLLM writes `"replay_endpoint": null`) reads as an empty string.
fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

impl KvEventsConfig {
    /// Parses the JSON of `--kv-events-config`; keys it leaves out keep their defaults.
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        serde_json::from_str(json).map_err(|e| invalid("kv_events", format!("--kv-events-config: {e}")))
    }

    /// Whether a publisher runs: enabled and not the "null" publisher.
    pub fn publishes(&self) -> bool {
        self.enable_kv_cache_events && self.publisher != "null"
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !["", "zmq", "null"].contains(&self.publisher.as_str()) {
            return Err(invalid(
                "kv_events.publisher",
                format!("`{}` is not zmq or null", self.publisher),
            ));
        }
        check_tcp_endpoint("kv_events.endpoint", &self.endpoint)?;
        if !self.replay_endpoint.is_empty() {
            check_tcp_endpoint("kv_events.replay_endpoint", &self.replay_endpoint)?;
        }
        for (key, value) in [
            ("kv_events.buffer_steps", self.buffer_steps),
            ("kv_events.hwm", self.hwm),
            ("kv_events.max_queue_size", self.max_queue_size),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        Ok(())
    }
}

/// kiln's ZeroMQ speaks TCP only (no `ipc://` or `inproc://`); the port must be a number.
fn check_tcp_endpoint(key: &'static str, endpoint: &str) -> Result<(), ConfigError> {
    let port = endpoint
        .strip_prefix("tcp://")
        .and_then(|rest| rest.rsplit_once(':'))
        .map(|(_, port)| port);
    match port {
        Some(port) if port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(invalid(key, format!("`{endpoint}` is not tcp://HOST:PORT"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_json_parses_with_nulls_and_defaults() {
        let c = KvEventsConfig::from_json(
            r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
                "replay_endpoint": null, "topic": "kv@pod-1@tiny"}"#,
        )
        .expect("parses");
        assert!(c.publishes());
        assert_eq!(c.replay_endpoint, "");
        assert_eq!(c.topic, "kv@pod-1@tiny");
        assert_eq!(c.buffer_steps, 10_000);
        c.validate().expect("valid");
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = KvEventsConfig::from_json(r#"{"enable_kv_cache_event": true}"#).unwrap_err();
        assert!(err.to_string().contains("enable_kv_cache_event"), "{err}");
        let ipc = KvEventsConfig {
            endpoint: "ipc:///tmp/kv".into(),
            ..Default::default()
        };
        assert!(ipc.validate().unwrap_err().to_string().contains("kv_events.endpoint"));
        let publisher = KvEventsConfig {
            publisher: "kafka".into(),
            ..Default::default()
        };
        assert!(
            publisher
                .validate()
                .unwrap_err()
                .to_string()
                .contains("kv_events.publisher")
        );
        let null = KvEventsConfig {
            enable_kv_cache_events: true,
            publisher: "null".into(),
            ..Default::default()
        };
        assert!(!null.publishes());
    }
}
