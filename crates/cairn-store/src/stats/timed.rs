//! Each layer's latency: [`Timed`], a [`Device`] in front of a layer of a
//! stack that times the layer's reads, writes and flushes into its
//! [`LayerTimes`] (three [`StripedHistogram`]s: no lock, no allocation per
//! request).
//!
//! A [`crate::Volume`] puts one in front of every layer with statistics
//! (the block cache, a tier, a log disk, an object volume) as it assembles
//! a stack, so what is above a layer — the NBD server, or the layer over it
//! — calls it through its `Timed`. A layer's time is therefore its service
//! time as its caller sees it, the layers below it included: a block
//! cache's read that misses counts the log disk's read inside it, which the
//! log disk's own histogram counts too.
//!
//! What is timed: reads (`read_at`, `read_vectored_at`, a `read_lent` or
//! `read_batch` that read), writes (`write_at`, `write_swap`, a `zero_fast`
//! that zeroed, `discard`: the writes, zeroes and trims of the export's
//! `write` latency), and flushes. Hints and queries (`prefetch`,
//! `allocation`) are not. Failed calls are timed as well.
//!
//! One switch per volume ([`crate::Volume::set_layer_timing`]) turns the
//! timing off (`cairn serve --no-stats`): a relaxed load per call then.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::histogram::{Latency, StripedHistogram};
use crate::device::{BlockSlice, Device, DeviceError, Extent};

/// One layer's latency histograms, recorded by its [`Timed`].
#[derive(Default)]
pub struct LayerTimes {
    read: StripedHistogram,
    write: StripedHistogram,
    flush: StripedHistogram,
}

impl LayerTimes {
    /// The distributions so far.
    pub fn latency(&self) -> LayerLatency {
        LayerLatency {
            read: self.read.counts().summary(),
            write: self.write.counts().summary(),
            flush: self.flush.counts().summary(),
        }
    }
}

/// A layer's service times, as a snapshot sends them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerLatency {
    /// Reads.
    pub read: Latency,
    /// Writes, zeroes and discards (trims).
    pub write: Latency,
    /// Flushes.
    pub flush: Latency,
}

/// A layer, timed: every [`Device`] call goes to `inner`; reads, writes and
/// flushes are timed into `times` while `on` is set.
pub struct Timed<D> {
    inner: D,
    times: Arc<LayerTimes>,
    on: Arc<AtomicBool>,
}

impl<D: Device> Timed<D> {
    /// `inner`, timed into `times` while `on` is set.
    pub fn new(inner: D, times: Arc<LayerTimes>, on: Arc<AtomicBool>) -> Self {
        Self { inner, times, on }
    }

    /// Runs `call`, timed into `histogram` when timing is on.
    #[inline]
    fn time<T>(&self, histogram: &StripedHistogram, call: impl FnOnce() -> T) -> T {
        if !self.on.load(Ordering::Relaxed) {
            return call();
        }
        let started = Instant::now();
        let result = call();
        histogram.record(started.elapsed().as_nanos() as u64);
        result
    }

    /// Runs `call`, a call that answers `Ok(false)` when it did nothing
    /// (the caller then takes another path, timed there): timed unless it
    /// did nothing.
    #[inline]
    fn time_if_done(
        &self,
        histogram: &StripedHistogram,
        call: impl FnOnce() -> Result<bool, DeviceError>,
    ) -> Result<bool, DeviceError> {
        if !self.on.load(Ordering::Relaxed) {
            return call();
        }
        let started = Instant::now();
        let result = call();
        if !matches!(result, Ok(false)) {
            histogram.record(started.elapsed().as_nanos() as u64);
        }
        result
    }
}

impl<D: Device> Device for Timed<D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.time(&self.times.read, || self.inner.read_at(buf, offset))
    }

    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> Result<(), DeviceError> {
        self.time(&self.times.read, || {
            self.inner.read_vectored_at(bufs, offset)
        })
    }

    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<bool, DeviceError> {
        if reads.is_empty() {
            // Only asks whether the device batches.
            return self.inner.read_batch(reads);
        }
        self.time_if_done(&self.times.read, || self.inner.read_batch(reads))
    }

    fn read_lent(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<BlockSlice>,
    ) -> Result<bool, DeviceError> {
        self.time_if_done(&self.times.read, || self.inner.read_lent(offset, len, out))
    }

    fn allocation(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, DeviceError> {
        self.inner.allocation(offset, len, out)
    }

    fn prefetch(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.prefetch(offset, len)
    }

    fn zero_fast(&self, offset: u64, len: u64) -> Result<bool, DeviceError> {
        self.time_if_done(&self.times.write, || self.inner.zero_fast(offset, len))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.time(&self.times.write, || self.inner.write_at(buf, offset))
    }

    fn write_swap(&self, buf: &mut Vec<u8>, offset: u64) -> Result<(), DeviceError> {
        self.time(&self.times.write, || self.inner.write_swap(buf, offset))
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.time(&self.times.flush, || self.inner.flush())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.time(&self.times.write, || self.inner.discard(offset, len))
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn alignment(&self) -> u64 {
        self.inner.alignment()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn busy_ns(&self) -> Option<u64> {
        self.inner.busy_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryDevice;

    fn timed() -> (Timed<MemoryDevice>, Arc<LayerTimes>, Arc<AtomicBool>) {
        let times = Arc::new(LayerTimes::default());
        let on = Arc::new(AtomicBool::new(true));
        let device = Timed::new(
            MemoryDevice::new(1 << 20),
            Arc::clone(&times),
            Arc::clone(&on),
        );
        (device, times, on)
    }

    #[test]
    fn reads_writes_and_flushes_are_timed_each_in_its_histogram() {
        let (device, times, _) = timed();
        let mut buf = vec![0u8; 4096];
        device.write_at(&buf, 0).unwrap();
        device.write_swap(&mut buf, 4096).unwrap();
        device.discard(0, 4096).unwrap();
        device.read_at(&mut buf, 0).unwrap();
        device.read_at(&mut buf, 8192).unwrap();
        device.read_vectored_at(&mut [&mut buf[..]], 0).unwrap();
        device.flush().unwrap();
        device.prefetch(0, 4096).unwrap();
        // Out of range: fails, and is timed all the same.
        assert!(device.read_at(&mut buf, 1 << 20).is_err());
        let latency = times.latency();
        assert_eq!(latency.read.count, 4);
        assert_eq!(latency.write.count, 3);
        assert_eq!(latency.flush.count, 1);
        assert!(latency.read.max_ns >= latency.read.p50_ns);
    }

    #[test]
    fn calls_that_did_nothing_and_calls_while_off_are_not_timed() {
        let (device, times, on) = timed();
        // An empty batch only asks; a memory device batches nothing.
        assert!(!device.read_batch(&mut []).unwrap());
        let mut buf = [0u8; 512];
        assert!(!device.read_batch(&mut [(0, &mut buf[..])]).unwrap());
        assert_eq!(times.latency().read.count, 0);
        on.store(false, Ordering::Relaxed);
        device.write_at(&buf, 0).unwrap();
        device.flush().unwrap();
        assert_eq!(times.latency(), LayerLatency::default());
        on.store(true, Ordering::Relaxed);
        device.write_at(&buf, 0).unwrap();
        assert_eq!(times.latency().write.count, 1);
    }
}
