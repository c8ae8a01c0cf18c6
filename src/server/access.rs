//! Who may reach kiln and how: API keys, CORS and TLS, built once from `[security]` and
//! applied alike to the public listener, the `/metrics` listener and the loading server.

use actix_web::web;

use super::listeners::Tls;
use super::tls::server_config;
use crate::api::auth::ApiKeys;
use crate::config::{Config, SecurityConfig};

pub struct Access {
    pub keys: web::Data<ApiKeys>,
    pub tls: Tls,
    pub cors: SecurityConfig,
}

impl Access {
    /// Reads the key file and the PEM files; fails at start, not on the first request.
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let s = &config.security;
        let keys = s.all_api_keys()?;
        let keys = ApiKeys::new(keys.iter().map(String::as_str));
        Ok(Self {
            keys: web::Data::new(keys),
            tls: server_config(s)?,
            cors: s.clone(),
        })
    }

    /// One line at start saying what is guarded (never a key).
    pub fn log(&self) {
        let s = &self.cors;
        tracing::info!(
            api_key = self.keys.is_enabled(),
            tls = self.tls.is_some(),
            client_certificates = %s.ssl_cert_reqs,
            allowed_origins = ?s.allowed_origins,
            "access"
        );
        if !self.keys.is_enabled() {
            tracing::warn!("no API key: every route is open to whoever reaches the port (--api-key-file to set one)");
        }
        if s.allow_credentials && s.allowed_origins.iter().any(|o| o == "*") {
            tracing::warn!(
                "--allow-credentials with every origin allowed: any web page may call kiln with its \
                 visitors' credentials; list the origins with --allowed-origins"
            );
        }
    }
}
