//! TLS for `https://` origins: the roots an origin's certificate must chain
//! to, and connections wrapped in a rustls client (see the parent module).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the system keeps its CA bundle (Debian and derivatives; Fedora and
/// RHEL; Alpine, macOS-like layouts).
const SYSTEM_CA_FILES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// What an `https` origin's connections are made with.
pub(super) struct Tls {
    pub(super) config: Arc<rustls::ClientConfig>,
    pub(super) name: rustls::pki_types::ServerName<'static>,
}

impl Tls {
    /// `stream` with TLS over it, the handshake done: a certificate the
    /// origin cannot prove fails here, as a connect error, not mid-request.
    pub(super) fn wrap(&self, stream: TcpStream) -> io::Result<Conn> {
        let session = rustls::ClientConnection::new(Arc::clone(&self.config), self.name.clone())
            .map_err(io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(session, stream);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Conn::Tls(Box::new(stream)))
    }
}

/// The roots of `ca_file`, `$SSL_CERT_FILE` or the system's bundle.
pub(super) fn tls_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let from_env = std::env::var_os("SSL_CERT_FILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let path = match ca_file.map(Path::to_path_buf).or(from_env) {
        Some(path) => path,
        None => SYSTEM_CA_FILES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .ok_or_else(|| {
                format!(
                    "https: no CA bundle at {} (install ca-certificates, or set SSL_CERT_FILE)",
                    SYSTEM_CA_FILES.join(", ")
                )
            })?,
    };
    let certificates = CertificateDer::pem_file_iter(&path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("https: CA file {}: {e}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(format!(
            "https: CA file {} holds no certificate",
            path.display()
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("https: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A connection to the origin: TCP, or TLS over it.
pub(super) enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Conn {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(stream) => stream.read(out),
            Conn::Tls(stream) => stream.read(out),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(stream) => stream.write(bytes),
            Conn::Tls(stream) => stream.write(bytes),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(stream) => stream.flush(),
            Conn::Tls(stream) => stream.flush(),
        }
    }
}
