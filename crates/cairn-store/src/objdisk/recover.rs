//! Opening an object disk: the volume record, the lease, the fences, the
//! newest valid checkpoint and the roll-forward over the segments after it.
//!
//! # Which objects count
//!
//! Every segment and checkpoint key carries its sequence and its writer's
//! generation. When generation `g` begins it writes a fence: the last
//! sequence `S(g)` of the segments it accepted. An object of generation `h`
//! and sequence `s` is *valid* when `s <= S(g)` for every fence with
//! `g > h`: what a writer wrote after a later generation began (a fenced
//! writer still running, or the uploads in flight at a crash beyond the
//! first gap) is void, whatever its sequence.
//!
//! # Roll-forward
//!
//! From the newest valid checkpoint (or an empty map), the valid segments
//! after it are applied in sequence order while the sequence is the next one;
//! the first gap ends the volume (prefix consistency: uploads run in
//! parallel, so a crash can leave a later segment without an earlier one).
//! The new generation's fence names the last one applied, a fresh
//! checkpoint is written at it, and the void and dead objects are deleted.

use std::collections::BTreeMap;

use cairn_objects::{ObjectError, ObjectStore};

use super::error::ObjectDiskError;
use super::format::{Checkpoint, Fence, Keys, SegmentHeader, VOID, VolumeRecord, parse_numbered};
use super::state::{Loc, SegInfo, State};

/// What the listing found.
pub(crate) struct Found {
    /// (sequence, generation) of every segment object.
    pub segments: Vec<(u64, u64)>,
    /// (sequence, generation) of every checkpoint object.
    pub checkpoints: Vec<(u64, u64)>,
    pub fences: Vec<Fence>,
}

pub(crate) fn list(store: &dyn ObjectStore, keys: &Keys) -> Result<Found, ObjectDiskError> {
    let segments = numbered(store, &keys.segments())?;
    let checkpoints = numbered(store, &keys.checkpoints())?;
    let mut fences = Vec::new();
    for o in store.list(&keys.fences())? {
        let bytes = store.get(&o.key)?;
        fences.push(Fence::decode(&bytes).map_err(|e| ObjectDiskError::format(&o.key, e))?);
    }
    Ok(Found {
        segments,
        checkpoints,
        fences,
    })
}

/// The (sequence, generation) of every object under `dir` named so, in
/// order. (A checkpoint lists only its own directory: the segments' is
/// hundreds of objects under a fast writer, and RADOS stats each one.)
pub(crate) fn numbered(
    store: &dyn ObjectStore,
    dir: &str,
) -> Result<Vec<(u64, u64)>, ObjectDiskError> {
    let mut out: Vec<(u64, u64)> = store
        .list(dir)?
        .iter()
        .filter_map(|o| parse_numbered(&o.key[dir.len()..]))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The validity rule (module docs): the highest sequence of generation
/// `generation` that counts.
pub(crate) fn limit(fences: &[Fence], generation: u64) -> u64 {
    fences
        .iter()
        .filter(|f| f.generation > generation)
        .map(|f| f.upto)
        .min()
        .unwrap_or(u64::MAX)
}

/// Reads a segment's header.
pub(crate) fn read_header(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<SegmentHeader, ObjectDiskError> {
    let mut buf = vec![0u8; 64 * 1024];
    let n = store.read_at(key, 0, &mut buf)?;
    buf.truncate(n);
    let len = SegmentHeader::peek_len(&buf).map_err(|e| ObjectDiskError::format(key, e))?;
    if len > buf.len() {
        buf.resize(len, 0);
        let more = store.read_at(key, n as u64, &mut buf[n..])?;
        buf.truncate(n + more);
    }
    buf.truncate(len.min(buf.len()));
    SegmentHeader::decode(&buf).map_err(|e| ObjectDiskError::format(key, e))
}

/// The state an open begins with, and what to delete once the new
/// generation's fence and checkpoint are in the store.
pub(crate) struct Recovered {
    pub state: State,
    /// Every fence in the store.
    pub fences: Vec<Fence>,
    pub garbage: Vec<String>,
    /// The checkpoint the state starts from (0: none).
    pub checkpoint: u64,
    /// Segments applied by the roll-forward.
    pub rolled: u64,
}

/// Rebuilds the state the valid objects describe, for generation
/// `generation` (the lease just taken; a read-only open, which takes none,
/// gives `u64::MAX`: every generation before counts).
pub(crate) fn recover(
    store: &dyn ObjectStore,
    keys: &Keys,
    volume: &VolumeRecord,
    generation_now: u64,
    blocks_per_segment: usize,
) -> Result<Recovered, ObjectDiskError> {
    let found = list(store, keys)?;
    let valid = |(seq, generation): (u64, u64)| {
        generation < generation_now && seq <= limit(&found.fences, generation)
    };
    // The newest valid checkpoint.
    let checkpoint = found.checkpoints.iter().rev().copied().find(|&c| valid(c));
    let bs = volume.block_size as usize;
    let (mut state, mut last) = match checkpoint {
        Some(c) => (
            load_checkpoint(store, keys, volume, generation_now, blocks_per_segment, c)?,
            c.0,
        ),
        None => (
            State::new(bs, blocks_per_segment, generation_now, volume.volume_id, 0),
            0,
        ),
    };
    // Roll forward over the valid segments after it, while they follow on.
    let after: BTreeMap<u64, u64> = found
        .segments
        .iter()
        .copied()
        .filter(|&s| valid(s) && s.0 > last)
        .collect();
    let mut rolled = 0;
    for (&seq, &generation) in &after {
        if seq != last + 1 {
            break;
        }
        let key = keys.segment(seq, generation);
        let h = read_header(store, &key)?;
        if h.volume_id != volume.volume_id || h.sequence != seq || h.generation != generation {
            return Err(ObjectDiskError::Inconsistent(format!(
                "{key}: holds segment {} of generation {} of volume {:#x}",
                h.sequence, h.generation, h.volume_id
            )));
        }
        let header_len = super::format::header_len(h.block_size, h.entries.len(), h.trims.len());
        state.segments.insert(
            seq,
            SegInfo {
                generation,
                header_len: header_len as u32,
                blocks: h.entries.len() as u32,
                live: 0,
                cleaned: false,
            },
        );
        for &(first, n) in &h.trims {
            for b in first..first.saturating_add(n) {
                state.unmap(b);
            }
        }
        for (i, &(block, crc)) in h.entries.iter().enumerate() {
            if block != VOID {
                state.place(
                    block,
                    Loc {
                        sequence: seq,
                        index: i as u32,
                        crc,
                    },
                );
            }
        }
        last = seq;
        rolled += 1;
    }
    // Start after the last one applied.
    let mut fresh = State::new(
        bs,
        blocks_per_segment,
        generation_now,
        volume.volume_id,
        last,
    );
    fresh.map = std::mem::take(&mut state.map);
    let open = fresh.open.sequence;
    let open_info = fresh.segments[&open];
    fresh.segments = std::mem::take(&mut state.segments);
    fresh.segments.retain(|&s, _| s <= last);
    fresh.segments.insert(open, open_info);
    let garbage = garbage(keys, &found, &fresh);
    Ok(Recovered {
        fences: found.fences.clone(),
        state: fresh,
        garbage,
        checkpoint: checkpoint.map_or(0, |c| c.0),
        rolled,
    })
}

/// Every object the recovered state does not need: segments it does not
/// know (void ones, valid ones after the first gap, dead ones a crash left
/// between a checkpoint and its deletes, or left waiting for readers —
/// `pins.rs`) and every checkpoint found (the open writes its own first).
fn garbage(keys: &Keys, found: &Found, fresh: &State) -> Vec<String> {
    let mut garbage = Vec::new();
    for &(seq, generation) in &found.segments {
        if fresh
            .segments
            .get(&seq)
            .is_none_or(|s| s.generation != generation)
        {
            garbage.push(keys.segment(seq, generation));
        }
    }
    for &(seq, generation) in &found.checkpoints {
        garbage.push(keys.checkpoint(seq, generation));
    }
    garbage
}

/// The state checkpoint `(seq, generation)` describes.
fn load_checkpoint(
    store: &dyn ObjectStore,
    keys: &Keys,
    volume: &VolumeRecord,
    generation_now: u64,
    blocks_per_segment: usize,
    (seq, generation): (u64, u64),
) -> Result<State, ObjectDiskError> {
    let key = keys.checkpoint(seq, generation);
    let c = Checkpoint::decode(&store.get(&key)?).map_err(|e| ObjectDiskError::format(&key, e))?;
    if c.volume_id != volume.volume_id || c.sequence != seq || c.generation != generation {
        return Err(ObjectDiskError::Inconsistent(format!(
            "{key}: holds checkpoint {} of generation {} of volume {:#x}",
            c.sequence, c.generation, c.volume_id
        )));
    }
    let mut state = State::new(
        volume.block_size as usize,
        blocks_per_segment,
        generation_now,
        volume.volume_id,
        seq,
    );
    for s in &c.segments {
        state.segments.insert(
            s.sequence,
            SegInfo {
                generation: s.generation,
                header_len: s.header_len,
                blocks: s.blocks,
                live: 0,
                cleaned: false,
            },
        );
    }
    for e in &c.entries {
        if !state.segments.contains_key(&e.sequence) {
            return Err(ObjectDiskError::Inconsistent(format!(
                "{key}: block {} points into segment {}, which the checkpoint does not list",
                e.block, e.sequence
            )));
        }
        state.place(
            e.block,
            Loc {
                sequence: e.sequence,
                index: e.index,
                crc: e.crc,
            },
        );
    }
    Ok(state)
}

/// Whether a local write log of generation `log` with records still
/// belongs on the volume, and from which segment on its records are to be
/// written again: `Some(base)` when every generation after `log` began by
/// replaying that same log (none finished, or it would have emptied it), so
/// none took a client's write; `None` when another server wrote the volume
/// since (the log is stale). `last`: where this open's recovery ends.
pub(crate) fn replay_base(fences: &[Fence], log: u64, last: u64) -> Option<u64> {
    let mut later: Vec<&Fence> = fences.iter().filter(|f| f.generation > log).collect();
    later.sort_by_key(|f| f.generation);
    match later.first() {
        None => Some(last),
        Some(first) => later
            .iter()
            .all(|f| f.replay_of == log)
            .then_some(first.replay_base),
    }
}

/// Reads the volume record, or writes it when there is none and `create`
/// describes one.
pub(crate) fn volume(
    store: &dyn ObjectStore,
    keys: &Keys,
    create: Option<VolumeRecord>,
) -> Result<VolumeRecord, ObjectDiskError> {
    let key = keys.volume();
    match store.get(&key) {
        Ok(bytes) => VolumeRecord::decode(&bytes).map_err(|e| ObjectDiskError::format(&key, e)),
        Err(ObjectError::NotFound { .. }) => {
            let Some(record) = create else {
                return Err(ObjectDiskError::NoVolume {
                    store: store.describe(),
                    key,
                });
            };
            match store.create(&key, &record.encode()) {
                Ok(()) => Ok(record),
                // Another server created it first: use theirs.
                Err(ObjectError::Exists { .. }) => volume(store, keys, None),
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}
