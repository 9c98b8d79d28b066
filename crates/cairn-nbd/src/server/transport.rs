//! A connection's two directions, plain or TLS, after `NBD_OPT_STARTTLS`.
//!
//! The server reads requests on one thread while another writes replies on
//! others, so the two directions must never wait for each other. A rustls
//! connection is one state machine for both; here it sits behind a mutex that
//! is held only for memory work, never across a socket call:
//!
//! ```text
//! reader thread: socket.read ──(unlocked)──► lock: read_tls, process, take plaintext
//! the sender:    lock: encrypt the reply, take the records ──(unlocked)──► socket.write
//! ```
//!
//! Writers are serialized by the connection's writer lock (which owns the
//! [`Writer`]), so records leave in the order they were sealed. A reply send
//! blocked on a full socket holds only that writer lock: the reader keeps
//! reading and decrypting requests. Messages rustls produces while reading
//! (alerts, key-update answers) wait in its buffer for the next reply.

use std::io::{self, BufRead, BufReader, IoSlice, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustls::{ServerConfig, ServerConnection};

use crate::limits::{TLS_READ_BUFFER_BYTES, TLS_WRITE_BATCH_BYTES};

type Shared = Arc<Mutex<ServerConnection>>;

fn lock(tls: &Shared) -> MutexGuard<'_, ServerConnection> {
    tls.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The receiving direction.
pub(super) enum Reader<R> {
    /// Bytes as they come.
    Plain(R),
    /// Decrypted records.
    Tls(TlsReader<R>),
    /// Between the two during an upgrade; reads fail.
    Upgrading,
}

/// The sending direction.
pub(super) enum Writer<W> {
    /// Bytes as they go.
    Plain(W),
    /// Sealed into records.
    Tls(TlsWriter<W>),
    /// Between the two during an upgrade; writes fail.
    Upgrading,
}

fn upgrading() -> io::Error {
    io::Error::other("the connection is being upgraded to TLS")
}

impl<R: Read> Read for Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(reader) => reader.read(buf),
            Self::Tls(reader) => reader.read(buf),
            Self::Upgrading => Err(upgrading()),
        }
    }
}

impl<W: Write> Write for Writer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(writer) => writer.write(buf),
            Self::Tls(writer) => writer.write_vectored(&[IoSlice::new(buf)]),
            Self::Upgrading => Err(upgrading()),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Plain(writer) => writer.write_vectored(bufs),
            Self::Tls(writer) => writer.write_vectored(bufs),
            Self::Upgrading => Err(upgrading()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(writer) => writer.flush(),
            // Every write already went to the socket.
            Self::Tls(_) => Ok(()),
            Self::Upgrading => Err(upgrading()),
        }
    }
}

/// Upgrade a plain connection to TLS: run the server side of the TLS
/// handshake on the sockets inside `reader` and `writer`, then swap both for
/// their TLS forms. Bytes the client sent early (already in `reader`'s
/// buffer) are fed to TLS first. On error the connection is unusable.
pub(super) fn start_tls<R: Read, W: Write>(
    config: &Arc<ServerConfig>,
    reader: &mut BufReader<Reader<R>>,
    writer: &mut Writer<W>,
) -> io::Result<()> {
    let early = reader.buffer().to_vec();
    reader.consume(early.len());
    let Reader::Plain(mut socket_in) = std::mem::replace(reader.get_mut(), Reader::Upgrading)
    else {
        return Err(io::Error::other(
            "STARTTLS on a connection that is not plain",
        ));
    };
    let Writer::Plain(mut socket_out) = std::mem::replace(writer, Writer::Upgrading) else {
        return Err(io::Error::other(
            "STARTTLS on a connection that is not plain",
        ));
    };
    let mut tls = ServerConnection::new(config.clone())
        .map_err(|e| io::Error::other(format!("TLS setup: {e}")))?;
    tls.set_buffer_limit(Some(TLS_WRITE_BATCH_BYTES));
    let mut early = io::Cursor::new(early);
    while tls.is_handshaking() {
        while tls.wants_write() {
            tls.write_tls(&mut socket_out)?;
        }
        if !tls.is_handshaking() {
            break;
        }
        let unread = early.get_ref().len() as u64 - early.position();
        let read = if unread > 0 {
            tls.read_tls(&mut early)?
        } else {
            tls.read_tls(&mut socket_in)?
        };
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the client left during the TLS handshake",
            ));
        }
        if let Err(e) = tls.process_new_packets() {
            // Tell the client why (the alert rustls queued), then give up.
            while tls.wants_write() && tls.write_tls(&mut socket_out).is_ok_and(|n| n > 0) {}
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("TLS handshake: {e}"),
            ));
        }
    }
    while tls.wants_write() {
        tls.write_tls(&mut socket_out)?;
    }
    let shared = Arc::new(Mutex::new(tls));
    let position = early.position() as usize;
    let mut buffer = early.into_inner();
    buffer.drain(..position);
    let end = buffer.len();
    buffer.resize(end.max(TLS_READ_BUFFER_BYTES), 0);
    *reader.get_mut() = Reader::Tls(TlsReader {
        tls: shared.clone(),
        socket: socket_in,
        ciphertext: buffer,
        start: 0,
        end,
    });
    *writer = Writer::Tls(TlsWriter {
        tls: shared,
        socket: socket_out,
        records: Vec::with_capacity(TLS_WRITE_BATCH_BYTES + 4096),
    });
    Ok(())
}

/// The TLS reading direction: ciphertext from the socket, plaintext out.
pub(super) struct TlsReader<R> {
    tls: Shared,
    socket: R,
    /// Ciphertext read from the socket; `start..end` not yet given to rustls.
    ciphertext: Vec<u8>,
    start: usize,
    end: usize,
}

impl<R: Read> Read for TlsReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut tls = lock(&self.tls);
                while self.start < self.end && tls.wants_read() {
                    let fed = tls.read_tls(&mut &self.ciphertext[self.start..self.end])?;
                    self.start += fed;
                    tls.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    if fed == 0 {
                        break;
                    }
                }
                match tls.reader().read(buf) {
                    // 0: the client sent close_notify, a clean end.
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.start < self.end {
                    // rustls takes no more ciphertext yet offers no plaintext:
                    // never expected after the handshake; fail, do not spin.
                    return Err(io::Error::other("TLS connection stalled"));
                }
            }
            // Wait for the client without holding the lock: replies go on.
            let read = loop {
                match self.socket.read(&mut self.ciphertext) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            if read == 0 {
                // Closed without close_notify (or shut down by us): the end.
                return Ok(0);
            }
            self.start = 0;
            self.end = read;
        }
    }
}

/// The TLS writing direction: plaintext in, sealed records to the socket.
pub(super) struct TlsWriter<W> {
    tls: Shared,
    socket: W,
    /// Sealed records on their way to the socket (reused).
    records: Vec<u8>,
}

impl<W: Write> TlsWriter<W> {
    /// Seal up to [`TLS_WRITE_BATCH_BYTES`] of `bufs` (rustls's buffer limit)
    /// under the lock, then send the records with the lock released.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        let accepted = {
            let mut tls = lock(&self.tls);
            let accepted = tls.writer().write_vectored(bufs)?;
            self.records.clear();
            while tls.wants_write() {
                tls.write_tls(&mut self.records)?;
            }
            accepted
        };
        self.socket.write_all(&self.records)?;
        if accepted == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        Ok(accepted)
    }
}
