//! The engine's load in an `endpoint-load-metrics` response header (ORCA's format), when a
//! load balancer asks with `endpoint-load-metrics-format: TEXT` or `JSON`.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{Error, web};

use super::AppState;
use crate::stats::data::SchedulerStats;

pub const FORMAT_HEADER: &str = "endpoint-load-metrics-format";
pub const LOAD_HEADER: &str = "endpoint-load-metrics";

/// Middleware: adds the header to any response whose request asked for it.
pub async fn endpoint_load_metrics(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let format = req
        .headers()
        .get(FORMAT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_uppercase());
    let engine = req.app_data::<web::Data<AppState>>().map(|s| s.engine.clone());
    let mut response = next.call(req).await?;
    if let (Some(format), Some(engine)) = (format, engine)
        && let Some(load) = engine.load().await
        && let Ok(value) = HeaderValue::from_str(&render(&format, &load))
    {
        response
            .headers_mut()
            .insert(HeaderName::from_static(LOAD_HEADER), value);
    }
    Ok(response)
}

/// `TEXT named_metrics.k=v, …` or `JSON {"named_metrics": {…}}` (TEXT unless JSON is asked).
pub fn render(format: &str, load: &SchedulerStats) -> String {
    let metrics = [
        ("num_requests_running", load.num_running as f64),
        ("num_requests_waiting", load.num_waiting as f64),
        ("num_requests_swapped", load.num_swapped as f64),
        ("kv_cache_usage_perc", load.kv_cache_usage),
        ("num_tokens_waiting", load.tokens.waiting as f64),
        ("uncached_tokens_waiting", load.tokens.uncached_waiting as f64),
        ("num_tokens_running", load.tokens.running as f64),
        ("max_token_capacity", load.tokens.capacity as f64),
    ];
    if format == "JSON" {
        let named: serde_json::Map<String, serde_json::Value> = metrics
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        format!("JSON {}", serde_json::json!({ "named_metrics": named }))
    } else {
        let pairs: Vec<String> = metrics.iter().map(|(k, v)| format!("named_metrics.{k}={v}")).collect();
        format!("TEXT {}", pairs.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::data::TokenLoad;

    #[test]
    fn text_and_json_forms() {
        let load = SchedulerStats {
            num_running: 3,
            num_waiting: 1,
            kv_cache_usage: 0.5,
            tokens: TokenLoad {
                waiting: 40,
                uncached_waiting: 24,
                running: 7,
                capacity: 1024,
            },
            ..Default::default()
        };
        assert_eq!(
            render("TEXT", &load),
            "TEXT named_metrics.num_requests_running=3, named_metrics.num_requests_waiting=1, \
             named_metrics.num_requests_swapped=0, named_metrics.kv_cache_usage_perc=0.5, \
             named_metrics.num_tokens_waiting=40, named_metrics.uncached_tokens_waiting=24, \
             named_metrics.num_tokens_running=7, named_metrics.max_token_capacity=1024"
        );
        let json: serde_json::Value =
            serde_json::from_str(render("JSON", &load).strip_prefix("JSON ").expect("prefix")).expect("json");
        assert_eq!(json["named_metrics"]["num_requests_running"], 3.0);
    }
}
