//! The read path: a block comes from the open segment, a segment still in
//! DRAM, the local segment cache, or the store (ranged GETs in `chunks.rs`);
//! dense segments missed in the cache are fetched whole into it.

use super::{ObjectDisk, chunks, device_error, segcache};
use crate::device::{Device, DeviceError, DeviceOp};
use cairn_objects::ObjectError;

impl ObjectDisk {
    /// Reads whole blocks from `first` into `buf`.
    pub(super) fn read_blocks(&self, first: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        let bs = self.shared.volume.block_size as usize;
        let offset = first * bs as u64;
        // A segment may be deleted between the lookup and the GET (all its
        // blocks overwritten, a checkpoint, its delete): look up again.
        for attempt in 0.. {
            // (buffer index, key, byte offset in the object, crc) of every
            // block to fetch.
            let mut remote: Vec<chunks::Want> = Vec::new();
            let fits;
            {
                let st = self.shared.state();
                // The volume's live data fits in the local segment cache:
                // misses fetch whole dense segments into it, so reads
                // converge on the local copy.
                fits = self.shared.segcache.as_ref().is_some_and(|c| {
                    (st.map.len() as u64).saturating_mul(bs as u64) <= c.capacity()
                });
                for (i, out) in buf.chunks_exact_mut(bs).enumerate() {
                    let Some(loc) = st.map.get(&(first + i as u64)).copied() else {
                        out.fill(0);
                        continue;
                    };
                    let at = loc.index as usize * bs;
                    if loc.sequence == st.open.sequence {
                        out.copy_from_slice(&st.open.data.data()[at..at + bs]);
                    } else if let Some(s) = st.inflight.get(&loc.sequence) {
                        out.copy_from_slice(&s.bytes[s.header_len + at..s.header_len + at + bs]);
                    } else {
                        let seg = st.segments[&loc.sequence];
                        remote.push(chunks::Want {
                            index: i,
                            segment: loc.sequence,
                            generation: seg.generation,
                            dense: u64::from(seg.live) * 2 >= u64::from(seg.blocks),
                            key: self.shared.keys.segment(loc.sequence, seg.generation),
                            at: u64::from(seg.header_len) + at as u64,
                            crc: loc.crc,
                        });
                    }
                }
            }
            if let Some(cache) = &self.shared.segcache {
                remote = local_reads(cache, buf, bs, remote);
                if fits && remote.iter().any(|w| w.dense) {
                    self.fetch_whole(cache, &remote);
                    remote = local_reads(cache, buf, bs, remote);
                }
            }
            match self
                .shared
                .chunks
                .read(self.shared.store.as_ref(), buf, bs, &remote)
            {
                Ok(()) => return Ok(()),
                // A read-only view never changes: looking up again finds
                // the same segment.
                Err(ObjectError::NotFound { key }) if self.shared.reader.is_some() => {
                    return Err(self.gone(offset, buf.len() as u64, &key));
                }
                Err(ObjectError::NotFound { .. }) if attempt < 3 => {}
                Err(e) => {
                    return Err(device_error(
                        DeviceOp::Read,
                        offset,
                        buf.len() as u64,
                        &self.describe(),
                        e,
                    ));
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// Fetches the dense segments of `wants` whole into the local segment
    /// cache, in parallel (a failed GET is left to the read's own).
    fn fetch_whole(&self, cache: &segcache::SegCache, wants: &[chunks::Want]) {
        let mut segments: Vec<(u64, u64, &str)> = wants
            .iter()
            .filter(|w| w.dense)
            .map(|w| (w.segment, w.generation, w.key.as_str()))
            .collect();
        segments.sort_unstable();
        segments.dedup_by_key(|s| s.0);
        let fetch = |(sequence, generation, key): (u64, u64, &str)| {
            cache.fetch(
                self.shared.store.as_ref(),
                key,
                sequence,
                generation,
                |seq| self.shared.state().segments.get(&seq).map(|s| s.live),
            );
        };
        if segments.len() == 1 {
            fetch(segments[0]);
            return;
        }
        let threads = segments.len().min(8);
        std::thread::scope(|scope| {
            for t in 0..threads {
                let mine: Vec<_> = segments.iter().copied().skip(t).step_by(threads).collect();
                let fetch = &fetch;
                scope.spawn(move || mine.into_iter().for_each(fetch));
            }
        });
    }
}

/// Reads from the local segment cache what it holds of `wants` into `buf`
/// (blocks of `bs` bytes); returns the rest, for the store.
fn local_reads(
    cache: &segcache::SegCache,
    buf: &mut [u8],
    bs: usize,
    mut wants: Vec<chunks::Want>,
) -> Vec<chunks::Want> {
    wants.sort_unstable_by_key(|w| (w.segment, w.at));
    let mut outs: Vec<Option<&mut [u8]>> = buf.chunks_exact_mut(bs).map(Some).collect();
    let mut rest = Vec::new();
    let mut wants = wants.into_iter().peekable();
    let mut group: Vec<chunks::Want> = Vec::new();
    while let Some(w) = wants.next() {
        let segment = w.segment;
        group.push(w);
        if wants.peek().is_some_and(|n| n.segment == segment) {
            continue;
        }
        let blocks: Vec<segcache::Block> = group
            .iter()
            .map(|w| segcache::Block {
                at: w.at,
                crc: w.crc,
            })
            .collect();
        let mut out: Vec<&mut [u8]> = group.iter().filter_map(|w| outs[w.index].take()).collect();
        let generation = group[0].generation;
        if out.len() != group.len() || !cache.read(segment, generation, &blocks, &mut out) {
            rest.append(&mut group);
        }
        group.clear();
    }
    rest
}
