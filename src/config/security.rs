//! The `[security]` section: API keys, CORS and TLS, with vLLM's flag names and defaults.

use std::path::Path;

use serde::Deserialize;

use super::{ConfigError, invalid};

#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// Accepted API keys; any one of them passes. Empty (and no key file): no authentication.
    pub api_keys: Vec<String>,
    /// A file of further keys, one a line (blank lines and `#` comments skipped), so keys stay
    /// out of the process list and the config file.
    pub api_key_file: String,
    /// CORS origins allowed to call the API from a browser; `*` is any.
    pub allowed_origins: Vec<String>,
    /// CORS methods; `*` is any.
    pub allowed_methods: Vec<String>,
    /// CORS request headers; `*` is any.
    pub allowed_headers: Vec<String>,
    /// Let browsers send cookies and credentials cross-origin.
    pub allow_credentials: bool,
    /// PEM private key; with `ssl_certfile`, serve HTTPS (both listeners).
    pub ssl_keyfile: String,
    /// PEM certificate chain, leaf first.
    pub ssl_certfile: String,
    /// PEM CA certificates that client certificates are checked against.
    pub ssl_ca_certs: String,
    /// Client certificates: "none" (0), "optional" (1) or "required" (2), as vLLM's
    /// `--ssl-cert-reqs` (Python's `ssl.CERT_*`).
    pub ssl_cert_reqs: String,
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
