//! Cost groups (papers/004): which device a block lives on × whether the
//! access that missed it was sequential or random; each group's miss service
//! time measured online and turned into the eviction costs the `cost` policy
//! reads.
//!
//! Group numbering is `device × 2 + (random ? 1 : 0)`, as the simulator's
//! `GroupMap` with `split_sequential` numbers them. Every device read the
//! cache issues is timed; its time per block updates an exponentially
//! weighted moving average for its group, and after each update every
//! measured group's cost becomes its average over the fastest group's (so the
//! fastest costs 1). A group not measured yet keeps cost 1.

use std::sync::Arc;
use std::time::Duration;

use cairn_policy::cost::CostTable;

use super::sync::{AtomicU64, Ordering};
use crate::device::{ConcatDevice, Device, StripedDevice};

/// Which device of a volume holds a byte. Given to the cache so it can put
/// each block into its device's cost groups.
pub trait Placement: Send + Sync {
    /// Number of devices (at least 1).
    fn devices(&self) -> u16;
    /// The device holding byte `offset` of the volume, `< devices()`.
    fn device_of(&self, offset: u64) -> u16;
}

/// Everything on one device.
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleDevice;

impl Placement for SingleDevice {
    fn devices(&self) -> u16 {
        1
    }
    fn device_of(&self, _offset: u64) -> u16 {
        0
    }
}

impl Placement for ConcatDevice {
    fn devices(&self) -> u16 {
        self.parts() as u16
    }
    fn device_of(&self, offset: u64) -> u16 {
        self.part_of(offset.min(self.len().saturating_sub(1))) as u16
    }
}

impl Placement for StripedDevice {
    fn devices(&self) -> u16 {
        self.parts() as u16
    }
    fn device_of(&self, offset: u64) -> u16 {
        ((offset / self.stripe()) % self.parts() as u64) as u16
    }
}

/// The group of an access to `device`.
#[inline]
pub fn group_of(device: u16, sequential: bool) -> u16 {
    device * 2 + u16::from(!sequential)
}

/// Per-group miss accounting and the online cost estimate.
pub(crate) struct GroupTracker {
    pub(crate) placement: Arc<dyn Placement>,
    groups: usize,
    /// Smoothed service time per block, ns, as `f64` bits; 0 = not measured.
    estimate_ns: Box<[AtomicU64]>,
    device_reads: Box<[AtomicU64]>,
    read_bytes: Box<[AtomicU64]>,
    read_ns: Box<[AtomicU64]>,
    table: Arc<CostTable>,
    /// Weight of a new sample in the average; 0 disables online estimation.
    smoothing: f64,
}

impl GroupTracker {
    pub(crate) fn new(
        placement: Arc<dyn Placement>,
        table: Arc<CostTable>,
        smoothing: f64,
    ) -> Self {
        let groups = usize::from(placement.devices().max(1)) * 2;
        let zeros = || (0..groups).map(|_| AtomicU64::new(0)).collect();
        Self {
            placement,
            groups,
            estimate_ns: zeros(),
            device_reads: zeros(),
            read_bytes: zeros(),
            read_ns: zeros(),
            table,
            smoothing,
        }
    }

    pub(crate) fn groups(&self) -> usize {
        self.groups
    }

    pub(crate) fn table(&self) -> &Arc<CostTable> {
        &self.table
    }

    #[inline]
    pub(crate) fn group(&self, offset: u64, sequential: bool) -> u16 {
        let device = self
            .placement
            .device_of(offset)
            .min(self.placement.devices() - 1);
        group_of(device, sequential)
    }

    /// Records one device read of `blocks` blocks (`bytes` bytes) for `group`
    /// that took `elapsed`.
    pub(crate) fn record(&self, group: u16, blocks: usize, bytes: u64, elapsed: Duration) {
        let g = usize::from(group);
        let ns = elapsed.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.device_reads[g].fetch_add(1, Ordering::Relaxed);
        self.read_bytes[g].fetch_add(bytes, Ordering::Relaxed);
        self.read_ns[g].fetch_add(ns, Ordering::Relaxed);
        if self.smoothing <= 0.0 {
            return;
        }
        let sample = (ns as f64 / blocks.max(1) as f64).max(1.0);
        let alpha = self.smoothing;
        let _ = self.estimate_ns[g].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            let old = f64::from_bits(bits);
            let new = if old > 0.0 {
                old + alpha * (sample - old)
            } else {
                sample
            };
            Some(new.to_bits())
        });
        self.publish();
    }

    /// Sets every measured group's cost to its estimate over the fastest's.
    fn publish(&self) {
        let estimates = self
            .estimate_ns
            .iter()
            .map(|e| f64::from_bits(e.load(Ordering::Relaxed)));
        let fastest = estimates.filter(|&e| e > 0.0).fold(f64::INFINITY, f64::min);
        if !fastest.is_finite() {
            return;
        }
        for (group, estimate) in self.estimate_ns.iter().enumerate() {
            let estimate = f64::from_bits(estimate.load(Ordering::Relaxed));
            if estimate > 0.0 && group < self.table.groups() {
                // Finite and ≥ 1 by construction, so `set` cannot refuse it.
                let _ = self.table.set(group as u16, estimate / fastest);
            }
        }
    }

    /// `(device reads, bytes read, total read ns, smoothed ns per block)` of
    /// `group`.
    pub(crate) fn snapshot(&self, group: usize) -> (u64, u64, u64, f64) {
        (
            self.device_reads[group].load(Ordering::Relaxed),
            self.read_bytes[group].load(Ordering::Relaxed),
            self.read_ns[group].load(Ordering::Relaxed),
            f64::from_bits(self.estimate_ns[group].load(Ordering::Relaxed)),
        )
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    #[test]
    fn costs_are_normalised_to_the_fastest_measured_group() {
        let table = Arc::new(CostTable::new(4));
        let tracker = GroupTracker::new(Arc::new(Two), Arc::clone(&table), 1.0);
        tracker.record(3, 1, 4096, Duration::from_micros(300));
        assert!(
            (table.get(3) - 1.0).abs() < 1e-12,
            "the only measured group is the fastest"
        );
        tracker.record(1, 2, 8192, Duration::from_micros(200));
        assert!((table.get(3) - 3.0).abs() < 1e-9, "{}", table.get(3));
        assert!((table.get(1) - 1.0).abs() < 1e-12);
        assert!((table.get(0) - 1.0).abs() < 1e-12, "unmeasured");
        let (reads, bytes, ns, per_block) = tracker.snapshot(1);
        assert_eq!((reads, bytes, ns), (1, 8192, 200_000));
        assert!((per_block - 100_000.0).abs() < 1e-6);
    }

    #[test]
    fn the_average_moves_by_the_smoothing_weight() {
        let table = Arc::new(CostTable::new(2));
        let tracker = GroupTracker::new(Arc::new(SingleDevice), table, 0.25);
        tracker.record(0, 1, 1, Duration::from_micros(1));
        tracker.record(0, 1, 1, Duration::from_micros(2));
        assert!((tracker.snapshot(0).3 - 1250.0).abs() < 1e-9);
    }

    struct Two;
    impl Placement for Two {
        fn devices(&self) -> u16 {
            2
        }
        fn device_of(&self, offset: u64) -> u16 {
            u16::from(offset >= 1 << 20)
        }
    }
}
