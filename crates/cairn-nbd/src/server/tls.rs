//! TLS settings: the mode and the server's X.509 credentials.
//!
//! Certificates are read from a directory in the layout nbdkit, qemu and
//! libnbd use (`--tls-certificates DIR`):
//!
//! ```text
//! DIR/server-cert.pem   the server's certificate, then any intermediates (PEM)
//! DIR/server-key.pem    its private key (PKCS#8, PKCS#1 RSA or SEC1 EC; PEM)
//! DIR/ca-cert.pem       the CA clients check the server against; with peer
//!                       verification, also the CA a client's certificate
//!                       must chain to
//! ```
//!
//! TLS 1.3 and 1.2 with rustls's safe defaults over the `ring` provider. By
//! default client certificates are not requested: TLS gives encryption and
//! server authentication, and whoever can reach the socket may connect. With
//! peer verification (nbdkit's `--tls-verify-peer`,
//! [`TlsConfig::with_peer_verification`]) every client must present a
//! certificate that chains to `ca-cert.pem` (libnbd and qemu send
//! `client-cert.pem` and `client-key.pem` from their certificates
//! directory), or its TLS handshake fails and that connection ends.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use crate::codec::handshake::TlsMode;

/// The server certificate's file name in a certificates directory.
pub const SERVER_CERT_FILE: &str = "server-cert.pem";
/// The server key's file name in a certificates directory.
pub const SERVER_KEY_FILE: &str = "server-key.pem";
/// The CA certificate's file name in a certificates directory.
pub const CA_CERT_FILE: &str = "ca-cert.pem";

/// Why TLS credentials could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// `on` or `require` without a certificates directory.
    #[error("TLS mode {0} needs a certificates directory (--tls-certificates DIR)")]
    NoCertificates(TlsMode),
    /// A PEM file is missing, unreadable or holds nothing usable.
    #[error("{path}: {problem}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The CA certificates could not verify client certificates.
    #[error("{path}: cannot verify client certificates with it: {problem}")]
    ClientCa {
        /// The CA file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// rustls refused the certificate and key (e.g. they do not match).
    #[error("certificate {cert} with key {key}: {source}")]
    Credentials {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
}

/// A server's TLS mode and, unless off, its credentials. Cheap to clone.
#[derive(Clone, Default)]
pub struct TlsConfig {
    mode: TlsMode,
    verify_peer: bool,
    server: Option<Arc<ServerConfig>>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("mode", &self.mode)
            .field("verify_peer", &self.verify_peer)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// No TLS: `NBD_OPT_STARTTLS` is refused.
    pub fn off() -> Self {
        Self::default()
    }

    /// `mode` with the credentials in `directory` (see the module docs);
    /// `directory` is not read when `mode` is off. Clients are not asked for
    /// certificates.
    pub fn new(mode: TlsMode, directory: Option<&Path>) -> Result<Self, TlsError> {
        Self::with_peer_verification(mode, directory, false)
    }

    /// [`TlsConfig::new`], and with `verify_peer` every client must present
    /// a certificate chaining to `directory`'s `ca-cert.pem` (nbdkit's
    /// `--tls-verify-peer`).
    pub fn with_peer_verification(
        mode: TlsMode,
        directory: Option<&Path>,
        verify_peer: bool,
    ) -> Result<Self, TlsError> {
        if mode == TlsMode::Off {
            return Ok(Self::off());
        }
        let directory = directory.ok_or(TlsError::NoCertificates(mode))?;
        let cert_path = directory.join(SERVER_CERT_FILE);
        let key_path = directory.join(SERVER_KEY_FILE);
        let chain = load_chain(&cert_path)?;
        let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| TlsError::File {
            path: key_path.clone(),
            problem: format!("no usable private key: {e}"),
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let clients = if verify_peer {
            Some(client_verifier(&directory.join(CA_CERT_FILE), &provider)?)
        } else {
            None
        };
        let server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|builder| {
                match clients {
                    Some(verifier) => builder.with_client_cert_verifier(verifier),
                    None => builder.with_no_client_auth(),
                }
                .with_single_cert(chain, key)
            })
            .map_err(|source| TlsError::Credentials {
                cert: cert_path,
                key: key_path,
                source,
            })?;
        Ok(Self {
            mode,
            verify_peer,
            server: Some(Arc::new(server)),
        })
    }

    /// Whether clients must present a certificate.
    pub fn verifies_peers(&self) -> bool {
        self.verify_peer
    }

    /// The mode.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// rustls's configuration; `None` when TLS is off.
    pub(crate) fn server(&self) -> Option<&Arc<ServerConfig>> {
        self.server.as_ref()
    }
}

/// A verifier accepting client certificates that chain to a CA in `path`.
fn client_verifier(
    path: &Path,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_chain(path)? {
        roots.add(cert).map_err(|e| TlsError::ClientCa {
            path: path.to_path_buf(),
            problem: e.to_string(),
        })?;
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsError::ClientCa {
            path: path.to_path_buf(),
            problem: e.to_string(),
        })
}

fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let problem = |problem: String| TlsError::File {
        path: path.to_path_buf(),
        problem,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| problem(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| problem(format!("bad PEM: {e}")))?;
    if chain.is_empty() {
        return Err(problem("no CERTIFICATE block".into()));
    }
    Ok(chain)
}
