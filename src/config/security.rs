//! The `[security]` section: API keys, CORS and TLS, with vLLM's flag names and defaults.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

#[derive(Clone, PartialEq, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "Security")]
pub struct SecurityConfig {
    /// An accepted API key (repeatable); clients send `Authorization: Bearer KEY`; none (and
    /// no key file): no authentication. Prefer --api-key-file or KILN_API_KEY: a flag shows in
    /// the process list. VLLM_API_KEY is read when no key is set any other way.
    #[arg(long = "api-key", env = "KILN_API_KEY", value_name = "KEY")]
    pub api_keys: Vec<String>,
    /// A file of further API keys, one a line (blank lines and `#` comments skipped), so keys
    /// stay out of the process list and the config file.
    #[arg(long, env = "KILN_API_KEY_FILE")]
    pub api_key_file: String,
    /// CORS origins allowed to call the API from a browser, as a JSON list (vLLM's form, e.g.
    /// '["https://app.example"]') or comma-separated; `*` is any.
    #[arg(long, env = "KILN_ALLOWED_ORIGINS", value_parser = parse_list)]
    pub allowed_origins: ::std::vec::Vec<String>,
    /// CORS methods, JSON list or comma-separated; `*` is any.
    #[arg(long, env = "KILN_ALLOWED_METHODS", value_parser = parse_list)]
    pub allowed_methods: ::std::vec::Vec<String>,
    /// CORS request headers, JSON list or comma-separated; `*` is any.
    #[arg(long, env = "KILN_ALLOWED_HEADERS", value_parser = parse_list)]
    pub allowed_headers: ::std::vec::Vec<String>,
    /// Allow credentials (cookies, authorization) on cross-origin requests.
    #[arg(long, env = "KILN_ALLOW_CREDENTIALS")]
    pub allow_credentials: bool,
    /// PEM private key; with --ssl-certfile, serve HTTPS (both listeners).
    #[arg(long, env = "KILN_SSL_KEYFILE")]
    pub ssl_keyfile: String,
    /// PEM certificate chain for HTTPS, leaf first.
    #[arg(long, env = "KILN_SSL_CERTFILE")]
    pub ssl_certfile: String,
    /// PEM CA certificates that client certificates are checked against.
    #[arg(long, env = "KILN_SSL_CA_CERTS")]
    pub ssl_ca_certs: String,
    /// Client certificates: 0/none, 1/optional, 2/required, as vLLM's `--ssl-cert-reqs`
    /// (Python's `ssl.CERT_*`).
    #[arg(long, env = "KILN_SSL_CERT_REQS")]
    pub ssl_cert_reqs: String,
}

/// A JSON list of strings, or a comma-separated list.
fn parse_list(text: &str) -> Result<Vec<String>, String> {
    let text = text.trim();
    if text.starts_with('[') {
        return serde_json::from_str(text).map_err(|e| format!("not a JSON list of strings: {e}"));
    }
    Ok(text.split(',').map(|v| v.trim().to_string()).collect())
}

impl Default for SecurityConfig {
    fn default() -> Self {
        let any = || vec!["*".to_string()];
        Self {
            api_keys: Vec::new(),
            api_key_file: String::new(),
            allowed_origins: any(),
            allowed_methods: any(),
            allowed_headers: any(),
            allow_credentials: false,
            ssl_keyfile: String::new(),
            ssl_certfile: String::new(),
            ssl_ca_certs: String::new(),
            ssl_cert_reqs: "none".into(),
        }
    }
}

/// Keys never reach a log through `{:?}`.
impl std::fmt::Debug for SecurityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecurityConfig")
            .field("api_keys", &format_args!("[{} redacted]", self.api_keys.len()))
            .field("api_key_file", &self.api_key_file)
            .field("allowed_origins", &self.allowed_origins)
            .field("allowed_methods", &self.allowed_methods)
            .field("allowed_headers", &self.allowed_headers)
            .field("allow_credentials", &self.allow_credentials)
            .field("ssl_keyfile", &self.ssl_keyfile)
            .field("ssl_certfile", &self.ssl_certfile)
            .field("ssl_ca_certs", &self.ssl_ca_certs)
            .field("ssl_cert_reqs", &self.ssl_cert_reqs)
            .finish()
    }
}

/// Whether and how clients present certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCertificates {
    None,
    Optional,
    Required,
}

impl SecurityConfig {
    /// `VLLM_API_KEY`'s key, only when no key is configured otherwise.
    pub fn fall_back_to_vllm_api_key(&mut self, vllm_api_key: Option<String>) {
        if self.api_keys.is_empty()
            && self.api_key_file.is_empty()
            && let Some(key) = vllm_api_key.filter(|k| !k.is_empty())
        {
            self.api_keys = vec![key];
        }
    }

    /// `api_keys` plus the keys in `api_key_file`.
    pub fn all_api_keys(&self) -> Result<Vec<String>, ConfigError> {
        let mut keys = self.api_keys.clone();
        if !self.api_key_file.is_empty() {
            let text = std::fs::read_to_string(&self.api_key_file)
                .map_err(|e| invalid("security.api_key_file", format!("cannot read it: {e}")))?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
            if keys.len() == self.api_keys.len() {
                return Err(invalid("security.api_key_file", "holds no key"));
            }
        }
        Ok(keys)
    }

    pub fn client_certificates(&self) -> Result<ClientCertificates, ConfigError> {
        match self.ssl_cert_reqs.to_ascii_lowercase().as_str() {
            "0" | "none" | "cert_none" => Ok(ClientCertificates::None),
            "1" | "optional" | "cert_optional" => Ok(ClientCertificates::Optional),
            "2" | "required" | "cert_required" => Ok(ClientCertificates::Required),
            other => Err(invalid(
                "security.ssl_cert_reqs",
                format!("`{other}` is not none (0), optional (1) or required (2)"),
            )),
        }
    }

    pub fn tls_enabled(&self) -> bool {
        !self.ssl_certfile.is_empty()
    }

    /// Every CORS entry is `*` or parses as what it names, so building the middleware
    /// cannot fail at start.
    fn validate_cors(&self) -> Result<(), ConfigError> {
        use actix_web::http::header::HeaderName;
        use actix_web::http::{Method, Uri};
        let origin_ok = |o: &str| {
            o.parse::<Uri>()
                .is_ok_and(|u| u.scheme().is_some() && u.authority().is_some() && u.path() == "/" && !o.ends_with('/'))
        };
        fn check(key: &'static str, list: &[String], parses: impl Fn(&str) -> bool) -> Result<(), ConfigError> {
            match list.iter().find(|v| v.as_str() != "*" && !parses(v)) {
                Some(bad) => Err(invalid(key, format!("`{bad}` is not valid here"))),
                None => Ok(()),
            }
        }
        check("security.allowed_origins", &self.allowed_origins, origin_ok)?;
        check("security.allowed_methods", &self.allowed_methods, |m| {
            Method::from_bytes(m.as_bytes()).is_ok()
        })?;
        check("security.allowed_headers", &self.allowed_headers, |h| {
            HeaderName::try_from(h).is_ok()
        })?;
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let keys = self.all_api_keys()?;
        if keys.iter().any(|k| k.is_empty() || k.chars().any(char::is_whitespace)) {
            return Err(invalid("security.api_keys", "a key is empty or contains whitespace"));
        }
        self.validate_cors()?;
        let certs = self.client_certificates()?;
        if self.ssl_keyfile.is_empty() != self.ssl_certfile.is_empty() {
            return Err(invalid(
                "security.ssl_keyfile",
                "--ssl-keyfile and --ssl-certfile go together",
            ));
        }
        if certs != ClientCertificates::None && self.ssl_ca_certs.is_empty() {
            return Err(invalid(
                "security.ssl_ca_certs",
                "checking client certificates (--ssl-cert-reqs) needs --ssl-ca-certs",
            ));
        }
        if !self.ssl_ca_certs.is_empty() && !self.tls_enabled() {
            return Err(invalid(
                "security.ssl_ca_certs",
                "needs --ssl-keyfile and --ssl-certfile",
            ));
        }
        for (key, path) in [
            ("security.ssl_keyfile", &self.ssl_keyfile),
            ("security.ssl_certfile", &self.ssl_certfile),
            ("security.ssl_ca_certs", &self.ssl_ca_certs),
        ] {
            if !path.is_empty() && !Path::new(path).is_file() {
                return Err(invalid(key, format!("no such file: {path}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: SecurityConfig) -> String {
        s.validate().expect_err("refused").to_string()
    }

    #[test]
    fn bad_values_are_refused_naming_their_key() {
        let base = SecurityConfig::default;
        assert!(base().validate().is_ok());
        let e = refused(SecurityConfig {
            allowed_origins: vec!["not a url".into()],
            ..base()
        });
        assert!(e.contains("security.allowed_origins"), "{e}");
        let e = refused(SecurityConfig {
            allowed_methods: vec!["GET POST".into()],
            ..base()
        });
        assert!(e.contains("security.allowed_methods"), "{e}");
        let e = refused(SecurityConfig {
            ssl_keyfile: "key.pem".into(),
            ..base()
        });
        assert!(e.contains("--ssl-certfile"), "{e}");
        let e = refused(SecurityConfig {
            ssl_cert_reqs: "2".into(),
            ..base()
        });
        assert!(e.contains("--ssl-ca-certs"), "{e}");
        let e = refused(SecurityConfig {
            ssl_cert_reqs: "sometimes".into(),
            ..base()
        });
        assert!(e.contains("security.ssl_cert_reqs"), "{e}");
        let e = refused(SecurityConfig {
            api_keys: vec!["two words".into()],
            ..base()
        });
        assert!(e.contains("security.api_keys"), "{e}");
    }

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
        s.fall_back_to_vllm_api_key(Some("from-vllm".into()));
        assert_eq!(s.api_keys, ["from-vllm"]);
        let mut s = SecurityConfig {
            api_keys: vec!["mine".into()],
            ..SecurityConfig::default()
        };
        s.fall_back_to_vllm_api_key(Some("from-vllm".into()));
        assert_eq!(s.api_keys, ["mine"]);
    }

    #[test]
    fn cert_reqs_take_vllm_numbers_and_names() {
        for (value, want) in [
            ("0", ClientCertificates::None),
            ("optional", ClientCertificates::Optional),
            ("2", ClientCertificates::Required),
            ("CERT_REQUIRED", ClientCertificates::Required),
        ] {
            let s = SecurityConfig {
                ssl_cert_reqs: value.into(),
                ..SecurityConfig::default()
            };
            assert_eq!(s.client_certificates().unwrap(), want, "{value}");
        }
    }

    #[test]
    fn debug_output_redacts_keys() {
        let s = SecurityConfig {
            api_keys: vec!["sk-secret".into()],
            ..SecurityConfig::default()
        };
        let shown = format!("{s:?}");
        assert!(!shown.contains("sk-secret") && shown.contains("1 redacted"), "{shown}");
    }
}
