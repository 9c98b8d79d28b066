//! [`ThrottledBackend`]: any backend slowed to a [`Throttle`]'s latency and
//! bandwidth (the store's throttled device's model and numbers), to stand
//! for a disk or a remote bucket reproducibly on any machine.
//!
//! Each read costs `op_us`, plus `seek_us` unless it continues the previous
//! read of the same object, plus its length over the bandwidth; reads are
//! served one at a time (one head). `stat` and `list` are not slowed (the
//! gateway's metadata is not what the experiments measure). The modelled
//! time of every read is summed into a busy clock ([`Backend::busy_ns`]),
//! which the cache's cost estimate reads instead of the wall clock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_store::device::Throttle;

use super::{Backend, BackendError, ListEntry, ObjectInfo};

/// A backend in front of another, at a [`Throttle`]'s speed.
pub struct ThrottledBackend<B> {
    inner: B,
    throttle: Throttle,
    /// The object and offset where the last read ended; the head lock.
    head: Mutex<(String, u64)>,
    /// Modelled service time of every read so far, ns.
    busy_ns: AtomicU64,
}

impl<B: Backend> ThrottledBackend<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, throttle: Throttle) -> Self {
        Self {
            inner,
            throttle,
            head: Mutex::new((String::new(), u64::MAX)),
            busy_ns: AtomicU64::new(0),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }
}

impl<B: Backend> Backend for ThrottledBackend<B> {
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
        self.inner.stat(key)
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let mut head = self
            .head
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seek = head.0 != key || head.1 != offset;
        let cost = self.throttle.cost(buf.len() as u64, seek);
        if head.0 != key {
            head.0.clear();
            head.0.push_str(key);
        }
        head.1 = offset + buf.len() as u64;
        let ns = cost.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
        std::thread::sleep(cost);
        let result = self.inner.read_at(key, offset, buf);
        drop(head);
        result
    }

    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError> {
        self.inner.list(prefix, after, max, out)
    }

    fn busy_ns(&self, _part: u16) -> Option<u64> {
        Some(self.busy_ns.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DirBackend;
    use std::time::{Duration, Instant};

    #[test]
    fn reads_take_the_throttles_time_and_return_the_same_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f"), vec![7u8; 1 << 20]).expect("write");
        let throttle = Throttle {
            op_us: 1000.0,
            seek_us: 20_000.0,
            bandwidth_mb_s: 100.0,
        };
        let backend = ThrottledBackend::new(DirBackend::open(dir.path()).expect("open"), throttle);
        let mut buf = vec![0u8; 1 << 19];
        let start = Instant::now();
        backend.read_at("f", 0, &mut buf).expect("read");
        // 1 ms + 20 ms seek + 524,288 B at 100 MB/s (5.2 ms).
        let first = start.elapsed();
        assert!(first >= Duration::from_millis(26), "{first:?}");
        let start = Instant::now();
        backend.read_at("f", 1 << 19, &mut buf).expect("read");
        let second = start.elapsed();
        // Continues the first read: no seek.
        assert!(
            second >= Duration::from_millis(6) && second < first,
            "{second:?} vs {first:?}"
        );
        assert!(buf.iter().all(|&b| b == 7));
        // The busy clock holds the model's time: 1 + 20 + 5.24 and 1 + 5.24 ms.
        let busy = backend
            .busy_ns(0)
            .expect("a throttled backend keeps a clock");
        assert!((busy as f64 / 1e6 - 32.49).abs() < 0.1, "{busy} ns");
    }
}
