//! The cleaner: rewrites the live blocks of mostly-dead segments into the
//! open segment, so the segments die whole and the next checkpoint deletes
//! them; a few per pass, only while the upload queue has room (clients'
//! writes come first). Which segments ([`Cleaner`], [`victims`]):
//!
//! - **greedy** (the default, LSVD's): those at most `clean_below` of their
//!   blocks live (LSVD cleans at 60 %), the emptiest first;
//! - **cost-benefit** (Rosenblum and Ousterhout's LFS): those whose
//!   `(1 − u)·age / (1 + u)` (`u` the live share, `age` the segments
//!   written since) is at least that of a segment `clean_below` live and
//!   one volume-write old (as many segments as the live data fills), the
//!   highest first: a young segment waits until it is emptier (its blocks
//!   are still dying), an old one is compacted fuller (they are not).
//!
//! Safe at any crash point without the local write log: a moved block's
//! old segment stays in the store until a checkpoint as of the block's new
//! segment or later (until then the block's shadow points into the old
//! one; `state.rs`), so recovery finds the block in one or the other, with
//! the same bytes. A block a client writes while its old copy is read is not moved
//! (the map no longer points at the copy).

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_objects::ObjectError;

use super::format::{SegmentHeader, VOID};
use super::state::Loc;
use super::victims::{Cleaner, Victim, victims};
use super::{ObjectDisk, Shared};

/// Segments cleaned in one pass at most.
const PER_PASS: usize = 4;

/// Blocks the cleaner moves under one hold of the state's lock (64 copies
/// of 4 KiB: a few microseconds a writer may wait).
const MOVE_SHARE: usize = 64;

impl ObjectDisk {
    /// Starts the background thread (once a second: cleaner passes unless
    /// `policy` is [`Cleaner::Off`] or `below` is 0, then a checkpoint
    /// when one is due).
    pub(super) fn start_cleaner(&self, policy: Cleaner, below: f64) {
        *self.cleaner.lock().unwrap_or_else(PoisonError::into_inner) =
            start_cleaner(self, policy, below, Duration::from_secs(1));
    }

    /// Runs the cleaner in the calling thread, as its thread would, until
    /// a pass moves nothing, then writes a checkpoint if one is due;
    /// returns the blocks moved. Before each pass it waits until every
    /// sealed segment is in the store, so what it picks does not depend on
    /// the uploaders' timing. For benchmarks and tests: open the disk with
    /// [`Cleaner::Off`] (else the thread cleans too, at its own times).
    pub fn clean_now(&self, policy: Cleaner, below: f64) -> Result<u64, ObjectError> {
        let mut total = 0;
        loop {
            {
                let mut st = self.shared.state();
                while st.durable < st.sealed && st.failed.is_none() {
                    st = self
                        .shared
                        .progress
                        .wait_timeout(st, Duration::from_millis(50))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
            match self.clean_pass_with(policy, below, PER_PASS)? {
                0 => {
                    self.maybe_checkpoint(false)?;
                    return Ok(total);
                }
                n => total += n as u64,
            }
        }
    }

    /// One greedy pass (tests).
    #[cfg(test)]
    pub(crate) fn clean_pass(&self, below: f64, max: usize) -> Result<usize, ObjectError> {
        self.clean_pass_with(Cleaner::Greedy, below, max)
    }

    /// One pass: picks up to `max` segments by `policy` ([`victims`]) and
    /// moves their live blocks; returns the blocks moved.
    pub(crate) fn clean_pass_with(
        &self,
        policy: Cleaner,
        below: f64,
        max: usize,
    ) -> Result<usize, ObjectError> {
        let chosen: Vec<Victim> = {
            let st = self.shared.state();
            if st.failed.is_some() || !self.room(&st) {
                return Ok(0);
            }
            let candidates = st
                .segments
                .range(..=st.durable)
                .filter(|(seq, s)| {
                    s.live > 0 && s.header_len > 0 && !st.inflight.contains_key(*seq)
                })
                .map(|(&seq, s)| (seq, s.generation, s.live, s.blocks));
            let reference = (st.map.len() / st.blocks_per_segment.max(1)) as u64;
            victims(policy, below, st.open.sequence, reference, candidates, max)
        };
        let mut moved = 0;
        for (sequence, generation) in chosen {
            moved += self.clean_one(sequence, generation)?;
        }
        Ok(moved)
    }

    /// Moves segment `sequence`'s live blocks into the open segment.
    fn clean_one(&self, sequence: u64, generation: u64) -> Result<usize, ObjectError> {
        self.clean_one_with(sequence, generation, || {})
    }

    /// [`Self::clean_one`], running `between` after the live blocks were
    /// looked up and before any moves (the lock is not held then: tests
    /// write there).
    pub(super) fn clean_one_with(
        &self,
        sequence: u64,
        generation: u64,
        between: impl FnOnce(),
    ) -> Result<usize, ObjectError> {
        let key = self.shared.keys.segment(sequence, generation);
        let object = match self
            .shared
            .segcache
            .as_ref()
            .and_then(|c| c.object(sequence, generation))
        {
            Some(o) => o,
            None => match self.shared.store.get(&key) {
                Ok(o) => o,
                // Deleted meanwhile (it died whole): nothing to move.
                Err(ObjectError::NotFound { .. }) => return Ok(0),
                Err(e) => return Err(e),
            },
        };
        let bad = |why: String| ObjectError::failed(cairn_objects::Op::Get, &key, why, false);
        let len = SegmentHeader::peek_len(&object).map_err(|e| bad(e.to_string()))?;
        let header = object
            .get(..len)
            .ok_or_else(|| bad(format!("{} bytes, shorter than its header", object.len())))
            .and_then(|h| SegmentHeader::decode(h).map_err(|e| bad(e.to_string())))?;
        let bs = self.shared.volume.block_size as usize;
        let here = |index: usize, crc: u32| Loc {
            sequence,
            index: index as u32,
            crc,
        };
        // The live blocks, looked up under the lock; their CRCs checked
        // outside it.
        let live: Vec<usize> = {
            let st = self.shared.state();
            header
                .entries
                .iter()
                .enumerate()
                .filter(|&(i, &(block, crc))| {
                    block != VOID && st.map.get(&block) == Some(&here(i, crc))
                })
                .map(|(i, _)| i)
                .collect()
        };
        for &index in &live {
            let at = len + index * bs;
            let Some(data) = object.get(at..at + bs) else {
                return Err(bad(format!("ends before block {index}")));
            };
            if crate::codec::crc32c(data) != header.entries[index].1 {
                return Err(bad(format!("block {index} fails its CRC32C")));
            }
        }
        between();
        // Moved a share at a time, so that writers wait for the lock at
        // most one share's copies; each block is looked up again (a client
        // may have written it meanwhile).
        let mut moved = 0;
        for share in live.chunks(MOVE_SHARE) {
            let mut st = self.shared.state();
            for &index in share {
                let (block, crc) = header.entries[index];
                if st.map.get(&block) != Some(&here(index, crc)) {
                    continue;
                }
                if st.open_full() {
                    // No room in the upload queue (clients' writes first, or
                    // the store is out): the rest waits for a later pass.
                    if !self.room(&st) {
                        return Ok(self.moved(moved));
                    }
                    let sealed = st.seal(self.key_fn());
                    self.send(sealed);
                }
                // Not for the local write log: the old copy stays in the
                // store until the new one is durable (module docs).
                let at = len + index * bs;
                let journaled = std::mem::replace(&mut st.journaled, false);
                st.write_block(block, &object[at..at + bs], crc);
                st.journaled = journaled;
                moved += 1;
            }
        }
        let mut st = self.shared.state();
        if st.open_full() && self.room(&st) {
            let sealed = st.seal(self.key_fn());
            drop(st);
            self.send(sealed);
        }
        Ok(self.moved(moved))
    }

    /// Counts `moved` blocks moved by the cleaner; returns it.
    fn moved(&self, moved: usize) -> usize {
        self.shared
            .cleaned
            .fetch_add(moved as u64, std::sync::atomic::Ordering::Relaxed);
        moved
    }
}

/// The background thread: every `every` while the disk runs, cleaner
/// passes (unless the cleaner is off), then a checkpoint when one is due
/// (every `checkpoint_every` segments; a FLUSH never writes one with a
/// local write log, so that it never waits for the store).
fn start_cleaner(
    disk: &ObjectDisk,
    policy: Cleaner,
    below: f64,
    every: Duration,
) -> Option<JoinHandle<()>> {
    let cleans = below > 0.0 && policy != Cleaner::Off;
    let shared: Arc<Shared> = Arc::clone(&disk.shared);
    let queue = disk.sender();
    std::thread::Builder::new()
        .name("cairn-clean".into())
        .spawn(move || {
            let disk = ObjectDisk::background(shared, queue);
            loop {
                let shared = &disk.shared;
                if shared.pause_unless(every, || shared.clean_stop.load(SeqCst)) {
                    return;
                }
                // Passes back to back while there is work and room.
                while cleans && !disk.shared.clean_stop.load(SeqCst) {
                    match disk.clean_pass_with(policy, below, PER_PASS) {
                        Ok(n) if n > 0 => {}
                        _ => break,
                    }
                }
                // A checkpoint when one is due, so that what died (here or
                // under a writer that never flushes) is deleted; none
                // while the store fails.
                let failing = {
                    let st = disk.shared.state();
                    st.failed.is_some() || st.outage.failing()
                };
                if !failing && let Err(e) = disk.maybe_checkpoint(false) {
                    disk.shared.upload_failed(&mut disk.shared.state(), &e);
                }
            }
        })
        .ok()
}
