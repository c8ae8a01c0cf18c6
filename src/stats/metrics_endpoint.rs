//! `GET /metrics` on either listener: the format is negotiated on `Accept` (protobuf with
//! native histograms for a Prometheus with native histograms on; OpenMetrics 1.0 with
//! exemplars for clients that ask for it, as Prometheus does; Prometheus text 0.0.4
//! otherwise, as before), then the registry is rendered with kiln's own writers.

use actix_web::http::header::{Accept, Header as _};
use actix_web::{HttpRequest, HttpResponse};
use prometheus::Registry;

use super::exposition::{ExpositionFormat, encode_selected};
use super::histogram_store::HistogramStore;
use super::protobuf_exposition::{PROTOBUF_CONTENT_TYPE, encode_protobuf};
use super::sample_filter::SampleFilter;

/// What `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    Text(ExpositionFormat),
    /// Length-delimited `io.prometheus.client.MetricFamily` messages, native histograms in.
    Protobuf,
}

/// The response to `req`: `registry` (histograms included: `histograms` is a collector in it)
/// and what the classic histogram cannot carry (native buckets, exemplars) where the format
/// carries it, in the negotiated
/// format, restricted to the samples its `name[]` parameters ask for, if any.
pub fn metrics_response(req: &HttpRequest, registry: &Registry, histograms: &HistogramStore) -> HttpResponse {
    let families = registry.gather();
    let snapshot = histograms.snapshot();
    let filter = SampleFilter::from_query(req.query_string());
    match negotiate(Accept::parse(req).ok().as_ref()) {
        MetricsFormat::Protobuf => {
            let selected: Vec<_> = match &filter {
                Some(f) => families.into_iter().filter(|family| f.selects_family(family)).collect(),
                None => families,
            };
            HttpResponse::Ok()
                .content_type(PROTOBUF_CONTENT_TYPE)
                .body(encode_protobuf(&selected, &snapshot))
        }
        MetricsFormat::Text(format) => HttpResponse::Ok()
            .content_type(format.content_type())
            .body(encode_selected(&families, format, &snapshot, filter.as_ref())),
    }
}

/// The format `accept` prefers: the acceptable media range with the highest `q` (the first
/// of equals), where acceptable is delimited protobuf of `io.prometheus.client.MetricFamily`,
/// OpenMetrics 1.0 or text 0.0.4 (with or without their `version`), `text/*` or `*/*`. No
/// header, an unparsable one or nothing acceptable: text, as `/metrics` always answered.
pub fn negotiate(accept: Option<&Accept>) -> MetricsFormat {
    let mut best = None;
    for item in accept.map(|a| a.0.as_slice()).unwrap_or_default() {
        let Some(format) = format_of(&item.item) else {
            continue;
        };
        let better = match best {
            None => item.quality > actix_web::http::header::Quality::ZERO,
            Some((quality, _)) => item.quality > quality,
        };
        if better {
            best = Some((item.quality, format));
        }
    }
    best.map_or(MetricsFormat::Text(ExpositionFormat::PrometheusText), |(_, format)| {
        format
    })
}

fn format_of(mime: &actix_web::mime::Mime) -> Option<MetricsFormat> {
    let param = |name: &str| mime.get_param(name).map(|v| v.as_str().to_owned());
    let version = param("version");
    let version_is = |wanted: &str| version.as_deref().is_none_or(|v| v == wanted);
    let text = |format| Some(MetricsFormat::Text(format));
    match (mime.type_().as_str(), mime.subtype().as_str()) {
        ("application", "vnd.google.protobuf")
            if param("proto").as_deref() == Some("io.prometheus.client.MetricFamily")
                && param("encoding").as_deref() == Some("delimited") =>
        {
            Some(MetricsFormat::Protobuf)
        }
        ("application", "openmetrics-text") if version_is("1.0.0") => text(ExpositionFormat::OpenMetrics),
        ("text", "plain") if version_is("0.0.4") => text(ExpositionFormat::PrometheusText),
        ("text", "*") | ("*", "*") => text(ExpositionFormat::PrometheusText),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::ACCEPT;
    use actix_web::test::TestRequest;

    fn format_for(accept: &str) -> MetricsFormat {
        let req = TestRequest::default().insert_header((ACCEPT, accept)).to_http_request();
        negotiate(Accept::parse(&req).ok().as_ref())
    }

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_text() {
        const OPEN_METRICS: MetricsFormat = MetricsFormat::Text(ExpositionFormat::OpenMetrics);
        const PROMETHEUS_TEXT: MetricsFormat = MetricsFormat::Text(ExpositionFormat::PrometheusText);
        // What Prometheus 2.42 sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(format_for(prometheus), OPEN_METRICS);
        assert_eq!(format_for("application/openmetrics-text"), OPEN_METRICS);
        assert_eq!(
            format_for("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            OPEN_METRICS
        );
        // Preferences by q, whatever the order.
        assert_eq!(
            format_for("text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0"),
            OPEN_METRICS
        );
        assert_eq!(
            format_for("application/openmetrics-text;q=0.2,text/plain"),
            PROMETHEUS_TEXT
        );
        // Versions kiln does not write, refusals and everything else fall back to text.
        assert_eq!(
            format_for("application/openmetrics-text;version=0.0.1"),
            PROMETHEUS_TEXT
        );
        assert_eq!(
            format_for("application/openmetrics-text;q=0,*/*;q=0.1"),
            PROMETHEUS_TEXT
        );
        assert_eq!(format_for("*/*"), PROMETHEUS_TEXT);
        assert_eq!(format_for("application/json"), PROMETHEUS_TEXT);
        assert_eq!(format_for("not a media type"), PROMETHEUS_TEXT);
        let no_header = TestRequest::default().to_http_request();
        assert_eq!(negotiate(Accept::parse(&no_header).ok().as_ref()), PROMETHEUS_TEXT);
    }

    #[test]
    fn prometheus_with_native_histograms_gets_protobuf() {
        let text = MetricsFormat::Text(ExpositionFormat::PrometheusText);
        // What Prometheus 2.42 sends with `--enable-feature=native-histograms`.
        let native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(format_for(native), MetricsFormat::Protobuf);
        // Another message, or another encoding, is not what kiln writes.
        let other = "application/vnd.google.protobuf;proto=io.prometheus.client.Other;encoding=delimited";
        assert_eq!(format_for(other), text);
        let text_encoding = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text";
        assert_eq!(format_for(text_encoding), text);
        // Preferences by q still decide.
        let prefers_text = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.2,text/plain";
        assert_eq!(format_for(prefers_text), text);
    }
}
