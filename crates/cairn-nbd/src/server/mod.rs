//! The NBD server: std threads over sockets.
//!
//! ```text
//! accept loop ── per connection: handshake (one thread, codec::handshake)
//!                                   │
//!   4 threads take turns (leader/follower): lock the reader ── parse + validate
//!   (+ WRITE payload into a pooled buffer; + this thread's share of the
//!   requests already buffered, into the ready queue) ── unlock ── execute on
//!   the device ── reply: write it if no thread is sending, else queue it for
//!   the sender; then a ready request, if any, before the reader again
//! ```
//!
//! At queue depth 1 the thread that read a request executes it and writes
//! its reply: no handoff between threads. Replies complete out of order; at
//! most one thread is ever blocked on the socket (the sender, which also
//! writes the replies queued meanwhile), so the others keep reading requests,
//! up to [`INFLIGHT_MAX_BYTES`] of payload and [`INFLIGHT_MAX_REQUESTS`]
//! requests in flight per connection. A write is acknowledged
//! only after `Device::write_at` returned (and, with FUA, `Device::flush`), so
//! a FLUSH on any connection covers every write acknowledged on any connection:
//! `NBD_FLAG_CAN_MULTI_CONN` is true.
//!
//! [`INFLIGHT_MAX_BYTES`]: crate::limits::INFLIGHT_MAX_BYTES
//! [`INFLIGHT_MAX_REQUESTS`]: crate::limits::INFLIGHT_MAX_REQUESTS

mod connection;
mod listen;
mod shutdown;
pub mod tls;
mod transport;

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use cairn_control::{ExportCounters, ExportIo};

use cairn_store::{Device, DeviceError};

use crate::codec::handshake::{BlockSize, ExportInfo};
use crate::limits::{
    CONNECTIONS_MAX, PAYLOAD_MAX_BYTES, SOCKET_SEND_BUFFER_BYTES, STRING_MAX_BYTES,
};

pub use listen::{ListenAddress, Listener, NBD_PORT, Stream};
pub use shutdown::Shutdown;
pub use tls::{TlsConfig, TlsError, TlsMode};

/// One export: a name and the device behind it.
#[derive(Clone)]
pub struct Export {
    /// The name clients ask for; the first export is also the default (`""`).
    pub name: String,
    /// Shown by `nbdinfo --list`.
    pub description: String,
    /// The storage.
    pub device: Arc<dyn Device>,
    /// Refuse writes.
    pub read_only: bool,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("name", &self.name)
            .field("device", &self.device.describe())
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The export list is unusable.
    #[error("invalid export configuration: {0}")]
    Config(String),
    /// Accepting or setting up a connection failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The final flush at shutdown failed: acknowledged writes may not be durable.
    #[error("flushing export {export:?} at shutdown: {source}")]
    Flush {
        /// The export.
        export: String,
        /// The device error.
        #[source]
        source: DeviceError,
    },
}

/// A server over a fixed set of exports. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) exports: Vec<Export>,
    pub(crate) infos: Vec<ExportInfo>,
    pub(crate) shutdown: Shutdown,
    /// Replaced whole by [`Server::reload_tls`]; a connection takes the
    /// credentials current at its STARTTLS and keeps them.
    tls: RwLock<TlsConfig>,
    /// The mode, fixed for the server's life (a reload changes credentials only).
    pub(crate) tls_mode: TlsMode,
    /// Per export (in `exports`' order), its requests' counters.
    pub(crate) counters: Vec<Arc<ExportCounters>>,
    /// Whether connections opened from now on count and time their
    /// requests ([`Server::set_counting`]).
    pub(crate) counting: AtomicBool,
}

impl Inner {
    /// The credentials for a STARTTLS now; `None` when TLS is off.
    pub(crate) fn tls_server(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.tls
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .server()
            .cloned()
    }
}

impl Server {
    /// A server for `exports` (at least one, names unique and valid), without TLS.
    pub fn new(exports: Vec<Export>) -> Result<Self, ServerError> {
        Self::with_tls(exports, TlsConfig::off())
    }

    /// A server for `exports` with TLS as `tls` says.
    pub fn with_tls(exports: Vec<Export>, tls: TlsConfig) -> Result<Self, ServerError> {
        if exports.is_empty() {
            return Err(ServerError::Config("no exports".into()));
        }
        let mut infos = Vec::with_capacity(exports.len());
        for (index, export) in exports.iter().enumerate() {
            if export.name.len() > STRING_MAX_BYTES || export.name.contains('\0') {
                return Err(ServerError::Config(format!(
                    "export name {:?} is longer than 4096 bytes or contains NUL",
                    export.name
                )));
            }
            if exports[..index].iter().any(|e| e.name == export.name) {
                return Err(ServerError::Config(format!(
                    "export name {:?} appears twice",
                    export.name
                )));
            }
            let alignment = export.device.alignment().clamp(512, 64 << 10);
            infos.push(ExportInfo {
                name: export.name.clone(),
                description: export.description.clone(),
                size: export.device.len(),
                read_only: export.read_only,
                block_size: BlockSize {
                    minimum_bytes: 1,
                    preferred_bytes: (alignment as u32).max(4096).next_power_of_two(),
                    maximum_bytes: PAYLOAD_MAX_BYTES,
                },
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                infos,
                shutdown: Shutdown::new(),
                tls_mode: tls.mode(),
                tls: RwLock::new(tls),
                counters: exports.iter().map(|_| Arc::default()).collect(),
                counting: AtomicBool::new(true),
                exports,
            }),
        })
    }

    /// Replace the TLS credentials (certificates and key, and the CA that
    /// client certificates are checked against): connections that start TLS
    /// from now on use `tls`; connections already under TLS keep theirs.
    /// The mode and whether peers are verified cannot change while serving:
    /// `tls` must match the server's (else [`ServerError::Config`] and
    /// nothing changes).
    pub fn reload_tls(&self, tls: TlsConfig) -> Result<(), ServerError> {
        let mut current = self
            .inner
            .tls
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if tls.mode() != current.mode() || tls.verifies_peers() != current.verifies_peers() {
            return Err(ServerError::Config(format!(
                "a TLS reload cannot change the mode ({} to {}) or peer verification ({} to {}); restart instead",
                current.mode(),
                tls.mode(),
                current.verifies_peers(),
                tls.verifies_peers()
            )));
        }
        *current = tls;
        Ok(())
    }

    /// Whether connections opened from now on count their requests and
    /// time them (on by default; off only to measure what counting costs:
    /// `cairn serve --no-stats`, `cairn bench nbd --stats-overhead`).
    /// Connections already open keep what they had.
    pub fn set_counting(&self, on: bool) {
        self.inner.counting.store(on, Ordering::Relaxed);
    }

    /// Whether new connections count their requests.
    pub fn counting(&self) -> bool {
        self.inner.counting.load(Ordering::Relaxed)
    }

    /// The requests, latencies and connections of the export at `index`
    /// (in [`Server::exports`]' order) since the server started; `None`
    /// past the end.
    pub fn export_io(&self, index: usize) -> Option<ExportIo> {
        self.inner.counters.get(index).map(|c| c.snapshot())
    }

    /// The handle that stops [`Server::serve`] gracefully.
    pub fn shutdown_handle(&self) -> Shutdown {
        self.inner.shutdown.clone()
    }

    /// The exports as the handshake describes them.
    pub fn exports(&self) -> &[ExportInfo] {
        &self.inner.infos
    }

    /// Accept connections until shutdown is triggered, then wait for every
    /// connection to finish its in-flight requests and flush every export.
    pub fn serve(&self, listener: &Listener) -> Result<(), ServerError> {
        let shutdown = &self.inner.shutdown;
        while !shutdown.is_requested() {
            let stream = match listener.accept_timeout() {
                Ok(Some(stream)) => stream,
                Ok(None) => continue,
                Err(e) if is_transient_accept_error(&e) => {
                    tracing::warn!(error = %e, "accept failed (continuing)");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
                Err(source) => {
                    return Err(ServerError::Io {
                        context: "accept".into(),
                        source,
                    });
                }
            };
            if shutdown.connections() >= CONNECTIONS_MAX {
                tracing::warn!(
                    peer = stream.peer(),
                    "refusing a connection: {CONNECTIONS_MAX} already open"
                );
                continue;
            }
            let server = self.clone();
            let spawned = std::thread::Builder::new()
                .name("nbd-conn".into())
                .spawn(move || server.serve_stream(stream));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start a connection thread");
            }
        }
        self.finish()
    }

    /// Serve one connected socket to its end (blocking).
    pub fn serve_stream(&self, stream: Stream) {
        let peer = stream.peer();
        let Some(_registration) = self.inner.shutdown.register(stream.as_fd()) else {
            tracing::info!(peer, "connection refused: the server is shutting down");
            return;
        };
        // A bigger send buffer lets a large READ reply go out in fewer
        // wake-ups of the sender (and of the client reading it). The kernel
        // caps it at net.core.wmem_max; a refusal changes nothing else. Unix
        // sockets only: on TCP it would switch off the kernel's autotuning.
        if let Stream::Unix(socket) = &stream {
            let _ =
                rustix::net::sockopt::set_socket_send_buffer_size(socket, SOCKET_SEND_BUFFER_BYTES);
        }
        let (reader, writer) = match (stream.try_clone(), stream) {
            (Ok(reader), writer) => (reader, writer),
            (Err(e), _) => {
                tracing::warn!(peer, error = %e, "cannot clone the socket");
                return;
            }
        };
        connection::serve(&self.inner, reader, writer, &peer);
    }

    /// Serve exactly one connection on stdin/stdout (for libnbd's
    /// `nbd_connect_command`, e.g. `nbdfuse --command`, and inetd-style starts), then flush. Nothing else may write to stdout.
    pub fn serve_stdio(&self) -> Result<(), ServerError> {
        let dup = |fd: std::os::fd::BorrowedFd<'_>, what: &str| {
            rustix::io::fcntl_dupfd_cloexec(fd, 3)
                .map(std::fs::File::from)
                .map_err(|e| ServerError::Io {
                    context: format!("duplicating {what}"),
                    source: e.into(),
                })
        };
        let reader = dup(io::stdin().as_fd(), "stdin")?;
        let writer = dup(io::stdout().as_fd(), "stdout")?;
        {
            let Some(_registration) = self.inner.shutdown.register(&reader) else {
                return Ok(());
            };
            connection::serve(&self.inner, reader, writer, "stdio");
        }
        self.finish()
    }

    /// Wait for live connections, then flush every export.
    fn finish(&self) -> Result<(), ServerError> {
        self.inner.shutdown.wait_idle();
        for export in &self.inner.exports {
            export.device.flush().map_err(|source| ServerError::Flush {
                export: export.name.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

fn is_transient_accept_error(e: &io::Error) -> bool {
    // EMFILE/ENFILE/ENOBUFS/ENOMEM: out of resources for a moment.
    matches!(e.raw_os_error(), Some(23 | 24 | 105 | 12))
}
