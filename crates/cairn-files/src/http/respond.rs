//! Answering one parsed request: routing (`/BUCKET/KEY`), preconditions,
//! ranges, and the body written from the cache's block handles — the head
//! and up to [`BLOCKS_PER_WRITE`] block slices in one `writev`, no copy
//! into a response buffer.

use std::io::{self, IoSlice, Write};
use std::time::SystemTime;

use cairn_store::device::BlockSlice;

use super::date::{unix_seconds, write_http_date};
use super::request::{
    Conditions, Precondition, RangeAnswer, Validators, parse_range, percent_decode,
};
use crate::backend::{Backend, BackendError};
use crate::cache::{FileCache, Object};
use crate::limits::BLOCKS_PER_WRITE;
use crate::s3::{S3Error, error_body, list_objects_v2, reason, write_etag};

/// What a request is served from.
pub(super) struct Context<'a, B> {
    pub(super) cache: &'a FileCache<B>,
    pub(super) bucket: &'a str,
}

/// A short string on the stack (an entity tag).
struct Tag {
    bytes: [u8; 64],
    len: usize,
}

impl std::fmt::Write for Tag {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl Tag {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// Writes a status line and the headers every answer carries.
fn status_line(out: &mut Vec<u8>, status: u16, close: bool) {
    let _ = write!(
        out,
        "HTTP/1.1 {status} {}\r\nServer: cairn\r\nDate: ",
        reason(status)
    );
    write_http_date(out, unix_seconds(SystemTime::now()));
    out.extend_from_slice(b"\r\n");
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
}

/// Writes a whole error answer (head, and the XML body unless `head_only`)
/// into `out`.
pub(super) fn error_head(
    out: &mut Vec<u8>,
    error: S3Error,
    message: &str,
    resource: &str,
    head_only: bool,
    close: bool,
) {
    error_with(out, error, message, resource, head_only, close, "");
}

/// [`error_head`] with `extra` header lines (each ending in CRLF).
fn error_with(
    out: &mut Vec<u8>,
    error: S3Error,
    message: &str,
    resource: &str,
    head_only: bool,
    close: bool,
    extra: &str,
) {
    status_line(out, error.status, close);
    out.extend_from_slice(extra.as_bytes());
    if error.status == 405 {
        out.extend_from_slice(b"Allow: GET, HEAD\r\n");
    }
    let message = if message.is_empty() {
        reason(error.status)
    } else {
        message
    };
    let body = error_body(error, message, resource);
    let _ = write!(
        out,
        "Content-Type: application/xml\r\nContent-Length: {}\r\n\r\n",
        if head_only { 0 } else { body.len() }
    );
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
}

/// Writes every byte of `parts`, in order, with vectored writes.
fn write_all_vectored(stream: &mut impl Write, mut parts: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        match stream.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The request's headers the gateway reads.
#[allow(clippy::struct_excessive_bools)] // one per header we look at
#[derive(Default)]
struct Fields<'a> {
    conditions: Conditions<'a>,
    range: Option<&'a str>,
    close: bool,
    keep_alive: bool,
    host: bool,
    body: bool,
    bad: bool,
}

fn fields<'a>(request: &httparse::Request<'_, 'a>) -> Fields<'a> {
    let mut f = Fields::default();
    for header in request.headers.iter() {
        let Ok(value) = std::str::from_utf8(header.value) else {
            continue; // not text: no header we read can use it
        };
        let name = header.name;
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("range") {
            f.range = Some(value);
        } else if is("if-match") {
            f.conditions.if_match = Some(value);
        } else if is("if-none-match") {
            f.conditions.if_none_match = Some(value);
        } else if is("if-modified-since") {
            f.conditions.if_modified_since = Some(value);
        } else if is("if-unmodified-since") {
            f.conditions.if_unmodified_since = Some(value);
        } else if is("if-range") {
            f.conditions.if_range = Some(value);
        } else if is("connection") {
            for token in value.split(',').map(str::trim) {
                f.close |= token.eq_ignore_ascii_case("close");
                f.keep_alive |= token.eq_ignore_ascii_case("keep-alive");
            }
        } else if is("host") {
            f.host = true;
        } else if is("transfer-encoding") {
            f.body = true;
        } else if is("content-length") {
            match value.trim().parse::<u64>() {
                Ok(0) => {}
                Ok(_) => f.body = true,
                Err(_) => f.bad = true,
            }
        }
    }
    f
}

/// Serves one request; whether the connection stays open.
pub(super) fn serve<B: Backend>(
    context: &Context<'_, B>,
    request: &httparse::Request<'_, '_>,
    stream: &mut impl Write,
    out: &mut Vec<u8>,
    path: &mut String,
    slices: &mut Vec<BlockSlice>,
) -> io::Result<bool> {
    out.clear();
    let method = request.method.unwrap_or_default();
    let target = request.path.unwrap_or_default();
    let f = fields(request);
    // We never read a body: a request with one ends the connection.
    let keep_alive = !f.body
        && !f.bad
        && if request.version == Some(1) {
            !f.close
        } else {
            f.keep_alive && !f.close
        };
    let head_only = method == "HEAD";
    let mut fail = |out: &mut Vec<u8>, error: S3Error, message: &str, resource: &str| {
        error_head(out, error, message, resource, head_only, !keep_alive);
    };
    let (raw_path, query) = target.split_once('?').unwrap_or((target, ""));
    let bad = if f.bad || (request.version == Some(1) && !f.host) {
        Some("a bad Content-Length, or no Host")
    } else if !raw_path.starts_with('/') || percent_decode(raw_path, path).is_none() {
        Some("the path is not /BUCKET/KEY in UTF-8")
    } else {
        None
    };
    if let Some(message) = bad {
        // A client this confused gets no second request.
        error_head(out, S3Error::BAD_REQUEST, message, target, head_only, true);
        stream.write_all(out)?;
        return Ok(false);
    }
    let (bucket, key) = path[1..].split_once('/').unwrap_or((&path[1..], ""));
    if method != "GET" && method != "HEAD" {
        fail(
            out,
            S3Error::METHOD_NOT_ALLOWED,
            "read-only: GET and HEAD",
            target,
        );
    } else if bucket != context.bucket {
        fail(out, S3Error::NO_SUCH_BUCKET, "no such bucket", bucket);
    } else if key.is_empty() {
        bucket_answer(context, out, query, head_only, keep_alive, &mut fail);
    } else {
        let resource = &path[..];
        return object(
            context, &f, key, resource, head_only, keep_alive, stream, out, slices,
        );
    }
    stream.write_all(out)?;
    Ok(keep_alive)
}

/// `HEAD /BUCKET` (it exists) or `GET /BUCKET?…` (`ListObjectsV2`).
fn bucket_answer<B: Backend>(
    context: &Context<'_, B>,
    out: &mut Vec<u8>,
    query: &str,
    head_only: bool,
    keep_alive: bool,
    fail: &mut impl FnMut(&mut Vec<u8>, S3Error, &str, &str),
) {
    if head_only {
        status_line(out, 200, !keep_alive);
        out.extend_from_slice(b"Content-Length: 0\r\n\r\n");
        return;
    }
    match list_objects_v2(context.cache.backend(), context.bucket, query) {
        Ok(body) => {
            status_line(out, 200, !keep_alive);
            let _ = write!(
                out,
                "Content-Type: application/xml\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            out.extend_from_slice(body.as_bytes());
        }
        Err((error, message)) => fail(out, error, &message, context.bucket),
    }
}

/// Answers a backend's error (its status and S3 code) before any of the
/// body was sent; returns whether the connection stays open.
fn backend_error(
    out: &mut Vec<u8>,
    stream: &mut impl Write,
    error: &BackendError,
    resource: &str,
    head_only: bool,
    keep_alive: bool,
) -> io::Result<bool> {
    error_head(
        out,
        S3Error::of(error),
        &error.message,
        resource,
        head_only,
        !keep_alive,
    );
    stream.write_all(out)?;
    Ok(keep_alive)
}

/// GET or HEAD of an object.
#[allow(clippy::too_many_arguments)] // the connection's buffers, passed down
fn object<B: Backend>(
    context: &Context<'_, B>,
    f: &Fields<'_>,
    key: &str,
    resource: &str,
    head_only: bool,
    keep_alive: bool,
    stream: &mut impl Write,
    out: &mut Vec<u8>,
    slices: &mut Vec<BlockSlice>,
) -> io::Result<bool> {
    let cache = context.cache;
    let object = match cache.open(key) {
        Ok(object) => object,
        Err(e) => return backend_error(out, stream, &e, resource, head_only, keep_alive),
    };
    let size = object.info.size;
    let modified = unix_seconds(object.info.modified);
    let mut etag = Tag {
        bytes: [0; 64],
        len: 0,
    };
    write_etag(&mut etag, size, object.info.modified);
    let validators = Validators {
        etag: etag.as_str(),
        modified,
    };
    let validator_headers = |out: &mut Vec<u8>| {
        let _ = write!(out, "ETag: {}\r\nLast-Modified: ", etag.as_str());
        write_http_date(out, modified);
        out.extend_from_slice(b"\r\n");
    };
    match f.conditions.evaluate(validators) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            status_line(out, 304, !keep_alive);
            validator_headers(out);
            out.extend_from_slice(b"\r\n");
            stream.write_all(out)?;
            return Ok(keep_alive);
        }
        Precondition::Failed => {
            error_head(
                out,
                S3Error::PRECONDITION_FAILED,
                "",
                resource,
                head_only,
                !keep_alive,
            );
            stream.write_all(out)?;
            return Ok(keep_alive);
        }
    }
    let range = if f.conditions.range_allowed(validators) {
        parse_range(f.range, size)
    } else {
        RangeAnswer::Whole
    };
    let (status, start, end) = match range {
        RangeAnswer::Whole => (200, 0, size),
        RangeAnswer::Part { start, end } => (206, start, end),
        RangeAnswer::Unsatisfiable => {
            let content_range = format!("Content-Range: bytes */{size}\r\n");
            error_with(
                out,
                S3Error::INVALID_RANGE,
                "",
                resource,
                head_only,
                !keep_alive,
                &content_range,
            );
            stream.write_all(out)?;
            return Ok(keep_alive);
        }
    };
    // The first blocks before the head: a backend failure can still be
    // answered with its status.
    slices.clear();
    let mut next = start;
    if !head_only && let Err(e) = fill(cache, key, &object, &mut next, end, slices) {
        return backend_error(out, stream, &e, resource, head_only, keep_alive);
    }
    status_line(out, status, !keep_alive);
    validator_headers(out);
    let _ = write!(
        out,
        "Accept-Ranges: bytes\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n",
        end - start
    );
    if status == 206 {
        let _ = write!(out, "Content-Range: bytes {start}-{}/{size}\r\n", end - 1);
    }
    out.extend_from_slice(b"\r\n");
    let mut with_head = true;
    loop {
        let mut parts: [IoSlice<'_>; BLOCKS_PER_WRITE + 1] =
            [IoSlice::new(&[]); BLOCKS_PER_WRITE + 1];
        let mut count = 0;
        if with_head {
            parts[0] = IoSlice::new(out);
            count = 1;
        }
        for slice in slices.iter() {
            parts[count] = IoSlice::new(slice);
            count += 1;
        }
        write_all_vectored(stream, &mut parts[..count])?;
        with_head = false;
        slices.clear();
        if next >= end || head_only {
            return Ok(keep_alive);
        }
        if let Err(e) = fill(cache, key, &object, &mut next, end, slices) {
            // The status is sent: all we can do is cut the body short.
            tracing::warn!("{resource}: {e}; connection closed mid-body");
            return Ok(false);
        }
    }
}

/// Appends to `slices` the parts of up to [`BLOCKS_PER_WRITE`] blocks from
/// byte `*next` (advanced) towards `end`.
fn fill<B: Backend>(
    cache: &FileCache<B>,
    key: &str,
    object: &Object,
    next: &mut u64,
    end: u64,
    slices: &mut Vec<BlockSlice>,
) -> Result<(), crate::backend::BackendError> {
    let block_size = cache.block_size();
    while *next < end && slices.len() < BLOCKS_PER_WRITE {
        let index = *next / block_size;
        let block_start = index * block_size;
        let block = cache.block(key, object, index)?;
        let from = (*next - block_start) as usize;
        let to = ((end - block_start) as usize).min(block.len());
        slices.push(block.into_slice(from..to));
        *next = block_start + to as u64;
    }
    Ok(())
}
