//! `GET /metrics` on either listener: the format is negotiated on `Accept` (OpenMetrics 1.0
//! with exemplars for clients that ask for it, as Prometheus does; Prometheus text 0.0.4
//! otherwise, as before), then the registry is rendered with kiln's own writer.

use actix_web::http::header::{Accept, Header as _};
use actix_web::{HttpRequest, HttpResponse};
use prometheus::Registry;

use super::exemplars::ExemplarStore;
use super::exporter::render_metrics_as;
use super::exposition::ExpositionFormat;

/// The response to `req`: `registry` (and `exemplars` in OpenMetrics) in the negotiated format.
pub fn metrics_response(req: &HttpRequest, registry: &Registry, exemplars: &ExemplarStore) -> HttpResponse {
    let format = negotiate(Accept::parse(req).ok().as_ref());
    HttpResponse::Ok()
        .content_type(format.content_type())
        .body(render_metrics_as(registry, exemplars, format))
}

/// The format `accept` prefers: the acceptable media range with the highest `q` (the first
/// of equals), where acceptable is OpenMetrics 1.0 or text 0.0.4 (with or without their
/// `version`), `text/*` or `*/*`. No header, an unparsable one or nothing acceptable: text,
/// as `/metrics` always answered.
pub fn negotiate(accept: Option<&Accept>) -> ExpositionFormat {
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
    best.map_or(ExpositionFormat::PrometheusText, |(_, format)| format)
}

fn format_of(mime: &actix_web::mime::Mime) -> Option<ExpositionFormat> {
    let version = mime.get_param("version").map(|v| v.as_str().to_owned());
    let version_is = |wanted: &str| version.as_deref().is_none_or(|v| v == wanted);
    match (mime.type_().as_str(), mime.subtype().as_str()) {
        ("application", "openmetrics-text") if version_is("1.0.0") => Some(ExpositionFormat::OpenMetrics),
        ("text", "plain") if version_is("0.0.4") => Some(ExpositionFormat::PrometheusText),
        ("text", "*") | ("*", "*") => Some(ExpositionFormat::PrometheusText),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::ACCEPT;
    use actix_web::test::TestRequest;

    fn format_for(accept: &str) -> ExpositionFormat {
        let req = TestRequest::default().insert_header((ACCEPT, accept)).to_http_request();
        negotiate(Accept::parse(&req).ok().as_ref())
    }

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_text() {
        use ExpositionFormat::{OpenMetrics, PrometheusText};
        // What Prometheus 2.42 sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(format_for(prometheus), OpenMetrics);
        assert_eq!(format_for("application/openmetrics-text"), OpenMetrics);
        assert_eq!(
            format_for("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            OpenMetrics
        );
        // Preferences by q, whatever the order.
        assert_eq!(
            format_for("text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0"),
            OpenMetrics
        );
        assert_eq!(
            format_for("application/openmetrics-text;q=0.2,text/plain"),
            PrometheusText
        );
        // Versions kiln does not write, refusals and everything else fall back to text.
        assert_eq!(format_for("application/openmetrics-text;version=0.0.1"), PrometheusText);
        assert_eq!(format_for("application/openmetrics-text;q=0,*/*;q=0.1"), PrometheusText);
        assert_eq!(format_for("*/*"), PrometheusText);
        assert_eq!(format_for("application/json"), PrometheusText);
        assert_eq!(format_for("not a media type"), PrometheusText);
        let no_header = TestRequest::default().to_http_request();
        assert_eq!(negotiate(Accept::parse(&no_header).ok().as_ref()), PrometheusText);
    }
}
