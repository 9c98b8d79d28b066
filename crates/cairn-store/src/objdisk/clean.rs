//! The cleaner: rewrites the live blocks of mostly-dead segments (at most
//! `clean_below` of their blocks live; LSVD cleans at 60 %) into the open
//! segment, so the segments die whole and the next checkpoint deletes them.
//! Greedy: the emptiest first, a few per pass, only while the upload queue
//! has room (clients' writes come first).
//!
//! Safe at any crash point without the local write log: a moved block's
//! old segment stays in the store until a checkpoint written after the
//! block's new segment is durable (a checkpoint needs every sealed segment
//! durable), so recovery finds the block in one or the other, with the same
//! bytes. A block a client writes while its old copy is read is not moved
//! (the map no longer points at the copy).

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_objects::ObjectError;

use super::format::{SegmentHeader, VOID};
use super::state::Loc;
use super::{ObjectDisk, Shared};

/// Segments cleaned in one pass at most.
const PER_PASS: usize = 4;

/// A segment worth cleaning: sequence, generation.
type Victim = (u64, u64);

impl ObjectDisk {
    /// Starts the cleaner thread (a pass a second) unless `below` is 0.
    pub(super) fn start_cleaner(&self, below: f64) {
        *self.cleaner.lock().unwrap_or_else(PoisonError::into_inner) =
            start_cleaner(self, below, Duration::from_secs(1));
    }

    /// One pass: picks up to `max` segments with at most `below` of their
    /// blocks live (emptiest first) and moves their live blocks; returns
    /// the blocks moved.
    pub(crate) fn clean_pass(&self, below: f64, max: usize) -> Result<usize, ObjectError> {
        let victims: Vec<Victim> = {
            let st = self.shared.state();
            if st.failed.is_some() || !self.room(&st) {
                return Ok(0);
            }
            let mut v: Vec<(u32, u64, u64)> = st
                .segments
                .range(..=st.durable)
                .filter(|(seq, s)| {
                    s.live > 0
                        && s.header_len > 0
                        && !st.inflight.contains_key(*seq)
                        && f64::from(s.live) <= below * f64::from(s.blocks)
                })
                .map(|(&seq, s)| (s.live, seq, s.generation))
                .collect();
            v.sort_unstable();
            v.into_iter().take(max).map(|(_, s, g)| (s, g)).collect()
        };
        let mut moved = 0;
        for (sequence, generation) in victims {
            moved += self.clean_one(sequence, generation)?;
        }
        Ok(moved)
    }

    /// Moves segment `sequence`'s live blocks into the open segment.
    fn clean_one(&self, sequence: u64, generation: u64) -> Result<usize, ObjectError> {
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
        let mut st = self.shared.state();
        let mut moved = 0;
        for (index, &(block, crc)) in header.entries.iter().enumerate() {
            let at = len + index * bs;
            let here = Loc {
                sequence,
                index: index as u32,
                crc,
            };
            if block == VOID || st.map.get(&block) != Some(&here) {
                continue;
            }
            let Some(data) = object.get(at..at + bs) else {
                return Err(bad(format!("ends before block {index}")));
            };
            if crate::codec::crc32c(data) != crc {
                return Err(bad(format!("block {index} fails its CRC32C")));
            }
            if st.open_full() {
                // No room in the upload queue (clients' writes first, or
                // the store is out): the rest waits for a later pass.
                if !self.room(&st) {
                    break;
                }
                let sealed = st.seal(self.key_fn());
                self.send(sealed);
            }
            // Not for the local write log: the old copy stays in the store
            // until the new one is durable (module docs).
            let journaled = std::mem::replace(&mut st.journaled, false);
            st.write_block(block, data, crc);
            st.journaled = journaled;
            moved += 1;
        }
        if st.open_full() && self.room(&st) {
            let sealed = st.seal(self.key_fn());
            drop(st);
            self.send(sealed);
        }
        self.shared
            .cleaned
            .fetch_add(moved as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(moved)
    }
}

/// The cleaner thread: a pass every `every` while the disk runs.
fn start_cleaner(disk: &ObjectDisk, below: f64, every: Duration) -> Option<JoinHandle<()>> {
    if below <= 0.0 {
        return None;
    }
    let shared: Arc<Shared> = Arc::clone(&disk.shared);
    let queue = disk.sender();
    std::thread::Builder::new()
        .name("cairn-clean".into())
        .spawn(move || {
            let disk = ObjectDisk::background(shared, queue);
            loop {
                {
                    let stop = disk
                        .shared
                        .beat_stop
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    let stopped = |stop: &bool| *stop || disk.shared.clean_stop.load(SeqCst);
                    let (stop, _) = disk
                        .shared
                        .beat
                        .wait_timeout_while(stop, every, |stop| !stopped(stop))
                        .unwrap_or_else(PoisonError::into_inner);
                    if stopped(&stop) {
                        return;
                    }
                }
                // Passes back to back while there is work and room.
                while !disk.shared.clean_stop.load(SeqCst) {
                    match disk.clean_pass(below, PER_PASS) {
                        Ok(n) if n > 0 => {}
                        _ => break,
                    }
                }
            }
        })
        .ok()
}
