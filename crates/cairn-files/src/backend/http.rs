//! [`HttpBackend`]: the objects of an HTTP origin — another Cairn gateway,
//! an S3-compatible store (path-style, anonymous or signed), or a plain web
//! server.
//!
//! [`HttpBackend::s3`] signs every request with SigV4 (`rusty-s3`, as the
//! object tier's S3 client does: query-string signatures, so the request's
//! path and query carry the signature and nothing else changes).
//!
//! - `stat` is a `HEAD`: `Content-Length` is the size; `Last-Modified` the
//!   modification time, whose sub-second part carries a hash of the `ETag`
//!   (so a rewrite within the same second is a new version in the cache).
//! - `read_at` is a `GET` with `Range: bytes=a-b`; the answer must be `206`
//!   with exactly that `Content-Range` (or a `200` of exactly the bytes asked
//!   for, from offset 0), else the read fails rather than return other bytes.
//! - `list` is S3's `ListObjectsV2` (`GET /BUCKET?list-type=2&prefix=…`);
//!   an origin that does not answer one is a clear error, not an empty list.
//!
//! `https://` origins (and S3 endpoints) are reached over TLS (rustls):
//! the origin's certificate must chain to a root of
//! [`HttpBackendConfig::ca_file`], else `$SSL_CERT_FILE`, else the system's
//! bundle (`/etc/ssl/certs/ca-certificates.crt` and its other usual places),
//! and name the URL's host. A certificate that does not is an
//! [`Other`](BackendErrorKind::Other) error on the first request, saying why.
//!
//! Connections are kept alive in a pool of at most
//! [`HttpBackendConfig::connections_max`]; a caller waits for a free one up to
//! the I/O timeout. A reused connection that fails before any byte of the
//! answer (the origin closed it while idle) is retried once on a new one.
//! Errors: a connect, read or write timeout, or `504`, is
//! [`Timeout`](BackendErrorKind::Timeout); other `5xx`, `408`, `429`, a
//! refused or reset connection are [`Retryable`](BackendErrorKind::Retryable);
//! `404` is [`NotFound`](BackendErrorKind::NotFound); `401`/`403` are
//! [`Forbidden`](BackendErrorKind::Forbidden); anything else is
//! [`Other`](BackendErrorKind::Other). Responses are parsed with `httparse`
//! in a fixed head buffer; bodies are `Content-Length` or chunked.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use cairn_objects::S3Config;
use rusty_s3::actions::S3Action;

use super::{Backend, BackendError, BackendErrorKind, ListEntry, ObjectInfo, check_key};
use crate::http::date::{from_unix_seconds, parse_http_date, parse_iso8601};
use crate::limits::{HEADERS_MAX, LIST_KEYS_MAX, REQUEST_HEAD_MAX_BYTES};

mod tls;
use tls::{Conn, Tls, tls_config};

/// How long a request's signature stays valid: it is made just before the
/// request is sent, so this only has to cover clock skew and a slow answer.
const SIGNATURE_LIFE: Duration = Duration::from_mins(15);

/// The largest body other than a block's bytes (an error page, a listing)
/// read from the origin.
const SMALL_BODY_MAX_BYTES: usize = 16 << 20;

/// How an [`HttpBackend`] reaches its origin.
#[derive(Clone, Debug)]
pub struct HttpBackendConfig {
    /// Connections open to the origin at most (idle or busy). Default 64.
    pub connections_max: usize,
    /// Time to connect. Default 5 s.
    pub connect_timeout: Duration,
    /// Time any one read or write may block, and to wait for a free
    /// connection. Default 30 s.
    pub io_timeout: Duration,
    /// `https`: the PEM certificates an origin's must chain to. `None`:
    /// `$SSL_CERT_FILE`, else the system's bundle.
    pub ca_file: Option<PathBuf>,
}

impl Default for HttpBackendConfig {
    fn default() -> Self {
        Self {
            connections_max: 64,
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(30),
            ca_file: None,
        }
    }
}

/// An HTTP origin's objects. See the module docs.
pub struct HttpBackend {
    url: String,
    /// `HOST:PORT` as given, for the `Host` header.
    authority: String,
    addrs: Vec<SocketAddr>,
    /// `/BUCKET`, or empty: a key's path is `{base}/{key}`.
    base: String,
    config: HttpBackendConfig,
    /// Signs each request (an S3 store with keys), or none (anonymous).
    signer: Option<Signer>,
    /// `https`: how connections are wrapped.
    tls: Option<Tls>,
    pool: Mutex<Pool>,
    freed: Condvar,
}

/// A bucket and the keys its requests are signed with.
struct Signer {
    bucket: rusty_s3::Bucket,
    credentials: rusty_s3::Credentials,
}

#[derive(Default)]
struct Pool {
    idle: Vec<Conn>,
    open: usize,
}

impl std::fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBackend")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// What an answer's head said.
#[derive(Default)]
struct Head {
    status: u16,
    content_length: Option<u64>,
    chunked: bool,
    close: bool,
    last_modified: Option<u64>,
    etag: Option<String>,
    /// `Content-Range: bytes a-b/…` as (a, b).
    content_range: Option<(u64, u64)>,
}

/// Where a body goes.
enum Sink<'a> {
    /// Discarded (`HEAD`): there is none.
    None,
    /// Exactly these bytes.
    Exact(&'a mut [u8]),
    /// Up to [`SMALL_BODY_MAX_BYTES`].
    Vec(&'a mut Vec<u8>),
}

impl HttpBackend {
    /// The origin at `url`: `http://HOST:PORT/BUCKET` (keys are
    /// `/BUCKET/KEY`) or `http://HOST:PORT/` (keys are `/KEY`), or the same
    /// with `https://` (TLS; the CA bundle is read now). The host is resolved
    /// now; nothing is connected until the first request.
    pub fn new(url: &str, config: HttpBackendConfig) -> Result<Self, String> {
        let (rest, https) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => {
                return Err(format!(
                    "{url}: an origin URL is http://HOST:PORT/BUCKET or https://HOST:PORT/BUCKET"
                ));
            }
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.is_empty() || authority.contains('@') {
            return Err(format!(
                "{url}: an origin URL is http://HOST:PORT/BUCKET (no user info)"
            ));
        }
        let path = path.trim_end_matches('/');
        if path.contains(['?', '#']) || path.get(1..).is_some_and(|p| p.contains('/')) {
            return Err(format!(
                "{url}: the path is one bucket name at most (http://HOST:PORT/BUCKET)"
            ));
        }
        if !(1..=crate::limits::CONNECTIONS_MAX).contains(&config.connections_max) {
            return Err(format!(
                "{} origin connections: not in 1..={}",
                config.connections_max,
                crate::limits::CONNECTIONS_MAX
            ));
        }
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.contains(']'))
        {
            authority.to_owned()
        } else {
            format!("{authority}:{}", if https { 443 } else { 80 })
        };
        let addrs: Vec<SocketAddr> = with_port
            .to_socket_addrs()
            .map_err(|e| format!("{url}: resolving {with_port}: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("{url}: {with_port} resolves to no address"));
        }
        let mut base = String::new();
        if !path.is_empty() {
            encode_path(&mut base, path);
        }
        let tls = if https {
            // The host the certificate must name: the authority without its
            // port, an IPv6 literal without its brackets.
            let host = match authority.rsplit_once(':') {
                Some((host, port)) if !port.contains(']') => host,
                _ => authority,
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|e| format!("{url}: {host:?} is not a TLS server name: {e}"))?;
            Some(Tls {
                config: tls_config(config.ca_file.as_deref())?,
                name,
            })
        } else {
            None
        };
        Ok(Self {
            url: url.to_owned(),
            authority: authority.to_owned(),
            addrs,
            base,
            config,
            signer: None,
            tls,
            pool: Mutex::new(Pool::default()),
            freed: Condvar::new(),
        })
    }

    /// The bucket of an S3-compatible store (`store`: endpoint, bucket,
    /// region, keys), every request signed with SigV4 by `store`'s keys;
    /// `store.timeout` replaces `config.io_timeout`. Nothing is sent until
    /// the first request: a wrong key shows there, as `403`
    /// ([`Forbidden`](BackendErrorKind::Forbidden)).
    pub fn s3(store: &S3Config, mut config: HttpBackendConfig) -> Result<Self, String> {
        let endpoint = store.endpoint.trim_end_matches('/');
        let parsed = url::Url::parse(endpoint).map_err(|e| format!("endpoint {endpoint}: {e}"))?;
        if parsed.path() != "/" || parsed.query().is_some() {
            return Err(format!(
                "endpoint {endpoint}: the store's URL is http://HOST:PORT, with no path"
            ));
        }
        if store.bucket.is_empty() || store.bucket.contains(['/', '?', '#']) {
            return Err(format!("{:?} is not a bucket name", store.bucket));
        }
        config.io_timeout = store.timeout;
        let mut backend = Self::new(&format!("{endpoint}/{}", store.bucket), config)?;
        let host = parsed
            .host_str()
            .ok_or_else(|| format!("endpoint {endpoint}: no host"))?;
        // The Host header must be what the signature covers: the URL's host,
        // with its port only when it is not the scheme's default.
        backend.authority = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let bucket = rusty_s3::Bucket::new(
            parsed,
            rusty_s3::UrlStyle::Path,
            store.bucket.clone(),
            store.region.clone(),
        )
        .map_err(|e| format!("endpoint {endpoint}, bucket {}: {e}", store.bucket))?;
        backend.signer = Some(Signer {
            bucket,
            credentials: rusty_s3::Credentials::new(
                store.access_key.clone(),
                store.secret_key.clone(),
            ),
        });
        Ok(backend)
    }

    /// The origin's URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Connections open to the origin now (idle or busy).
    pub fn connections_open(&self) -> usize {
        self.lock_pool().open
    }

    fn lock_pool(&self) -> MutexGuard<'_, Pool> {
        self.pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An idle connection (`true`: reused) or a new one, waiting up to the
    /// I/O timeout while all are busy.
    fn acquire(&self, what: &str, fresh: bool) -> Result<(Conn, bool), BackendError> {
        let deadline = Instant::now() + self.config.io_timeout;
        let mut pool = self.lock_pool();
        loop {
            if !fresh && let Some(stream) = pool.idle.pop() {
                return Ok((stream, true));
            }
            if fresh && let Some(stream) = pool.idle.pop() {
                // Make room for a new one rather than reuse.
                drop(stream);
                pool.open -= 1;
            }
            if pool.open < self.config.connections_max {
                pool.open += 1;
                drop(pool);
                return match self.connect() {
                    Ok(stream) => Ok((stream, false)),
                    Err(e) => {
                        self.release(None);
                        Err(io_error(what, &self.url, &e))
                    }
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(BackendError::new(
                    BackendErrorKind::Timeout,
                    format!(
                        "{what}: all {} connections to {} stayed busy for {:?}",
                        self.config.connections_max, self.url, self.config.io_timeout
                    ),
                ));
            }
            pool = self
                .freed
                .wait_timeout(pool, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Returns a connection to the pool (`Some`) or closes one (`None`).
    fn release(&self, stream: Option<Conn>) {
        let mut pool = self.lock_pool();
        match stream {
            Some(stream) => pool.idle.push(stream),
            None => pool.open -= 1,
        }
        drop(pool);
        self.freed.notify_one();
    }

    fn connect(&self) -> io::Result<Conn> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for addr in &self.addrs {
            match TcpStream::connect_timeout(addr, self.config.connect_timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(self.config.io_timeout))?;
                    stream.set_write_timeout(Some(self.config.io_timeout))?;
                    stream.set_nodelay(true)?;
                    return match &self.tls {
                        Some(tls) => tls.wrap(stream),
                        None => Ok(Conn::Plain(stream)),
                    };
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Sends `method target` (with `range`) and reads the answer's body into
    /// `sink` if its status is `2xx` (into `error_body` otherwise).
    fn request(
        &self,
        method: &str,
        target: &str,
        range: Option<(u64, u64)>,
        sink: &mut Sink<'_>,
        error_body: &mut Vec<u8>,
    ) -> Result<Head, BackendError> {
        let what = format!("{method} {target}");
        let mut request = format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nUser-Agent: cairn\r\n",
            self.authority
        );
        if let Some((first, last)) = range {
            use std::fmt::Write as _;
            let _ = write!(request, "Range: bytes={first}-{last}\r\n");
        }
        request.push_str("\r\n");
        let mut fresh = false;
        loop {
            let (mut stream, reused) = self.acquire(&what, fresh)?;
            match exchange(&mut stream, method, request.as_bytes(), sink, error_body) {
                Ok(head) => {
                    self.release((!head.close).then_some(stream));
                    return Ok(head);
                }
                Err(Failure::BeforeAnswer(_)) if reused => {
                    // The origin closed the idle connection: once more, new.
                    self.release(None);
                    fresh = true;
                }
                Err(Failure::BeforeAnswer(e) | Failure::Io(e)) => {
                    self.release(None);
                    return Err(io_error(&what, &self.url, &e));
                }
                Err(Failure::Protocol(message)) => {
                    self.release(None);
                    return Err(BackendError::new(
                        BackendErrorKind::Other,
                        format!("{what} at {}: {message}", self.url),
                    ));
                }
            }
        }
    }

    /// The request target of `method` (`HEAD` or `GET`) on `key`: its path,
    /// and with a signer the signature's query.
    fn target(&self, method: &str, key: &str) -> String {
        if let Some(signer) = &self.signer {
            let credentials = Some(&signer.credentials);
            let url = if method == "HEAD" {
                signer
                    .bucket
                    .head_object(credentials, key)
                    .sign(SIGNATURE_LIFE)
            } else {
                signer
                    .bucket
                    .get_object(credentials, key)
                    .sign(SIGNATURE_LIFE)
            };
            return url[url::Position::BeforePath..].to_owned();
        }
        let mut target = String::with_capacity(self.base.len() + key.len() + 8);
        target.push_str(&self.base);
        target.push('/');
        encode_path(&mut target, key);
        target
    }

    fn status_error(&self, what: &str, head: &Head, body: &[u8]) -> BackendError {
        let kind = match head.status {
            404 => BackendErrorKind::NotFound,
            401 | 403 => BackendErrorKind::Forbidden,
            504 => BackendErrorKind::Timeout,
            408 | 429 | 500..=599 => BackendErrorKind::Retryable,
            _ => BackendErrorKind::Other,
        };
        let code = xml_element(body, "Code")
            .map(|c| format!(" ({})", String::from_utf8_lossy(c)))
            .unwrap_or_default();
        BackendError::new(
            kind,
            format!("{what}: origin {} answered {}{code}", self.url, head.status),
        )
    }

    fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<(bool, Option<String>), BackendError> {
        let target = if let Some(signer) = &self.signer {
            let mut action = signer.bucket.list_objects_v2(Some(&signer.credentials));
            // Keys come back as they are, as they do unsigned (rusty-s3 asks
            // for them URL-encoded).
            action.query_mut().remove("encoding-type");
            action.with_max_keys(max);
            action.with_prefix(prefix);
            if let Some(after) = after {
                action.with_start_after(after);
            }
            let url = action.sign(SIGNATURE_LIFE);
            url[url::Position::BeforePath..].to_owned()
        } else {
            let mut target = format!("{}/?list-type=2&max-keys={max}&prefix=", self.base);
            encode_query(&mut target, prefix);
            if let Some(after) = after {
                target.push_str("&start-after=");
                encode_query(&mut target, after);
            }
            target
        };
        let mut body = Vec::new();
        let mut error_body = Vec::new();
        let head = self.request(
            "GET",
            &target,
            None,
            &mut Sink::Vec(&mut body),
            &mut error_body,
        )?;
        let unsupported = |why: &str| {
            BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "listing {prefix:?}: origin {} does not answer S3 ListObjectsV2 ({why}); \
                     only an S3-compatible origin can be listed",
                    self.url
                ),
            )
        };
        if !(200..300).contains(&head.status) {
            let error = self.status_error(&format!("listing {prefix:?}"), &head, &error_body);
            return Err(if error.is_retryable() {
                error
            } else {
                unsupported(&format!("status {}", head.status))
            });
        }
        if find(&body, b"<ListBucketResult").is_none() {
            return Err(unsupported("no ListBucketResult in the answer"));
        }
        let mut last = None;
        let mut rest = body.as_slice();
        while let Some(start) = find(rest, b"<Contents>") {
            let after_start = &rest[start..];
            let end = find(after_start, b"</Contents>")
                .ok_or_else(|| unsupported("an unclosed Contents element"))?;
            let contents = &after_start[..end];
            rest = &after_start[end..];
            let key = xml_element(contents, "Key")
                .and_then(xml_unescape)
                .ok_or_else(|| unsupported("a Contents element without a UTF-8 Key"))?;
            let size = xml_element(contents, "Size")
                .and_then(|s| std::str::from_utf8(s).ok()?.trim().parse::<u64>().ok())
                .ok_or_else(|| unsupported("a Contents element without a Size"))?;
            let seconds = xml_element(contents, "LastModified")
                .and_then(|t| parse_iso8601(std::str::from_utf8(t).ok()?))
                .ok_or_else(|| unsupported("a Contents element without a LastModified"))?;
            let etag = xml_element(contents, "ETag").and_then(xml_unescape);
            if key.starts_with(prefix)
                && after.is_none_or(|a| key.as_str() > a)
                && check_key(&key).is_ok()
            {
                out.push(ListEntry {
                    key: key.clone(),
                    info: ObjectInfo {
                        size,
                        modified: version_time(seconds, etag.as_deref()),
                    },
                });
            }
            last = Some(key);
        }
        let truncated = xml_element(&body, "IsTruncated").is_some_and(|t| t == b"true");
        Ok((truncated, last))
    }
}

impl Backend for HttpBackend {
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
        check_key(key)?;
        let target = self.target("HEAD", key);
        let mut error_body = Vec::new();
        let head = self.request("HEAD", &target, None, &mut Sink::None, &mut error_body)?;
        if !(200..300).contains(&head.status) {
            return Err(self.status_error(&format!("HEAD {key}"), &head, &error_body));
        }
        let size = head.content_length.ok_or_else(|| {
            BackendError::new(
                BackendErrorKind::Other,
                format!("HEAD {key}: origin {} gave no Content-Length", self.url),
            )
        })?;
        let Some(seconds) = head.last_modified else {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "HEAD {key}: origin {} gave no Last-Modified (needed to version the cache)",
                    self.url
                ),
            ));
        };
        Ok(ObjectInfo {
            size,
            modified: version_time(seconds, head.etag.as_deref()),
        })
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        check_key(key)?;
        if buf.is_empty() {
            return Ok(());
        }
        let target = self.target("GET", key);
        let last = offset + buf.len() as u64 - 1;
        let len = buf.len() as u64;
        let mut error_body = Vec::new();
        let head = self.request(
            "GET",
            &target,
            Some((offset, last)),
            &mut Sink::Exact(buf),
            &mut error_body,
        )?;
        match head.status {
            206 if head.content_range == Some((offset, last)) => Ok(()),
            200 if offset == 0 && head.content_length == Some(len) => Ok(()),
            200 | 206 => Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "GET {key} bytes {offset}-{last}: origin {} answered {} with other bytes",
                    self.url, head.status
                ),
            )),
            416 => Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "{key}: shorter than {} bytes at origin {} (changed while read)",
                    offset + len,
                    self.url
                ),
            )),
            _ => Err(self.status_error(&format!("GET {key}"), &head, &error_body)),
        }
    }

    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError> {
        let wanted = out.len() + max;
        let mut after = after.map(str::to_owned);
        loop {
            let before = out.len();
            let page = (wanted - out.len() + 1).min(LIST_KEYS_MAX);
            let (truncated, last) = self.list_page(prefix, after.as_deref(), page, out)?;
            if out.len() > wanted {
                out.truncate(wanted);
                return Ok(true);
            }
            if !truncated {
                return Ok(false);
            }
            if out.len() == wanted {
                return Ok(true);
            }
            match last {
                Some(last) if after.as_deref().is_none_or(|a| last.as_str() > a) => {
                    after = Some(last);
                }
                _ if out.len() > before => after = out.last().map(|e| e.key.clone()),
                _ => {
                    return Err(BackendError::new(
                        BackendErrorKind::Other,
                        format!(
                            "listing {prefix:?}: origin {} said truncated without a next key",
                            self.url
                        ),
                    ));
                }
            }
        }
    }
}

/// How one exchange failed.
enum Failure {
    /// Nothing of the answer arrived (the request may not have been sent).
    BeforeAnswer(io::Error),
    /// The connection failed during the answer.
    Io(io::Error),
    /// The answer was not HTTP we accept.
    Protocol(String),
}

fn exchange(
    stream: &mut Conn,
    method: &str,
    request: &[u8],
    sink: &mut Sink<'_>,
    error_body: &mut Vec<u8>,
) -> Result<Head, Failure> {
    stream.write_all(request).map_err(Failure::BeforeAnswer)?;
    let mut buf = vec![0u8; REQUEST_HEAD_MAX_BYTES];
    let mut filled = 0;
    let (head, head_len) = loop {
        let n = match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => {
                return Err(Failure::BeforeAnswer(io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(0) => return Err(Failure::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if filled == 0 && is_reset(&e) => return Err(Failure::BeforeAnswer(e)),
            Err(e) => return Err(Failure::Io(e)),
        };
        filled += n;
        let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf[..filled]) {
            Ok(httparse::Status::Complete(len)) => break (parse_head(&response)?, len),
            Ok(httparse::Status::Partial) if filled < buf.len() => {}
            Ok(httparse::Status::Partial) => {
                return Err(Failure::Protocol(format!(
                    "an answer head over {} bytes",
                    buf.len()
                )));
            }
            Err(e) => return Err(Failure::Protocol(format!("a malformed answer: {e}"))),
        }
    };
    if head.status / 100 == 1 {
        return Err(Failure::Protocol(format!(
            "an interim {} answer",
            head.status
        )));
    }
    let mut pending = &buf[head_len..filled];
    let no_body = method == "HEAD" || head.status == 204 || head.status == 304;
    if no_body {
        return if pending.is_empty() {
            Ok(head)
        } else {
            Err(Failure::Protocol("bytes after a bodiless answer".into()))
        };
    }
    let ok = (200..300).contains(&head.status);
    let mut reader = Prefixed {
        pending: &mut pending,
        stream,
    };
    match (ok, sink) {
        (true, Sink::Exact(out)) if !head.chunked => {
            if head.content_length == Some(out.len() as u64) {
                reader.read_exact(out).map_err(Failure::Io)?;
            } else {
                // Read nothing into `out`; the caller reports the mismatch
                // (its range check fails) or the status.
                let mut discard = Vec::new();
                read_small(&mut reader, &head, &mut discard)?;
            }
        }
        (true, Sink::Exact(out)) => {
            let mut body = Vec::new();
            read_small(&mut reader, &head, &mut body)?;
            if body.len() == out.len() {
                out.copy_from_slice(&body);
            } else {
                return Err(Failure::Protocol(format!(
                    "a chunked body of {} bytes for {} asked",
                    body.len(),
                    out.len()
                )));
            }
        }
        (true, Sink::Vec(out)) => read_small(&mut reader, &head, out)?,
        (true, Sink::None) | (false, _) => read_small(&mut reader, &head, error_body)?,
    }
    if !reader.pending.is_empty() {
        return Err(Failure::Protocol("bytes after the body".into()));
    }
    Ok(head)
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            // TLS: the origin closed without close_notify.
            | io::ErrorKind::UnexpectedEof
    )
}

/// The bytes read with the head, then the stream.
struct Prefixed<'a, 'b> {
    pending: &'a mut &'b [u8],
    stream: &'a mut Conn,
}

impl Read for Prefixed<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pending.is_empty() {
            return self.stream.read(out);
        }
        let n = self.pending.len().min(out.len());
        out[..n].copy_from_slice(&self.pending[..n]);
        *self.pending = &self.pending[n..];
        Ok(n)
    }
}

/// Reads a body of at most [`SMALL_BODY_MAX_BYTES`] into `out`.
fn read_small(reader: &mut impl Read, head: &Head, out: &mut Vec<u8>) -> Result<(), Failure> {
    let too_big = || Failure::Protocol(format!("a body over {SMALL_BODY_MAX_BYTES} bytes"));
    if head.chunked {
        loop {
            let line = read_line(reader)?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| Failure::Protocol(format!("a bad chunk size {size_text:?}")))?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !read_line(reader)?.is_empty() {}
                return Ok(());
            }
            if out.len() + size > SMALL_BODY_MAX_BYTES {
                return Err(too_big());
            }
            let start = out.len();
            out.resize(start + size, 0);
            reader.read_exact(&mut out[start..]).map_err(Failure::Io)?;
            if !read_line(reader)?.is_empty() {
                return Err(Failure::Protocol("a chunk without its CRLF".into()));
            }
        }
    }
    let Some(len) = head.content_length else {
        if head.close {
            // Delimited by the end of the connection.
            reader
                .take(SMALL_BODY_MAX_BYTES as u64 + 1)
                .read_to_end(out)
                .map_err(Failure::Io)?;
            return if out.len() > SMALL_BODY_MAX_BYTES {
                Err(too_big())
            } else {
                Ok(())
            };
        }
        return Err(Failure::Protocol(
            "a body with neither Content-Length nor chunked encoding".into(),
        ));
    };
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= SMALL_BODY_MAX_BYTES)
        .ok_or_else(too_big)?;
    let start = out.len();
    out.resize(start + len, 0);
    reader.read_exact(&mut out[start..]).map_err(Failure::Io)
}

/// One CRLF-ended line (of a chunked body), without the CRLF; at most 4 KiB.
fn read_line(reader: &mut impl Read) -> Result<String, Failure> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        reader.read_exact(&mut byte).map_err(Failure::Io)?;
        if byte[0] == b'\n' {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return String::from_utf8(line)
                .map_err(|_| Failure::Protocol("a chunk line that is not UTF-8".into()));
        }
        if line.len() >= 4096 {
            return Err(Failure::Protocol("a chunk line over 4 KiB".into()));
        }
        line.push(byte[0]);
    }
}

fn parse_head(response: &httparse::Response<'_, '_>) -> Result<Head, Failure> {
    let mut head = Head {
        status: response.code.unwrap_or(0),
        close: response.version == Some(0),
        ..Head::default()
    };
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value).unwrap_or("").trim();
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let len = value
                .parse::<u64>()
                .map_err(|_| Failure::Protocol(format!("a bad Content-Length {value:?}")))?;
            if head.content_length.is_some_and(|l| l != len) {
                return Err(Failure::Protocol("two Content-Lengths".into()));
            }
            head.content_length = Some(len);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if value.eq_ignore_ascii_case("chunked") {
                head.chunked = true;
            } else {
                return Err(Failure::Protocol(format!(
                    "a Transfer-Encoding {value:?}, not chunked"
                )));
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',') {
                let token = token.trim();
                if token.eq_ignore_ascii_case("close") {
                    head.close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    head.close = false;
                }
            }
        } else if name.eq_ignore_ascii_case("last-modified") {
            head.last_modified = parse_http_date(value);
        } else if name.eq_ignore_ascii_case("etag") {
            head.etag = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("content-range") {
            head.content_range = value
                .strip_prefix("bytes ")
                .and_then(|r| r.split_once('/'))
                .and_then(|(span, _)| span.split_once('-'))
                .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
        }
    }
    if head.chunked {
        // RFC 9112 6.3: chunked wins over Content-Length.
        head.content_length = None;
    }
    Ok(head)
}

/// `seconds` with a sub-second part hashed from `etag` (FNV-1a), so two
/// versions written within one second differ in the cache.
fn version_time(seconds: u64, etag: Option<&str>) -> SystemTime {
    let nanos = etag.map_or(0, |etag| {
        let tag = etag.trim_start_matches("W/").trim_matches('"');
        let hash = tag.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        hash % 1_000_000_000
    });
    from_unix_seconds(seconds) + Duration::from_nanos(nanos)
}

fn io_error(what: &str, url: &str, e: &io::Error) -> BackendError {
    let kind = match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => BackendErrorKind::Timeout,
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof
        | io::ErrorKind::Interrupted => BackendErrorKind::Retryable,
        _ => BackendErrorKind::Other,
    };
    let cause = if kind == BackendErrorKind::Timeout {
        "timed out".to_owned()
    } else {
        e.to_string()
    };
    BackendError::new(kind, format!("{what} at origin {url}: {cause}"))
}

/// Appends `text` percent-encoded for a path: all but unreserved bytes and `/`.
fn encode_path(out: &mut String, text: &str) {
    encode(out, text, true);
}

/// Appends `text` percent-encoded for a query value.
fn encode_query(out: &mut String, text: &str) {
    encode(out, text, false);
}

fn encode(out: &mut String, text: &str, keep_slash: bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The text of the first `<name>…</name>` in `xml`.
fn xml_element<'a>(xml: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = find(xml, open.as_bytes())? + open.len();
    let len = find(&xml[start..], close.as_bytes())?;
    Some(&xml[start..start + len])
}

/// XML text with its entities (the five named, `&#N;`, `&#xN;`) decoded.
fn xml_unescape(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let semi = rest[amp..].find(';')? + amp;
        let entity = &rest[amp + 1..semi];
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = entity.strip_prefix("#x") {
                    u32::from_str_radix(hex, 16).ok()?
                } else {
                    entity.strip_prefix('#')?.parse().ok()?
                };
                char::from_u32(code)?
            }
        };
        out.push(c);
        rest = &rest[semi + 1..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_requests_carry_a_signature_over_the_host_sent() {
        let origin = S3Config {
            endpoint: "http://127.0.0.1:80/".into(),
            bucket: "media".into(),
            region: "us-east-1".into(),
            access_key: "AKEXAMPLE".into(),
            secret_key: "secret".into(),
            timeout: Duration::from_secs(7),
        };
        let backend = HttpBackend::s3(&origin, HttpBackendConfig::default()).expect("origin");
        // The url crate drops a default port, so the signature covers
        // `127.0.0.1`: the Host header must say the same.
        assert_eq!(backend.authority, "127.0.0.1");
        assert_eq!(backend.config.io_timeout, Duration::from_secs(7));
        let head = backend.target("HEAD", "a b.mp4");
        let get = backend.target("GET", "a b.mp4");
        for target in [&head, &get] {
            assert!(target.starts_with("/media/a%20b.mp4?"), "{target}");
            assert!(target.contains("X-Amz-Credential=AKEXAMPLE%2F"), "{target}");
            assert!(target.contains("X-Amz-Signature="), "{target}");
        }
        let signature = |t: &str| t.rsplit_once("X-Amz-Signature=").map(|(_, s)| s.to_owned());
        assert_ne!(signature(&head), signature(&get), "the method is signed");
        assert!(
            !format!("{origin:?}").contains("secret\""),
            "Debug hides the secret"
        );
        for (endpoint, bucket) in [
            ("http://127.0.0.1:80/path", "media"),
            ("http://127.0.0.1:80?x", "media"),
            ("not a url", "media"),
            ("http://127.0.0.1:80", "a/b"),
            ("http://127.0.0.1:80", ""),
        ] {
            let bad = S3Config {
                endpoint: endpoint.into(),
                bucket: bucket.into(),
                ..origin.clone()
            };
            assert!(
                HttpBackend::s3(&bad, HttpBackendConfig::default()).is_err(),
                "{endpoint} {bucket}"
            );
        }
    }

    #[test]
    fn urls_are_checked_and_keys_encoded() {
        let backend = HttpBackend::new("http://127.0.0.1:9/media", HttpBackendConfig::default())
            .expect("url");
        assert_eq!(
            backend.target("GET", "a b/ü&.mp4"),
            "/media/a%20b/%C3%BC%26.mp4"
        );
        let root =
            HttpBackend::new("http://127.0.0.1:9/", HttpBackendConfig::default()).expect("url");
        assert_eq!(root.target("GET", "x"), "/x");
        let missing = HttpBackendConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..HttpBackendConfig::default()
        };
        let error = HttpBackend::new("https://127.0.0.1:9/b", missing).expect_err("no CA file");
        assert!(error.contains("CA file /nonexistent/ca.pem"), "{error}");
        let not_pem = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(not_pem.path(), b"not a certificate").expect("write");
        let config = HttpBackendConfig {
            ca_file: Some(not_pem.path().to_path_buf()),
            ..HttpBackendConfig::default()
        };
        let error = HttpBackend::new("https://127.0.0.1:9/b", config).expect_err("no certificate");
        assert!(error.contains("holds no certificate"), "{error}");
        for bad in [
            "ftp://h/b",
            "http:///b",
            "http://u@127.0.0.1:9/b",
            "http://127.0.0.1:9/b/c",
            "http://127.0.0.1:9/b?x",
        ] {
            assert!(
                HttpBackend::new(bad, HttpBackendConfig::default()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn xml_entities_decode() {
        assert_eq!(
            xml_unescape(b"a&amp;b&lt;&#x41;&#66;&quot;").as_deref(),
            Some("a&b<AB\"")
        );
        assert_eq!(xml_unescape(b"a&bogus;"), None);
        assert_eq!(xml_element(b"<X><Key>k</Key></X>", "Key"), Some(&b"k"[..]));
    }

    #[test]
    fn a_refused_connection_is_retryable_and_releases_its_slot() {
        // Bind then drop: the port refuses.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let backend = HttpBackend::new(
            &format!("http://127.0.0.1:{port}/b"),
            HttpBackendConfig {
                connections_max: 1,
                ..HttpBackendConfig::default()
            },
        )
        .expect("url");
        for _ in 0..3 {
            let error = backend.stat("k").expect_err("refused");
            assert_eq!(error.kind, BackendErrorKind::Retryable, "{error}");
        }
        assert_eq!(backend.connections_open(), 0);
    }
}
