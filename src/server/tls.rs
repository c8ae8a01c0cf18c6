//! HTTPS: a rustls server config (ring provider, TLS 1.2 and 1.3) from the `[security]`
//! PEM files, with client certificates none, optional or required as vLLM's
//! `--ssl-cert-reqs`. Files are read once at start: a rotated certificate needs a restart.

use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::config::security::{ClientCertificates, SecurityConfig};

/// The TLS config both listeners serve with, or `None` for plain HTTP.
pub fn server_config(s: &SecurityConfig) -> anyhow::Result<Option<Arc<ServerConfig>>> {
    if !s.tls_enabled() {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = read_certificates(&s.ssl_certfile).context("--ssl-certfile")?;
    let key = PrivateKeyDer::from_pem_file(&s.ssl_keyfile)
        .with_context(|| format!("--ssl-keyfile {}: no PEM private key", s.ssl_keyfile))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match s.client_certificates()? {
        ClientCertificates::None => builder.with_no_client_auth(),
        mode => {
            let mut roots = RootCertStore::empty();
            for ca in read_certificates(&s.ssl_ca_certs).context("--ssl-ca-certs")? {
                roots
                    .add(ca)
                    .context("--ssl-ca-certs: a certificate is not usable as a CA")?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match mode {
                ClientCertificates::Optional => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build()?)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .context("--ssl-certfile and --ssl-keyfile do not make a usable pair")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

fn read_certificates(path: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {path}"))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{path}: not PEM certificates"))?;
    anyhow::ensure!(!certs.is_empty(), "{path} holds no certificate");
    Ok(certs)
}
