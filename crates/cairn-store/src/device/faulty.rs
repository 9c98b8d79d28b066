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

use std::sync::{Mutex, MutexGuard, PoisonError};

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
}

/// An in-memory device with durable state, crashes and injected errors.
#[derive(Debug)]
pub struct FaultyDevice {
    state: Mutex<State>,
    len: u64,
    seed: u64,
}

impl FaultyDevice {
    /// A zero-filled device of `len` bytes whose random choices come from `seed`.
    pub fn new(len: u64, seed: u64) -> Self {
        let bytes = usize::try_from(len).unwrap_or(usize::MAX);
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
            }),
            len,
            seed,
        }
    }

    /// The seed this device was created with (print it when a test fails).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Crash, in `mode`, once `writes` more writes have completed (0: at the
    /// next operation). Until [`reboot`](Self::reboot) every operation then
    /// fails with [`DeviceError::Crashed`].
    pub fn crash_after_writes(&self, writes: u64, mode: CrashMode) {
        let mut state = self.lock();
        state.crash_mode = mode;
        if writes == 0 {
            crash(&mut state, mode);
        } else {
            state.crash_after = Some(writes);
        }
    }

    /// Crash now, in `mode`, and come back up at once (a power cut and reboot).
    pub fn crash_now(&self, mode: CrashMode) {
        let mut state = self.lock();
        crash(&mut state, mode);
        state.crashed = false;
    }

    /// Comes back up after a triggered crash; the device then holds what
    /// survived it. Returns whether the device had crashed.
    pub fn reboot(&self) -> bool {
        let mut state = self.lock();
        std::mem::replace(&mut state.crashed, false)
    }

    /// Whether a triggered crash has happened and no reboot yet.
    pub fn is_crashed(&self) -> bool {
        self.lock().crashed
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
        let mut state = self.lock();
        Self::admit_op(&mut state, op, offset, data.len() as u64)?;
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
            }
        }
        Ok(())
    }
}

/// Rebuilds the live image from the durable one and what `mode` lets through.
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
    state.crashed = true;
    state.counts.crashes += 1;
}

impl Device for FaultyDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len)?;
        let mut state = self.lock();
        Self::admit_op(&mut state, DeviceOp::Read, offset, buf.len() as u64)?;
        let start = offset as usize;
        buf.copy_from_slice(&state.live[start..start + buf.len()]);
        state.counts.reads += 1;
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.write_bytes(buf, offset, DeviceOp::Write)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let mut state = self.lock();
        Self::admit_op(&mut state, DeviceOp::Flush, 0, 0)?;
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
}
