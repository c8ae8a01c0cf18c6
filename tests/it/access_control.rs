//! API keys and CORS against a real server on the tiny model: every route is guarded except
//! the probes and scrape endpoints, a refusal is OpenAI-shaped and gives nothing away, and
//! CORS preflights follow vLLM's settings.

use reqwest::Method;
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::{Value, json};

use crate::common::{Tiny, start_tiny};

const KEYS: [&str; 2] = ["sk-first-3f9a", "sk-second-77c1"];

fn with_keys() -> Tiny {
    start_tiny(|c| c.security.api_keys = KEYS.map(String::from).to_vec())
}

/// Every guarded route with a body that would succeed once the key is right.
fn guarded() -> Vec<(Method, &'static str, Option<Value>)> {
    vec![
        (Method::GET, "/v1/models", None),
        (
            Method::POST,
            "/v1/completions",
            Some(json!({"prompt": "a", "max_tokens": 2})),
        ),
        (
            Method::POST,
            "/v1/chat/completions",
            Some(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})),
        ),
        (
            Method::POST,
            "/v1/responses",
            Some(json!({"input": "hi", "max_output_tokens": 2})),
        ),
        (Method::GET, "/openapi.json", None),
        (Method::GET, "/no/such/route", None),
    ]
}

fn request(client: &Client, t: &Tiny, method: &Method, path: &str, body: &Option<Value>) -> RequestBuilder {
    let req = client.request(method.clone(), t.server.url(path));
    match body {
        Some(body) => req.json(body),
        None => req,
    }
}

fn assert_refused(resp: reqwest::blocking::Response, what: &str) {
    assert_eq!(resp.status().as_u16(), 401, "{what}");
    assert_eq!(
        resp.headers().get("www-authenticate").map(|v| v.as_bytes()),
        Some(&b"Bearer"[..]),
        "{what}"
    );
    let text = resp.text().expect("body");
    for key in KEYS {
        assert!(!text.contains(key), "{what}: the refusal names a key: {text}");
    }
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["error"]["type"], "authentication_error", "{what}: {body}");
    assert_eq!(body["error"]["code"], "invalid_api_key", "{what}: {body}");
}

#[test]
fn every_route_but_the_open_ones_needs_one_of_the_keys() {
    let t = with_keys();
    for (method, path, body) in guarded() {
        let what = format!("{method} {path}");
        assert_refused(
            request(&t.client, &t, &method, path, &body).send().expect("send"),
            &what,
        );
        for wrong in [
            "Bearer sk-wrong",
            "Bearer ",
            "sk-first-3f9a",
            "Basic c2stZmlyc3Q=",
            "Bearer sk-first-3f9",
        ] {
            let resp = request(&t.client, &t, &method, path, &body)
                .header("authorization", wrong)
                .send()
                .expect("send");
            assert_refused(resp, &format!("{what} with `{wrong}`"));
        }
        for key in KEYS {
            let resp = request(&t.client, &t, &method, path, &body)
                .bearer_auth(key)
                .send()
                .expect("send");
            let expected = if path == "/no/such/route" { 404 } else { 200 };
            assert_eq!(resp.status().as_u16(), expected, "{what} with a right key");
        }
    }
    for open in ["/health", "/live", "/ready", "/version", "/load", "/metrics"] {
        let resp = t.client.get(t.server.url(open)).send().expect("send");
        assert_eq!(resp.status().as_u16(), 200, "{open} needs no key");
    }
    // Refusals are counted like any other response.
    let (_, metrics) = t.get_text("/metrics");
    assert!(
        metrics.lines().any(|l| l.contains("http_response_status_code=\"401\"")),
        "401s reach the HTTP metrics"
    );
}

#[test]
fn without_keys_nothing_is_guarded() {
    let t = start_tiny(|_| {});
    let (status, body) = t.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 2}));
    assert_eq!(status, 200, "{body}");
}

fn preflight(t: &Tiny, origin: &str, method: &str, headers: &str) -> reqwest::blocking::Response {
    t.client
        .request(Method::OPTIONS, t.server.url("/v1/chat/completions"))
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header("access-control-request-headers", headers)
        .send()
        .expect("preflight")
}

fn header(resp: &reqwest::blocking::Response, name: &str) -> Option<String> {
    resp.headers().get(name).map(|v| v.to_str().expect("ascii").to_owned())
}

#[test]
fn preflights_pass_the_key_check_and_follow_the_defaults() {
    let t = with_keys();
    let resp = preflight(&t, "https://app.example", "POST", "authorization,content-type");
    assert_eq!(
        resp.status().as_u16(),
        200,
        "a preflight carries no key and still passes"
    );
    assert_eq!(header(&resp, "access-control-allow-origin").as_deref(), Some("*"));
    let methods = header(&resp, "access-control-allow-methods").expect("allow-methods");
    assert!(methods.contains("POST"), "{methods}");
    let headers = header(&resp, "access-control-allow-headers").expect("allow-headers");
    assert!(headers.contains("authorization"), "{headers}");
    assert_eq!(
        header(&resp, "access-control-allow-credentials"),
        None,
        "credentials off by default"
    );
    // A refused request from a page still carries the CORS headers, so the page can read it.
    let resp = t
        .client
        .get(t.server.url("/v1/models"))
        .header("origin", "https://app.example")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(header(&resp, "access-control-allow-origin").as_deref(), Some("*"));
}

#[test]
fn configured_origins_methods_headers_and_credentials_are_enforced() {
    let t = start_tiny(|c| {
        c.security.allowed_origins = vec!["https://app.example".into()];
        c.security.allowed_methods = vec!["GET".into(), "POST".into()];
        c.security.allowed_headers = vec!["authorization".into(), "content-type".into()];
        c.security.allow_credentials = true;
    });
    let resp = preflight(&t, "https://app.example", "POST", "content-type");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        header(&resp, "access-control-allow-origin").as_deref(),
        Some("https://app.example")
    );
    assert_eq!(
        header(&resp, "access-control-allow-credentials").as_deref(),
        Some("true")
    );

    let other = preflight(&t, "https://evil.example", "POST", "content-type");
    assert_eq!(
        other.status().as_u16(),
        400,
        "a disallowed origin's preflight is refused"
    );
    assert_eq!(header(&other, "access-control-allow-origin"), None);
    let delete = preflight(&t, "https://app.example", "DELETE", "content-type");
    assert_eq!(delete.status().as_u16(), 400, "a method not listed");
    let odd_header = preflight(&t, "https://app.example", "POST", "x-not-listed");
    assert_eq!(odd_header.status().as_u16(), 400, "a header not listed");

    // A simple request from another origin is served without CORS headers (the browser
    // then withholds the answer from the page), as Starlette does in front of vLLM.
    let resp = t
        .client
        .get(t.server.url("/v1/models"))
        .header("origin", "https://evil.example")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(header(&resp, "access-control-allow-origin"), None);
}
