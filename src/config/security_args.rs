//! The security flags of `kiln serve` (vLLM's names), applied over the `[security]` section.

use clap::Args;

use super::{ConfigError, SecurityConfig, invalid};

#[derive(Debug, Default, Args)]
pub struct SecurityArgs {
    /// An accepted API key (repeatable); clients send `Authorization: Bearer KEY`. Prefer
    /// --api-key-file or KILN_API_KEY: a flag shows in the process list. VLLM_API_KEY is read
    /// when no key is set any other way.
    #[arg(long = "api-key", env = "KILN_API_KEY", value_name = "KEY")]
    pub api_keys: Vec<String>,
    /// A file of API keys, one a line.
    #[arg(long, env = "KILN_API_KEY_FILE")]
    pub api_key_file: Option<String>,
    /// CORS origins, as a JSON list (vLLM's form, e.g. '["https://app.example"]') or comma-separated.
    #[arg(long, env = "KILN_ALLOWED_ORIGINS")]
    pub allowed_origins: Option<String>,
    /// CORS methods, JSON list or comma-separated.
    #[arg(long, env = "KILN_ALLOWED_METHODS")]
    pub allowed_methods: Option<String>,
    /// CORS request headers, JSON list or comma-separated.
    #[arg(long, env = "KILN_ALLOWED_HEADERS")]
    pub allowed_headers: Option<String>,
    /// Allow credentials (cookies, authorization) on cross-origin requests.
    #[arg(long, env = "KILN_ALLOW_CREDENTIALS")]
    pub allow_credentials: bool,
    /// PEM private key for HTTPS.
    #[arg(long, env = "KILN_SSL_KEYFILE")]
    pub ssl_keyfile: Option<String>,
    /// PEM certificate chain for HTTPS.
    #[arg(long, env = "KILN_SSL_CERTFILE")]
    pub ssl_certfile: Option<String>,
    /// PEM CA certificates to check client certificates against.
    #[arg(long, env = "KILN_SSL_CA_CERTS")]
    pub ssl_ca_certs: Option<String>,
    /// Client certificates: 0/none, 1/optional, 2/required.
    #[arg(long, env = "KILN_SSL_CERT_REQS")]
    pub ssl_cert_reqs: Option<String>,
}

impl SecurityArgs {
    /// Flags over the file's values; `vllm_api_key` (the `VLLM_API_KEY` variable) only when
    /// no key is configured otherwise.
    pub fn apply(&self, s: &mut SecurityConfig, vllm_api_key: Option<String>) -> Result<(), ConfigError> {
        if !self.api_keys.is_empty() {
            s.api_keys = self.api_keys.clone();
        }
        if let Some(file) = &self.api_key_file {
            s.api_key_file = file.clone();
        }
        if s.api_keys.is_empty()
            && s.api_key_file.is_empty()
            && let Some(key) = vllm_api_key.filter(|k| !k.is_empty())
        {
            s.api_keys = vec![key];
        }
        for (key, flag, target) in [
            (
                "security.allowed_origins",
                &self.allowed_origins,
                &mut s.allowed_origins,
            ),
            (
                "security.allowed_methods",
                &self.allowed_methods,
                &mut s.allowed_methods,
            ),
            (
                "security.allowed_headers",
                &self.allowed_headers,
                &mut s.allowed_headers,
            ),
        ] {
            if let Some(list) = flag {
                *target = parse_list(list).map_err(|m| invalid(key, m))?;
            }
        }
        if self.allow_credentials {
            s.allow_credentials = true;
        }
        for (flag, target) in [
            (&self.ssl_keyfile, &mut s.ssl_keyfile),
            (&self.ssl_certfile, &mut s.ssl_certfile),
            (&self.ssl_ca_certs, &mut s.ssl_ca_certs),
            (&self.ssl_cert_reqs, &mut s.ssl_cert_reqs),
        ] {
            if let Some(v) = flag {
                *target = v.clone();
            }
        }
        Ok(())
    }
}

/// A JSON list of strings, or a comma-separated list.
fn parse_list(text: &str) -> Result<Vec<String>, String> {
    let text = text.trim();
    if text.starts_with('[') {
        return serde_json::from_str(text).map_err(|e| format!("not a JSON list of strings: {e}"));
    }
    Ok(text.split(',').map(|v| v.trim().to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_json_or_comma_separated() {
        assert_eq!(
            parse_list(r#"["https://a", "http://b:8080"]"#).unwrap(),
            ["https://a", "http://b:8080"]
        );
        assert_eq!(parse_list("GET, POST").unwrap(), ["GET", "POST"]);
        assert!(parse_list("[not json").is_err());
    }

    #[test]
    fn vllm_api_key_is_a_fallback_only() {
        let mut s = SecurityConfig::default();
        SecurityArgs::default().apply(&mut s, Some("from-vllm".into())).unwrap();
        assert_eq!(s.api_keys, ["from-vllm"]);
        let mut s = SecurityConfig::default();
        let args = SecurityArgs {
            api_keys: vec!["mine".into()],
            ..Default::default()
        };
        args.apply(&mut s, Some("from-vllm".into())).unwrap();
        assert_eq!(s.api_keys, ["mine"]);
    }
}
