//! One connection: handshake, then a reader that queues requests to workers
//! that execute them and write replies under the writer lock.

use std::io::{self, BufReader, IoSlice, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use cairn_store::cache::BlockSlice;
use cairn_store::{Device, DeviceError};

use super::Inner;
use super::transport::{self, Reader, Writer};
use crate::codec::handshake::{
    self, BASE_ALLOCATION_ID, Negotiation, OPTION_HEADER_LEN, OptionHeader, Outcome, Session,
};
use crate::codec::transmission::{
    self, Command, Limits, REQUEST_HEADER_LEN, Rejection, RequestHeader,
};
use crate::limits::{
    INFLIGHT_MAX_BYTES, POOLED_BUFFER_MAX_BYTES, POOLED_BUFFERS_MAX, QUEUE_MAX_REQUESTS,
    WORKERS_PER_CONNECTION, ZERO_CHUNK_BYTES,
};
use crate::proto::Errno;

/// Bytes of the reader's buffer: several small requests per `read` syscall.
const READ_BUFFER_BYTES: usize = 256 << 10;

/// At most this many extents in one `BLOCK_STATUS` reply (8 bytes each); the
/// client asks again from where the reply stopped.
const BLOCK_STATUS_MAX_EXTENTS: usize = 16 << 10;

/// No data, reads as zeroes.
const STATE_HOLE_ZERO: u32 = crate::proto::STATE_HOLE | crate::proto::STATE_ZERO;

/// The `base:allocation` extents of `offset..offset + length` as (length,
/// flags): from the device where it knows (the log disk: blocks never
/// written or trimmed are holes), else one allocated extent. With `req_one`
/// only the first; never more than [`BLOCK_STATUS_MAX_EXTENTS`] (the spec
/// lets a reply cover less than was asked).
fn block_status(
    device: &dyn Device,
    offset: u64,
    length: u32,
    req_one: bool,
) -> Result<Vec<(u32, u32)>, DeviceError> {
    let mut runs = Vec::new();
    if !device.allocation(offset, u64::from(length), &mut runs)? || runs.is_empty() {
        return Ok(vec![(length, 0)]);
    }
    let keep = if req_one { 1 } else { BLOCK_STATUS_MAX_EXTENTS };
    Ok(runs
        .iter()
        .take(keep)
        .map(|r| {
            // Runs lie within `length`, a u32.
            let len = u32::try_from(r.len).unwrap_or(u32::MAX);
            (len, if r.hole { STATE_HOLE_ZERO } else { 0 })
        })
        .collect())
}

/// Zeroes for `WRITE_ZEROES`, shared by every connection.
static ZEROES: [u8; ZERO_CHUNK_BYTES] = [0u8; ZERO_CHUNK_BYTES];

/// Run a connection to its end. Errors are logged, never propagated: one
/// client's trouble never reaches another.
pub(super) fn serve<R: Read, W: Write + Send>(inner: &Inner, reader: R, writer: W, peer: &str) {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, Reader::Plain(reader));
    let mut writer = Writer::Plain(writer);
    let session = match negotiate(inner, &mut reader, &mut writer, peer) {
        Ok(Some(session)) => session,
        Ok(None) => {
            tracing::debug!("{peer}: left during the handshake");
            return;
        }
        // A client that aborts often closes before reading our last reply.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) =>
        {
            tracing::debug!("{peer}: left during the handshake: {e}");
            return;
        }
        Err(e) => {
            tracing::info!("{peer}: handshake ended: {e}");
            return;
        }
    };
    let export = &inner.exports[session.export];
    tracing::debug!(
        "{peer}: transmission on export {:?} (structured replies: {})",
        export.name,
        session.structured
    );
    let info = &inner.infos[session.export];
    let connection = Connection {
        device: export.device.as_ref(),
        session,
        writer: Mutex::new(writer),
        broken: AtomicBool::new(false),
        pool: Mutex::new(Vec::new()),
        lent: Mutex::new(Vec::new()),
        budget: Budget::default(),
    };
    let limits = Limits {
        export_size: info.size,
        read_only: info.read_only,
        structured: session.structured,
        base_allocation: session.base_allocation,
        max_payload_bytes: info.block_size.maximum_bytes,
    };
    let (sender, receiver) = sync_channel::<Job>(QUEUE_MAX_REQUESTS);
    let receiver = Mutex::new(receiver);
    std::thread::scope(|scope| {
        for _ in 0..WORKERS_PER_CONNECTION {
            scope.spawn(|| connection.work(&receiver));
        }
        match connection.read_requests(&mut reader, &limits, &sender) {
            Ok(()) => tracing::debug!("{peer}: disconnected"),
            Err(e) => tracing::info!("{peer}: closing: {e}"),
        }
        // Workers drain what was queued, reply, and exit.
        drop(sender);
    });
}

/// The handshake: `Ok(None)` when the client aborted or left. A STARTTLS
/// upgrades `reader` and `writer` in place.
fn negotiate<R: Read, W: Write>(
    inner: &Inner,
    reader: &mut BufReader<Reader<R>>,
    writer: &mut Writer<W>,
    peer: &str,
) -> io::Result<Option<Session>> {
    writer.write_all(&handshake::greeting())?;
    writer.flush()?;
    let mut flags = [0u8; 4];
    if !read_or_eof(reader, &mut flags)? {
        return Ok(None);
    }
    let client = handshake::parse_client_flags(flags).map_err(io::Error::other)?;
    let mut negotiation = Negotiation::with_tls(client, inner.tls.mode());
    let mut data = Vec::new();
    let mut out = Vec::new();
    loop {
        let mut header = [0u8; OPTION_HEADER_LEN];
        if !read_or_eof(reader, &mut header)? {
            return Ok(None);
        }
        let header = OptionHeader::parse(&header).map_err(io::Error::other)?;
        data.resize(header.length as usize, 0);
        reader.read_exact(&mut data)?;
        out.clear();
        let outcome = negotiation.handle(header, &data, &inner.infos, &mut out);
        writer.write_all(&out)?;
        writer.flush()?;
        match outcome {
            Outcome::Continue => {}
            Outcome::Abort => return Ok(None),
            Outcome::Transmission(session) => return Ok(Some(session)),
            Outcome::Disconnect(e) => return Err(io::Error::other(e)),
            Outcome::StartTls => {
                let Some(config) = inner.tls.server() else {
                    return Err(io::Error::other("STARTTLS accepted without credentials"));
                };
                transport::start_tls(config, reader, writer)?;
                negotiation.tls_established();
                tracing::debug!("{peer}: TLS established");
            }
        }
    }
}

/// Fill `buf`; `Ok(false)` on a clean end of file before its first byte.
fn read_or_eof<R: Read>(reader: &mut R, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("truncated frame: {filled} of {} bytes", buf.len()),
                ));
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// One unit of work for a worker.
enum Job {
    /// Execute a validated command; `payload` holds WRITE data.
    Run {
        cookie: u64,
        command: Command,
        payload: Vec<u8>,
        /// Budget bytes to release when the reply is sent.
        budget: u64,
    },
    /// Reply with an error without executing.
    Reject { cookie: u64, rejection: Rejection },
}

struct Connection<'a, W> {
    device: &'a dyn Device,
    session: Session,
    writer: Mutex<W>,
    /// A reply could not be sent: the client is gone, skip remaining reads.
    broken: AtomicBool,
    pool: Mutex<Vec<Vec<u8>>>,
    /// Emptied lists of lent buffers, for reuse.
    lent: Mutex<Vec<Vec<BlockSlice>>>,
    budget: Budget,
}

impl<W: Write + Send> Connection<'_, W> {
    /// Parse requests and queue them until the client disconnects, sends
    /// `NBD_CMD_DISC`, or breaks the framing.
    fn read_requests<R: Read>(
        &self,
        reader: &mut R,
        limits: &Limits,
        sender: &SyncSender<Job>,
    ) -> io::Result<()> {
        let mut bytes = [0u8; REQUEST_HEADER_LEN];
        loop {
            if !read_or_eof(reader, &mut bytes)? {
                return Ok(());
            }
            let header = RequestHeader::parse(&bytes).map_err(io::Error::other)?;
            let job = match transmission::validate(&header, limits) {
                Ok(Command::Disconnect) => return Ok(()),
                Ok(command) => {
                    let (payload, budget) = match command {
                        Command::Write { length, .. } => {
                            let budget = self.budget.acquire(u64::from(length));
                            let mut payload = self.buffer(length as usize);
                            if let Err(e) = reader.read_exact(&mut payload) {
                                self.budget.release(budget);
                                return Err(e);
                            }
                            (payload, budget)
                        }
                        Command::Read { length, .. } => {
                            (Vec::new(), self.budget.acquire(u64::from(length)))
                        }
                        _ => (Vec::new(), 0),
                    };
                    Job::Run {
                        cookie: header.cookie,
                        command,
                        payload,
                        budget,
                    }
                }
                Err(rejection) => {
                    // Stay in sync: skip the payload of a refused WRITE.
                    let skip = u64::from(header.payload_len());
                    let skipped = io::copy(&mut reader.by_ref().take(skip), &mut io::sink())?;
                    if skipped < skip {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "truncated write payload",
                        ));
                    }
                    tracing::debug!(
                        "request {:#x} (command {}) refused: {} {}",
                        header.cookie,
                        header.command,
                        rejection.errno,
                        rejection.message
                    );
                    Job::Reject {
                        cookie: header.cookie,
                        rejection,
                    }
                }
            };
            if sender.send(job).is_err() {
                return Err(io::Error::other("every worker has stopped"));
            }
        }
    }

    fn work(&self, receiver: &Mutex<Receiver<Job>>) {
        loop {
            let job = {
                let receiver = receiver.lock().unwrap_or_else(PoisonError::into_inner);
                receiver.recv()
            };
            let Ok(job) = job else { return };
            match job {
                Job::Run {
                    cookie,
                    command,
                    payload,
                    budget,
                } => {
                    self.execute(cookie, command, payload);
                    self.budget.release(budget);
                }
                Job::Reject { cookie, rejection } => {
                    self.reply_error(cookie, rejection.errno, rejection.message);
                }
            }
        }
    }

    fn execute(&self, cookie: u64, command: Command, payload: Vec<u8>) {
        let device = self.device;
        let result = match command {
            Command::Read { offset, length } => {
                self.read(cookie, offset, length);
                self.recycle(payload);
                return;
            }
            Command::Write { offset, fua, .. } => {
                let written = device.write_at(&payload, offset);
                self.recycle(payload);
                written.and_then(|()| flush_if(device, fua))
            }
            Command::Disconnect => return,
            Command::Flush => device.flush(),
            Command::Trim {
                offset,
                length,
                fua,
            } => {
                if length == 0 {
                    Ok(())
                } else {
                    device
                        .discard(offset, u64::from(length))
                        .and_then(|()| flush_if(device, fua))
                }
            }
            // A hint: the block cache loads the range; other devices ignore it.
            Command::Cache { offset, length } => device.prefetch(offset, u64::from(length)),
            Command::WriteZeroes {
                offset,
                length,
                fua,
                fast_zero,
                ..
            } => {
                if fast_zero {
                    // Zeroing is a write of zeroes here, no faster than WRITE:
                    // the spec says fail fast and let the client write.
                    self.reply_error(cookie, Errno::NotSup, "zeroing is not faster than writing");
                    return;
                }
                write_zeroes(device, offset, u64::from(length)).and_then(|()| flush_if(device, fua))
            }
            Command::BlockStatus {
                offset,
                length,
                req_one,
            } => {
                if length == 0 {
                    self.reply_error(cookie, Errno::Inval, "zero-length block status");
                    return;
                }
                match block_status(device, offset, length, req_one) {
                    Ok(extents) => {
                        let mut out = Vec::with_capacity(32 + 8 * extents.len());
                        transmission::block_status_chunk(
                            &mut out,
                            cookie,
                            BASE_ALLOCATION_ID,
                            &extents,
                        );
                        self.send(&[&out]);
                    }
                    Err(e) => {
                        tracing::warn!("request {cookie:#x} failed: {e}");
                        self.reply_error(cookie, errno_for(&e), &e.to_string());
                    }
                }
                return;
            }
        };
        match result {
            Ok(()) => self.send(&[&transmission::simple_reply(cookie, 0)]),
            Err(e) => {
                let errno = errno_for(&e);
                tracing::warn!("request {cookie:#x} failed: {e}");
                self.reply_error(cookie, errno, &e.to_string());
            }
        }
    }

    fn read(&self, cookie: u64, offset: u64, length: u32) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        // Zero-copy where the device lends its buffers (the block cache):
        // the reply is written from them.
        let mut lent = self
            .lent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        match self.device.read_lent(offset, u64::from(length), &mut lent) {
            Ok(true) => {
                let header: &[u8] = if self.session.structured {
                    &transmission::offset_data_header(cookie, offset, length, true)
                } else {
                    &transmission::simple_reply(cookie, 0)
                };
                if length == 0 && self.session.structured {
                    self.send(&[&transmission::none_chunk(cookie)]);
                } else {
                    self.send_parts(std::iter::once(header).chain(lent.iter().map(|s| &**s)));
                }
                lent.clear();
                let mut pool = self.lent.lock().unwrap_or_else(PoisonError::into_inner);
                if pool.len() < POOLED_BUFFERS_MAX {
                    pool.push(lent);
                }
                return;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!("read {cookie:#x} failed: {e}");
                self.reply_error(cookie, errno_for(&e), &e.to_string());
                return;
            }
        }
        let mut buffer = self.buffer(length as usize);
        match self.device.read_at(&mut buffer, offset) {
            Ok(()) if !self.session.structured => {
                self.send(&[&transmission::simple_reply(cookie, 0), &buffer]);
            }
            Ok(()) if length == 0 => self.send(&[&transmission::none_chunk(cookie)]),
            Ok(()) => {
                let header = transmission::offset_data_header(cookie, offset, length, true);
                self.send(&[&header, &buffer]);
            }
            Err(e) => {
                tracing::warn!("read {cookie:#x} failed: {e}");
                self.reply_error(cookie, errno_for(&e), &e.to_string());
            }
        }
        self.recycle(buffer);
    }

    /// An error reply: a structured error chunk when negotiated (it carries
    /// the message, and a READ must not get a simple reply then), else a
    /// simple reply.
    fn reply_error(&self, cookie: u64, errno: Errno, message: &str) {
        if self.session.structured {
            let mut out = Vec::with_capacity(32 + message.len());
            transmission::error_chunk(&mut out, cookie, errno, message);
            self.send(&[&out]);
        } else {
            self.send(&[&transmission::simple_reply(cookie, errno.code())]);
        }
    }

    /// Write one reply whole under the writer lock.
    fn send(&self, parts: &[&[u8]]) {
        self.send_parts(parts.iter().copied());
    }

    /// Write one reply whole under the writer lock, from any number of parts.
    fn send_parts<'a>(&self, parts: impl Iterator<Item = &'a [u8]>) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = write_all_iter(&mut *writer, parts).and_then(|()| writer.flush())
            && !self.broken.swap(true, Ordering::Relaxed)
        {
            tracing::debug!("reply not delivered, client gone: {e}");
        }
    }

    fn buffer(&self, len: usize) -> Vec<u8> {
        let mut buffer = {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            match pool.iter().position(|b| b.capacity() >= len) {
                Some(index) => pool.swap_remove(index),
                None => pool.pop().unwrap_or_default(),
            }
        };
        buffer.resize(len, 0);
        buffer
    }

    fn recycle(&self, buffer: Vec<u8>) {
        if buffer.capacity() == 0 || buffer.capacity() > POOLED_BUFFER_MAX_BYTES {
            return;
        }
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOLED_BUFFERS_MAX {
            pool.push(buffer);
        }
    }
}

fn flush_if(device: &dyn Device, fua: bool) -> Result<(), DeviceError> {
    if fua { device.flush() } else { Ok(()) }
}

fn write_zeroes(device: &dyn Device, mut offset: u64, length: u64) -> Result<(), DeviceError> {
    let end = offset + length;
    while offset < end {
        let n = (end - offset).min(ZERO_CHUNK_BYTES as u64) as usize;
        device.write_at(&ZEROES[..n], offset)?;
        offset += n as u64;
    }
    Ok(())
}

/// The protocol errno for a device error.
pub(crate) fn errno_for(error: &DeviceError) -> Errno {
    match error {
        DeviceError::OutOfRange { op, .. } => match op {
            cairn_store::DeviceOp::Write => Errno::NoSpc,
            _ => Errno::Inval,
        },
        DeviceError::ReadOnly { .. } => Errno::Perm,
        DeviceError::Unaligned { .. } => Errno::Inval,
        // ENOSPC, EDQUOT, EFBIG → NBD_ENOSPC (spec).
        DeviceError::Io { source, .. } if matches!(source.raw_os_error(), Some(28 | 122 | 27)) => {
            Errno::NoSpc
        }
        _ => Errno::Io,
    }
}

/// `write_all` for several slices with as few syscalls as the kernel allows.
/// Slices one `write_vectored` call takes at most.
const IOV_CHUNK: usize = 64;

/// Writes every part, in order, up to [`IOV_CHUNK`] parts per system call.
fn write_all_iter<'a, W: Write + ?Sized>(
    writer: &mut W,
    parts: impl Iterator<Item = &'a [u8]>,
) -> io::Result<()> {
    let mut parts = parts.peekable();
    while parts.peek().is_some() {
        let mut slices = [IoSlice::new(&[]); IOV_CHUNK];
        let mut count = 0;
        for (slot, part) in slices.iter_mut().zip(parts.by_ref()) {
            *slot = IoSlice::new(part);
            count += 1;
        }
        let mut slices = &mut slices[..count];
        IoSlice::advance_slices(&mut slices, 0);
        while !slices.is_empty() {
            match writer.write_vectored(slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Payload bytes in flight on one connection, bounded by [`INFLIGHT_MAX_BYTES`].
#[derive(Default)]
struct Budget {
    used: Mutex<u64>,
    freed: Condvar,
}

impl Budget {
    /// Wait until `bytes` fit (a request alone always fits), then take them.
    fn acquire(&self, bytes: u64) -> u64 {
        let mut used = self.lock();
        while *used > 0 && *used + bytes > INFLIGHT_MAX_BYTES {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *used += bytes;
        bytes
    }

    fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut used = self.lock();
        *used -= bytes;
        self.freed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, u64> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
