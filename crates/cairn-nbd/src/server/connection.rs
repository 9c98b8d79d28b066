//! One connection: the handshake, then a few threads that take turns reading
//! requests (leader/follower): the thread that reads a request executes it and
//! sends its reply, while the next thread reads the next request. Requests
//! already whole in the read buffer are taken a share at a time into a ready
//! queue that any thread runs from, so the reader changes hands once per
//! batch, not once per request. A thread never waits to send: when another
//! thread is sending, the reply joins the connection's reply queue and that
//! sender writes it too.

use std::collections::VecDeque;
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use cairn_store::cache::BlockSlice;
use cairn_store::{Device, DeviceError};

use super::Inner;
use super::transport::{self, Reader, Writer};
use crate::codec::handshake::{
    self, BASE_ALLOCATION_ID, Negotiation, OPTION_HEADER_LEN, OptionHeader, Outcome, Session,
};
use crate::codec::transmission::{
    self, Command, Limits, OFFSET_DATA_HEADER_LEN, REQUEST_HEADER_LEN, Rejection, RequestHeader,
};
use crate::limits::{
    INFLIGHT_MAX_BYTES, INFLIGHT_MAX_REQUESTS, POOL_MAX_BYTES, POOLED_BUFFER_MAX_BYTES,
    POOLED_BUFFERS_MAX, THREADS_PER_CONNECTION, ZERO_CHUNK_BYTES,
};
use crate::proto::Errno;

/// Bytes of the reader's buffer: several small requests per `read` syscall.
const READ_BUFFER_BYTES: usize = 256 << 10;

/// Most requests one thread takes from the read buffer at a turn (its own
/// and those it queues as ready).
const BATCH_MAX: usize = 16;

/// Most buffered requests counted when sizing a thread's share.
const BATCH_SCAN_MAX: usize = 64;

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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Run a connection to its end. Errors are logged, never propagated: one
/// client's trouble never reaches another.
pub(super) fn serve<R: Read + Send, W: Write + Send>(
    inner: &Inner,
    reader: R,
    writer: W,
    peer: &str,
) {
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
        limits: Limits {
            export_size: info.size,
            read_only: info.read_only,
            structured: session.structured,
            base_allocation: session.base_allocation,
            max_payload_bytes: info.block_size.maximum_bytes,
        },
        peer,
        input: Mutex::new(Input {
            reader: &mut reader,
            done: false,
        }),
        ready: Mutex::new(VecDeque::with_capacity(BATCH_SCAN_MAX)),
        output: Mutex::new(Output {
            sending: false,
            queue: VecDeque::new(),
            spare: VecDeque::new(),
        }),
        writer: Mutex::new(writer),
        broken: AtomicBool::new(false),
        pool: Mutex::new(Pool::default()),
        lent: Mutex::new(Vec::new()),
        budget: Budget::default(),
    };
    std::thread::scope(|scope| {
        for _ in 1..THREADS_PER_CONNECTION {
            scope.spawn(|| connection.run());
        }
        connection.run();
        // The scope waits for the others: each finishes its request and
        // sends (or queues) its reply; the last sender empties the queue.
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
    let mut negotiation = Negotiation::with_tls(client, inner.tls_mode);
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
                let Some(config) = inner.tls_server() else {
                    return Err(io::Error::other("STARTTLS accepted without credentials"));
                };
                transport::start_tls(&config, reader, writer)?;
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

/// A request read and validated, not yet executed.
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

/// The request stream, read by one thread at a time (the one holding the
/// lock around it).
struct Input<'r, R> {
    reader: &'r mut BufReader<Reader<R>>,
    /// The client disconnected or broke the framing: read nothing more.
    done: bool,
}

/// Replies waiting for the thread that is sending.
struct Output {
    /// A thread is writing replies to the socket; others queue theirs.
    sending: bool,
    /// Bounded by the in-flight budget: a queued reply still holds its
    /// request's budget, and the reader waits for budget.
    queue: VecDeque<Reply>,
    /// The sender's batch between turns (kept for its capacity).
    spare: VecDeque<Reply>,
}

/// Longest reply header kept inline (an `OFFSET_DATA` chunk header).
const HEAD_MAX: usize = OFFSET_DATA_HEADER_LEN;

/// One reply, owned, so it can wait in the queue.
struct Reply {
    head: [u8; HEAD_MAX],
    head_len: usize,
    body: Body,
    /// Budget bytes (and one request) to release once the reply is out.
    budget: u64,
}

enum Body {
    Empty,
    /// A pooled buffer (READ data).
    Buffer(Vec<u8>),
    /// Buffers lent by the device (zero-copy READ).
    Lent(Vec<BlockSlice>),
    /// An error chunk or block status (allocated, not pooled).
    Owned(Vec<u8>),
}

impl Reply {
    fn new(head: &[u8], body: Body, budget: u64) -> Self {
        let mut bytes = [0u8; HEAD_MAX];
        bytes[..head.len()].copy_from_slice(head);
        Self {
            head: bytes,
            head_len: head.len(),
            body,
            budget,
        }
    }

    /// The reply's bytes, in order.
    fn parts(&self) -> impl Iterator<Item = &[u8]> {
        let (single, lent): (&[u8], &[BlockSlice]) = match &self.body {
            Body::Empty => (&[], &[]),
            Body::Buffer(bytes) | Body::Owned(bytes) => (bytes, &[]),
            Body::Lent(slices) => (&[], slices),
        };
        std::iter::once(&self.head[..self.head_len])
            .chain(std::iter::once(single))
            .chain(lent.iter().map(|s| &**s))
            .filter(|part| !part.is_empty())
    }
}

/// Payload buffers kept for reuse (a fresh one costs a zero-fill).
#[derive(Default)]
struct Pool {
    buffers: Vec<Vec<u8>>,
    /// The buffers' total capacity.
    bytes: usize,
}

struct Connection<'a, 'r, R, W> {
    device: &'a dyn Device,
    session: Session,
    limits: Limits,
    peer: &'a str,
    input: Mutex<Input<'r, R>>,
    /// Requests read by one thread for it to run after its current one,
    /// unless another thread takes them first.
    ready: Mutex<VecDeque<Job>>,
    output: Mutex<Output>,
    /// Held only by the sending thread.
    writer: Mutex<W>,
    /// A reply could not be sent: the client is gone, skip remaining reads.
    broken: AtomicBool,
    pool: Mutex<Pool>,
    /// Emptied lists of lent buffers, for reuse.
    lent: Mutex<Vec<Vec<BlockSlice>>>,
    budget: Budget,
}

impl<R: Read, W: Write + Send> Connection<'_, '_, R, W> {
    /// One thread's loop until the request stream ends and every request
    /// read has run: take a request from the ready queue, or else the reader
    /// (see [`Self::take_jobs`]); hand the reader on; execute; reply.
    fn run(&self) {
        let mut extra: Vec<Job> = Vec::with_capacity(BATCH_MAX);
        let mut replies: Vec<Reply> = Vec::with_capacity(1);
        loop {
            let job = if let Some(job) = self.pop_ready() {
                job
            } else {
                let mut input = lock(&self.input);
                if input.done {
                    drop(input);
                    match self.pop_ready() {
                        Some(job) => job,
                        None => return,
                    }
                } else {
                    match self.take_jobs(&mut input, &mut extra) {
                        Some(job) => job,
                        None => continue,
                    }
                }
            };
            let reply = match job {
                Job::Run {
                    cookie,
                    command,
                    payload,
                    budget,
                } => self.execute(cookie, command, payload, budget),
                Job::Reject { cookie, rejection } => {
                    Some(self.error_reply(cookie, rejection.errno, rejection.message, 0))
                }
            };
            if let Some(reply) = reply {
                replies.push(reply);
                self.deliver(&mut replies);
            }
        }
    }

    fn pop_ready(&self) -> Option<Job> {
        lock(&self.ready).pop_front()
    }

    /// With the reader held: the next request for this thread to run, and
    /// this thread's share of the requests already whole in the read buffer
    /// behind it (one per thread of the connection, at most [`BATCH_MAX`])
    /// moved to the ready queue. The thread that read them runs them next,
    /// after its own, unless another thread takes them first; so a deep
    /// queue of small requests costs one hand-over of the reader per batch
    /// instead of one per request, and a slow request holds up nothing
    /// behind it: a thread that finds the read buffer empty takes a ready
    /// request before it waits on the socket. `None` at the end of the
    /// stream (`done` is set; requests already read still run).
    fn take_jobs(&self, input: &mut Input<'_, R>, extra: &mut Vec<Job>) -> Option<Job> {
        let (behind, _) = transmission::buffered_requests(input.reader.buffer(), 1);
        if behind == 0
            && let Some(job) = self.pop_ready()
        {
            return Some(job);
        }
        let first = self.read_job(input)?;
        let (behind, _) = transmission::buffered_requests(input.reader.buffer(), BATCH_SCAN_MAX);
        let share = behind.div_ceil(THREADS_PER_CONNECTION).min(BATCH_MAX - 1);
        while extra.len() < share {
            // Only what is buffered (no waiting on the socket), and only what
            // fits the in-flight budget now (no waiting on replies this
            // thread has yet to send).
            let (whole, bytes) = transmission::buffered_requests(input.reader.buffer(), 1);
            if whole == 0 || !self.budget.fits(bytes) {
                break;
            }
            match self.read_job(input) {
                Some(job) => extra.push(job),
                None => break,
            }
        }
        if !extra.is_empty() {
            lock(&self.ready).extend(extra.drain(..));
        }
        Some(first)
    }

    /// The next request from the reader; `None` (and `done` set) at the end
    /// of the stream or when the framing broke.
    fn read_job(&self, input: &mut Input<'_, R>) -> Option<Job> {
        match self.next_job(&mut *input.reader) {
            Ok(Some(job)) => Some(job),
            Ok(None) => {
                input.done = true;
                tracing::debug!("{}: disconnected", self.peer);
                None
            }
            Err(e) => {
                input.done = true;
                tracing::info!("{}: closing: {e}", self.peer);
                None
            }
        }
    }

    /// Read and validate the next request: `Ok(None)` when the client
    /// disconnected or sent `NBD_CMD_DISC`. Takes its budget first (waiting
    /// while the connection has too much in flight).
    fn next_job(&self, reader: &mut impl Read) -> io::Result<Option<Job>> {
        let mut bytes = [0u8; REQUEST_HEADER_LEN];
        if !read_or_eof(reader, &mut bytes)? {
            return Ok(None);
        }
        let header = RequestHeader::parse(&bytes).map_err(io::Error::other)?;
        let job = match transmission::validate(&header, &self.limits) {
            Ok(Command::Disconnect) => return Ok(None),
            Ok(command) => {
                let (payload, budget) = match command {
                    Command::Write { length, .. } => {
                        let budget = self.budget.acquire(u64::from(length));
                        let mut payload = self.buffer(length as usize);
                        if let Err(e) = reader.read_exact(&mut payload) {
                            self.budget.release(budget);
                            self.recycle(payload);
                            return Err(e);
                        }
                        (payload, budget)
                    }
                    Command::Read { length, .. } => {
                        (Vec::new(), self.budget.acquire(u64::from(length)))
                    }
                    _ => (Vec::new(), self.budget.acquire(0)),
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
                self.budget.acquire(0);
                Job::Reject {
                    cookie: header.cookie,
                    rejection,
                }
            }
        };
        Ok(Some(job))
    }

    /// Execute one command; its reply (`None` when there is none to send,
    /// its budget then released here).
    fn execute(
        &self,
        cookie: u64,
        command: Command,
        payload: Vec<u8>,
        budget: u64,
    ) -> Option<Reply> {
        let device = self.device;
        let result = match command {
            Command::Read { offset, length } => {
                self.recycle(payload);
                return self.read(cookie, offset, length, budget);
            }
            Command::Write { offset, fua, .. } => {
                // The device may keep the payload's buffer (a memory volume
                // takes a whole stripe so) and hand back another to pool.
                let mut payload = payload;
                let written = device.write_swap(&mut payload, offset);
                self.recycle(payload);
                written.and_then(|()| flush_if(device, fua))
            }
            Command::Disconnect => {
                // Handled by the reader; never executed.
                self.budget.release(budget);
                return None;
            }
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
                no_hole,
            } => {
                let length = u64::from(length);
                // A fast zero may punch holes, which NO_HOLE forbids.
                match if no_hole {
                    Ok(false)
                } else {
                    device.zero_fast(offset, length)
                } {
                    Ok(true) => flush_if(device, fua),
                    Ok(false) if fast_zero => {
                        // Zeroing would be a write of zeroes, no faster than
                        // WRITE: the spec says fail fast and let the client write.
                        return Some(self.error_reply(
                            cookie,
                            Errno::NotSup,
                            "zeroing is not faster than writing",
                            budget,
                        ));
                    }
                    Ok(false) => {
                        write_zeroes(device, offset, length).and_then(|()| flush_if(device, fua))
                    }
                    Err(e) => Err(e),
                }
            }
            Command::BlockStatus {
                offset,
                length,
                req_one,
            } => {
                if length == 0 {
                    return Some(self.error_reply(
                        cookie,
                        Errno::Inval,
                        "zero-length block status",
                        budget,
                    ));
                }
                return Some(match block_status(device, offset, length, req_one) {
                    Ok(extents) => {
                        let mut out = Vec::with_capacity(32 + 8 * extents.len());
                        transmission::block_status_chunk(
                            &mut out,
                            cookie,
                            BASE_ALLOCATION_ID,
                            &extents,
                        );
                        Reply::new(&[], Body::Owned(out), budget)
                    }
                    Err(e) => {
                        tracing::warn!("request {cookie:#x} failed: {e}");
                        self.error_reply(cookie, errno_for(&e), &e.to_string(), budget)
                    }
                });
            }
        };
        Some(match result {
            Ok(()) => Reply::new(&transmission::simple_reply(cookie, 0), Body::Empty, budget),
            Err(e) => {
                tracing::warn!("request {cookie:#x} failed: {e}");
                self.error_reply(cookie, errno_for(&e), &e.to_string(), budget)
            }
        })
    }

    fn read(&self, cookie: u64, offset: u64, length: u32, budget: u64) -> Option<Reply> {
        if self.broken.load(Ordering::Relaxed) {
            self.budget.release(budget);
            return None;
        }
        let structured = self.session.structured;
        // Zero-copy where the device lends its buffers (the block cache):
        // the reply is written from them.
        let mut lent = lock(&self.lent).pop().unwrap_or_default();
        match self.device.read_lent(offset, u64::from(length), &mut lent) {
            Ok(true) if length == 0 && structured => {
                self.recycle_lent(lent);
                return Some(Reply::new(
                    &transmission::none_chunk(cookie),
                    Body::Empty,
                    budget,
                ));
            }
            Ok(true) => {
                let body = Body::Lent(lent);
                return Some(if structured {
                    let header = transmission::offset_data_header(cookie, offset, length, true);
                    Reply::new(&header, body, budget)
                } else {
                    Reply::new(&transmission::simple_reply(cookie, 0), body, budget)
                });
            }
            Ok(false) => self.recycle_lent(lent),
            Err(e) => {
                self.recycle_lent(lent);
                tracing::warn!("read {cookie:#x} failed: {e}");
                return Some(self.error_reply(cookie, errno_for(&e), &e.to_string(), budget));
            }
        }
        let mut buffer = self.buffer(length as usize);
        Some(match self.device.read_at(&mut buffer, offset) {
            Ok(()) if !structured => Reply::new(
                &transmission::simple_reply(cookie, 0),
                Body::Buffer(buffer),
                budget,
            ),
            Ok(()) if length == 0 => {
                self.recycle(buffer);
                Reply::new(&transmission::none_chunk(cookie), Body::Empty, budget)
            }
            Ok(()) => {
                let header = transmission::offset_data_header(cookie, offset, length, true);
                Reply::new(&header, Body::Buffer(buffer), budget)
            }
            Err(e) => {
                self.recycle(buffer);
                tracing::warn!("read {cookie:#x} failed: {e}");
                self.error_reply(cookie, errno_for(&e), &e.to_string(), budget)
            }
        })
    }

    /// An error reply: a structured error chunk when negotiated (it carries
    /// the message, and a READ must not get a simple reply then), else a
    /// simple reply.
    fn error_reply(&self, cookie: u64, errno: Errno, message: &str, budget: u64) -> Reply {
        if self.session.structured {
            let mut out = Vec::with_capacity(32 + message.len());
            transmission::error_chunk(&mut out, cookie, errno, message);
            Reply::new(&[], Body::Owned(out), budget)
        } else {
            Reply::new(
                &transmission::simple_reply(cookie, errno.code()),
                Body::Empty,
                budget,
            )
        }
    }

    /// Send `replies` (leaving the vector empty), or queue them when another
    /// thread is sending. The thread
    /// that sends also sends every reply queued meanwhile, all that waited
    /// at once (`writev`, 64 parts per call), so exactly one thread at a time
    /// can be blocked on the socket and the others keep reading requests.
    fn deliver(&self, replies: &mut Vec<Reply>) {
        let mut batch = {
            let mut output = lock(&self.output);
            if output.sending {
                output.queue.extend(replies.drain(..));
                return;
            }
            output.sending = true;
            std::mem::take(&mut output.spare)
        };
        batch.extend(replies.drain(..));
        let mut writer = lock(&self.writer);
        loop {
            if !self.broken.load(Ordering::Relaxed)
                && let Err(e) = write_all_iter(&mut *writer, batch.iter().flat_map(Reply::parts))
                    .and_then(|()| writer.flush())
                && !self.broken.swap(true, Ordering::Relaxed)
            {
                tracing::debug!("{}: reply not delivered, client gone: {e}", self.peer);
            }
            for reply in batch.drain(..) {
                self.finish(reply);
            }
            let mut output = lock(&self.output);
            if output.queue.is_empty() {
                output.sending = false;
                output.spare = batch;
                return;
            }
            std::mem::swap(&mut output.queue, &mut batch);
        }
    }

    /// A reply is out (or dropped): release its budget, keep its buffers.
    fn finish(&self, reply: Reply) {
        self.budget.release(reply.budget);
        match reply.body {
            Body::Buffer(buffer) => self.recycle(buffer),
            Body::Lent(lent) => self.recycle_lent(lent),
            Body::Empty | Body::Owned(_) => {}
        }
    }

    fn buffer(&self, len: usize) -> Vec<u8> {
        let mut buffer = {
            let mut pool = lock(&self.pool);
            let index = pool.buffers.iter().position(|b| b.capacity() >= len);
            let buffer = match index {
                Some(index) => pool.buffers.swap_remove(index),
                None => pool.buffers.pop().unwrap_or_default(),
            };
            pool.bytes -= buffer.capacity();
            buffer
        };
        buffer.resize(len, 0);
        buffer
    }

    fn recycle(&self, buffer: Vec<u8>) {
        let capacity = buffer.capacity();
        if capacity == 0 || capacity > POOLED_BUFFER_MAX_BYTES {
            return;
        }
        let mut pool = lock(&self.pool);
        if pool.buffers.len() < POOLED_BUFFERS_MAX && pool.bytes + capacity <= POOL_MAX_BYTES {
            pool.bytes += capacity;
            pool.buffers.push(buffer);
        }
    }

    fn recycle_lent(&self, mut lent: Vec<BlockSlice>) {
        // Drop the handles (the blocks may be evicted now) outside the lock.
        lent.clear();
        let mut pool = lock(&self.lent);
        if pool.len() < POOLED_BUFFERS_MAX {
            pool.push(lent);
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

/// Requests and payload bytes in flight on one connection (read, not yet
/// replied to), bounded by [`INFLIGHT_MAX_REQUESTS`] and
/// [`INFLIGHT_MAX_BYTES`].
#[derive(Default)]
struct Budget {
    used: Mutex<Used>,
    freed: Condvar,
}

#[derive(Default)]
struct Used {
    bytes: u64,
    requests: usize,
    /// A reader waits in [`Budget::acquire`] (so a release must wake it).
    waiting: bool,
}

impl Budget {
    /// Wait until one more request and `bytes` fit (a request alone always
    /// fits), then take them.
    fn acquire(&self, bytes: u64) -> u64 {
        let mut used = lock(&self.used);
        while used.requests >= INFLIGHT_MAX_REQUESTS
            || (used.bytes > 0 && used.bytes + bytes > INFLIGHT_MAX_BYTES)
        {
            used.waiting = true;
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        used.requests += 1;
        used.bytes += bytes;
        bytes
    }

    /// Whether one more request and `bytes` would fit now, without waiting.
    fn fits(&self, bytes: u64) -> bool {
        let used = lock(&self.used);
        used.requests < INFLIGHT_MAX_REQUESTS
            && (used.bytes == 0 || used.bytes + bytes <= INFLIGHT_MAX_BYTES)
    }

    /// Give back one request and its `bytes`.
    fn release(&self, bytes: u64) {
        let mut used = lock(&self.used);
        used.requests -= 1;
        used.bytes -= bytes;
        if used.waiting {
            used.waiting = false;
            self.freed.notify_all();
        }
    }
}
