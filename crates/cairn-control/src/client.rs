//! The client side of the control socket (`cairn stats`, `cairn ctl`).

use std::io::{self, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::limits::REPLY_MAX_BYTES;
use crate::protocol::{FrameError, Reply, Request, read_frame, write_frame};

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Nothing listens there.
    #[error(
        "cannot connect to the control socket {path}: {error} (is `cairn serve` running? \
         its socket is <data_dir>/cairn.ctl unless --control says otherwise)"
    )]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// Sending or receiving failed.
    #[error("control socket {path}")]
    Frame {
        /// The socket.
        path: PathBuf,
        /// The error.
        #[source]
        source: FrameError,
    },
    /// The reply is not one this client understands.
    #[error("control socket {path}: an unreadable reply: {message}")]
    Reply {
        /// The socket.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

/// A connection to a server's control socket.
pub struct Client {
    stream: BufReader<UnixStream>,
    path: PathBuf,
}

impl Client {
    /// Connects to `path`.
    pub fn connect(path: &Path) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path).map_err(|error| ClientError::Connect {
            path: path.to_owned(),
            error,
        })?;
        // A layer's command (writing back a tier) may take a while.
        let _ = stream.set_read_timeout(Some(Duration::from_mins(10)));
        Ok(Self {
            stream: BufReader::new(stream),
            path: path.to_owned(),
        })
    }

    /// Sends `request` and reads its reply.
    pub fn request(&mut self, request: &Request) -> Result<Reply, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Reply {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        self.request_raw(&body)
    }

    /// Sends `body` as one frame, as is, and reads the reply (for tests of
    /// bad requests).
    pub fn request_raw(&mut self, body: &[u8]) -> Result<Reply, ClientError> {
        let path = self.path.clone();
        let frame = |source| ClientError::Frame { path, source };
        if let Err(e) = write_frame(self.stream.get_mut(), body) {
            // A server that refused this client (another uid, too many
            // clients) said why before it closed: that is the answer.
            return self.read_reply().map_err(|_| frame(FrameError::Io(e)));
        }
        self.read_reply()
    }

    /// Reads one reply frame.
    pub fn read_reply(&mut self) -> Result<Reply, ClientError> {
        let mut reply = Vec::new();
        read_frame(&mut self.stream, REPLY_MAX_BYTES, &mut reply).map_err(|source| {
            ClientError::Frame {
                path: self.path.clone(),
                source,
            }
        })?;
        serde_json::from_slice(&reply).map_err(|e| ClientError::Reply {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// The raw stream (for tests that write broken frames).
    pub fn stream(&mut self) -> &mut UnixStream {
        self.stream.get_mut()
    }
}
