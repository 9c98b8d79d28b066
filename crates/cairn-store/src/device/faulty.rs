//! The crash-test device: an in-memory device that knows which bytes are
//! durable, and can crash.
//!
//! It keeps two images: the **live** one (what reads see) and the **durable**
//! one (what survives a crash), plus the writes since the last flush (the
//! current *flush epoch*). A crash replaces the live image with the durable one
//! plus whatever the [`CrashMode`] lets through of the epoch:
//!
//! - with [`CrashMode::DropUnflushed`], nothing;
//! - with [`CrashMode::Reorder`], any subset of the epoch's writes (each survives
//!   with probability ½, applied in issue order), as a disk's write cache that
//!   reorders within a flush epoch;
//! - with [`CrashMode::TearLast`], every write of the epoch but the last, and of the
//!   last only some of its 512-byte sectors.
//!
//! Triggers: [`FaultyDevice::crash_after_writes`] crashes the device after the
//! Nth further write (every operation then fails with
//! [`DeviceError::Crashed`] until [`FaultyDevice::reboot`]), so a test can
//! enumerate crash points by running a workload once per N.
//! [`FaultyDevice::fail`] makes a chosen future operation return an injected
//! EIO with no effect. All randomness comes from the seed given at creation, so
//! a failing case replays exactly from its printed seed.
//!
//! Power cuts across devices: devices made with [`FaultyDevice::with_power`]
//! share one [`Power`], whose [`Power::crash_after_writes`] counts the writes of
//! all of them and, at the Nth, cuts them all at that instant. Each device
//! keeps what its own flush epochs allow (a flush of one device makes nothing
//! of another's durable), resolved in the cut's mode with its own seed; until
//! [`Power::reboot`] every operation on any of them fails with
//! [`DeviceError::Crashed`]. The cut is applied lazily: a device that did not
//! trigger it resolves its epoch at its next operation (or inspection), which
//! is the same thing, since every operation first checks the power and no
//! operation can complete on it in between. Lock order: a device's lock, then
//! its power's; the power never takes a device's lock, so there is no cycle. A
//! device made with [`FaultyDevice::new`] is alone on its own power.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Device, DeviceError, DeviceOp, SECTOR, check_range};

/// What survives of the current flush epoch at a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Nothing unflushed survives.
    DropUnflushed,
    /// Each unflushed write survives or not, independently (seeded).
    Reorder,
    /// Unflushed writes survive, except the last, of which each 512-byte sector
    /// survives or not, independently (seeded).
    TearLast,
}

/// Operation counts since creation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Completed reads.
    pub reads: u64,
    /// Completed writes (discards count as writes of zeroes).
    pub writes: u64,
    /// Completed flushes.
    pub flushes: u64,
    /// Crashes (triggered or explicit).
    pub crashes: u64,
}

#[derive(Debug)]
struct Pending {
    offset: u64,
    data: Vec<u8>,
}

#[derive(Debug)]
struct State {
    live: Vec<u8>,
    durable: Vec<u8>,
    epoch: Vec<Pending>,
    rng: ChaCha8Rng,
    counts: Counts,
    /// Crash after this many more writes.
    crash_after: Option<u64>,
    crash_mode: CrashMode,
    crashed: bool,
    /// (operation, how many more of it succeed before one fails).
    faults: Vec<(DeviceOp, u64)>,
    /// The power's cuts this device has resolved.
    generation: u64,
}

/// A power source shared by several [`FaultyDevice`]s (as an `Arc<Power>`): a
/// power cut crashes all of them at one instant.
///
/// Its state is one mutex, taken inside a device's lock (never the other way),
/// so the writes of all its devices are counted in one order and a cut is an
/// instant in that order.
#[derive(Debug, Default)]
pub struct Power {
    state: Mutex<PowerState>,
}

#[derive(Debug, Default)]
struct PowerState {
    /// Cut and not yet rebooted: every operation fails.
    cut: bool,
    /// The mode of every cut so far (its generation is its index + 1); a
    /// device that missed cuts resolves its epoch in the first one's mode. One
    /// byte per cut.
    cuts: Vec<CrashMode>,
    /// Completed writes (and discards) of all the devices.
    writes: u64,
    /// Cut after this many more writes, in this mode.
    cut_after: Option<(u64, CrashMode)>,
}

impl PowerState {
    fn generation(&self) -> u64 {
        self.cuts.len() as u64
    }

    fn cut(&mut self, mode: CrashMode) {
        self.cuts.push(mode);
        self.cut = true;
    }
}

impl Power {
    /// A power source with no devices yet and no cut armed.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, PowerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Cuts the power, in `mode`, once `writes` more writes have completed on
    /// any of its devices (0: now). Until [`reboot`](Self::reboot) every
    /// operation on its devices then fails with [`DeviceError::Crashed`].
    pub fn crash_after_writes(&self, writes: u64, mode: CrashMode) {
        let mut state = self.lock();
        if writes == 0 {
            state.cut_after = None;
            state.cut(mode);
        } else {
            state.cut_after = Some((writes, mode));
        }
    }

    /// Cuts the power now, in `mode`, and brings it back at once (a power cut
    /// and reboot of every device).
    pub fn crash_now(&self, mode: CrashMode) {
        let mut state = self.lock();
        state.cut(mode);
        state.cut = false;
    }

    /// Brings the power back after a triggered cut; each device then holds
    /// what survived it. Returns whether the power was cut.
    pub fn reboot(&self) -> bool {
        std::mem::replace(&mut self.lock().cut, false)
    }

    /// Whether a triggered cut has happened and no reboot yet.
    pub fn is_cut(&self) -> bool {
        self.lock().cut
    }

    /// Writes (and discards) completed on all its devices since creation.
    pub fn writes(&self) -> u64 {
        self.lock().writes
    }

    /// How many cuts there have been (triggered or explicit).
    pub fn cuts(&self) -> u64 {
        self.lock().generation()
    }
}

/// An in-memory device with durable state, crashes and injected errors.
#[derive(Debug)]
pub struct FaultyDevice {
    state: Mutex<State>,
    power: Arc<Power>,
    len: u64,
    seed: u64,
}

impl FaultyDevice {
    /// A zero-filled device of `len` bytes whose random choices come from
    /// `seed`, alone on its own power.
    pub fn new(len: u64, seed: u64) -> Self {
        Self::with_power(len, seed, Power::new())
    }

    /// A zero-filled device of `len` bytes whose random choices come from
    /// `seed`, on `power` with the other devices made on it.
    pub fn with_power(len: u64, seed: u64, power: Arc<Power>) -> Self {
        let bytes = usize::try_from(len).unwrap_or(usize::MAX);
        let generation = power.lock().generation();
        Self {
            state: Mutex::new(State {
                live: vec![0; bytes],
                durable: vec![0; bytes],
                epoch: Vec::new(),
                rng: ChaCha8Rng::seed_from_u64(seed),
                counts: Counts::default(),
                crash_after: None,
                crash_mode: CrashMode::DropUnflushed,
                crashed: false,
                faults: Vec::new(),
                generation,
            }),
            power,
            len,
            seed,
        }
    }

    /// The seed this device was created with (print it when a test fails).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The power this device is on.
    pub fn power(&self) -> &Arc<Power> {
        &self.power
    }

    /// The device's state, caught up with its power's cuts.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        catch_up(&mut state, &self.power.lock());
        state
    }

    /// Crash this device alone, in `mode`, once `writes` more writes have
    /// completed on it (0: at the next operation). Until
    /// [`reboot`](Self::reboot) every operation then fails with
    /// [`DeviceError::Crashed`]. (To crash all the devices on a power, see
    /// [`Power::crash_after_writes`].)
    pub fn crash_after_writes(&self, writes: u64, mode: CrashMode) {
        let mut state = self.lock();
        state.crash_mode = mode;
        if writes == 0 {
            crash(&mut state, mode);
            state.crashed = true;
            state.crash_after = None;
        } else {
            state.crash_after = Some(writes);
        }
    }

    /// Crash this device now, in `mode`, and come back up at once (a power cut
    /// and reboot of this device alone).
    pub fn crash_now(&self, mode: CrashMode) {
        let mut state = self.lock();
        crash(&mut state, mode);
        state.crashed = false;
        // A crash now supersedes one still to come.
        state.crash_after = None;
    }

    /// Comes back up after a triggered crash of this device; it then holds
    /// what survived it. Returns whether the device had crashed. A cut of its
    /// power lasts until [`Power::reboot`].
    pub fn reboot(&self) -> bool {
        let mut state = self.lock();
        std::mem::replace(&mut state.crashed, false)
    }

    /// Whether the device is down: a triggered crash of it and no reboot yet,
    /// or its power cut.
    pub fn is_crashed(&self) -> bool {
        let crashed = self.lock().crashed;
        crashed || self.power.is_cut()
    }

    /// Makes the operation `op` fail with an injected EIO (and no effect) after
    /// `after` more of them succeed.
    pub fn fail(&self, op: DeviceOp, after: u64) {
        self.lock().faults.push((op, after));
    }

    /// Operation counts so far.
    pub fn counts(&self) -> Counts {
        self.lock().counts
    }

    /// A copy of the durable image (what a crash now in
    /// [`CrashMode::DropUnflushed`] would leave).
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// Locks the device for an operation: fails it if the device crashed, its
    /// power is cut or a fault is due; otherwise, for a write, counts it on the
    /// power and says whether it is the one that cuts the power (the caller
    /// applies it, then crashes). Checking and counting happen under the
    /// power's lock, so every operation of every device on it is before or
    /// after a cut, never across it.
    fn begin(
        &self,
        op: DeviceOp,
        offset: u64,
        len: u64,
    ) -> Result<(MutexGuard<'_, State>, Option<CrashMode>), DeviceError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut power = self.power.lock();
        catch_up(&mut state, &power);
        if power.cut {
            return Err(DeviceError::Crashed { op });
        }
        Self::admit_op(&mut state, op, offset, len)?;
        let mut cut = None;
        if matches!(op, DeviceOp::Write | DeviceOp::Discard) {
            power.writes += 1;
            if let Some((left, mode)) = power.cut_after.as_mut() {
                *left -= 1;
                if *left == 0 {
                    cut = Some(*mode);
                    power.cut_after = None;
                }
            }
            if let Some(mode) = cut {
                power.cut(mode);
                // This device resolves the cut itself, after applying the write.
                state.generation = power.generation();
            }
        }
        Ok((state, cut))
    }

    /// Fails the operation if the device crashed or a fault is due.
    fn admit_op(state: &mut State, op: DeviceOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        if state.crashed {
            return Err(DeviceError::Crashed { op });
        }
        let mut due = false;
        state.faults.retain_mut(|(fault_op, after)| {
            if *fault_op != op || due {
                return true;
            }
            if *after == 0 {
                due = true;
                false
            } else {
                *after -= 1;
                true
            }
        });
        if due {
            return Err(DeviceError::Injected { op, offset, len });
        }
        Ok(())
    }

    fn write_bytes(&self, data: &[u8], offset: u64, op: DeviceOp) -> Result<(), DeviceError> {
        check_range(op, offset, data.len() as u64, self.len)?;
        let (mut state, power_cut) = self.begin(op, offset, data.len() as u64)?;
        let start = offset as usize;
        state.live[start..start + data.len()].copy_from_slice(data);
        state.epoch.push(Pending {
            offset,
            data: data.to_vec(),
        });
        state.counts.writes += 1;
        if let Some(left) = state.crash_after.as_mut() {
            *left -= 1;
            if *left == 0 {
                state.crash_after = None;
                let mode = state.crash_mode;
                crash(&mut state, mode);
                state.crashed = true;
            }
        }
        if let Some(mode) = power_cut {
            crash(&mut state, mode);
        }
        Ok(())
    }
}

/// Resolves the power's cuts the device has not seen: the first in its mode
/// (nothing of the device can have changed since it, as every operation
/// checks the power first), the rest over an empty epoch.
fn catch_up(state: &mut State, power: &PowerState) {
    let missed = usize::try_from(state.generation).unwrap_or(usize::MAX);
    for &mode in power.cuts.get(missed..).unwrap_or_default() {
        crash(state, mode);
    }
    state.generation = power.generation();
}

/// Rebuilds the live image from the durable one and what `mode` lets through
/// (the caller says whether the device then stays down).
fn crash(state: &mut State, mode: CrashMode) {
    let epoch = std::mem::take(&mut state.epoch);
    let last = epoch.len().saturating_sub(1);
    for (i, write) in epoch.iter().enumerate() {
        let start = write.offset as usize;
        match mode {
            CrashMode::DropUnflushed => {}
            CrashMode::Reorder => {
                if state.rng.random_bool(0.5) {
                    state.durable[start..start + write.data.len()].copy_from_slice(&write.data);
                }
            }
            CrashMode::TearLast if i < last => {
                state.durable[start..start + write.data.len()].copy_from_slice(&write.data);
            }
            CrashMode::TearLast => {
                // Sectors of the device the write touches, each kept or not.
                let end = start + write.data.len();
                let mut at = start;
                while at < end {
                    let sector_end = ((at as u64 / SECTOR + 1) * SECTOR) as usize;
                    let chunk_end = sector_end.min(end);
                    if state.rng.random_bool(0.5) {
                        state.durable[at..chunk_end]
                            .copy_from_slice(&write.data[at - start..chunk_end - start]);
                    }
                    at = chunk_end;
                }
            }
        }
    }
    state.live.clone_from(&state.durable);
    state.counts.crashes += 1;
}

impl Device for FaultyDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len)?;
        let (mut state, _) = self.begin(DeviceOp::Read, offset, buf.len() as u64)?;
        let start = offset as usize;
        buf.copy_from_slice(&state.live[start..start + buf.len()]);
        state.counts.reads += 1;
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.write_bytes(buf, offset, DeviceOp::Write)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let (mut state, _) = self.begin(DeviceOp::Flush, 0, 0)?;
        let state = &mut *state;
        for write in state.epoch.drain(..) {
            let start = write.offset as usize;
            state.durable[start..start + write.data.len()].copy_from_slice(&write.data);
        }
        state.counts.flushes += 1;
        Ok(())
    }

    /// Writes zeroes (a discard is a write as far as crashes go).
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len)?;
        let zeroes = vec![0u8; usize::try_from(len).unwrap_or(0)];
        self.write_bytes(&zeroes, offset, DeviceOp::Discard)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn describe(&self) -> String {
        format!(
            "faulty memory device ({} bytes, seed {})",
            self.len, self.seed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dev: &FaultyDevice, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        dev.read_at(&mut buf, offset).unwrap();
        buf
    }

    #[test]
    fn conforms() {
        super::super::conformance::check(&FaultyDevice::new(1 << 17, 1));
    }

    #[test]
    fn flushed_writes_survive_and_unflushed_ones_do_not() {
        let dev = FaultyDevice::new(1 << 16, 7);
        dev.write_at(&[1; 4096], 0).unwrap();
        dev.flush().unwrap();
        dev.write_at(&[2; 4096], 0).unwrap();
        dev.write_at(&[3; 4096], 8192).unwrap();
        assert_eq!(read(&dev, 0, 4096), vec![2; 4096], "live before the crash");
        dev.crash_now(CrashMode::DropUnflushed);
        assert_eq!(read(&dev, 0, 4096), vec![1; 4096]);
        assert_eq!(read(&dev, 8192, 4096), vec![0; 4096]);
        assert_eq!(dev.counts().crashes, 1);
    }

    #[test]
    fn reorder_keeps_some_subset_of_the_epoch() {
        let mut seen = std::collections::HashSet::new();
        for seed in 0..64 {
            let dev = FaultyDevice::new(1 << 16, seed);
            for i in 0..4u8 {
                dev.write_at(&[i + 1; 512], u64::from(i) * 512).unwrap();
            }
            dev.crash_now(CrashMode::Reorder);
            let kept: Vec<bool> = (0..4).map(|i| read(&dev, i * 512, 1)[0] != 0).collect();
            seen.insert(kept);
        }
        // Some outcome keeps a later write and drops an earlier one, and the
        // outcomes vary.
        let reordered = seen
            .iter()
            .any(|kept| (0..4).any(|i| !kept[i] && kept[i + 1..].iter().any(|&k| k)));
        assert!(reordered, "{seen:?}");
        assert!(seen.len() > 4, "{seen:?}");
    }

    #[test]
    fn tear_last_splits_the_last_write_at_sector_boundaries() {
        let mut mixed = false;
        for seed in 0..32 {
            let dev = FaultyDevice::new(1 << 16, seed);
            dev.write_at(&[9; 1024], 0).unwrap();
            dev.write_at(&[7; 4096], 4096).unwrap();
            dev.crash_now(CrashMode::TearLast);
            assert_eq!(read(&dev, 0, 1024), vec![9; 1024], "earlier writes kept");
            let last = read(&dev, 4096, 4096);
            for sector in last.chunks(512) {
                assert!(sector.iter().all(|&b| b == 7) || sector.iter().all(|&b| b == 0));
            }
            mixed |= last.contains(&7) && last.contains(&0);
        }
        assert!(mixed, "some seed tears the write");
    }

    #[test]
    fn crash_after_n_writes_refuses_io_until_reboot() {
        let dev = FaultyDevice::new(1 << 16, 3);
        dev.write_at(&[1; 512], 0).unwrap();
        dev.flush().unwrap();
        dev.crash_after_writes(2, CrashMode::DropUnflushed);
        dev.write_at(&[2; 512], 0).unwrap();
        assert!(!dev.is_crashed());
        dev.write_at(&[3; 512], 512).unwrap();
        assert!(dev.is_crashed());
        assert!(matches!(
            dev.read_at(&mut [0; 1], 0),
            Err(DeviceError::Crashed { .. })
        ));
        assert!(matches!(dev.flush(), Err(DeviceError::Crashed { .. })));
        assert!(dev.reboot());
        assert_eq!(read(&dev, 0, 512), vec![1; 512]);
        assert_eq!(read(&dev, 512, 512), vec![0; 512]);
    }

    #[test]
    fn injected_errors_hit_the_chosen_operation_and_change_nothing() {
        let dev = FaultyDevice::new(1 << 16, 5);
        dev.fail(DeviceOp::Write, 1);
        dev.write_at(&[1; 16], 0).unwrap();
        let error = dev.write_at(&[2; 16], 0).unwrap_err();
        assert!(
            matches!(
                error,
                DeviceError::Injected {
                    op: DeviceOp::Write,
                    ..
                }
            ),
            "{error}"
        );
        assert_eq!(read(&dev, 0, 16), vec![1; 16]);
        dev.write_at(&[3; 16], 0).unwrap();
        dev.fail(DeviceOp::Flush, 0);
        assert!(dev.flush().is_err());
        dev.flush().unwrap();
        assert_eq!(dev.durable_image()[..16], [3; 16]);
    }

    #[test]
    fn the_same_seed_crashes_the_same_way() {
        let run = |seed| {
            let dev = FaultyDevice::new(1 << 16, seed);
            for i in 0..16u8 {
                dev.write_at(&[i + 1; 700], u64::from(i) * 900).unwrap();
            }
            dev.crash_now(CrashMode::Reorder);
            dev.durable_image()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }

    /// Two devices on one power, `a` and `b`, each 64 KiB.
    fn pair(seed_a: u64, seed_b: u64) -> (Arc<Power>, FaultyDevice, FaultyDevice) {
        let power = Power::new();
        let a = FaultyDevice::with_power(1 << 16, seed_a, Arc::clone(&power));
        let b = FaultyDevice::with_power(1 << 16, seed_b, Arc::clone(&power));
        (power, a, b)
    }

    /// Writes 512-byte blocks of value `i + 1` to the devices in turn (`a`,
    /// `b`, `b`, `a`, ...), flushing the device after each, until an operation
    /// fails; returns how many writes completed and how many were flushed.
    fn alternate(a: &FaultyDevice, b: &FaultyDevice) -> (usize, usize) {
        let mut written = 0;
        for i in 0..8u8 {
            let dev = if matches!(i % 4, 0 | 3) { a } else { b };
            if dev.write_at(&[i + 1; 512], u64::from(i) * 512).is_err() {
                return (written, written);
            }
            written += 1;
            if dev.flush().is_err() {
                return (written, written - 1);
            }
        }
        (written, written)
    }

    #[test]
    fn a_power_cut_after_the_nth_write_in_total_crashes_both_devices_there() {
        let (power, a, b) = pair(1, 2);
        assert_eq!(alternate(&a, &b), (8, 8));
        let total = power.writes();
        assert_eq!(total, 8, "the group counts both devices' writes");
        for n in 1..=total {
            let (power, a, b) = pair(1, 2);
            power.crash_after_writes(n, CrashMode::DropUnflushed);
            let (written, flushed) = alternate(&a, &b);
            assert_eq!(
                written as u64, n,
                "the cut comes after write {n} of either device"
            );
            assert_eq!(flushed + 1, written, "the write that cut is not flushed");
            assert!(power.is_cut() && a.is_crashed() && b.is_crashed());
            assert_eq!(power.writes(), n);
            assert!(power.reboot());
            assert!(!power.reboot(), "one cut, one reboot");
            for i in 0..8u8 {
                let dev = if matches!(i % 4, 0 | 3) { &a } else { &b };
                let expected = if usize::from(i) < flushed { i + 1 } else { 0 };
                assert_eq!(
                    read(dev, u64::from(i) * 512, 512),
                    vec![expected; 512],
                    "cut {n}, block {i}"
                );
            }
            assert_eq!(a.counts().crashes, 1, "cut {n}");
            assert_eq!(b.counts().crashes, 1, "cut {n}");
        }
    }

    #[test]
    fn a_flush_of_one_device_does_not_make_the_others_writes_durable() {
        // Explicit and triggered cuts, and a cut triggered by either device.
        for trigger in 0..3 {
            let (power, a, b) = pair(3, 4);
            b.write_at(&[2; 512], 0).unwrap();
            a.write_at(&[1; 512], 0).unwrap();
            a.flush().unwrap();
            match trigger {
                0 => power.crash_now(CrashMode::DropUnflushed),
                1 => {
                    power.crash_after_writes(1, CrashMode::DropUnflushed);
                    a.write_at(&[3; 512], 512).unwrap();
                    assert!(power.reboot());
                }
                _ => {
                    power.crash_after_writes(1, CrashMode::DropUnflushed);
                    b.write_at(&[3; 512], 512).unwrap();
                    assert!(power.reboot());
                }
            }
            assert_eq!(read(&a, 0, 512), vec![1; 512], "trigger {trigger}");
            assert_eq!(read(&b, 0, 512), vec![0; 512], "trigger {trigger}");
            assert_eq!(read(&a, 512, 512), vec![0; 512], "trigger {trigger}");
            assert_eq!(read(&b, 512, 512), vec![0; 512], "trigger {trigger}");
            assert_eq!(b.durable_image(), vec![0; 1 << 16], "trigger {trigger}");
        }
    }

    #[test]
    fn while_the_power_is_cut_nothing_happens_and_after_reboot_both_hold_what_survived() {
        let (power, a, b) = pair(5, 6);
        a.write_at(&[1; 512], 0).unwrap();
        b.write_at(&[2; 512], 0).unwrap();
        b.flush().unwrap();
        b.write_at(&[4; 512], 1024).unwrap();
        power.crash_after_writes(0, CrashMode::DropUnflushed);
        for dev in [&a, &b] {
            let crashed =
                |r: Result<(), DeviceError>| matches!(r, Err(DeviceError::Crashed { .. }));
            assert!(crashed(dev.write_at(&[9; 512], 512)));
            assert!(crashed(dev.discard(0, 512)));
            assert!(crashed(dev.flush()));
            assert!(crashed(dev.read_at(&mut [0; 1], 0)));
            assert!(!dev.reboot(), "the device itself did not crash");
            assert!(dev.is_crashed(), "its power is still cut");
        }
        assert_eq!(power.writes(), 3, "refused writes are not counted");
        assert!(power.reboot());
        assert_eq!(read(&a, 0, 1024), vec![0; 1024]);
        assert_eq!(read(&b, 0, 512), vec![2; 512]);
        assert_eq!(read(&b, 512, 1024), vec![0; 1024]);
        // Both work again, and a later explicit cut keeps what was flushed.
        a.write_at(&[5; 512], 0).unwrap();
        a.flush().unwrap();
        b.write_at(&[6; 512], 0).unwrap();
        power.crash_now(CrashMode::DropUnflushed);
        assert!(!power.is_cut());
        assert_eq!(read(&a, 0, 512), vec![5; 512]);
        assert_eq!(read(&b, 0, 512), vec![2; 512]);
        assert_eq!(
            (a.counts().crashes, b.counts().crashes, power.cuts()),
            (2, 2, 2)
        );
    }

    #[test]
    fn power_cuts_are_seeded_per_device() {
        let run = |seed: u64, mode| {
            let (power, a, b) = pair(seed, seed + 100);
            power.crash_after_writes(24, mode);
            for i in 0..12u8 {
                a.write_at(&[i + 1; 1500], u64::from(i) * 2000).unwrap();
                b.write_at(&[i + 1; 1500], u64::from(i) * 2000).unwrap();
            }
            assert!(power.reboot());
            (a.durable_image(), b.durable_image())
        };
        for mode in [CrashMode::Reorder, CrashMode::TearLast] {
            let (a, b) = run(11, mode);
            assert_eq!((a.clone(), b.clone()), run(11, mode), "{mode:?}");
            assert_ne!(a, b, "{mode:?}: each device has its own seed");
            assert_ne!((a, b), run(12, mode), "{mode:?}");
        }
    }

    #[test]
    fn a_cut_triggered_on_one_device_stops_concurrent_io_on_the_other() {
        for seed in 0..20u64 {
            let (power, a, b) = pair(seed, seed + 1);
            power.crash_after_writes(40 + seed, CrashMode::DropUnflushed);
            let start = std::sync::Barrier::new(2);
            let (a_writes, b_flushed) = std::thread::scope(|scope| {
                let background = scope.spawn(|| {
                    // Each block written and flushed in turn; returns the
                    // blocks flushed.
                    start.wait();
                    for i in 0..128u64 {
                        if b.write_at(&[1; 512], i * 512).is_err() || b.flush().is_err() {
                            return i;
                        }
                        std::thread::yield_now();
                    }
                    128
                });
                start.wait();
                let mut a_writes = 0;
                for i in 0..128u64 {
                    if a.write_at(&[1; 512], i * 512).is_err() {
                        break;
                    }
                    a_writes += 1;
                    std::thread::yield_now();
                }
                (a_writes, background.join().unwrap())
            });
            assert!(power.reboot(), "seed {seed}");
            let b_image = b.durable_image();
            let b_kept = b_image
                .chunks(512)
                .take_while(|block| block[0] == 1)
                .count() as u64;
            assert_eq!(
                b_kept, b_flushed,
                "seed {seed}: b keeps exactly its flushed blocks"
            );
            assert!(
                b_image[b_kept as usize * 512..].iter().all(|&x| x == 0),
                "seed {seed}"
            );
            let b_written = b.counts().writes;
            assert!(
                b_written == b_flushed || b_written == b_flushed + 1,
                "seed {seed}"
            );
            assert_eq!(
                a_writes + b_written,
                40 + seed,
                "seed {seed}: the cut is at one write"
            );
            assert_eq!(
                a.durable_image(),
                vec![0; 1 << 16],
                "seed {seed}: a never flushed"
            );
        }
    }
}
