//! Cairn's file gateway: objects of a backing store (a local directory, a
//! throttled one; an S3 bucket later) served over HTTP/1.1 and the S3
//! GET/HEAD object API, through a file-aware cache of large blocks.
//!
//! - [`backend`]: where objects come from ([`Backend`]), with errors as
//!   values that say not found / forbidden / retryable / other.
//! - [`cache`]: the large-block cache: (object, block) keys, any policy
//!   (ONS by default), single-flight misses, zero-copy [`BlockRef`](cairn_store::BlockRef) handles.
//! - [`http`]: the HTTP/1.1 front end ([`Gateway`]), path-style S3
//!   addressing (`/BUCKET/KEY`), ranges, conditionals, keep-alive.
//! - [`s3`]: S3's XML error documents and `ListObjectsV2`.
//!
//! What it is not (yet): a writer (PUT/DELETE are `405`), an authenticator
//! (requests are anonymous; an `Authorization` header is accepted and
//! ignored), a TLS endpoint. Limits are in [`limits`].

pub mod backend;
pub mod cache;
pub mod http;
pub mod limits;
pub mod s3;

pub use backend::{
    Backend, BackendError, BackendErrorKind, DirBackend, HttpBackend, HttpBackendConfig, ListEntry,
    MemoryBackend, ObjectInfo, SpillBackend, SpillConfig, SpillError, StripedBackend,
    ThrottledBackend, UnionBackend,
};
pub use cache::{
    BackendErrorCounts, FileCache, FileCacheConfig, FileCacheError, FileCacheStats, Object,
};
pub use http::{Gateway, GatewayConfig};
