//! The trace identity of one engine request: which span a request's telemetry links to
//! (its OTLP span, its histogram exemplars, its access-log line). Plain data with no
//! OpenTelemetry types, so the scheduler and the stats actor stay free of the tracing SDK.

use std::fmt;

/// A W3C trace id and the id of the span that stands for this engine request. Present only
/// when the request is traced (sampled); `None` elsewhere costs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl TraceContext {
    /// The trace id as 32 lowercase hex digits (the W3C and Prometheus exemplar form).
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The span id as 16 lowercase hex digits.
    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }
}

impl fmt::Display for TraceContext {
    /// `trace_id-span_id`, for log lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.trace_id_hex(), self.span_id_hex())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_lowercase_hex_of_their_w3c_width() {
        let context = TraceContext {
            trace_id: [0xab; 16],
            span_id: [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef],
        };
        assert_eq!(context.trace_id_hex(), "ab".repeat(16));
        assert_eq!(context.span_id_hex(), "0123456789abcdef");
        assert_eq!(context.to_string(), format!("{}-0123456789abcdef", "ab".repeat(16)));
    }
}
