//! [`Metered`]: counts what reaches a store.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{ObjectError, ObjectInfo, ObjectStore};

/// Requests and bytes that reached a store (successful or not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// PUTs, creates included.
    pub puts: u64,
    /// Bytes in PUT bodies.
    pub put_bytes: u64,
    /// GETs, ranged or whole.
    pub gets: u64,
    /// Bytes GETs returned.
    pub get_bytes: u64,
    /// HEADs.
    pub heads: u64,
    /// DELETEs.
    pub deletes: u64,
    /// LIST calls (one each, however many pages).
    pub lists: u64,
}

#[derive(Debug, Default)]
struct Counters {
    puts: AtomicU64,
    put_bytes: AtomicU64,
    gets: AtomicU64,
    get_bytes: AtomicU64,
    heads: AtomicU64,
    deletes: AtomicU64,
    lists: AtomicU64,
}

/// Wraps a store and counts its requests (relaxed atomics; no lock).
#[derive(Debug)]
pub struct Metered<S> {
    inner: S,
    counters: Counters,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl<S: ObjectStore> Metered<S> {
    /// Wraps `inner`, counting from zero.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            counters: Counters::default(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The counts so far.
    pub fn counts(&self) -> StoreCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StoreCounts {
            puts: get(&c.puts),
            put_bytes: get(&c.put_bytes),
            gets: get(&c.gets),
            get_bytes: get(&c.get_bytes),
            heads: get(&c.heads),
            deletes: get(&c.deletes),
            lists: get(&c.lists),
        }
    }
}

impl<S: ObjectStore> ObjectStore for Metered<S> {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        add(&self.counters.puts, 1);
        add(&self.counters.put_bytes, body.len() as u64);
        self.inner.put(key, body)
    }

    fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        add(&self.counters.puts, 1);
        add(&self.counters.put_bytes, body.len() as u64);
        self.inner.create(key, body)
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
        add(&self.counters.gets, 1);
        let n = self.inner.read_at(key, offset, buf)?;
        add(&self.counters.get_bytes, n as u64);
        Ok(n)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        add(&self.counters.gets, 1);
        let body = self.inner.get(key)?;
        add(&self.counters.get_bytes, body.len() as u64);
        Ok(body)
    }

    fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
        add(&self.counters.heads, 1);
        self.inner.head(key)
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        add(&self.counters.deletes, 1);
        self.inner.delete(key)
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
        add(&self.counters.lists, 1);
        self.inner.list(prefix)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}
