//! The cleaner: moves the live blocks of mostly-dead segments into
//! segments of their own, so the old ones die whole and the next
//! checkpoint deletes them; a few per pass, only while the upload queue
//! has room (clients' writes come first). Which segments ([`Cleaner`],
//! [`victims`]), by their live share `u` — a client's segment counted
//! against a whole segment's room (one a FLUSH sealed early, with
//! `flush = "remote"`, wastes an object and a cache slot as dead blocks
//! do), one the cleaner built against its own blocks:
//!
//! - **greedy** (the default, LSVD's): those at most `clean_below` live
//!   (LSVD cleans at 60 %), the emptiest first;
//! - **cost-benefit** (Rosenblum and Ousterhout's LFS): those whose
//!   `(1 − u)·age / (1 + u)` (`age` the segments written since) is at
//!   least that of a segment `clean_below` live and one volume-write old
//!   (as many segments as the live data fills), the highest first: a young
//!   segment waits until it is emptier (its blocks are still dying), an old
//!   one is compacted fuller (they are not).
//!
//! **Staging.** A victim is read whole (local segment cache, else one GET),
//! its live blocks looked up under the state's lock, CRC-checked without
//! it, looked up again, and copied into the *staging* segment buffer (no
//! state lock held). When the staging holds a segment's worth it goes to
//! the state ([`super::state::Staged`]) and its segment is built at the
//! next seal — at once if no client's write is open — by making the buffer
//! the open segment's data (no copy under the lock): each block the map
//! still points where it was read from is mapped there, the others are void
//! entries. So moved (cold) blocks never share a segment with clients'
//! (hot) ones (LFS's and F2FS's separation), and no client's FLUSH cuts the
//! cleaner's segment short: cleaning a partial segment does not make
//! another (no churn). Fewer than a segment's worth wait in the staging
//! for more (the tests' passes build what is staged at their end, however
//! little).
//!
//! Safe at any crash point without the local write log: a moved block's
//! old segment stays in the store until a checkpoint as of the block's new
//! segment or later (until then the block's shadow points into the old
//! one; `state.rs`), so recovery finds the block in one or the other, with
//! the same bytes. Staged blocks are only in DRAM: a crash or a close drops
//! them, and the old copies are still the volume's.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_objects::ObjectError;

use super::format::{SegmentHeader, VOID};
use super::segbuf::SegBuf;
use super::state::Loc;
use super::victims::{Cleaner, Victim, victims};
use super::{ObjectDisk, Shared};

/// Segments cleaned in one pass at most.
const PER_PASS: usize = 4;

impl ObjectDisk {
    /// Starts the background thread (once a second: cleaner passes unless
    /// `policy` is [`Cleaner::Off`] or `below` is 0, then a checkpoint
    /// when one is due).
    pub(super) fn start_cleaner(&self, policy: Cleaner, below: f64) {
        *self.cleaner.lock().unwrap_or_else(PoisonError::into_inner) =
            start_cleaner(self, policy, below, Duration::from_secs(1));
    }

    /// Runs the cleaner in the calling thread, as its thread would, until
    /// a pass stages nothing, then writes a checkpoint if one is due;
    /// returns the blocks staged (moved once their segment is built, at
    /// the next seal: [`Self::cleaned_blocks`]). Before each pass it waits until every
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

    /// Hands the staged blocks to the state and builds their segment now,
    /// however few (sealing the open segment first if it holds anything);
    /// whether there were any.
    #[cfg(test)]
    pub(crate) fn build_now(&self) -> bool {
        self.hand_over_staging();
        let mut st = self.shared.state();
        if st.staged.is_empty() {
            return false;
        }
        st.staged_limit = u64::MAX;
        let seals = st.seal(self.key_fn());
        st.staged_limit = self.shared.upload_queue;
        drop(st);
        self.send(seals);
        true
    }

    /// Hands what the staging holds, however little, to the state, to be
    /// built into a segment at the next seal.
    pub(super) fn hand_over_staging(&self) {
        let staged = std::mem::take(
            &mut *self
                .shared
                .staging
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if !staged.blocks.is_empty() {
            self.shared.state().staged.push_back(staged);
        }
    }

    /// One greedy pass, its staged blocks built into a segment at once
    /// (tests).
    #[cfg(test)]
    pub(crate) fn clean_pass(&self, below: f64, max: usize) -> Result<usize, ObjectError> {
        let moved = self.clean_pass_with(Cleaner::Greedy, below, max)?;
        self.build_now();
        Ok(moved)
    }

    /// One pass: picks up to `max` segments by `policy` ([`victims`]) and
    /// stages their live blocks, until a segment's worth is staged (its
    /// segment is then built at once if no client's write is open, else
    /// at the next seal); returns the blocks staged.
    pub(crate) fn clean_pass_with(
        &self,
        policy: Cleaner,
        below: f64,
        max: usize,
    ) -> Result<usize, ObjectError> {
        // The staging's victims (up to a segment's worth of one-block
        // segments), looked up per candidate: a set.
        let staging = self
            .shared
            .staging
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .from
            .clone();
        let chosen: Vec<Victim> = {
            let mut st = self.shared.state();
            if st.failed.is_some() {
                return Ok(0);
            }
            // Staged segments wait for the next seal: built now if nothing
            // is open; no more staged while enough wait.
            let seals = st.seal_if_idle(self.key_fn());
            let wait = st.staged_bytes() >= self.staged_limit(&st) || !self.room(&st);
            drop(st);
            self.send(seals);
            if wait {
                return Ok(0);
            }
            let st = self.shared.state();
            // A client's segment counts its live blocks against a whole
            // segment's room (one a FLUSH sealed early is as wasteful as
            // one whose blocks died); the cleaner's own against its
            // blocks (else one it built short would be taken again).
            let whole = st.blocks_per_segment as u32;
            let candidates = st
                .segments
                .range(..=st.durable)
                .filter(|(seq, s)| {
                    s.live > 0
                        && s.header_len > 0
                        && !st.inflight.contains_key(*seq)
                        && !staging.contains(seq)
                        && !st.staged.iter().any(|g| g.from.contains(seq))
                })
                .map(|(&seq, s)| {
                    let room = if s.cleaned {
                        s.blocks
                    } else {
                        whole.max(s.blocks)
                    };
                    (seq, s.generation, s.live, room)
                });
            let reference = (st.map.len() / st.blocks_per_segment.max(1)) as u64;
            victims(policy, below, st.open.sequence, reference, candidates, max)
        };
        let mut moved = 0;
        for (sequence, generation) in chosen {
            let (n, waiting) = self.clean_one(sequence, generation)?;
            moved += n;
            if waiting {
                break;
            }
        }
        Ok(moved)
    }

    /// Stages segment `sequence`'s live blocks (as many as the staging
    /// has room for); returns how many, and whether a segment's worth now
    /// waits for the next seal (nothing more is staged until then).
    fn clean_one(&self, sequence: u64, generation: u64) -> Result<(usize, bool), ObjectError> {
        self.clean_one_with(sequence, generation, || {})
    }

    /// [`Self::clean_one`], running `between` after the live blocks were
    /// looked up and before they are staged (no lock is held then: tests
    /// write there).
    pub(super) fn clean_one_with(
        &self,
        sequence: u64,
        generation: u64,
        between: impl FnOnce(),
    ) -> Result<(usize, bool), ObjectError> {
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
                Err(ObjectError::NotFound { .. }) => return Ok((0, false)),
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
        // Looked up again (a client may have written one meanwhile: its
        // old copy must not be staged), then copied with no lock but the
        // staging's; the segment is built of those still where they were
        // read from (`State::seal`).
        let (still, whole, pool) = {
            let st = self.shared.state();
            let still: Vec<usize> = live
                .into_iter()
                .filter(|&i| {
                    let (block, crc) = header.entries[i];
                    st.map.get(&block) == Some(&here(i, crc))
                })
                .collect();
            (still, st.blocks_per_segment, Arc::clone(&st.pool))
        };
        let mut staging = self
            .shared
            .staging
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut rest = &still[..];
        let mut taken = 0;
        loop {
            let n = rest.len().min(whole.saturating_sub(staging.blocks.len()));
            for &index in &rest[..n] {
                let (block, crc) = header.entries[index];
                let at = len + index * bs;
                staging.blocks.push((block, here(index, crc)));
                staging
                    .data
                    .get_or_insert_with(|| SegBuf::new(&pool))
                    .push(&object[at..at + bs]);
            }
            if n > 0 {
                staging.from.insert(sequence);
            }
            taken += n;
            rest = &rest[n..];
            if staging.blocks.len() < whole {
                return Ok((taken, false));
            }
            // A segment's worth: the state's, built at the next seal (now,
            // if no client's write is open) — unless half the upload
            // queue's worth waits already; then the rest waits for a later
            // pass.
            let mut st = self.shared.state();
            let limit = self.staged_limit(&st);
            if st.staged_bytes() >= limit {
                return Ok((taken, true));
            }
            st.staged_limit = self.shared.upload_queue;
            st.staged.push_back(std::mem::take(&mut *staging));
            let seals = st.seal_if_idle(self.key_fn());
            let waiting = st.staged_bytes() >= limit;
            drop(st);
            self.send(seals);
            if rest.is_empty() {
                return Ok((taken, waiting));
            }
            // The rest of this victim starts the next one.
        }
    }
}

impl ObjectDisk {
    /// Bytes of staged segments waiting for a seal past which the cleaner
    /// stages no more: four segments (the cleaner may move up to four
    /// blocks per block a client writes: WA 5), at most half the upload
    /// queue. Few, because a staged block a client writes meanwhile is
    /// read and staged for nothing.
    fn staged_limit(&self, st: &super::state::State) -> u64 {
        let segment = (st.blocks_per_segment * st.block_size) as u64;
        (4 * segment).min(self.shared.upload_queue / 2).max(segment)
    }
}

/// A checkpoint if one is due; none while the store fails.
fn checkpoint_when_due(disk: &ObjectDisk) {
    let failing = {
        let st = disk.shared.state();
        st.failed.is_some() || st.outage.failing()
    };
    if !failing && let Err(e) = disk.maybe_checkpoint(false) {
        disk.shared.upload_failed(&mut disk.shared.state(), &e);
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
                // Passes back to back while there is work and room, each
                // followed by a checkpoint when one is due, so that what
                // died (here or under a writer that never flushes) is
                // deleted: a writer the cleaner never catches up with
                // must not hold dead objects in the store for as long as
                // it writes.
                loop {
                    let moved = if cleans && !disk.shared.clean_stop.load(SeqCst) {
                        disk.clean_pass_with(policy, below, PER_PASS)
                    } else {
                        Ok(0)
                    };
                    checkpoint_when_due(&disk);
                    match moved {
                        Ok(n) if n > 0 => {}
                        _ => break,
                    }
                }
            }
        })
        .ok()
}
