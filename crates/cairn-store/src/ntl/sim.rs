//! A simulated persistent-memory region for crash tests (the `pmreorder` idea).
//!
//! Model: memory is a sequence of aligned 8-byte words; a store to a word is never
//! torn. Every store since a word was last made durable is kept in that word's
//! history. [`Region::flush`] marks the word's current history as covered, and the
//! next [`Region::fence`] makes the covered value durable. At a simulated
//! [`SimRegion::crash`] each word independently keeps its durable value or any prefix
//! of its unfenced history (cache coherence keeps one word's stores in order, but
//! different words reach media in any order, or not at all), chosen by a seeded
//! `ChaCha8Rng`, so a failing seed replays exactly.
//!
//! [`SimRegion::crash_after`] arms a crash point: after that many stores and fences
//! the region refuses every further store (`DeviceError::Crashed`), which is how tests
//! enumerate "crash after every store/fence".

use std::collections::HashMap;
use std::sync::Mutex;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::region::{Region, check, check_word};
use crate::device::{DeviceError, DeviceOp};

#[derive(Default)]
struct State {
    volatile: Vec<u8>,
    durable: Vec<u8>,
    /// Word index → values stored since it was last durable, oldest first.
    pending: HashMap<u64, Vec<u64>>,
    /// Word index → how many of its pending values the last flush covered.
    flushed: HashMap<u64, usize>,
    /// Stores and fences so far.
    events: u64,
    /// Refuse stores once `events` reaches this.
    crash_at: Option<u64>,
}

impl State {
    fn word(buf: &[u8], w: u64) -> u64 {
        let i = (w * 8) as usize;
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[i..i + 8]);
        u64::from_le_bytes(b)
    }

    fn set_word(buf: &mut [u8], w: u64, v: u64) {
        let i = (w * 8) as usize;
        buf[i..i + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn tick(&mut self, op: DeviceOp) -> Result<(), DeviceError> {
        if self.crash_at.is_some_and(|at| self.events >= at) {
            return Err(DeviceError::Crashed { op });
        }
        self.events += 1;
        Ok(())
    }

    fn store_word(&mut self, w: u64, v: u64) {
        Self::set_word(&mut self.volatile, w, v);
        self.pending.entry(w).or_default().push(v);
    }
}

/// An in-memory `Region` that simulates losing and reordering unfenced stores.
pub struct SimRegion {
    len: u64,
    state: Mutex<State>,
    /// Report [`Region::flush_is_sync`]: a region persisted by `msync`, whose
    /// callers gather a batch's ranges into one flush.
    sync_flush: bool,
}

impl SimRegion {
    /// A zeroed region of `len` bytes, rounded up to a multiple of 8.
    pub fn new(len: u64) -> Self {
        let len = len.div_ceil(8) * 8;
        Self {
            len,
            state: Mutex::new(State {
                volatile: vec![0; len as usize],
                durable: vec![0; len as usize],
                ..State::default()
            }),
            sync_flush: false,
        }
    }

    /// The same region, standing for a page-cache mapping persisted by
    /// `msync` ([`Region::flush_is_sync`]): callers then defer data ranges
    /// into one flush with their entries, which is what the crash tests
    /// exercise with it. Stores still persist only through flush and fence.
    #[must_use]
    pub fn with_sync_flush(mut self) -> Self {
        self.sync_flush = true;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores and fences performed so far (the crash-point clock).
    pub fn events(&self) -> u64 {
        self.lock().events
    }

    /// Arms a crash after `events` stores and fences in total.
    pub fn crash_after(&self, events: u64) {
        self.lock().crash_at = Some(events);
    }

    /// Simulates power loss: each word keeps its durable value or a seeded-random
    /// prefix of its unfenced stores; then the region is usable again.
    pub fn crash(&self, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut st = self.lock();
        let mut words: Vec<(u64, Vec<u64>)> = st.pending.drain().collect();
        words.sort_unstable_by_key(|(w, _)| *w);
        for (w, history) in words {
            strict_assert!(!history.is_empty(), "word {w} pending with no store");
            let keep = rng.random_range(0..=history.len());
            if keep > 0 {
                State::set_word(&mut st.durable, w, history[keep - 1]);
            }
        }
        st.flushed.clear();
        let st = &mut *st;
        st.volatile.clone_from(&st.durable);
        st.crash_at = None;
    }

    /// A copy of the durable image (what survives any crash).
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }
}

impl Region for SimRegion {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check(DeviceOp::Read, offset, buf.len() as u64, self.len)?;
        let st = self.lock();
        let o = offset as usize;
        buf.copy_from_slice(&st.volatile[o..o + buf.len()]);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check(DeviceOp::Write, offset, data.len() as u64, self.len)?;
        if data.is_empty() {
            return Ok(());
        }
        let mut st = self.lock();
        let end = offset + data.len() as u64;
        let mut w = offset / 8;
        while w * 8 < end {
            // Every touched word is one untearable store (partial words merge with
            // the current contents, as a CPU's byte stores would within a line).
            st.tick(DeviceOp::Write)?;
            let mut bytes = State::word(&st.volatile, w).to_le_bytes();
            for (i, b) in bytes.iter_mut().enumerate() {
                let at = w * 8 + i as u64;
                if at >= offset && at < end {
                    *b = data[(at - offset) as usize];
                }
            }
            st.store_word(w, u64::from_le_bytes(bytes));
            w += 1;
        }
        Ok(())
    }

    fn load_u64(&self, offset: u64) -> Result<u64, DeviceError> {
        check_word(DeviceOp::Read, offset, self.len)?;
        Ok(State::word(&self.lock().volatile, offset / 8))
    }

    fn store_u64(&self, offset: u64, value: u64) -> Result<(), DeviceError> {
        check_word(DeviceOp::Write, offset, self.len)?;
        let mut st = self.lock();
        st.tick(DeviceOp::Write)?;
        st.store_word(offset / 8, value);
        Ok(())
    }

    fn flush_is_sync(&self) -> bool {
        self.sync_flush
    }

    fn flush(&self, ranges: &[(u64, u64)]) -> Result<(), DeviceError> {
        for &(offset, len) in ranges {
            check(DeviceOp::Flush, offset, len, self.len)?;
        }
        let mut st = self.lock();
        for &(offset, len) in ranges {
            if len == 0 {
                continue;
            }
            for w in offset / 8..(offset + len).div_ceil(8) {
                let n = st.pending.get(&w).map_or(0, Vec::len);
                if n > 0 {
                    st.flushed.insert(w, n);
                }
            }
        }
        Ok(())
    }

    fn fence(&self) -> Result<(), DeviceError> {
        let mut st = self.lock();
        st.tick(DeviceOp::Flush)?;
        let flushed: Vec<(u64, usize)> = st.flushed.drain().collect();
        for (w, n) in flushed {
            let Some(history) = st.pending.get_mut(&w) else {
                continue;
            };
            let n = n.min(history.len());
            let Some(&v) = n.checked_sub(1).and_then(|i| history.get(i)) else {
                continue;
            };
            history.drain(..n);
            let settled = history.is_empty();
            if settled {
                st.pending.remove(&w);
            }
            State::set_word(&mut st.durable, w, v);
            // A word with no store pending holds the same value in both images.
            strict_assert!(
                !settled || State::word(&st.volatile, w) == v,
                "word {w}: its last store is not its volatile value"
            );
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("simulated pmem ({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_stores_survive_every_crash() {
        for seed in 0..64 {
            let r = SimRegion::new(256);
            r.write(3, b"durable bytes").expect("write");
            r.store_u64(64, 7).expect("store");
            r.flush(&[(3, 13), (64, 8)]).expect("flush");
            r.fence().expect("fence");
            r.crash(seed);
            let mut b = [0u8; 13];
            r.read(3, &mut b).expect("read");
            assert_eq!(&b, b"durable bytes", "seed {seed}");
            assert_eq!(r.load_u64(64).expect("load"), 7, "seed {seed}");
        }
    }

    #[test]
    fn unfenced_stores_are_sometimes_lost_sometimes_kept_never_torn() {
        let (mut lost, mut kept) = (0, 0);
        for seed in 0..64 {
            let r = SimRegion::new(64);
            r.store_u64(0, 1).expect("store");
            r.flush(&[(0, 8)]).expect("flush");
            r.fence().expect("fence");
            r.store_u64(0, 2).expect("store");
            r.store_u64(0, 0xffff_ffff_ffff_ffff).expect("store");
            r.flush(&[(0, 8)]).expect("flush"); // flushed but never fenced
            r.crash(seed);
            let v = r.load_u64(0).expect("load");
            assert!(
                [1, 2, 0xffff_ffff_ffff_ffff].contains(&v),
                "seed {seed}: torn {v:#x}"
            );
            if v == 1 {
                lost += 1;
            } else {
                kept += 1;
            }
        }
        assert!(lost > 0 && kept > 0, "lost {lost} kept {kept}");
    }

    #[test]
    fn flush_covers_only_stores_before_it() {
        for seed in 0..32 {
            let r = SimRegion::new(64);
            r.store_u64(8, 5).expect("store");
            r.flush(&[(8, 8)]).expect("flush");
            r.store_u64(8, 6).expect("store");
            r.fence().expect("fence");
            r.crash(seed);
            let v = r.load_u64(8).expect("load");
            assert!(v == 5 || v == 6, "seed {seed}: {v}");
        }
    }

    #[test]
    fn armed_crash_refuses_later_stores() {
        let r = SimRegion::new(64);
        r.crash_after(2);
        r.store_u64(0, 1).expect("first");
        r.write(8, &[1, 2]).expect("second");
        assert!(matches!(
            r.store_u64(16, 1),
            Err(DeviceError::Crashed { .. })
        ));
        assert_eq!(r.events(), 2);
        r.crash(0);
        r.store_u64(16, 1).expect("usable after crash");
    }
}
