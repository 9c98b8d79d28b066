//! Where connections come from: a Unix socket, a TCP socket, a socket handed
//! over by systemd (`LISTEN_FDS`), or one connection on stdin/stdout.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown as NetShutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::limits::ACCEPT_POLL_MS;

/// The IANA port for NBD.
pub const NBD_PORT: u16 = 10809;

/// An address to listen on: `unix:PATH` or `tcp:HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    /// A Unix stream socket at this path.
    Unix(PathBuf),
    /// A TCP socket (`HOST:PORT`; IPv6 hosts in brackets).
    Tcp(String),
}

impl FromStr for ListenAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path, e.g. unix:./cairn-data/cairn.sock".into());
            }
            Ok(Self::Unix(PathBuf::from(path)))
        } else if let Some(address) = text.strip_prefix("tcp:") {
            let Some((host, port)) = address.rsplit_once(':') else {
                return Err(format!(
                    "{text:?}: expected tcp:HOST:PORT, e.g. tcp:127.0.0.1:{NBD_PORT}"
                ));
            };
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(format!(
                    "{text:?}: expected tcp:HOST:PORT with a port 0-65535"
                ));
            }
            Ok(Self::Tcp(address.to_owned()))
        } else {
            Err(format!(
                "{text:?}: expected unix:PATH or tcp:HOST:PORT (e.g. tcp:127.0.0.1:{NBD_PORT})"
            ))
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "unix:{}", path.display()),
            Self::Tcp(address) => write!(f, "tcp:{address}"),
        }
    }
}

/// A bound listening socket.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix; `path` is removed when the listener is dropped if we created it.
    Unix {
        /// The socket.
        listener: UnixListener,
        /// The path we bound (and remove on drop), if any.
        path: Option<PathBuf>,
    },
}

impl Listener {
    /// Bind `address`. A Unix socket path left behind by a dead server is
    /// replaced; one that a live server answers on is an `AddrInUse` error.
    pub fn bind(address: &ListenAddress) -> io::Result<Self> {
        match address {
            ListenAddress::Tcp(address) => TcpListener::bind(address.as_str())
                .map(Self::Tcp)
                .map_err(|e| io::Error::new(e.kind(), format!("bind tcp:{address}: {e}"))),
            ListenAddress::Unix(path) => bind_unix(path),
        }
    }

    /// Take the first socket systemd (or `systemd-socket-activate`) passed via
    /// `LISTEN_FDS`/`LISTEN_PID`, if any. Call it before starting threads: it
    /// clears those variables from the environment.
    pub fn from_systemd() -> io::Result<Option<Self>> {
        let mut fds = listenfd::ListenFd::from_env();
        if fds.len() == 0 {
            return Ok(None);
        }
        if let Ok(Some(listener)) = fds.take_unix_listener(0) {
            return Ok(Some(Self::Unix {
                listener,
                path: None,
            }));
        }
        match fds.take_tcp_listener(0) {
            Ok(Some(listener)) => Ok(Some(Self::Tcp(listener))),
            Ok(None) => Ok(None),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("LISTEN_FDS: descriptor 3 is not a listening stream socket: {e}"),
            )),
        }
    }

    /// Where clients connect, as an NBD URI (`nbd+unix:///?socket=…` or `nbd://…`).
    pub fn uri(&self, export: &str) -> String {
        match self {
            Self::Tcp(listener) => match listener.local_addr() {
                Ok(address) => format!("nbd://{address}/{export}"),
                Err(_) => "nbd://?".to_owned(),
            },
            Self::Unix { listener, .. } => {
                let path = listener
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(Path::to_path_buf))
                    .map(|p| std::path::absolute(&p).unwrap_or(p));
                match path {
                    Some(path) => format!("nbd+unix:///{export}?socket={}", path.display()),
                    None => "nbd+unix:///?socket=?".to_owned(),
                }
            }
        }
    }

    /// Wait up to [`ACCEPT_POLL_MS`] for a connection; `Ok(None)` on timeout.
    pub(crate) fn accept_timeout(&self) -> io::Result<Option<Stream>> {
        let fd = self.as_fd();
        let mut poll_fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec::try_from(Duration::from_millis(ACCEPT_POLL_MS))
            .map_err(|_| io::Error::other("accept poll timeout out of range"))?;
        match rustix::event::poll(&mut poll_fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let accepted = match self {
            Self::Tcp(listener) => listener.accept().map(|(stream, _)| {
                // Replies are written whole; Nagle would only delay them.
                let _ = stream.set_nodelay(true);
                Stream::Tcp(stream)
            }),
            Self::Unix { listener, .. } => listener.accept().map(|(s, _)| Stream::Unix(s)),
        };
        match accepted {
            Ok(stream) => Ok(Some(stream)),
            // Another accept (or a client that gave up) took it.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Tcp(listener) => listener.as_fd(),
            Self::Unix { listener, .. } => listener.as_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Self::Unix {
            path: Some(path), ..
        } = self
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn bind_unix(path: &Path) -> io::Result<Listener> {
    let context =
        |e: io::Error| io::Error::new(e.kind(), format!("bind unix:{}: {e}", path.display()));
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(context)?;
    }
    match UnixListener::bind(path) {
        Ok(listener) => Ok(Listener::Unix {
            listener,
            path: Some(path.to_path_buf()),
        }),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            if UnixStream::connect(path).is_ok() {
                return Err(context(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another server is listening there",
                )));
            }
            // A stale socket from a server that died: replace it.
            std::fs::remove_file(path).map_err(context)?;
            let listener = UnixListener::bind(path).map_err(context)?;
            Ok(Listener::Unix {
                listener,
                path: Some(path.to_path_buf()),
            })
        }
        Err(e) => Err(context(e)),
    }
}

/// A connected client socket.
#[derive(Debug)]
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix.
    Unix(UnixStream),
}

impl Stream {
    /// Another handle to the same socket.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            Self::Tcp(s) => Self::Tcp(s.try_clone()?),
            Self::Unix(s) => Self::Unix(s.try_clone()?),
        })
    }

    /// Shut down one or both directions.
    pub fn shutdown(&self, how: NetShutdown) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.shutdown(how),
            Self::Unix(s) => s.shutdown(how),
        }
    }

    /// The peer, for logs: a TCP address, or a Unix socket client's pid and uid.
    pub fn peer(&self) -> String {
        match self {
            Self::Tcp(s) => s
                .peer_addr()
                .map_or_else(|_| "tcp peer".to_owned(), |a| a.to_string()),
            // A Unix socket's client has no address: its process does.
            Self::Unix(s) => rustix::net::sockopt::socket_peercred(s).map_or_else(
                |_| "unix peer".to_owned(),
                |peer| {
                    format!(
                        "unix pid {} uid {}",
                        peer.pid.as_raw_nonzero(),
                        peer.uid.as_raw()
                    )
                },
            ),
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Tcp(s) => s.as_fd(),
            Self::Unix(s) => s.as_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(buf),
            Self::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write_vectored(bufs),
            Self::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print_back() {
        for text in ["unix:/tmp/x.sock", "tcp:127.0.0.1:10809", "tcp:[::1]:0"] {
            let address: ListenAddress = text.parse().unwrap();
            assert_eq!(address.to_string(), text);
        }
        for bad in [
            "",
            "unix:",
            "tcp:",
            "tcp:host",
            "tcp::1",
            "tcp:h:99999",
            "http://x",
        ] {
            assert!(bad.parse::<ListenAddress>().is_err(), "{bad}");
        }
    }
}
