//! The control socket: a Unix socket, mode 0600, that serves
//! [`Request`]s to its owner only.
//!
//! Who may ask: the socket file is created owner-only (0600), and every
//! connection's peer credentials (`SO_PEERCRED`) are checked against the
//! server's effective uid; another uid (root included: root passes the
//! file's mode, not this check) gets an error reply naming both uids, and
//! is disconnected. Bad input gets an error reply and the server goes on:
//! see [`crate::protocol`]. Each client has a thread of its own, at most
//! [`CLIENTS_MAX`] at once, and is dropped after [`IDLE_SECONDS`] of silence.

use std::io::{self, BufReader, BufWriter};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cairn_store::stats::LayerCommand;

use crate::limits::{CLIENTS_MAX, IDLE_SECONDS, POLL_MILLISECONDS, REQUEST_MAX_BYTES};
use crate::protocol::{FrameError, Reply, Request, parse_request, read_frame, write_frame};
use crate::snapshot::Snapshot;

/// How long a refused client is given to take its error reply.
const REFUSAL_WAIT: Duration = Duration::from_millis(200);

/// The most a refused client's request is read (and dropped) before the
/// connection is closed.
const REFUSAL_DRAIN_BYTES: u64 = 64 << 10;

/// What the control socket serves: the server behind it.
pub trait Handler: Sync {
    /// Every export's and layer's counters now.
    fn stats(&self) -> Snapshot;
    /// Carries out `command` on `export` (on its layer `layer`, or on every
    /// layer that supports it): one line per layer of what was done, or
    /// why not.
    fn control(
        &self,
        export: &str,
        layer: Option<&str>,
        command: &LayerCommand,
    ) -> Result<Vec<String>, String>;
}

/// Why the control socket could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Another server answers on the path.
    #[error("control socket {path}: another server is using it (stop it, or pass --control PATH)")]
    InUse {
        /// The socket.
        path: PathBuf,
    },
    /// Creating, binding or securing the socket failed.
    #[error("control socket {path}: {what}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The step.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// A bound control socket; the file is removed when it is dropped.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
    owner: u32,
}

impl ControlSocket {
    /// Binds `path` (its directory must exist), owner-only: a socket file
    /// left there by a dead server is replaced, a live one is refused.
    pub fn bind(path: &Path) -> Result<Self, ControlError> {
        let error = |what, source| ControlError::Io {
            path: path.to_owned(),
            what,
            source,
        };
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(ControlError::InUse {
                    path: path.to_owned(),
                });
            }
            std::fs::remove_file(path).map_err(|e| error("removing a stale socket", e))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| error("binding", e))?;
        // Until this chmod the file has the umask's mode; a client that
        // connects meanwhile still meets the uid check below.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| error("making it owner-only (0600)", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| error("setting it non-blocking", e))?;
        Ok(Self {
            listener,
            path: path.to_owned(),
            owner: rustix::process::geteuid().as_raw(),
        })
    }

    /// Serve only clients of uid `owner` (tests use it to stand for
    /// another user).
    #[must_use]
    pub fn with_owner(mut self, owner: u32) -> Self {
        self.owner = owner;
        self
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves clients until `stop` is set (looked at every
    /// [`POLL_MILLISECONDS`]), then waits for the clients being served.
    pub fn serve(&self, handler: &dyn Handler, stop: &AtomicBool) {
        let clients = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            while !stop.load(Ordering::Relaxed) {
                let accepted = self.listener.accept().map(|(s, _)| s);
                let what = format_args!("control socket {}", self.path.display());
                let Some(stream) = next_client(&self.listener, accepted, what) else {
                    continue;
                };
                let Some(stream) = self.admit(stream, &clients) else {
                    continue;
                };
                clients.fetch_add(1, Ordering::Relaxed);
                let clients = &clients;
                scope.spawn(move || {
                    serve_client(&stream, handler, stop);
                    clients.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
    }

    /// The stream, ready to serve, if its peer is the owner and there is
    /// room; else it is told why and closed.
    fn admit(&self, stream: UnixStream, clients: &AtomicUsize) -> Option<UnixStream> {
        let refuse = |stream: UnixStream, message: String| {
            tracing::warn!("control socket {}: {message}", self.path.display());
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_write_timeout(Some(REFUSAL_WAIT));
            let _ = send(&mut &stream, &Reply::Error { message });
            // Read what the client sent before closing: closing a Unix
            // socket with unread data resets the peer, which might then
            // lose the reply before reading it.
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let _ = stream.set_read_timeout(Some(REFUSAL_WAIT));
            let _ = io::copy(
                &mut io::Read::take(&stream, REFUSAL_DRAIN_BYTES),
                &mut io::sink(),
            );
        };
        let uid = match rustix::net::sockopt::socket_peercred(stream.as_fd()) {
            Ok(credentials) => credentials.uid.as_raw(),
            Err(e) => {
                refuse(
                    stream,
                    format!("refused: cannot read the client's credentials: {e}"),
                );
                return None;
            }
        };
        if uid != self.owner {
            refuse(
                stream,
                format!(
                    "refused: the client runs as uid {uid}, but only the server's owner \
                     (uid {}) may use its control socket",
                    self.owner
                ),
            );
            return None;
        }
        if clients.load(Ordering::Relaxed) >= CLIENTS_MAX {
            refuse(
                stream,
                format!("refused: {CLIENTS_MAX} control clients are connected already; retry"),
            );
            return None;
        }
        let ready = stream.set_nonblocking(false).and_then(|()| {
            stream.set_read_timeout(Some(Duration::from_secs(IDLE_SECONDS)))?;
            stream.set_write_timeout(Some(Duration::from_secs(IDLE_SECONDS)))
        });
        match ready {
            Ok(()) => Some(stream),
            Err(e) => {
                tracing::warn!("control socket {}: {e}", self.path.display());
                None
            }
        }
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers one client's requests until it leaves, goes quiet, breaks the
/// framing, or the server stops.
fn serve_client(stream: &UnixStream, handler: &dyn Handler, stop: &AtomicBool) {
    let mut reader = BufReader::new(stream);
    let mut writer = BufWriter::new(stream);
    let mut body = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let reply = match read_frame(&mut reader, REQUEST_MAX_BYTES, &mut body) {
            Ok(()) => match parse_request(&body) {
                Ok(request) => answer(handler, request),
                Err(message) => {
                    tracing::info!("control socket: bad request: {message}");
                    Reply::Error { message }
                }
            },
            Err(FrameError::TooLong { length, limit }) => {
                let message = format!(
                    "a request frame of {length} bytes is over the limit of {limit} bytes; \
                     closing the connection"
                );
                tracing::info!("control socket: {message}");
                let _ = send(&mut writer, &Reply::Error { message });
                return;
            }
            Err(FrameError::Closed) => return,
            Err(e) => {
                tracing::debug!("control socket: {e}");
                return;
            }
        };
        if let Err(e) = send(&mut writer, &reply) {
            tracing::debug!("control socket: sending a reply: {e}");
            return;
        }
    }
}

fn answer(handler: &dyn Handler, request: Request) -> Reply {
    match request {
        Request::Stats => Reply::Stats(Box::new(handler.stats())),
        Request::Ctl {
            export,
            layer,
            command,
        } => match handler.control(&export, layer.as_deref(), &command) {
            Ok(lines) => {
                for line in &lines {
                    tracing::info!("control: {export} {}: {line}", command.name());
                }
                Reply::Done { lines }
            }
            Err(message) => {
                tracing::warn!("control: {export} {}: {message}", command.name());
                Reply::Error { message }
            }
        },
    }
}

fn send(writer: &mut impl io::Write, reply: &Reply) -> io::Result<()> {
    let body = serde_json::to_vec(reply).map_err(io::Error::other)?;
    write_frame(writer, &body)
}

/// An accept loop's next client: the stream `accepted` from the
/// non-blocking `listener` (the control socket's or the metrics
/// listener's, named `what` in a warning); `None` after waiting up to
/// [`POLL_MILLISECONDS`] for one (so the loop looks at its stop flag that
/// often), or after a failed accept and a short pause.
pub(crate) fn next_client<S>(
    listener: &impl std::os::fd::AsFd,
    accepted: io::Result<S>,
    what: std::fmt::Arguments<'_>,
) -> Option<S> {
    match accepted {
        Ok(stream) => Some(stream),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            let mut fds = [rustix::event::PollFd::new(
                listener,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(POLL_MILLISECONDS) * 1_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
            None
        }
        Err(e) => {
            tracing::warn!("{what}: accept: {e}");
            std::thread::sleep(Duration::from_millis(50));
            None
        }
    }
}
