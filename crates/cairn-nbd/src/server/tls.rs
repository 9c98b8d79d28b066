//! TLS settings: the mode and the server's X.509 credentials.
//!
//! Certificates are read from a directory in the layout nbdkit, qemu and
//! libnbd use (`--tls-certificates DIR`):
//!
//! ```text
//! DIR/server-cert.pem   the server's certificate, then any intermediates (PEM)
//! DIR/server-key.pem    its private key (PKCS#8, PKCS#1 RSA or SEC1 EC; PEM)
//! DIR/ca-cert.pem       the CA clients check the server against (clients read
//!                       it; the server does not, as it does not verify client
//!                       certificates)
//! ```
//!
//! TLS 1.3 and 1.2 with rustls's safe defaults over the `ring` provider.
//! Client certificates are not requested (nbdkit's `--tls-verify-peer` has no
//! counterpart yet): TLS here gives encryption and server authentication,
//! and whoever can reach the socket may connect.

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
    server: Option<Arc<ServerConfig>>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// No TLS: `NBD_OPT_STARTTLS` is refused.
    pub fn off() -> Self {
        Self::default()
    }

    /// `mode` with the credentials in `directory` (see the module docs);
    /// `directory` is not read when `mode` is off.
    pub fn new(mode: TlsMode, directory: Option<&Path>) -> Result<Self, TlsError> {
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
        let server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|builder| builder.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|source| TlsError::Credentials {
                cert: cert_path,
                key: key_path,
                source,
            })?;
        Ok(Self {
            mode,
            server: Some(Arc::new(server)),
        })
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
