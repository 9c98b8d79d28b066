//! `flush = "local"`: a FLUSH writes what changed since the last one to the
//! local write log ([`Journal`]) and returns; the segments go to the store
//! when full. At open, what the log holds beyond the store is written again.

use std::sync::{MutexGuard, PoisonError};

use super::ObjectDisk;
use super::journal::{Journal, Record, Records};
use super::state::{Pending, State};
use crate::device::{Device, DeviceError, DeviceOp};

impl ObjectDisk {
    fn journal(&self) -> Option<MutexGuard<'_, Journal>> {
        self.shared
            .journal
            .as_ref()
            .map(|j| j.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The pending changes as log records, the latest write of each block
    /// only (in its place among the trims), with the data of each write.
    fn take_pending(st: &mut State) -> (Vec<Record>, Vec<u8>) {
        let pending = std::mem::take(&mut st.pending);
        let mut seen = hashbrown::HashSet::new();
        let mut kept: Vec<Pending> = Vec::with_capacity(pending.len());
        for p in pending.into_iter().rev() {
            match p {
                Pending::Write(b) if !seen.insert(b) => {}
                other => kept.push(other),
            }
        }
        kept.reverse();
        let bs = st.block_size;
        let mut records = Vec::with_capacity(kept.len());
        let mut data = Vec::new();
        for p in kept {
            match p {
                Pending::Write(b) => {
                    // Unmapped since (a later trim says so), or durable in
                    // the store (its segment and every one before it):
                    // nothing to log. (Uploaded beyond a gap is not enough:
                    // a crash would void it.)
                    let Some(loc) = st.map.get(&b).copied() else {
                        continue;
                    };
                    if loc.sequence <= st.durable {
                        continue;
                    }
                    let at = loc.index as usize * bs;
                    if loc.sequence == st.open.sequence {
                        data.extend_from_slice(&st.open.data.data()[at..at + bs]);
                    } else {
                        let s = &st.inflight[&loc.sequence];
                        data.extend_from_slice(&s.bytes[s.header_len + at..s.header_len + at + bs]);
                    }
                    records.push(Record::Write {
                        block: b,
                        segment: loc.sequence,
                        crc: loc.crc,
                    });
                }
                Pending::Trim(first, n, segment) => {
                    if segment <= st.durable {
                        continue;
                    }
                    // Records hold at most u32::MAX blocks each.
                    let mut at = first;
                    let end = first + n;
                    while at < end {
                        let blocks = (end - at).min(u64::from(u32::MAX)) as u32;
                        records.push(Record::Trim {
                            block: at,
                            blocks,
                            segment,
                        });
                        at += u64::from(blocks);
                    }
                }
            }
        }
        (records, data)
    }

    /// Makes every write before the call durable in the local write log.
    pub(super) fn flush_local(&self) -> Result<(), DeviceError> {
        let fail = |e: String| super::device_error(DeviceOp::Flush, 0, 0, &self.describe(), e);
        let w = super::Wait::new(DeviceOp::Flush, 0, 0);
        let mut journal = self.journal().expect("flush_local runs with a journal");
        let (records, data) = {
            let mut st = self.shared.state();
            self.refuse(&st, DeviceOp::Flush, 0, 0)?;
            Self::take_pending(&mut st)
        };
        let bs = self.shared.volume.block_size as usize;
        let most = journal.max_batch_blocks();
        let (mut r, mut d) = (0, 0);
        while r < records.len() {
            // A batch of at most `most` records.
            let end = (r + most).min(records.len());
            let blocks = records[r..end]
                .iter()
                .filter(|x| matches!(x, Record::Write { .. }))
                .count();
            let chunk = &data[d * bs..(d + blocks) * bs];
            loop {
                let durable = self.shared.state().durable;
                journal.release(durable);
                if journal.append(&records[r..end], chunk)?.is_some() {
                    break;
                }
                // The ring is full of batches whose segments are not in the
                // store yet: send the open one (when the upload queue has
                // room), wait for an upload, up to the stall timeout.
                let mut st = self.shared.state();
                let before = st.durable;
                st = self.seal_when_room(st, &w, |s| !s.open.is_empty() && s.durable == before)?;
                while st.durable == before && st.durable < st.sealed {
                    st = self.wait(st, &w, "the local write log is full")?;
                }
                if st.durable == before && st.durable >= st.sealed {
                    return Err(fail(format!(
                        "the local write log holds {} blocks of batches and has no room for {} more",
                        journal.max_batch_blocks() * 4,
                        end - r
                    )));
                }
            }
            r = end;
            d += blocks;
        }
        // The flush is durable. No checkpoint here: a FLUSH to the local
        // log never waits for the store (a checkpoint's PUT in an outage
        // would hold it for `retry_for`); the background thread writes
        // them when due (`clean.rs`).
        Ok(())
    }

    /// Writes again what the log held beyond the store (`records`, those
    /// in segments after `base`), makes it durable in the store, and
    /// empties the log.
    pub(super) fn replay(&self, records: Records, base: u64) -> Result<usize, DeviceError> {
        let mut applied = 0;
        let bs = u64::from(self.shared.volume.block_size);
        for (record, data) in records {
            match (record, data) {
                (Record::Write { block, segment, .. }, Some(data)) if segment > base => {
                    self.write_blocks(block, &data)?;
                    applied += 1;
                }
                (
                    Record::Trim {
                        block,
                        blocks,
                        segment,
                    },
                    _,
                ) if segment > base => {
                    let end = (block + u64::from(blocks)).min(self.shared.volume.size / bs);
                    if block < end {
                        self.shared.state().trim(block, end - block);
                    }
                    applied += 1;
                }
                _ => {}
            }
        }
        if applied > 0 {
            self.flush_remote()?;
        }
        self.shared.state().pending.clear();
        self.journal()
            .expect("replay runs with a journal")
            .reset()?;
        Ok(applied)
    }
}
