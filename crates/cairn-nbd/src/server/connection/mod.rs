//! One connection: the handshake, then a few threads that take turns reading
//! requests (leader/follower): the thread that reads a request executes it and
//! sends its reply, while the next thread reads the next request. Requests
//! already whole in the read buffer are taken a share at a time into a ready
//! queue that any thread runs from, so the reader changes hands once per
//! batch, not once per request. A thread never waits to send: when another
//! thread is sending, the reply joins the connection's reply queue and that
//! sender writes it too.
//!
//! This file orchestrates; each part has a room of its own, and none of them
//! uses this file's items:
//! - `negotiate`: the handshake, up to transmission
//! - `execute`: one function per command, on the device
//! - `reply`: the owned reply, its sender and the reply queue
//! - `budget`: requests and bytes in flight
//! - `buffers`: payload buffers and lent-block lists kept for reuse
//! - `lock`: locking through poison

mod budget;
mod buffers;
mod execute;
mod lock;
mod negotiate;
mod reply;

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::{self, BufReader, Read, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use cairn_control::{IoCounters, Op};

use cairn_store::Device;

use super::Inner;
use super::transport::{Reader, Writer};
use crate::codec::transmission::{
    self, Command, Limits, REQUEST_HEADER_LEN, Rejection, RequestHeader,
};
use crate::limits::THREADS_PER_CONNECTION;
use budget::Budget;
use buffers::Buffers;
use execute::Executor;
use lock::lock;
use negotiate::{negotiate, read_or_eof};
use reply::{Body, Reply, Sender};

/// Bytes of the reader's buffer: several small requests per `read` syscall.
const READ_BUFFER_BYTES: usize = 256 << 10;

/// Most requests one thread takes from the read buffer at a turn (its own
/// and those it queues as ready).
const BATCH_MAX: usize = 16;

/// Most buffered requests counted when sizing a thread's share.
const BATCH_SCAN_MAX: usize = 64;

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
            tracing::debug!(peer, "left during the handshake");
            return;
        }
        // A client that aborts often closes before reading our last reply.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) =>
        {
            tracing::debug!(peer, error = %e, "left during the handshake");
            return;
        }
        Err(e) => {
            tracing::info!(peer, error = %e, "handshake ended");
            return;
        }
    };
    let export = &inner.exports[session.export];
    tracing::debug!(
        peer,
        export = export.name,
        structured_replies = session.structured,
        "transmission"
    );
    let info = &inner.infos[session.export];
    // Counted per connection (no lock, no allocation per request), summed
    // per export when asked; with counting off, not even timed.
    let counted = inner
        .counting
        .load(Ordering::Relaxed)
        .then(|| inner.counters[session.export].connect(peer));
    let connection = Connection {
        counters: counted.as_ref().map(cairn_control::Connected::io),
        device: export.device.as_ref(),
        export: &export.name,
        // Once per connection, for the log lines of failed requests.
        stack: export.device.describe(),
        structured: session.structured,
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
        sender: Sender::new(writer),
        broken: AtomicBool::new(false),
        buffers: Buffers::default(),
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

/// What is counted of a request that ran.
struct Counted {
    op: Op,
    /// What it asked to move (counted if it succeeded).
    bytes: u64,
    started: Instant,
    ok: bool,
}

/// A command's kind and the bytes it asks to move, for its counters.
fn op_of(command: &Command) -> (Op, u64) {
    match *command {
        Command::Read { length, .. } => (Op::Read, u64::from(length)),
        Command::Write { length, .. } => (Op::Write, u64::from(length)),
        Command::Trim { length, .. } => (Op::Trim, u64::from(length)),
        Command::WriteZeroes { length, .. } => (Op::WriteZeroes, u64::from(length)),
        Command::Cache { length, .. } => (Op::Cache, u64::from(length)),
        Command::BlockStatus { .. } => (Op::BlockStatus, 0),
        // Never executed (the reader ends the stream); counted as a flush
        // would be, for completeness.
        Command::Flush | Command::Disconnect => (Op::Flush, 0),
    }
}

/// The request stream, read by one thread at a time (the one holding the
/// lock around it).
struct Input<'r, R> {
    reader: &'r mut BufReader<Reader<R>>,
    /// The client disconnected or broke the framing: read nothing more.
    done: bool,
}

struct Connection<'a, 'r, R, W> {
    device: &'a dyn Device,
    /// The export's name and its device stack, for log lines.
    export: &'a str,
    stack: String,
    /// Where requests are counted and timed; `None` with counting off.
    counters: Option<&'a IoCounters>,
    /// Structured replies were negotiated.
    structured: bool,
    limits: Limits,
    peer: &'a str,
    input: Mutex<Input<'r, R>>,
    /// Requests read by one thread for it to run after its current one,
    /// unless another thread takes them first.
    ready: Mutex<VecDeque<Job>>,
    sender: Sender<Writer<W>>,
    /// A reply could not be sent: the client is gone, skip remaining reads.
    broken: AtomicBool,
    buffers: Buffers,
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
            let (reply, counted) = self.run_job(job);
            if let Some(reply) = reply {
                replies.push(reply);
                self.sender
                    .deliver(&mut replies, &self.broken, self.peer, |reply| {
                        self.finish(reply);
                    });
            }
            // The request's time runs to its reply handed to the socket
            // (written, or queued behind another thread's send).
            if let (Some(counters), Some(counted)) = (self.counters, counted) {
                let ns = counted.started.elapsed().as_nanos() as u64;
                counters.record(counted.op, counted.bytes, ns, counted.ok);
            }
        }
    }

    /// Executes a job (or refuses it): its reply, and what to count of it
    /// when counting is on.
    fn run_job(&self, job: Job) -> (Option<Reply>, Option<Counted>) {
        match job {
            Job::Run {
                cookie,
                command,
                payload,
                budget,
            } => {
                let started = self.counters.map(|_| (Instant::now(), op_of(&command)));
                let executor = self.executor();
                let reply = executor.execute(cookie, command, payload, budget);
                let counted = started.map(|(started, (op, bytes))| Counted {
                    op,
                    bytes,
                    started,
                    ok: !executor.failed.get(),
                });
                (reply, counted)
            }
            Job::Reject { cookie, rejection } => {
                if let Some(counters) = self.counters {
                    counters.record_rejected();
                }
                let reply = Reply::error(
                    self.structured,
                    cookie,
                    rejection.errno,
                    rejection.message,
                    0,
                );
                (Some(reply), None)
            }
        }
    }

    /// The connection as a command needs it, for one request.
    fn executor(&self) -> Executor<'_> {
        Executor {
            device: self.device,
            structured: self.structured,
            buffers: &self.buffers,
            budget: &self.budget,
            broken: &self.broken,
            export: self.export,
            stack: &self.stack,
            peer: self.peer,
            failed: Cell::new(false),
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
                tracing::debug!(peer = self.peer, export = self.export, "disconnected");
                None
            }
            Err(e) => {
                input.done = true;
                tracing::info!(
                    peer = self.peer,
                    export = self.export,
                    error = %e,
                    "closing the connection"
                );
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
                        let mut payload = self.buffers.take(length as usize);
                        if let Err(e) = reader.read_exact(&mut payload) {
                            self.budget.release(budget);
                            self.buffers.recycle(payload);
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
                    peer = self.peer,
                    export = self.export,
                    cookie = format!("{:#x}", header.cookie),
                    command = header.command,
                    "request refused: {} {}",
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

    /// A reply is out (or dropped): release its budget, keep its buffers.
    fn finish(&self, reply: Reply) {
        self.budget.release(reply.budget);
        match reply.body {
            Body::Buffer(buffer) => self.buffers.recycle(buffer),
            Body::Lent(lent) => self.buffers.recycle_lent(lent),
            Body::Empty | Body::Owned(_) => {}
        }
    }
}
