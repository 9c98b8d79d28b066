//! The metrics listener: a minimal HTTP/1.1 responder on a TCP socket
//! (`cairn serve --metrics tcp:127.0.0.1:9100`) that serves
//!
//! | path | what |
//! |---|---|
//! | `/metrics` | the snapshot in Prometheus's text format ([`crate::prometheus`]) |
//! | `/stats.json` | the snapshot as JSON (what `cairn stats --json` prints) |
//! | `/` | the dashboard: one page, its script and style (`/dashboard.js`, `/dashboard.css`) built into the binary, polling `/stats.json` |
//!
//! Each answer reads the same snapshot as the control socket's `stats`
//! ([`Handler::stats`]). One request per connection (`Connection: close`):
//! a scrape a second is nothing to keep alive for. `GET` and `HEAD` only.
//!
//! Bad input never stops it: a head that is not HTTP/1.x is answered 400,
//! a head over [`HTTP_HEAD_MAX_BYTES`] 400 (unread beyond), another method
//! 405, another path 404, a client past [`HTTP_CLIENTS_MAX`] 503, and a
//! client slower than [`HTTP_IO_SECONDS`] is dropped. Each client has a
//! thread of its own; the NBD server's threads never see them.
//!
//! Not loopback only by accident: [`MetricsListener::bind`] refuses an
//! address that is not loopback unless told otherwise (the page and the
//! metrics have no authentication; they name the exports and what clients
//! do).
//!
//! Why not an HTTP crate (`tiny_http`, `hyper`): four fixed paths, `GET`
//! only, no keep-alive, no body to read — this is 300 lines, and a crate
//! would bring its own threads, parser and dependencies for none of that.

use std::borrow::Cow;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::limits::{HTTP_CLIENTS_MAX, HTTP_HEAD_MAX_BYTES, HTTP_IO_SECONDS};
use crate::server::Handler;
use crate::server::next_client;

/// The dashboard page.
const INDEX_HTML: &str = include_str!("dashboard/index.html");
/// Its script: polls `/stats.json`, draws the charts.
const DASHBOARD_JS: &str = include_str!("dashboard/dashboard.js");
/// Its style.
const DASHBOARD_CSS: &str = include_str!("dashboard/dashboard.css");

/// The page may load only from this listener: no CDN, no other host.
const PAGE_POLICY: &str = "Content-Security-Policy: default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'\r\n";

/// The most of a finished client's unread input that is read (and dropped)
/// before closing: closing a TCP socket with unread data resets it, and
/// the client might lose the answer.
const DRAIN_BYTES: u64 = 64 << 10;

/// How long the drain waits for the client to close.
const DRAIN_WAIT: Duration = Duration::from_millis(200);

/// Why the metrics listener could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The address is not `tcp:HOST:PORT`, or names no address.
    #[error("metrics address {text:?}: {why}")]
    Address {
        /// The address as given.
        text: String,
        /// What is wrong.
        why: String,
    },
    /// The address is reachable from other hosts, and that was not asked
    /// for.
    #[error(
        "metrics address {address} is not a loopback address: the metrics and the dashboard \
         have no authentication and show every export's name and traffic to whoever reaches \
         them. Bind 127.0.0.1 or [::1] (tcp:127.0.0.1:9100), or, to expose them on purpose \
         (behind a firewall or a proxy), add --metrics-public"
    )]
    NotLoopback {
        /// The address.
        address: SocketAddr,
    },
    /// Binding failed (in use, not permitted).
    #[error("metrics address {address}: binding: {source}")]
    Bind {
        /// The address.
        address: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// A bound metrics listener.
pub struct MetricsListener {
    listener: TcpListener,
    address: SocketAddr,
}

/// The socket addresses of `tcp:HOST:PORT` (`HOST` a name, an IPv4
/// address, or an IPv6 address in brackets).
pub fn resolve(text: &str) -> Result<Vec<SocketAddr>, MetricsError> {
    let error = |why: String| MetricsError::Address {
        text: text.to_owned(),
        why,
    };
    let Some(rest) = text.strip_prefix("tcp:") else {
        let why = if text.starts_with("unix:") {
            "the metrics listener is TCP only (Prometheus and browsers speak HTTP over TCP); \
             write tcp:HOST:PORT, e.g. tcp:127.0.0.1:9100"
        } else {
            "write tcp:HOST:PORT, e.g. tcp:127.0.0.1:9100"
        };
        return Err(error(why.into()));
    };
    let addresses: Vec<SocketAddr> = rest
        .to_socket_addrs()
        .map_err(|e| {
            error(format!(
                "{e} (write tcp:HOST:PORT, e.g. tcp:127.0.0.1:9100)"
            ))
        })?
        .collect();
    if addresses.is_empty() {
        return Err(error("the host has no address".into()));
    }
    Ok(addresses)
}

impl MetricsListener {
    /// Binds `tcp:HOST:PORT` (port 0: any free port, see
    /// [`MetricsListener::address`]). Every address the host resolves to
    /// must be loopback unless `public`.
    pub fn bind(text: &str, public: bool) -> Result<Self, MetricsError> {
        let addresses = resolve(text)?;
        if !public
            && let Some(&address) = addresses
                .iter()
                .find(|a| !a.ip().to_canonical().is_loopback())
        {
            return Err(MetricsError::NotLoopback { address });
        }
        let listener = TcpListener::bind(&addresses[..]).map_err(|source| MetricsError::Bind {
            address: text.to_owned(),
            source,
        })?;
        let bound = listener
            .local_addr()
            .and_then(|address| listener.set_nonblocking(true).map(|()| address));
        let address = bound.map_err(|source| MetricsError::Bind {
            address: text.to_owned(),
            source,
        })?;
        Ok(Self { listener, address })
    }

    /// The address it listens on (the port chosen, for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves clients until `stop` is set (looked at every
    /// [`crate::limits::POLL_MILLISECONDS`]), then waits for the clients being served.
    pub fn serve(&self, handler: &dyn Handler, stop: &AtomicBool) {
        let clients = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            while !stop.load(Ordering::Relaxed) {
                let accepted = self.listener.accept().map(|(s, _)| s);
                let what = format_args!("metrics listener {}", self.address);
                let Some(stream) = next_client(&self.listener, accepted, what) else {
                    continue;
                };
                if prepare(&stream).is_err() {
                    continue;
                }
                if clients.load(Ordering::Relaxed) >= HTTP_CLIENTS_MAX {
                    let message = format!(
                        "{HTTP_CLIENTS_MAX} metrics clients are connected already; retry\n"
                    );
                    finish(stream, &Response::text(503, message), false);
                    continue;
                }
                clients.fetch_add(1, Ordering::Relaxed);
                let clients = &clients;
                let spawned = std::thread::Builder::new()
                    .name("metrics-client".into())
                    .spawn_scoped(scope, move || {
                        serve_client(stream, handler);
                        clients.fetch_sub(1, Ordering::Relaxed);
                    });
                if let Err(e) = spawned {
                    clients.fetch_sub(1, Ordering::Relaxed);
                    tracing::warn!("metrics listener: cannot start a client thread: {e}");
                }
            }
        });
    }
}

/// A client's socket made blocking, with the write timeout.
fn prepare(stream: &TcpStream) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(Duration::from_secs(HTTP_IO_SECONDS)))
}

/// An answer.
struct Response {
    status: u16,
    content_type: &'static str,
    body: Cow<'static, [u8]>,
    /// Extra header lines, each ending in CRLF.
    headers: &'static str,
}

impl Response {
    fn text(status: u16, body: String) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Cow::Owned(body.into_bytes()),
            headers: "",
        }
    }

    fn fixed(content_type: &'static str, body: &'static str) -> Self {
        Self {
            status: 200,
            content_type,
            body: Cow::Borrowed(body.as_bytes()),
            headers: "",
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Reads one request, answers it, closes.
fn serve_client(stream: TcpStream, handler: &dyn Handler) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let head = match read_head(&stream) {
        Ok(head) => head,
        Err(HeadError::TooLong) => {
            let message =
                format!("bad request: the request head is over {HTTP_HEAD_MAX_BYTES} bytes\n");
            tracing::debug!("metrics listener: {peer}: {}", message.trim_end());
            finish(stream, &Response::text(400, message), false);
            return;
        }
        Err(HeadError::Gone(e)) => {
            tracing::debug!("metrics listener: {peer}: {e}");
            return;
        }
    };
    let (response, head_only) = match parse(&head) {
        Ok(request) => (route(&request, handler), request.method == "HEAD"),
        Err(why) => (Response::text(400, format!("bad request: {why}\n")), false),
    };
    if response.status != 200 {
        tracing::debug!(
            "metrics listener: {peer}: {} {}",
            response.status,
            String::from_utf8_lossy(&response.body).trim_end()
        );
    }
    finish(stream, &response, head_only);
}

enum HeadError {
    /// Over [`HTTP_HEAD_MAX_BYTES`] without its end.
    TooLong,
    /// Closed, timed out or failed before the head ended.
    Gone(io::Error),
}

/// The request head (through its blank line), read within
/// [`HTTP_IO_SECONDS`] and [`HTTP_HEAD_MAX_BYTES`].
fn read_head(mut stream: &TcpStream) -> Result<Vec<u8>, HeadError> {
    let deadline = Instant::now() + Duration::from_secs(HTTP_IO_SECONDS);
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Gone(io::ErrorKind::TimedOut.into()));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(HeadError::Gone)?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Err(HeadError::Gone(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(HeadError::Gone(e)),
        };
        // Look for the end from a little before the new bytes (it may
        // straddle two reads).
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        match head_end(&head[from..]) {
            Some(end) if from + end <= HTTP_HEAD_MAX_BYTES => {
                head.truncate(from + end);
                return Ok(head);
            }
            Some(_) => return Err(HeadError::TooLong),
            None if head.len() > HTTP_HEAD_MAX_BYTES => return Err(HeadError::TooLong),
            None => {}
        }
    }
}

/// Where the head ends in `bytes` (after its blank line: CRLF CRLF, or LF
/// LF as lenient parsers allow).
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A parsed request line.
#[derive(Debug, PartialEq, Eq)]
struct Request<'a> {
    method: &'a str,
    /// The path, without its query.
    path: &'a str,
}

/// The request line and headers, checked; the error says what is wrong.
fn parse(head: &[u8]) -> Result<Request<'_>, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request is not text".to_owned())?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or_default();
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(format!(
            "the request line {:?} is not METHOD PATH HTTP/1.1",
            shorten(line)
        ));
    };
    if method.is_empty() || !method.bytes().all(is_token) {
        return Err(format!("{:?} is not a method", shorten(method)));
    }
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(format!(
            "{:?} is not HTTP/1.0 or HTTP/1.1",
            shorten(version)
        ));
    }
    if !target.starts_with('/') || target.bytes().any(|b| b.is_ascii_control()) {
        return Err(format!("{:?} is not a path", shorten(target)));
    }
    for header in lines.take_while(|l| !l.is_empty()) {
        let name = header.split_once(':').map(|(name, _)| name);
        if !name.is_some_and(|n| !n.is_empty() && n.bytes().all(is_token)) {
            return Err(format!("{:?} is not a header line", shorten(header)));
        }
    }
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    Ok(Request { method, path })
}

/// A character of an HTTP token (RFC 9110 `tchar`).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// At most 64 characters of `text`, for an error message.
fn shorten(text: &str) -> String {
    text.chars().take(64).collect()
}

/// The answer to a well-formed request.
fn route(request: &Request<'_>, handler: &dyn Handler) -> Response {
    if !matches!(request.method, "GET" | "HEAD") {
        return Response {
            headers: "Allow: GET, HEAD\r\n",
            ..Response::text(
                405,
                format!(
                    "method {} is not allowed: GET or HEAD\n",
                    shorten(request.method)
                ),
            )
        };
    }
    match request.path {
        "/metrics" => Response {
            status: 200,
            content_type: crate::prometheus::CONTENT_TYPE,
            body: Cow::Owned(crate::prometheus::render(&handler.stats()).into_bytes()),
            headers: "",
        },
        "/stats.json" => match serde_json::to_vec(&handler.stats()) {
            Ok(body) => Response {
                status: 200,
                content_type: "application/json",
                body: Cow::Owned(body),
                headers: "",
            },
            Err(e) => Response::text(500, format!("the snapshot as JSON: {e}\n")),
        },
        "/" | "/index.html" => Response {
            headers: PAGE_POLICY,
            ..Response::fixed("text/html; charset=utf-8", INDEX_HTML)
        },
        "/dashboard.js" => Response::fixed("text/javascript; charset=utf-8", DASHBOARD_JS),
        "/dashboard.css" => Response::fixed("text/css; charset=utf-8", DASHBOARD_CSS),
        other => Response::text(
            404,
            format!(
                "not found: {}; this listener serves /metrics (Prometheus), /stats.json and / \
                 (the dashboard)\n",
                shorten(other)
            ),
        ),
    }
}

/// Sends `response` (its head only, for `HEAD`) and closes: the write side
/// first, then whatever the client still sends is read for a moment, so
/// the close does not reset the connection under the answer.
fn finish(mut stream: TcpStream, response: &Response, head_only: bool) {
    let mut out = Vec::with_capacity(256 + response.body.len());
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    out.extend_from_slice(response.headers.as_bytes());
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(&response.body);
    }
    if stream
        .write_all(&out)
        .and_then(|()| stream.flush())
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(DRAIN_WAIT));
    let _ = io::copy(&mut (&stream).take(DRAIN_BYTES), &mut io::sink());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_parse_or_say_what_is_wrong() {
        let ok = parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n").unwrap();
        assert_eq!(
            ok,
            Request {
                method: "GET",
                path: "/metrics"
            }
        );
        assert_eq!(parse(b"HEAD / HTTP/1.0\n\n").unwrap().method, "HEAD");
        for (bad, says) in [
            (&b"\x16\x03\x01\x02\x00"[..], "not METHOD PATH"),
            (b"\xff\xfe / HTTP/1.1\r\n\r\n", "not text"),
            (b"GET /metrics\r\n\r\n", "not METHOD PATH"),
            (b"GET /metrics HTTP/2.0\r\n\r\n", "not HTTP/1.0"),
            (b"GET metrics HTTP/1.1\r\n\r\n", "not a path"),
            (b"G(T / HTTP/1.1\r\n\r\n", "not a method"),
            (
                b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
                "not a header line",
            ),
        ] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn the_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn only_loopback_unless_public() {
        assert!(matches!(
            MetricsListener::bind("tcp:0.0.0.0:0", false),
            Err(MetricsError::NotLoopback { .. })
        ));
        let error = MetricsListener::bind("unix:/tmp/x", false).err().unwrap();
        assert!(error.to_string().contains("TCP only"), "{error}");
        let error = MetricsListener::bind("127.0.0.1:9100", false)
            .err()
            .unwrap();
        assert!(error.to_string().contains("tcp:HOST:PORT"), "{error}");
        let listener = MetricsListener::bind("tcp:127.0.0.1:0", false).unwrap();
        assert!(listener.address().ip().is_loopback());
        assert_ne!(listener.address().port(), 0);
    }
}
