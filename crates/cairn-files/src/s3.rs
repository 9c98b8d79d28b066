//! The S3 side of the gateway: error bodies in S3's XML (`NoSuchKey`,
//! `NoSuchBucket`, `InvalidRange`, …) and `ListObjectsV2`
//! (`GET /BUCKET?list-type=2&prefix=…&delimiter=…`), path-style only.
//! Requests are anonymous: an `Authorization` header (SigV4) is accepted and
//! not checked.

use std::fmt::Write as _;

use crate::backend::{Backend, BackendError, ListEntry};
use crate::http::date::{unix_seconds, write_iso8601};
use crate::http::request::query_value;
use crate::limits::LIST_KEYS_MAX;

/// An error answer: its status and S3 error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct S3Error {
    /// HTTP status.
    pub status: u16,
    /// S3's `<Code>`.
    pub code: &'static str,
}

impl S3Error {
    /// 400: a malformed request.
    pub const BAD_REQUEST: Self = Self {
        status: 400,
        code: "BadRequest",
    };
    /// 403: the key would leave the root.
    pub const ACCESS_DENIED: Self = Self {
        status: 403,
        code: "AccessDenied",
    };
    /// 404: no such object.
    pub const NO_SUCH_KEY: Self = Self {
        status: 404,
        code: "NoSuchKey",
    };
    /// 404: the path names another bucket than the export.
    pub const NO_SUCH_BUCKET: Self = Self {
        status: 404,
        code: "NoSuchBucket",
    };
    /// 405: not GET or HEAD.
    pub const METHOD_NOT_ALLOWED: Self = Self {
        status: 405,
        code: "MethodNotAllowed",
    };
    /// 408: the request head did not arrive in time.
    pub const REQUEST_TIMEOUT: Self = Self {
        status: 408,
        code: "RequestTimeout",
    };
    /// 412: If-Match / If-Unmodified-Since failed.
    pub const PRECONDITION_FAILED: Self = Self {
        status: 412,
        code: "PreconditionFailed",
    };
    /// 414: the request line is too long.
    pub const URI_TOO_LONG: Self = Self {
        status: 414,
        code: "RequestURITooLong",
    };
    /// 416: the range selects nothing.
    pub const INVALID_RANGE: Self = Self {
        status: 416,
        code: "InvalidRange",
    };
    /// 431: the headers are too large or too many.
    pub const HEADERS_TOO_LARGE: Self = Self {
        status: 431,
        code: "RequestHeaderSectionTooLarge",
    };
    /// 502: the backend failed.
    pub const BAD_GATEWAY: Self = Self {
        status: 502,
        code: "BadGateway",
    };
    /// 503: too many connections.
    pub const SLOW_DOWN: Self = Self {
        status: 503,
        code: "SlowDown",
    };
    /// 504: the backend timed out.
    pub const GATEWAY_TIMEOUT: Self = Self {
        status: 504,
        code: "GatewayTimeout",
    };

    /// The answer to a backend error.
    pub fn of(error: &BackendError) -> Self {
        use crate::backend::BackendErrorKind as K;
        match error.kind {
            K::NotFound => Self::NO_SUCH_KEY,
            K::Forbidden => Self::ACCESS_DENIED,
            K::Timeout => Self::GATEWAY_TIMEOUT,
            K::Retryable | K::Other => Self::BAD_GATEWAY,
        }
    }
}

/// The reason phrase of a status the gateway sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        412 => "Precondition Failed",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

/// Appends `text` to `out` with XML's five special characters escaped.
pub fn xml_escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
}

/// S3's `<Error>` document.
pub fn error_body(error: S3Error, message: &str, resource: &str) -> String {
    let mut body = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>");
    body.push_str(error.code);
    body.push_str("</Code><Message>");
    xml_escape(&mut body, message);
    body.push_str("</Message><Resource>");
    xml_escape(&mut body, resource);
    body.push_str("</Resource></Error>\n");
    body
}

/// Writes the strong entity tag of an object version, quotes included.
pub fn write_etag(out: &mut impl std::fmt::Write, size: u64, modified: std::time::SystemTime) {
    let nanos = modified
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let _ = write!(out, "\"{size:x}-{nanos:x}\"");
}

fn hex(text: &str) -> String {
    text.bytes().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// Answers `ListObjectsV2` on `backend` for `bucket` with the request's
/// `query`: the XML body, or the error to send.
pub fn list_objects_v2(
    backend: &dyn Backend,
    bucket: &str,
    query: &str,
) -> Result<String, (S3Error, String)> {
    let bad = |what: &str| (S3Error::BAD_REQUEST, what.to_owned());
    let prefix = query_value(query, "prefix").unwrap_or_default();
    let delimiter = query_value(query, "delimiter").filter(|d| !d.is_empty());
    let max_keys = match query_value(query, "max-keys") {
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| bad("max-keys is not a number"))?,
        None => LIST_KEYS_MAX,
    }
    .min(LIST_KEYS_MAX);
    let token = query_value(query, "continuation-token");
    let start_after = query_value(query, "start-after").filter(|s| !s.is_empty());
    let mut after = match &token {
        Some(token) => Some(unhex(token).ok_or_else(|| bad("invalid continuation-token"))?),
        None => start_after.clone(),
    };
    let mut contents: Vec<ListEntry> = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    let mut truncated = false;
    let mut page = Vec::new();
    'pages: while contents.len() + prefixes.len() < max_keys {
        page.clear();
        let more = backend
            .list(&prefix, after.as_deref(), max_keys.max(1), &mut page)
            .map_err(|e| (S3Error::of(&e), e.message))?;
        for entry in page.drain(..) {
            if contents.len() + prefixes.len() == max_keys {
                truncated = true;
                break 'pages;
            }
            let Some(rest) = entry.key.strip_prefix(prefix.as_str()) else {
                // A backend that breaks its contract is an error, not a panic.
                return Err((
                    S3Error::BAD_GATEWAY,
                    format!("the backend listed {:?} for prefix {prefix:?}", entry.key),
                ));
            };
            let common = delimiter.as_deref().and_then(|d| {
                rest.find(d)
                    .map(|at| entry.key[..prefix.len() + at + d.len()].to_owned())
            });
            if let Some(common) = common {
                // Skip everything under it: the next key after it sorts
                // after `common` followed by the highest character.
                after = Some(format!("{common}\u{10FFFF}"));
                prefixes.push(common);
                continue 'pages;
            }
            after = Some(entry.key.clone());
            contents.push(entry);
        }
        if !more {
            break;
        }
    }
    if !truncated && contents.len() + prefixes.len() == max_keys && max_keys > 0 {
        let mut probe = Vec::new();
        truncated = backend
            .list(&prefix, after.as_deref(), 1, &mut probe)
            .map_err(|e| (S3Error::of(&e), e.message))?
            || !probe.is_empty();
    }
    let mut body = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>",
    );
    xml_escape(&mut body, bucket);
    body.push_str("</Name><Prefix>");
    xml_escape(&mut body, &prefix);
    let _ = write!(
        body,
        "</Prefix><KeyCount>{}</KeyCount><MaxKeys>{max_keys}</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
        contents.len() + prefixes.len()
    );
    if let Some(delimiter) = &delimiter {
        body.push_str("<Delimiter>");
        xml_escape(&mut body, delimiter);
        body.push_str("</Delimiter>");
    }
    if let Some(token) = &token {
        body.push_str("<ContinuationToken>");
        xml_escape(&mut body, token);
        body.push_str("</ContinuationToken>");
    }
    if let Some(start_after) = &start_after {
        body.push_str("<StartAfter>");
        xml_escape(&mut body, start_after);
        body.push_str("</StartAfter>");
    }
    if truncated && let Some(after) = &after {
        let _ = write!(
            body,
            "<NextContinuationToken>{}</NextContinuationToken>",
            hex(after)
        );
    }
    for entry in &contents {
        body.push_str("<Contents><Key>");
        xml_escape(&mut body, &entry.key);
        body.push_str("</Key><LastModified>");
        write_iso8601(&mut body, unix_seconds(entry.info.modified));
        body.push_str("</LastModified><ETag>");
        let mut etag = String::new();
        write_etag(&mut etag, entry.info.size, entry.info.modified);
        xml_escape(&mut body, &etag);
        let _ = write!(
            body,
            "</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            entry.info.size
        );
    }
    for common in &prefixes {
        body.push_str("<CommonPrefixes><Prefix>");
        xml_escape(&mut body, common);
        body.push_str("</Prefix></CommonPrefixes>");
    }
    body.push_str("</ListBucketResult>\n");
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryBackend;
    use std::time::SystemTime;

    fn backend() -> MemoryBackend {
        let backend = MemoryBackend::new();
        for key in ["a.txt", "dir/x", "dir/y", "dir/sub/z", "e<&>.bin"] {
            backend.put(key, vec![1; 3], SystemTime::UNIX_EPOCH);
        }
        backend
    }

    fn keys(body: &str, tag: &str) -> Vec<String> {
        body.split(&format!("<{tag}>"))
            .skip(1)
            .map(|s| s.split('<').next().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn listing_with_and_without_delimiter_and_pages() {
        let backend = backend();
        let all = list_objects_v2(&backend, "b", "list-type=2").expect("list");
        assert_eq!(
            keys(&all, "Key"),
            ["a.txt", "dir/sub/z", "dir/x", "dir/y", "e&lt;&amp;&gt;.bin"]
        );
        assert!(all.contains("<IsTruncated>false</IsTruncated>"), "{all}");
        let top = list_objects_v2(&backend, "b", "list-type=2&delimiter=%2F").expect("list");
        assert_eq!(keys(&top, "Key"), ["a.txt", "e&lt;&amp;&gt;.bin"]);
        assert_eq!(keys(&top, "Prefix")[1..], ["dir/"]);
        let dir =
            list_objects_v2(&backend, "b", "list-type=2&prefix=dir/&delimiter=/").expect("list");
        assert_eq!(keys(&dir, "Key"), ["dir/x", "dir/y"]);
        assert_eq!(keys(&dir, "Prefix")[1..], ["dir/sub/"]);
        let mut seen = Vec::new();
        let mut query = "list-type=2&max-keys=2".to_owned();
        for _ in 0..5 {
            let page = list_objects_v2(&backend, "b", &query).expect("page");
            seen.extend(keys(&page, "Key"));
            let Some(token) = keys(&page, "NextContinuationToken").pop() else {
                break;
            };
            assert!(page.contains("<IsTruncated>true</IsTruncated>"));
            query = format!("list-type=2&max-keys=2&continuation-token={token}");
        }
        assert_eq!(seen.len(), 5, "{seen:?}");
        let error = list_objects_v2(&backend, "b", "continuation-token=zz").expect_err("bad token");
        assert_eq!(error.0.status, 400);
    }

    #[test]
    fn error_documents_escape_what_they_quote() {
        let body = error_body(S3Error::NO_SUCH_KEY, "no <such> key", "/b/a&b");
        assert!(body.contains("<Code>NoSuchKey</Code>"));
        assert!(body.contains("<Resource>/b/a&amp;b</Resource>"));
        assert!(body.contains("no &lt;such&gt; key"));
    }
}
