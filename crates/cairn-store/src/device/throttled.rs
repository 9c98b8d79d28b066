//! A device slowed to a chosen latency and bandwidth, to emulate an HDD, an
//! SSD or network storage reproducibly on any machine.
//!
//! Each operation costs `op_us` plus, when it does not start where the previous
//! one ended, `seek_us` (an HDD's seek and rotation), plus its length over
//! `bandwidth_mb_s`. In [`Pace::Sleep`] the caller's thread sleeps that long,
//! one operation at a time (one head; the last 100 µs spun, so short
//! operations take their time to the microsecond); in [`Pace::Virtual`] nothing sleeps and
//! the cost is only added to a clock that [`ThrottledDevice::elapsed`] reads, so
//! tests and models get the same numbers on every run.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Device, DeviceError};

/// The speed of an emulated device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throttle {
    /// Fixed cost of every operation, microseconds.
    pub op_us: f64,
    /// Extra cost of an operation that does not continue the previous one,
    /// microseconds.
    pub seek_us: f64,
    /// Transfer rate, MB/s (10^6 bytes per second); must be positive.
    pub bandwidth_mb_s: f64,
}

impl Throttle {
    /// A 7,200 rpm disk: 8 ms seek and rotation, 150 MB/s.
    pub fn hdd() -> Self {
        Self {
            op_us: 0.0,
            seek_us: 8_000.0,
            bandwidth_mb_s: 150.0,
        }
    }

    /// A SATA SSD: 80 µs per operation, 500 MB/s.
    pub fn ssd() -> Self {
        Self {
            op_us: 80.0,
            seek_us: 0.0,
            bandwidth_mb_s: 500.0,
        }
    }

    /// The cost of moving `len` bytes, with or without a seek.
    pub fn cost(&self, len: u64, seek: bool) -> Duration {
        let us =
            self.op_us + if seek { self.seek_us } else { 0.0 } + len as f64 / self.bandwidth_mb_s;
        Duration::from_secs_f64(us.max(0.0) / 1e6)
    }
}

/// Whether time is slept or only counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Sleep each operation's cost, one operation at a time.
    Sleep,
    /// Count the cost on a virtual clock; never sleep.
    Virtual,
}

/// A device in front of another, at a [`Throttle`]'s speed.
pub struct ThrottledDevice<D> {
    inner: D,
    throttle: Throttle,
    pace: Pace,
    /// Where the last operation ended (for seek detection) and the head lock.
    head: Mutex<u64>,
    elapsed_ns: AtomicU64,
}

impl<D: Device> ThrottledDevice<D> {
    /// Wraps `inner`.
    pub fn new(inner: D, throttle: Throttle, pace: Pace) -> Self {
        Self {
            inner,
            throttle,
            pace,
            head: Mutex::new(u64::MAX),
            elapsed_ns: AtomicU64::new(0),
        }
    }

    /// Total modelled time of every operation so far.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns.load(Ordering::Relaxed))
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    fn charge<T>(&self, offset: u64, len: u64, io: impl FnOnce() -> T) -> T {
        let mut head = self
            .head
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let cost = self.throttle.cost(len, *head != offset);
        *head = offset.saturating_add(len);
        self.elapsed_ns
            .fetch_add(cost.as_nanos() as u64, Ordering::Relaxed);
        if self.pace == Pace::Sleep {
            pace(cost);
        }
        io()
    }
}

/// Waits `cost`: sleeps all but the last [`SPIN`] (a sleep overshoots by
/// the timer slack, tens of microseconds, which would swamp a fast emulated
/// device), then spins to the deadline.
fn pace(cost: Duration) {
    let deadline = Instant::now() + cost;
    if let Some(sleep) = cost.checked_sub(SPIN) {
        std::thread::sleep(sleep);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// The last stretch of a paced operation that is spun, not slept.
const SPIN: Duration = Duration::from_micros(100);

impl<D: Device> Device for ThrottledDevice<D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let len = buf.len() as u64;
        self.charge(offset, len, || self.inner.read_at(buf, offset))
    }

    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> Result<(), DeviceError> {
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.charge(offset, len, || self.inner.read_vectored_at(bufs, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.charge(offset, buf.len() as u64, || {
            self.inner.write_at(buf, offset)
        })
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn alignment(&self) -> u64 {
        self.inner.alignment()
    }

    fn busy_ns(&self) -> Option<u64> {
        Some(self.elapsed_ns.load(Ordering::Relaxed))
    }

    fn describe(&self) -> String {
        format!(
            "throttled ({} µs/op, {} µs/seek, {} MB/s, {:?}) {}",
            self.throttle.op_us,
            self.throttle.seek_us,
            self.throttle.bandwidth_mb_s,
            self.pace,
            self.inner.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    #[test]
    fn conforms() {
        let dev = ThrottledDevice::new(MemoryDevice::new(1 << 17), Throttle::hdd(), Pace::Virtual);
        super::super::conformance::check(&dev);
    }

    #[test]
    fn sequential_io_pays_no_seek_and_random_io_does() {
        let dev = ThrottledDevice::new(MemoryDevice::new(1 << 24), Throttle::hdd(), Pace::Virtual);
        let block = vec![0u8; 1 << 20];
        for i in 0..4 {
            dev.write_at(&block, i << 20).unwrap();
        }
        // One seek (the first) and 4 MiB at 150 MB/s.
        let want = 0.008 + 4.0 * 1_048_576.0 / 150e6;
        assert!(
            (dev.elapsed().as_secs_f64() - want).abs() < 1e-6,
            "{:?}",
            dev.elapsed()
        );
        let before = dev.elapsed();
        let mut small = [0u8; 4096];
        dev.read_at(&mut small, 10 << 20).unwrap();
        dev.read_at(&mut small, 2 << 20).unwrap();
        let random = dev.elapsed().checked_sub(before).unwrap().as_secs_f64();
        assert!(
            (random - 2.0 * (0.008 + 4096.0 / 150e6)).abs() < 1e-6,
            "{random}"
        );
    }

    #[test]
    fn sleep_pace_takes_the_modelled_time() {
        let throttle = Throttle {
            op_us: 2_000.0,
            seek_us: 0.0,
            bandwidth_mb_s: 1000.0,
        };
        let dev = ThrottledDevice::new(MemoryDevice::new(1 << 16), throttle, Pace::Sleep);
        let start = std::time::Instant::now();
        for _ in 0..5 {
            dev.write_at(&[1; 512], 0).unwrap();
        }
        assert!(
            start.elapsed() >= Duration::from_millis(10),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_vectored_read_is_one_operation() {
        let dev = ThrottledDevice::new(MemoryDevice::new(1 << 20), Throttle::hdd(), Pace::Virtual);
        dev.write_at(&[5; 8192], 4096).unwrap();
        let before = dev.elapsed();
        let (mut a, mut b) = ([0u8; 4096], [0u8; 4096]);
        dev.read_vectored_at(&mut [&mut a, &mut b], 4096).unwrap();
        assert_eq!((a, b), ([5; 4096], [5; 4096]));
        let took = dev.elapsed().checked_sub(before).unwrap().as_secs_f64();
        assert!((took - (0.008 + 8192.0 / 150e6)).abs() < 1e-6, "{took}");
    }

    #[test]
    fn errors_pass_through() {
        let dev = ThrottledDevice::new(MemoryDevice::new(4096), Throttle::ssd(), Pace::Virtual);
        assert!(dev.write_at(&[0; 2], 4095).is_err());
    }
}
