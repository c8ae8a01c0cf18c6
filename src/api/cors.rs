//! CORS with vLLM's settings and defaults (any origin, method and header; no credentials),
//! answered like Starlette's middleware in front of vLLM: preflights from an allowed origin
//! get the allow headers, a disallowed origin's preflight is refused, and simple requests
//! are served either way (the browser enforces the missing headers).

use actix_cors::Cors;

use crate::config::SecurityConfig;

/// How long browsers may cache a preflight answer (Starlette's default).
const PREFLIGHT_MAX_AGE_S: usize = 600;

/// The CORS middleware for `s` (values already checked by config validation).
pub fn cors(s: &SecurityConfig) -> Cors {
    let any = |list: &[String]| list.iter().any(|v| v == "*");
    let mut cors = Cors::default()
        .block_on_origin_mismatch(false)
        .max_age(PREFLIGHT_MAX_AGE_S);
    if any(&s.allowed_origins) {
        cors = cors.allow_any_origin();
        if !s.allow_credentials {
            cors = cors.send_wildcard();
        }
    } else {
        for origin in &s.allowed_origins {
            cors = cors.allowed_origin(origin);
        }
    }
    cors = if any(&s.allowed_methods) {
        cors.allow_any_method()
    } else {
        cors.allowed_methods(s.allowed_methods.iter().map(String::as_str))
    };
    cors = if any(&s.allowed_headers) {
        cors.allow_any_header()
    } else {
        cors.allowed_headers(s.allowed_headers.iter().map(String::as_str))
    };
    if s.allow_credentials {
        cors = cors.supports_credentials();
    }
    cors
}
