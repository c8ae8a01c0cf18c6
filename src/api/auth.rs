//! API keys: `Authorization: Bearer KEY` on every route except the probes and the scrape
//! endpoints that orchestrators, load balancers and Prometheus call without credentials.
//!
//! Keys are kept only as SHA-256 digests and a presented key's digest is compared with each
//! of them in constant time, so neither the comparison's timing nor a memory dump of the
//! table gives a key away; a refusal never says which part was wrong.

use actix_web::ResponseError;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::AUTHORIZATION;
use actix_web::middleware::Next;
use actix_web::web;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::errors::ApiError;

/// Paths served without a key: liveness, readiness, version, load and metrics.
pub const OPEN_PATHS: &[&str] = &[
    "/health",
    "/live",
    "/ready",
    "/version",
    "/load",
    "/metrics",
    "/metrics/",
];

/// The accepted keys, as digests. Empty: no authentication.
#[derive(Clone, Default)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.digests.len())
    }
}

impl ApiKeys {
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            digests: keys.into_iter().map(|k| Sha256::digest(k.as_bytes()).into()).collect(),
        }
    }

    pub fn is_enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// Whether `presented` is one of the keys; every digest is compared, match or not.
    pub fn accepts(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let matched = self
            .digests
            .iter()
            .fold(subtle::Choice::from(0), |any, key| any | key.ct_eq(&digest));
        matched.into()
    }

    /// Whether a request may proceed: open paths, CORS preflights and, with keys set, a
    /// bearer token that is one of them.
    pub fn admits(&self, method: &Method, path: &str, authorization: Option<&[u8]>) -> bool {
        if !self.is_enabled() || *method == Method::OPTIONS || OPEN_PATHS.contains(&path) {
            return true;
        }
        authorization
            .and_then(bearer_token)
            .is_some_and(|token| self.accepts(token))
    }
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme is case-insensitive).
fn bearer_token(header: &[u8]) -> Option<&str> {
    let header = std::str::from_utf8(header).ok()?;
    let (scheme, token) = header.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Middleware: answers 401 before the route runs (the keys are the app's
/// `web::Data<ApiKeys>`; without it, nothing is guarded). The refusal is a response, not an
/// error, so the CORS layer around it still adds its headers and a browser can read it.
pub async fn require_api_key(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if let Some(keys) = req.app_data::<web::Data<ApiKeys>>() {
        let authorization = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
        if !keys.admits(req.method(), req.path(), authorization) {
            let refusal = ApiError::Unauthorized.error_response();
            return Ok(req.into_response(refusal).map_into_right_body());
        }
    }
    Ok(next.call(req).await?.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_configured_key_passes_and_open_paths_need_none() {
        let keys = ApiKeys::new(["first-key", "second-key"]);
        let post = Method::POST;
        assert!(keys.admits(&post, "/v1/completions", Some(b"Bearer first-key")));
        assert!(keys.admits(&post, "/v1/completions", Some(b"bearer second-key")));
        for bad in [
            &b"Bearer wrong"[..],
            b"Bearer first-key2",
            b"Bearer ",
            b"first-key",
            b"Basic Zmlyc3Q=",
        ] {
            assert!(!keys.admits(&post, "/v1/completions", Some(bad)), "{bad:?}");
        }
        assert!(!keys.admits(&post, "/v1/completions", None));
        assert!(!keys.admits(&post, "/tokenize", None), "guarded as in vLLM");
        assert!(!keys.admits(&post, "/detokenize", None), "guarded as in vLLM");
        assert!(!keys.admits(&Method::GET, "/openapi.json", None));
        assert!(!keys.admits(&Method::GET, "/no/such/path", None));
        for open in OPEN_PATHS {
            assert!(keys.admits(&Method::GET, open, None), "{open}");
        }
        assert!(keys.admits(&Method::OPTIONS, "/v1/completions", None), "preflight");
        assert!(
            ApiKeys::default().admits(&post, "/v1/completions", None),
            "no keys: open"
        );
    }

    #[test]
    fn debug_output_never_shows_a_key() {
        let keys = ApiKeys::new(["sk-secret"]);
        assert_eq!(format!("{keys:?}"), "ApiKeys(1 keys)");
    }
}
