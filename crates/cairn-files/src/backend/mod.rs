//! Where objects come from: the [`Backend`] trait and its implementations —
//! a local directory ([`DirBackend`]) and a throttled wrapper
//! ([`ThrottledBackend`]) that slows any backend to a chosen latency and
//! bandwidth, and an in-memory one that counts and fails reads on demand
//! ([`MemoryBackend`], for tests), an HTTP origin ([`HttpBackend`]: another
//! gateway, an S3-compatible store path-style, or a plain web server), and
//! [`StripedBackend`], one object striped round robin over several of them
//! (papers/001's I/O servers), and [`UnionBackend`], several of them in
//! order (a local directory before a remote bucket), each object from the
//! first that has it, and [`SpillBackend`], any of them behind a local SSD
//! (the store's flash tier), kept across restarts.
//!
//! Keys are `/`-separated relative names (`videos/a.mp4`); a backend answers
//! with errors as values that say what the gateway should tell the client:
//! not found (404), forbidden (403), timed out (504), retryable or other
//! (502). None of them is ever cached.

mod dir;
mod http;
mod memory;
pub mod spill;
pub mod striped;
mod throttled;
mod union;

pub use dir::DirBackend;
pub use http::{HttpBackend, HttpBackendConfig};
pub use memory::MemoryBackend;
pub use spill::{SpillBackend, SpillConfig, SpillError};
pub use striped::{StripedBackend, stripe_file};
pub use throttled::ThrottledBackend;
pub use union::{UNION_MAX, UnionBackend};

use std::time::SystemTime;

/// What a backend knows about one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Length in bytes.
    pub size: u64,
    /// Last modification time.
    pub modified: SystemTime,
}

/// One object a listing found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    /// Its key.
    pub key: String,
    /// Its size and modification time.
    pub info: ObjectInfo,
}

/// What went wrong in a backend, in the terms a client is answered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendErrorKind {
    /// No such object (or the key names a directory).
    NotFound,
    /// The key is refused: it would leave the backend's root.
    Forbidden,
    /// The backend did not answer in time; retrying may work.
    Timeout,
    /// A transient failure (a reset connection, an overloaded server);
    /// retrying may work.
    Retryable,
    /// Anything else (an I/O error, an object that shrank while read).
    Other,
}

/// A backend's error: its kind and a message naming the key and the cause.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// What kind of failure.
    pub kind: BackendErrorKind,
    /// What failed, naming the key.
    pub message: String,
}

impl BackendError {
    /// An error of `kind` with `message`.
    pub fn new(kind: BackendErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// Whether retrying may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            BackendErrorKind::Timeout | BackendErrorKind::Retryable
        )
    }
}

/// A store of immutable-while-read objects, read by key. `Send + Sync`:
/// every connection's thread calls it at once.
pub trait Backend: Send + Sync {
    /// The object's size and modification time.
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError>;

    /// Reads `buf.len()` bytes of `key` at `offset`. Fewer bytes (the object
    /// shrank) is an error of kind [`BackendErrorKind::Other`]: an `Ok` has
    /// written every byte of `buf`, which the cache reads into reused
    /// buffers whose old bytes a short read would otherwise serve.
    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError>;

    /// Appends to `out`, in key order, up to `max` objects whose key starts
    /// with `prefix` and sorts after `after` (if given); returns whether more
    /// matched.
    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError>;

    /// How many backends this one is made of whose reads the cache times
    /// apart, each its own cost group ([`UnionBackend`]'s members); 1
    /// otherwise.
    fn parts(&self) -> u16 {
        1
    }

    /// [`stat`](Self::stat), and which part (`< parts()`) holds the object.
    fn locate(&self, key: &str) -> Result<(ObjectInfo, u16), BackendError> {
        self.stat(key).map(|info| (info, 0))
    }

    /// [`read_at`](Self::read_at) from part `part`, as [`locate`](Self::locate)
    /// named it.
    fn read_part(
        &self,
        part: u16,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        let _ = part;
        self.read_at(key, offset, buf)
    }

    /// [`read_part`](Self::read_part) for a cache above that would take the
    /// block, saying whether a level of the backend's own served all of it
    /// and keeps it (an exclusive spill that does not promote): the cache
    /// above must then not hold it too. False by default.
    fn read_kept(
        &self,
        part: u16,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<bool, BackendError> {
        self.read_part(part, key, offset, buf).map(|()| false)
    }

    /// Part `part`'s busy clock, nanoseconds of modelled service time (a
    /// [`ThrottledBackend`]'s), if it keeps one; the cache then times its
    /// reads by it rather than by the wall clock.
    fn busy_ns(&self, part: u16) -> Option<u64> {
        let _ = part;
        None
    }

    /// Appends the backend's own metrics (a [`SpillBackend`]'s tier), named
    /// without the `cairn_files_` prefix; none by default.
    fn metrics(&self, out: &mut Vec<cairn_store::stats::Metric>) {
        let _ = out;
    }

    /// Whether the cache above should hand down the blocks it drops
    /// ([`demote`](Self::demote)): an exclusive [`SpillBackend`]'s level
    /// holds only those. False by default.
    fn takes_demotions(&self) -> bool {
        false
    }

    /// A block the cache above dropped: `data` is `key`'s bytes at `offset`
    /// as the version `info` describes holds them (a whole cache block, or
    /// the object's last part). A backend with a level of its own may keep
    /// it; it never fails the caller. Nothing by default.
    fn demote(&self, key: &str, info: ObjectInfo, offset: u64, data: &[u8]) {
        let _ = (key, info, offset, data);
    }

    /// The cache above took back the `len` bytes at `offset` it had just
    /// handed down ([`demote`](Self::demote)): a reader wanted them before
    /// the hand-down was done. A backend that kept them lets them go, so
    /// that the levels hold different blocks. Nothing by default.
    fn retract(&self, key: &str, info: ObjectInfo, offset: u64, len: u64) {
        let _ = (key, info, offset, len);
    }
}

impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
        (**self).stat(key)
    }
    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        (**self).read_at(key, offset, buf)
    }
    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError> {
        (**self).list(prefix, after, max, out)
    }
    fn parts(&self) -> u16 {
        (**self).parts()
    }
    fn locate(&self, key: &str) -> Result<(ObjectInfo, u16), BackendError> {
        (**self).locate(key)
    }
    fn read_part(
        &self,
        part: u16,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        (**self).read_part(part, key, offset, buf)
    }
    fn read_kept(
        &self,
        part: u16,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<bool, BackendError> {
        (**self).read_kept(part, key, offset, buf)
    }
    fn busy_ns(&self, part: u16) -> Option<u64> {
        (**self).busy_ns(part)
    }
    fn metrics(&self, out: &mut Vec<cairn_store::stats::Metric>) {
        (**self).metrics(out);
    }
    fn takes_demotions(&self) -> bool {
        (**self).takes_demotions()
    }
    fn demote(&self, key: &str, info: ObjectInfo, offset: u64, data: &[u8]) {
        (**self).demote(key, info, offset, data);
    }
    fn retract(&self, key: &str, info: ObjectInfo, offset: u64, len: u64) {
        (**self).retract(key, info, offset, len);
    }
}

/// Checks that `key` is a relative `/`-separated name that stays below the
/// root: not empty, not longer than [`KEY_MAX_BYTES`](crate::limits::KEY_MAX_BYTES),
/// no empty, `.` or `..` component, no leading `/`, no NUL or backslash.
pub fn check_key(key: &str) -> Result<(), BackendError> {
    let refuse = |why: &str| {
        Err(BackendError::new(
            BackendErrorKind::Forbidden,
            format!("key {key:?} refused: {why}"),
        ))
    };
    if key.is_empty() {
        return refuse("empty");
    }
    if key.len() > crate::limits::KEY_MAX_BYTES {
        return refuse("too long");
    }
    if key.contains(['\0', '\\']) {
        return refuse("contains NUL or a backslash");
    }
    if key
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return refuse("an empty, `.` or `..` path component, or a leading `/`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_could_leave_the_root_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a/.",
            "a\\b",
            "a\0",
            "a/",
        ] {
            let error = check_key(bad).expect_err(bad);
            assert_eq!(error.kind, BackendErrorKind::Forbidden, "{bad:?}");
        }
        for good in ["a", "a/b.mp4", "..a", "a..b/c", "x/.hidden"] {
            check_key(good).expect(good);
        }
    }
}
