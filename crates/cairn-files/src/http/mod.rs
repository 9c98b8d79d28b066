//! The HTTP/1.1 front end: a thread per connection, at most
//! [`GatewayConfig::connections_max`] at once (more are answered `503` and
//! closed), as the NBD server does.
//!
//! A connection reads request heads into one fixed buffer of
//! [`REQUEST_HEAD_MAX_BYTES`] and parses them with `httparse`; a head must
//! arrive whole within [`GatewayConfig::header_timeout`] of the connection
//! starting to wait for it (slowloris; an idle keep-alive connection gets the
//! same time). Requests are served in order (pipelining works); the
//! connection stays open unless the client says `Connection: close`, speaks
//! HTTP/1.0 without `keep-alive`, sends a body, or sends something we cannot
//! parse (`400`, `414`, `431`, then closed). Bodies go out from the cache's
//! block handles with vectored writes ([`respond`]).
//!
//! Addressing is path-style S3: `/BUCKET/KEY`, where `BUCKET` is the
//! export's name; `GET /BUCKET` lists (`ListObjectsV2`).
//!
//! Counting ([`GatewayCounters`]): connections when accepted or refused;
//! requests by method and status class into a stripe of relaxed atomics
//! the connection picked at its start (one cache line each, shared by two
//! connections only past [`COUNTER_STRIPES`] at once), summed when read. No
//! lock and no allocation per request.

pub mod date;
pub mod request;
mod respond;
#[cfg(test)]
mod tests;

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cairn_store::device::BlockSlice;

use crate::backend::Backend;
use crate::cache::FileCache;
use crate::limits::{
    ACCEPT_POLL_MS, BLOCKS_PER_WRITE, BUCKET_NAME_MAX_BYTES, CONNECTIONS_MAX,
    CONNECTIONS_MAX_DEFAULT, HEADER_TIMEOUT_MS_DEFAULT, HEADERS_MAX, REQUEST_HEAD_MAX_BYTES,
    REQUEST_LINE_MAX_BYTES, WRITE_TIMEOUT_MS,
};
use crate::s3::S3Error;

/// Stripes of request counters (connections past this many share them).
pub const COUNTER_STRIPES: usize = 64;

/// The methods requests are counted by: `GET`, `HEAD`, anything else.
pub const METHODS: [&str; 3] = ["get", "head", "other"];

/// The status classes requests are counted by (a status outside them
/// counts in the nearest: the gateway sends none).
pub const STATUS_CLASSES: [&str; 4] = ["2xx", "3xx", "4xx", "5xx"];

const COUNTS: usize = METHODS.len() * STATUS_CLASSES.len();

/// Requests answered, by method ([`METHODS`]) and status class
/// ([`STATUS_CLASSES`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// `counts[method][class]`, in the order of [`METHODS`] and
    /// [`STATUS_CLASSES`].
    pub counts: [[u64; STATUS_CLASSES.len()]; METHODS.len()],
}

impl RequestCounts {
    /// Every request answered.
    pub fn total(&self) -> u64 {
        self.counts.iter().flatten().sum()
    }

    /// Requests of `method` answered with a status of `class` (`"get"`,
    /// `"2xx"`); 0 for names not counted.
    pub fn get(&self, method: &str, class: &str) -> u64 {
        let m = METHODS.iter().position(|&n| n == method);
        let c = STATUS_CLASSES.iter().position(|&n| n == class);
        m.zip(c).map_or(0, |(m, c)| self.counts[m][c])
    }
}

/// One stripe of request counters, alone on its cache lines.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Stripe([AtomicU64; COUNTS]);

/// The index of a method among [`METHODS`].
fn method_index(method: &str) -> usize {
    match method {
        "GET" => 0,
        "HEAD" => 1,
        _ => 2,
    }
}

/// The status of the answer whose head starts `out`: every answer's first
/// line is `respond::status_line`'s `HTTP/1.1 NNN …`.
fn status_of(out: &[u8]) -> u16 {
    debug_assert!(
        out.starts_with(b"HTTP/1.1 "),
        "an answer starts with its status line"
    );
    out.get(9..12)
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(500)
}

/// How a gateway serves.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// The export's name: the bucket of `/BUCKET/KEY`. 1–63 bytes of
    /// lowercase letters, digits, `-` and `.` (S3's rule).
    pub bucket: String,
    /// Time a client has to send a request head. Default 10 s.
    pub header_timeout: Duration,
    /// Connections served at once, 1–[`CONNECTIONS_MAX`]. Default 256.
    pub connections_max: usize,
}

impl GatewayConfig {
    /// A configuration for `bucket` with the default limits.
    pub fn new(bucket: &str) -> Self {
        Self {
            bucket: bucket.to_owned(),
            header_timeout: Duration::from_millis(HEADER_TIMEOUT_MS_DEFAULT),
            connections_max: CONNECTIONS_MAX_DEFAULT,
        }
    }

    /// Checks the bucket name and the limits.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.bucket;
        let valid = !name.is_empty()
            && name.len() <= BUCKET_NAME_MAX_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !name.starts_with(['-', '.']);
        if !valid {
            return Err(format!(
                "bucket name {name:?}: 1 to {BUCKET_NAME_MAX_BYTES} lowercase letters, digits, '-' and '.', not starting with '-' or '.'"
            ));
        }
        if !(1..=CONNECTIONS_MAX).contains(&self.connections_max) {
            return Err(format!(
                "connections_max {} is not in 1..={CONNECTIONS_MAX}",
                self.connections_max
            ));
        }
        if self.header_timeout.is_zero() {
            return Err("header_timeout must be more than 0".into());
        }
        Ok(())
    }
}

/// Counters of the front end (see the module docs).
#[derive(Debug)]
pub struct GatewayCounters {
    /// Connections accepted and served.
    pub connections: AtomicUsize,
    /// Connections refused with `503` (over the limit).
    pub refused: AtomicUsize,
    /// Connections being served now.
    pub open: AtomicUsize,
    stripes: Box<[Stripe]>,
}

impl Default for GatewayCounters {
    fn default() -> Self {
        Self {
            connections: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            stripes: (0..COUNTER_STRIPES).map(|_| Stripe::default()).collect(),
        }
    }
}

impl GatewayCounters {
    /// Counts a request of `method` (an index of [`METHODS`]) answered with
    /// `status`, into `stripe`.
    #[inline]
    fn count(&self, stripe: usize, method: usize, status: u16) {
        let class = usize::from(status / 100).clamp(2, 5) - 2;
        self.stripes[stripe % COUNTER_STRIPES].0[method * STATUS_CLASSES.len() + class]
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Requests answered, by method and status class, summed over the
    /// stripes.
    pub fn requests_by(&self) -> RequestCounts {
        let mut counts = RequestCounts::default();
        for stripe in &self.stripes {
            for (i, n) in stripe.0.iter().enumerate() {
                counts.counts[i / STATUS_CLASSES.len()][i % STATUS_CLASSES.len()] +=
                    n.load(Ordering::Relaxed);
            }
        }
        counts
    }

    /// Requests answered.
    pub fn requests(&self) -> u64 {
        self.requests_by().total()
    }
}

/// An HTTP/S3 gateway over a [`FileCache`], bound to a TCP address.
pub struct Gateway<B> {
    shared: Arc<Shared<B>>,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
}

struct Shared<B> {
    cache: Arc<FileCache<B>>,
    config: GatewayConfig,
    counters: Arc<GatewayCounters>,
}

impl<B: Backend + 'static> Gateway<B> {
    /// Binds `address` (port 0 picks one) to serve `cache`.
    pub fn bind(
        address: impl ToSocketAddrs,
        cache: Arc<FileCache<B>>,
        config: GatewayConfig,
    ) -> io::Result<Self> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let listener = TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            shared: Arc::new(Shared {
                cache,
                config,
                counters: Arc::new(GatewayCounters::default()),
            }),
            listener,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The flag that stops [`serve`](Self::serve) (within
    /// [`ACCEPT_POLL_MS`]); connections being served finish their request.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// The cache served.
    pub fn cache(&self) -> &Arc<FileCache<B>> {
        &self.shared.cache
    }

    /// The front end's counters (shared: they stay readable while another
    /// thread serves).
    pub fn counters(&self) -> Arc<GatewayCounters> {
        Arc::clone(&self.shared.counters)
    }

    /// Accepts and serves connections until the stop flag is set.
    pub fn serve(&self) -> io::Result<()> {
        while !self.stop.load(Ordering::Relaxed) {
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(ACCEPT_POLL_MS));
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: wait, keep serving the others.
                    tracing::warn!("accept: {e}");
                    std::thread::sleep(Duration::from_millis(ACCEPT_POLL_MS));
                    continue;
                }
            };
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_nodelay(true);
            let _ = stream.set_write_timeout(Some(Duration::from_millis(WRITE_TIMEOUT_MS)));
            let shared = &self.shared;
            let counters = &shared.counters;
            if counters.open.fetch_add(1, Ordering::AcqRel) >= shared.config.connections_max {
                counters.open.fetch_sub(1, Ordering::AcqRel);
                counters.refused.fetch_add(1, Ordering::Relaxed);
                refuse(stream);
                continue;
            }
            let stripe = counters.connections.fetch_add(1, Ordering::Relaxed);
            let shared = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name("cairn-files-conn".into())
                .spawn(move || {
                    if let Err(e) = Connection::new(&shared, stream, stripe).run() {
                        tracing::debug!("connection from {peer}: {e}");
                    }
                    shared.counters.open.fetch_sub(1, Ordering::AcqRel);
                });
            if let Err(e) = spawned {
                self.shared.counters.open.fetch_sub(1, Ordering::AcqRel);
                tracing::warn!("connection from {peer}: cannot start its thread: {e}");
            }
        }
        Ok(())
    }
}

/// Answers a connection over the limit with `503` and closes it.
fn refuse(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(ACCEPT_POLL_MS * 10)));
    let mut out = Vec::new();
    respond::error_head(
        &mut out,
        S3Error::SLOW_DOWN,
        "too many connections",
        "/",
        false,
        true,
    );
    let _ = io::Write::write_all(&mut stream, &out);
}

/// One connection's state: its buffers are reused request after request.
struct Connection<'a, B> {
    shared: &'a Shared<B>,
    stream: TcpStream,
    head: Vec<u8>,
    filled: usize,
    out: Vec<u8>,
    path: String,
    slices: Vec<BlockSlice>,
    /// Its stripe of the request counters.
    stripe: usize,
}

/// How reading a request head ended.
enum Head {
    /// A complete head of this many bytes is at the buffer's start.
    Complete(usize),
    /// The client closed, or went silent (nothing to answer).
    Closed,
    /// Answer this error, then close.
    Reject(S3Error),
}

impl<'a, B: Backend> Connection<'a, B> {
    fn new(shared: &'a Shared<B>, stream: TcpStream, stripe: usize) -> Self {
        Self {
            shared,
            stream,
            head: vec![0; REQUEST_HEAD_MAX_BYTES],
            filled: 0,
            out: Vec::with_capacity(1024),
            path: String::new(),
            slices: Vec::with_capacity(BLOCKS_PER_WRITE),
            stripe,
        }
    }

    fn run(mut self) -> io::Result<()> {
        loop {
            match self.read_head()? {
                Head::Complete(len) => {
                    let (keep_alive, method) = self.serve_one(len)?;
                    self.shared
                        .counters
                        .count(self.stripe, method, status_of(&self.out));
                    self.head.copy_within(len..self.filled, 0);
                    self.filled -= len;
                    if !keep_alive {
                        return Ok(());
                    }
                }
                Head::Closed => return Ok(()),
                Head::Reject(error) => {
                    self.out.clear();
                    respond::error_head(&mut self.out, error, "", "", false, true);
                    self.shared
                        .counters
                        .count(self.stripe, method_index(""), error.status);
                    return io::Write::write_all(&mut self.stream, &self.out);
                }
            }
        }
    }

    /// Reads until a whole head is buffered, the deadline passes, or the
    /// head breaks a limit.
    fn read_head(&mut self) -> io::Result<Head> {
        let deadline = Instant::now() + self.shared.config.header_timeout;
        loop {
            if self.filled > 0 {
                let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
                let mut request = httparse::Request::new(&mut headers);
                match request.parse(&self.head[..self.filled]) {
                    Ok(httparse::Status::Complete(len)) => {
                        let line = self.head.iter().position(|&b| b == b'\n').unwrap_or(len);
                        return Ok(if line > REQUEST_LINE_MAX_BYTES {
                            Head::Reject(S3Error::URI_TOO_LONG)
                        } else {
                            Head::Complete(len)
                        });
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(httparse::Error::TooManyHeaders) => {
                        return Ok(Head::Reject(S3Error::HEADERS_TOO_LARGE));
                    }
                    Err(_) => return Ok(Head::Reject(S3Error::BAD_REQUEST)),
                }
                let line_end = self.head[..self.filled].iter().position(|&b| b == b'\n');
                if line_end.map_or(self.filled, |at| at) > REQUEST_LINE_MAX_BYTES {
                    return Ok(Head::Reject(S3Error::URI_TOO_LONG));
                }
                if self.filled == self.head.len() {
                    return Ok(Head::Reject(S3Error::HEADERS_TOO_LARGE));
                }
            }
            let Some(left) = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return Ok(if self.filled > 0 {
                    Head::Reject(S3Error::REQUEST_TIMEOUT)
                } else {
                    Head::Closed
                });
            };
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut self.head[self.filled..]) {
                Ok(0) => return Ok(Head::Closed),
                Ok(n) => self.filled += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Serves the request whose head is the buffer's first `len` bytes;
    /// whether the connection stays open, and the request's method (an
    /// index of [`METHODS`]). The answer's head is at the start of
    /// `self.out`.
    fn serve_one(&mut self, len: usize) -> io::Result<(bool, usize)> {
        let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
        let mut request = httparse::Request::new(&mut headers);
        let parsed = request.parse(&self.head[..len]);
        debug_assert!(matches!(parsed, Ok(httparse::Status::Complete(n)) if n == len));
        let method = method_index(request.method.unwrap_or_default());
        respond::serve(
            &respond::Context {
                cache: &self.shared.cache,
                bucket: &self.shared.config.bucket,
            },
            &request,
            &mut self.stream,
            &mut self.out,
            &mut self.path,
            &mut self.slices,
        )
        .map(|keep_alive| (keep_alive, method))
    }
}
