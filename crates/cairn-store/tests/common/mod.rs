//! Devices the cache tests observe the cache through, and (in [`logdisk`])
//! the log disk tests' shared helpers (in [`objdisk`]: the object disk's
//! scenario on a real store).
#![allow(dead_code)]

pub mod logdisk;
pub mod objdisk;
pub mod tier;
pub mod volume;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use cairn_store::{Device, DeviceError, MemoryDevice};

/// A memory device that counts reads per block of `block` bytes and checks
/// that no two reads of one block are ever in flight at once.
pub struct CountingDevice {
    inner: MemoryDevice,
    block: u64,
    reads: Vec<AtomicU64>,
    in_flight: Vec<AtomicU64>,
    /// Set when a block was read by two callers at once.
    pub overlapped: AtomicBool,
    delay: Duration,
}

impl CountingDevice {
    pub fn new(len: u64, block: u64, delay: Duration) -> Self {
        let blocks = len.div_ceil(block) as usize;
        Self {
            inner: MemoryDevice::new(len),
            block,
            reads: (0..blocks).map(|_| AtomicU64::new(0)).collect(),
            in_flight: (0..blocks).map(|_| AtomicU64::new(0)).collect(),
            overlapped: AtomicBool::new(false),
            delay,
        }
    }

    pub fn reads(&self, block: u64) -> u64 {
        self.reads[block as usize].load(Ordering::SeqCst)
    }

    pub fn total_reads(&self) -> u64 {
        self.reads.iter().map(|r| r.load(Ordering::SeqCst)).sum()
    }
}

impl Device for CountingDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let blocks = offset / self.block..(offset + buf.len() as u64).div_ceil(self.block);
        for b in blocks.clone() {
            self.reads[b as usize].fetch_add(1, Ordering::SeqCst);
            if self.in_flight[b as usize].fetch_add(1, Ordering::SeqCst) != 0 {
                self.overlapped.store(true, Ordering::SeqCst);
            }
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let result = self.inner.read_at(buf, offset);
        for b in blocks {
            self.in_flight[b as usize].fetch_sub(1, Ordering::SeqCst);
        }
        result
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn describe(&self) -> String {
        "counting".into()
    }
}

/// A memory device whose next read, once armed, copies its data and then
/// stops until released: the test can land a write between a miss's device
/// read and the cache installing what it read.
pub struct GatedDevice {
    pub inner: MemoryDevice,
    armed: AtomicBool,
    state: Mutex<Gate>,
    changed: Condvar,
}

#[derive(Default, PartialEq)]
enum Gate {
    #[default]
    Open,
    Captured,
    Released,
}

impl GatedDevice {
    pub fn new(len: u64) -> Self {
        Self {
            inner: MemoryDevice::new(len),
            armed: AtomicBool::new(false),
            state: Mutex::new(Gate::Open),
            changed: Condvar::new(),
        }
    }

    /// The next read stops after copying its data.
    pub fn arm(&self) {
        *self.state.lock().unwrap() = Gate::Open;
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Waits until the armed read has copied its data.
    pub fn wait_captured(&self) {
        let mut state = self.state.lock().unwrap();
        while *state != Gate::Captured {
            state = self.changed.wait(state).unwrap();
        }
    }

    /// Lets the armed read return.
    pub fn release(&self) {
        *self.state.lock().unwrap() = Gate::Released;
        self.changed.notify_all();
    }
}

impl Device for GatedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.inner.read_at(buf, offset)?;
        if self.armed.swap(false, Ordering::SeqCst) {
            let mut state = self.state.lock().unwrap();
            *state = Gate::Captured;
            self.changed.notify_all();
            while *state != Gate::Released {
                state = self.changed.wait(state).unwrap();
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn describe(&self) -> String {
        "gated".into()
    }
}

/// The seed of a randomized test: `CAIRN_SEED` if set (to replay a
/// failure), else the clock. Printed by the caller.
pub fn seed() -> u64 {
    std::env::var("CAIRN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
}
