//! [`MemoryBackend`]: objects held in memory, with a read counter, an
//! optional delay per read and injectable failures — for tests and
//! benchmarks that must count or break what reaches the backend.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use super::{Backend, BackendError, BackendErrorKind, ListEntry, ObjectInfo, check_key};

/// One object's bytes and modification time.
type Stored = (Arc<Vec<u8>>, SystemTime);

/// Objects in memory. See the module docs.
#[derive(Default)]
pub struct MemoryBackend {
    objects: RwLock<BTreeMap<String, Stored>>,
    reads: AtomicU64,
    stats: AtomicU64,
    delay: Mutex<Duration>,
    /// Failures to return, oldest first, instead of the next reads.
    failures: Mutex<Vec<BackendErrorKind>>,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `bytes` as `key`, modified at `modified`.
    pub fn put(&self, key: &str, bytes: Vec<u8>, modified: SystemTime) {
        self.objects
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.to_owned(), (Arc::new(bytes), modified));
    }

    /// Reads so far (successful or not).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Stats so far (successful or not).
    pub fn stats(&self) -> u64 {
        self.stats.load(Ordering::Relaxed)
    }

    /// Makes every later read sleep `delay` first.
    pub fn set_delay(&self, delay: Duration) {
        *self
            .delay
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = delay;
    }

    /// Makes the next read fail with `kind` (queued after earlier ones).
    pub fn fail_next_read(&self, kind: BackendErrorKind) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(kind);
    }

    fn get(&self, key: &str) -> Result<Stored, BackendError> {
        check_key(key)?;
        self.objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()
            .ok_or_else(|| {
                BackendError::new(BackendErrorKind::NotFound, format!("{key}: no such object"))
            })
    }
}

impl Backend for MemoryBackend {
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
        self.stats.fetch_add(1, Ordering::Relaxed);
        let (bytes, modified) = self.get(key)?;
        Ok(ObjectInfo {
            size: bytes.len() as u64,
            modified,
        })
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let delay = *self
            .delay
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let failure = {
            let mut failures = self
                .failures
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (!failures.is_empty()).then(|| failures.remove(0))
        };
        if let Some(kind) = failure {
            return Err(BackendError::new(kind, format!("{key}: injected {kind:?}")));
        }
        let (bytes, _) = self.get(key)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let Some(source) = start
            .checked_add(buf.len())
            .and_then(|end| bytes.get(start..end))
        else {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!("{key}: read past the end"),
            ));
        };
        buf.copy_from_slice(source);
        Ok(())
    }

    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError> {
        let objects = self
            .objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut matched = objects
            .iter()
            .filter(|(k, _)| k.starts_with(prefix) && after.is_none_or(|a| k.as_str() > a));
        for (key, (bytes, modified)) in matched.by_ref().take(max) {
            out.push(ListEntry {
                key: key.clone(),
                info: ObjectInfo {
                    size: bytes.len() as u64,
                    modified: *modified,
                },
            });
        }
        Ok(matched.next().is_some())
    }
}
