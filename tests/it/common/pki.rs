//! A throwaway PKI written at test time: a CA, a server certificate for 127.0.0.1 and
//! localhost, and a client certificate, all signed by the CA, as PEM files.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, pem: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).expect("write pem");
            path
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "kiln test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key")).expect("ca");

        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("leaf key");
            let cert = params.signed_by(&key, &ca).expect("sign leaf");
            (cert.pem(), key.serialize_pem())
        };
        let (server_pem, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_pem, client_key) = leaf(vec!["kiln-test-client".into()], ExtendedKeyUsagePurpose::ClientAuth);
        Self {
            ca: write("ca.pem", ca.pem()),
            server_cert: write("server.pem", server_pem),
            server_key: write("server.key", server_key),
            client_cert: write("client.pem", client_pem),
            client_key: write("client.key", client_key),
            dir,
        }
    }
}

/// A rustls client config (ring provider) trusting `ca`, presenting `identity` (certificate
/// and key PEM files) when given.
pub fn client_config(
    ca: &std::path::Path,
    identity: Option<(&std::path::Path, &std::path::Path)>,
) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca file") {
        roots.add(cert.expect("ca pem")).expect("ca cert");
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_root_certificates(roots);
    match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .expect("client cert")
                .collect::<Result<Vec<_>, _>>()
                .expect("client cert pem");
            builder
                .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).expect("client key"))
                .expect("client identity")
        }
        None => builder.with_no_client_auth(),
    }
}

/// A minimal blocking HTTPS/1.1 client on [`client_config`], one connection a request.
/// (reqwest's TLS would need a process-wide crypto provider in every test binary.)
#[derive(Clone)]
pub struct HttpsClient {
    config: std::sync::Arc<rustls::ClientConfig>,
}

impl HttpsClient {
    pub fn new(ca: &std::path::Path, identity: Option<(&std::path::Path, &std::path::Path)>) -> Self {
        Self {
            config: std::sync::Arc::new(client_config(ca, identity)),
        }
    }

    /// Sends one request to 127.0.0.1:`port`; the status and body, or the transport error
    /// (a refused handshake, a closed connection).
    pub fn request(
        &self,
        port: u16,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        json: Option<&serde_json::Value>,
    ) -> std::io::Result<(u16, String)> {
        use std::io::{Read, Write};
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
        let connection = rustls::ClientConnection::new(self.config.clone(), name).map_err(std::io::Error::other)?;
        let socket = std::net::TcpStream::connect(("127.0.0.1", port))?;
        socket.set_read_timeout(Some(std::time::Duration::from_secs(60)))?;
        let mut tls = rustls::StreamOwned::new(connection, socket);
        let body = json.map(|j| j.to_string()).unwrap_or_default();
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
        if let Some(key) = bearer {
            head.push_str(&format!("Authorization: Bearer {key}\r\n"));
        }
        if json.is_some() {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        tls.write_all(head.as_bytes())?;
        tls.write_all(body.as_bytes())?;
        let mut response = Vec::new();
        match tls.read_to_end(&mut response) {
            Ok(_) => {}
            // A peer that closes without close_notify after a full response is fine here.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
            Err(e) => return Err(e),
        }
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }
}
