//! [`S3Store`]: any S3-compatible store over HTTP(S).
//!
//! Requests are signed with SigV4 by `rusty-s3` (query-string signatures:
//! the URL carries the signature, so a body needs no hashing) and sent by
//! `ureq`, which keeps connections alive between requests. Path-style URLs
//! (`http://host:port/bucket/key`), so a custom endpoint such as Ceph RGW or
//! MinIO on an IP address works.
//!
//! How answers map to [`ObjectError`]: 404 → `NotFound`; 412 on a create →
//! `Exists`; 408, 409 on a create (AWS's `ConditionalRequestConflict`, two
//! creates racing), 429, 500, 502, 503 (`SlowDown`), 504, and transport
//! failures (refused or reset connections, timeouts) → retryable; any other
//! status → not retryable, with the store's `Code` and `Message`.

use std::io::Read;
use std::time::Duration;

use rusty_s3::actions::{ListObjectsV2, S3Action};
use rusty_s3::{Bucket, Credentials, UrlStyle};

use crate::{ObjectError, ObjectInfo, ObjectStore, Op};

/// How long a signature stays valid (covers a request's whole life,
/// retries excluded: each attempt signs anew).
const SIGNATURE_LIFE: Duration = Duration::from_mins(15);

/// Where the store is and who we are to it.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// `http://127.0.0.1:7480` (Ceph RGW), `https://s3.eu-west-1.amazonaws.com`.
    pub endpoint: String,
    /// The bucket; it must exist.
    pub bucket: String,
    /// The SigV4 region (`us-east-1` for stores that ignore it).
    pub region: String,
    /// Access key id.
    pub access_key: String,
    /// Secret key (never printed by `Debug`).
    pub secret_key: String,
    /// Limit on one request, from connecting to the last byte of the answer.
    pub timeout: Duration,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("secret_key", &"…")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// An S3-compatible store.
#[derive(Debug)]
pub struct S3Store {
    bucket: Bucket,
    credentials: Credentials,
    agent: ureq::Agent,
    describe: String,
}

impl S3Store {
    /// A client of `config`'s bucket. Sends nothing: a wrong endpoint or key
    /// shows at the first request.
    pub fn new(config: &S3Config) -> Result<Self, ObjectError> {
        let bad = |detail: String| ObjectError::failed(Op::List, &config.bucket, detail, false);
        let endpoint = url::Url::parse(&config.endpoint)
            .map_err(|e| bad(format!("endpoint {:?}: {e}", config.endpoint)))?;
        let bucket = Bucket::new(
            endpoint,
            UrlStyle::Path,
            config.bucket.clone(),
            config.region.clone(),
        )
        .map_err(|e| bad(format!("endpoint {:?}: {e}", config.endpoint)))?;
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(config.timeout))
            .no_delay(true)
            .max_idle_connections_per_host(64)
            .build()
            .new_agent();
        Ok(Self {
            describe: format!("s3 {}", bucket.base_url()),
            bucket,
            credentials: Credentials::new(config.access_key.clone(), config.secret_key.clone()),
            agent,
        })
    }
}

/// The signed URL of a request.
fn signed<'a>(action: &impl S3Action<'a>) -> String {
    action.sign(SIGNATURE_LIFE).to_string()
}

/// What a transport failure (no HTTP answer) means.
fn transport(op: Op, key: &str, err: &ureq::Error) -> ObjectError {
    let retryable = matches!(
        err,
        ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
            | ureq::Error::Protocol(_)
            | ureq::Error::BodyStalled
    );
    ObjectError::failed(op, key, err.to_string(), retryable)
}

/// The text between `<tag>` and `</tag>` in an S3 error document.
fn xml_field<'a>(body: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = body.find(&open)? + open.len();
    let end = body[start..].find(&format!("</{tag}>"))?;
    Some(&body[start..start + end])
}

/// What an HTTP answer other than success means.
fn status(op: Op, key: &str, mut response: ureq::http::Response<ureq::Body>) -> ObjectError {
    let code = response.status().as_u16();
    match (code, op) {
        (404, _) => {
            return ObjectError::NotFound {
                key: key.to_owned(),
            };
        }
        (412, Op::Create) => {
            return ObjectError::Exists {
                key: key.to_owned(),
            };
        }
        _ => {}
    }
    let body = response
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    let mut detail = format!("HTTP {code}");
    if let Some(c) = xml_field(&body, "Code") {
        detail.push(' ');
        detail.push_str(c);
    }
    if let Some(m) = xml_field(&body, "Message").filter(|m| !m.is_empty()) {
        detail.push_str(": ");
        detail.push_str(m);
    }
    let retryable =
        matches!(code, 408 | 429 | 500 | 502 | 503 | 504) || (code == 409 && op == Op::Create);
    ObjectError::failed(op, key, detail, retryable)
}

type Answer = Result<ureq::http::Response<ureq::Body>, ureq::Error>;

/// The answer if it is a success (2xx), else the error it means.
fn success(
    op: Op,
    key: &str,
    answer: Answer,
) -> Result<ureq::http::Response<ureq::Body>, ObjectError> {
    let response = answer.map_err(|e| transport(op, key, &e))?;
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(status(op, key, response))
    }
}

/// Reads a body into the front of `buf` until it is full or the body ends.
fn fill(op: Op, key: &str, body: &mut ureq::Body, buf: &mut [u8]) -> Result<usize, ObjectError> {
    let mut reader = body.as_reader();
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(ObjectError::failed(
                    op,
                    key,
                    format!("reading the answer: {e}"),
                    true,
                ));
            }
        }
    }
    Ok(n)
}

impl ObjectStore for S3Store {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        let url = signed(&self.bucket.put_object(Some(&self.credentials), key));
        success(Op::Put, key, self.agent.put(&url).send(body)).map(drop)
    }

    fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        let mut action = self.bucket.put_object(Some(&self.credentials), key);
        action.headers_mut().insert("if-none-match", "*");
        let url = signed(&action);
        let answer = self.agent.put(&url).header("if-none-match", "*").send(body);
        success(Op::Create, key, answer).map(drop)
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
        if buf.is_empty() {
            return Ok(0);
        }
        let url = signed(&self.bucket.get_object(Some(&self.credentials), key));
        let last = offset + buf.len() as u64 - 1;
        let answer = self
            .agent
            .get(&url)
            .header("range", format!("bytes={offset}-{last}"))
            .call();
        let mut response = match answer {
            // Past the end: nothing to read (S3 says 416 when the range
            // starts at or after the object's end).
            Ok(r) if r.status().as_u16() == 416 => return Ok(0),
            other => success(Op::Get, key, other)?,
        };
        if response.status().as_u16() == 200 && offset > 0 {
            // The store ignored the range and sent the whole object.
            let mut skip = response.body_mut().as_reader().take(offset);
            std::io::copy(&mut skip, &mut std::io::sink()).map_err(|e| {
                ObjectError::failed(Op::Get, key, format!("reading the answer: {e}"), true)
            })?;
        }
        fill(Op::Get, key, response.body_mut(), buf)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        let url = signed(&self.bucket.get_object(Some(&self.credentials), key));
        let mut response = success(Op::Get, key, self.agent.get(&url).call())?;
        response
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_vec()
            .map_err(|e| transport(Op::Get, key, &e))
    }

    fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
        let url = signed(&self.bucket.head_object(Some(&self.credentials), key));
        let response = match success(Op::Head, key, self.agent.head(&url).call()) {
            Ok(r) => r,
            Err(ObjectError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let length = response
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                ObjectError::failed(Op::Head, key, "the answer has no Content-Length", false)
            })?;
        Ok(Some(length))
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        let url = signed(&self.bucket.delete_object(Some(&self.credentials), key));
        match success(Op::Delete, key, self.agent.delete(&url).call()) {
            Ok(_) | Err(ObjectError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut action = ListObjectsV2::new(&self.bucket, Some(&self.credentials));
            action.with_prefix(prefix);
            if let Some(t) = &token {
                action.with_continuation_token(t.clone());
            }
            let url = signed(&action);
            let mut response = success(Op::List, prefix, self.agent.get(&url).call())?;
            let text = response
                .body_mut()
                .with_config()
                .limit(64 * 1024 * 1024)
                .read_to_string()
                .map_err(|e| transport(Op::List, prefix, &e))?;
            let page = ListObjectsV2::parse_response(&text).map_err(|e| {
                ObjectError::failed(
                    Op::List,
                    prefix,
                    format!("a listing the store sent does not parse: {e}"),
                    false,
                )
            })?;
            for c in page.contents {
                let size = c.size.ok_or_else(|| {
                    ObjectError::failed(
                        Op::List,
                        prefix,
                        format!("the listing gives no size for {}", c.key),
                        false,
                    )
                })?;
                out.push(ObjectInfo { key: c.key, size });
            }
            match page.next_continuation_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
        // S3 lists in UTF-8 byte order already; sorting keeps the contract
        // for stores that do not.
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}
