//! Cost groups (papers/004): which device a block lives on × whether the
//! access that missed it was sequential or random; each group's miss service
//! time measured online and turned into the eviction costs the `cost` policy
//! reads.
//!
//! Group numbering is `device × 2 + (random ? 1 : 0)`, as the simulator's
//! `GroupMap` with `split_sequential` numbers them. Every device read the
//! cache issues is timed, per device it touches: a run of consecutive blocks
//! may span several devices of a concatenated, striped or hash-split volume,
//! and each device's part is charged to that device's group, by the bytes it
//! served. The time is the device's own busy clock where the placement gives
//! one ([`Placement::busy_ns`]: a throttled device's modelled time, free of
//! the cache's per-call overhead and of scheduling noise), else the wall time
//! of the read (then a read spanning several devices updates no estimate: its
//! time cannot be split between them). Each sample, in nanoseconds per byte,
//! goes to `cairn_policy::cost::CostEstimator` (an exponentially weighted
//! moving average per group, costs normalised to the fastest group's; the
//! file gateway feeds the same estimator).
//!
//! A device clock counts every operation on the device, so when several
//! threads read one device at once a read's delta includes the overlapping
//! reads of the others: under concurrency the samples measure the device's
//! busy time per byte the cache asked for, queueing included.

use std::sync::Arc;
use std::time::Duration;

use cairn_policy::cost::{CostEstimator, CostTable};

use crate::device::{ConcatDevice, Device, StripedDevice};

/// Which device of a volume holds a byte. Given to the cache so it can put
/// each block into its device's cost groups.
pub trait Placement: Send + Sync {
    /// Number of devices (at least 1).
    fn devices(&self) -> u16;
    /// The device holding byte `offset` of the volume, `< devices()`.
    fn device_of(&self, offset: u64) -> u16;
    /// Device `device`'s busy clock, nanoseconds ([`Device::busy_ns`]), if
    /// it keeps one. Default `None`: the cache times reads by the wall clock.
    fn busy_ns(&self, device: u16) -> Option<u64> {
        let _ = device;
        None
    }
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
    fn busy_ns(&self, device: u16) -> Option<u64> {
        self.part(usize::from(device)).busy_ns()
    }
}

impl Placement for StripedDevice {
    fn devices(&self) -> u16 {
        self.parts() as u16
    }
    fn device_of(&self, offset: u64) -> u16 {
        ((offset / self.stripe()) % self.parts() as u64) as u16
    }
    fn busy_ns(&self, device: u16) -> Option<u64> {
        self.part(usize::from(device)).busy_ns()
    }
}

/// The group of an access to `device`.
#[inline]
pub fn group_of(device: u16, sequential: bool) -> u16 {
    device * 2 + u16::from(!sequential)
}

/// One device's part of a device read: the bytes it serves and its busy
/// clock before the read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Share {
    device: u16,
    bytes: u64,
    clock: Option<u64>,
}

/// Per-group miss accounting and the online cost estimate
/// ([`CostEstimator`], shared with the file gateway).
pub(crate) struct GroupTracker {
    pub(crate) placement: Arc<dyn Placement>,
    /// Bytes per block (to report the estimate per block).
    block_size: u64,
    estimator: CostEstimator,
}

impl GroupTracker {
    pub(crate) fn new(
        placement: Arc<dyn Placement>,
        table: Arc<CostTable>,
        smoothing: f64,
        block_size: u64,
    ) -> Self {
        let groups = usize::from(placement.devices().max(1)) * 2;
        Self {
            placement,
            block_size,
            estimator: CostEstimator::new(groups, table, smoothing),
        }
    }

    pub(crate) fn groups(&self) -> usize {
        self.estimator.groups()
    }

    pub(crate) fn table(&self) -> &Arc<CostTable> {
        self.estimator.table()
    }

    /// The device holding byte `offset`.
    #[inline]
    pub(crate) fn device(&self, offset: u64) -> u16 {
        self.placement
            .device_of(offset)
            .min(self.placement.devices() - 1)
    }

    #[inline]
    pub(crate) fn group(&self, offset: u64, sequential: bool) -> u16 {
        group_of(self.device(offset), sequential)
    }

    /// Adds `bytes` served by `device` to the shares of a read about to be
    /// issued, reading the device's clock the first time it appears.
    pub(crate) fn share(&self, shares: &mut Vec<Share>, device: u16, bytes: u64) {
        if let Some(share) = shares.iter_mut().find(|s| s.device == device) {
            share.bytes += bytes;
        } else {
            shares.push(Share {
                device,
                bytes,
                clock: self.placement.busy_ns(device),
            });
        }
    }

    /// Records a device read that served `shares` (accesses sequential or
    /// not) and took `wall` by the wall clock.
    pub(crate) fn record_read(&self, shares: &[Share], sequential: bool, wall: Duration) {
        let wall_ns = wall.as_nanos().min(u128::from(u64::MAX)) as u64;
        let clocked = shares.iter().all(|s| s.clock.is_some());
        let total: u64 = shares.iter().map(|s| s.bytes).sum::<u64>().max(1);
        for share in shares {
            let group = group_of(share.device, sequential);
            let ns = match (clocked, share.clock) {
                (true, Some(before)) => self
                    .placement
                    .busy_ns(share.device)
                    .unwrap_or(before)
                    .saturating_sub(before),
                // The wall time, split by bytes only for the counters.
                _ => (u128::from(wall_ns) * u128::from(share.bytes) / u128::from(total)) as u64,
            };
            let sample = clocked || shares.len() == 1;
            self.record(group, share.bytes, ns, sample);
        }
    }

    /// Records one device's part of a device read for `group`: `bytes`
    /// bytes in `ns`; `sample`: whether it updates the estimate.
    pub(crate) fn record(&self, group: u16, bytes: u64, ns: u64, sample: bool) {
        self.estimator.record(group, bytes, ns, sample);
    }

    /// `(device reads, bytes read, total read ns, smoothed ns per block)` of
    /// `group`.
    pub(crate) fn snapshot(&self, group: usize) -> (u64, u64, u64, f64) {
        let reads = self.estimator.snapshot(group);
        (
            reads.reads,
            reads.bytes,
            reads.ns,
            reads.ns_per_byte * self.block_size as f64,
        )
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn costs_are_normalised_to_the_fastest_measured_group() {
        let table = Arc::new(CostTable::new(4));
        let tracker = GroupTracker::new(Arc::new(Two::default()), Arc::clone(&table), 1.0, 4096);
        tracker.record(3, 4096, 300_000, true);
        assert!(
            (table.get(3) - 1.0).abs() < 1e-12,
            "the only measured group is the fastest"
        );
        tracker.record(1, 8192, 200_000, true);
        assert!((table.get(3) - 3.0).abs() < 1e-9, "{}", table.get(3));
        assert!((table.get(1) - 1.0).abs() < 1e-12);
        assert!((table.get(0) - 1.0).abs() < 1e-12, "unmeasured");
        let (reads, bytes, ns, per_block) = tracker.snapshot(1);
        assert_eq!((reads, bytes, ns), (1, 8192, 200_000));
        assert!((per_block - 100_000.0).abs() < 1e-6, "{per_block}");
    }

    #[test]
    fn the_average_moves_by_the_smoothing_weight() {
        let table = Arc::new(CostTable::new(2));
        let tracker = GroupTracker::new(Arc::new(SingleDevice), table, 0.25, 1);
        tracker.record(0, 1, 1000, true);
        tracker.record(0, 1, 2000, true);
        assert!((tracker.snapshot(0).3 - 1250.0).abs() < 1e-9);
        tracker.record(0, 1, 9000, false);
        assert!(
            (tracker.snapshot(0).3 - 1250.0).abs() < 1e-9,
            "not a sample"
        );
    }

    #[test]
    fn a_read_across_devices_charges_each_by_its_clock_and_bytes() {
        let table = Arc::new(CostTable::new(4));
        let two = Arc::new(Two::default());
        let tracker = GroupTracker::new(Arc::clone(&two) as _, Arc::clone(&table), 1.0, 4096);
        let mut shares = Vec::new();
        tracker.share(&mut shares, 0, 4096);
        tracker.share(&mut shares, 1, 8192);
        tracker.share(&mut shares, 0, 4096);
        assert_eq!(shares.len(), 2);
        // Device 1 is 3× slower per byte; the wall time is ignored.
        two.clocks[0].fetch_add(8192, Ordering::Relaxed);
        two.clocks[1].fetch_add(3 * 8192, Ordering::Relaxed);
        tracker.record_read(&shares, false, Duration::from_secs(1));
        assert!((table.get(1) - 1.0).abs() < 1e-12);
        assert!((table.get(3) - 3.0).abs() < 1e-9, "{}", table.get(3));
        assert_eq!(tracker.snapshot(1).1, 8192);
        assert_eq!(tracker.snapshot(3).2, 3 * 8192);
        assert!((tracker.snapshot(3).3 - 3.0 * 4096.0).abs() < 1e-9);
    }

    #[test]
    fn without_clocks_a_read_across_devices_updates_no_estimate() {
        let table = Arc::new(CostTable::new(4));
        let tracker = GroupTracker::new(Arc::new(NoClocks), Arc::clone(&table), 1.0, 4096);
        let mut shares = Vec::new();
        tracker.share(&mut shares, 0, 4096);
        tracker.share(&mut shares, 1, 4096);
        tracker.record_read(&shares, true, Duration::from_micros(8));
        assert_eq!(tracker.snapshot(0).2, 4000, "the counters get a share");
        assert!(tracker.snapshot(0).3 == 0.0 && tracker.snapshot(2).3 == 0.0);
        let mut one = Vec::new();
        tracker.share(&mut one, 1, 4096);
        tracker.record_read(&one, true, Duration::from_micros(4));
        assert!((tracker.snapshot(2).3 - 4000.0).abs() < 1e-9);
    }

    #[derive(Default)]
    struct Two {
        clocks: [AtomicU64; 2],
    }
    impl Placement for Two {
        fn devices(&self) -> u16 {
            2
        }
        fn device_of(&self, offset: u64) -> u16 {
            u16::from(offset >= 1 << 20)
        }
        fn busy_ns(&self, device: u16) -> Option<u64> {
            Some(self.clocks[usize::from(device)].load(Ordering::Relaxed))
        }
    }

    struct NoClocks;
    impl Placement for NoClocks {
        fn devices(&self) -> u16 {
            2
        }
        fn device_of(&self, offset: u64) -> u16 {
            u16::from(offset >= 1 << 20)
        }
    }
}
