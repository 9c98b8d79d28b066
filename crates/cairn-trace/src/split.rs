//! Turning [`Request`]s into the cache [`Access`]es a policy sees.

use cairn_policy::{Access, NEVER};

use crate::Request;

/// How requests map onto cached units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// One request is one access of the whole object (libCacheSim's mode):
    /// key = object id, size = request size.
    Object,
    /// A request covers every block of `block_size` bytes it overlaps:
    /// key = `object << 44 | block index`.
    Block {
        /// The cache block size in bytes (a power of two is usual, not needed).
        block_size: u32,
    },
}

/// Bits of the key that hold the block index in [`Unit::Block`] mode: objects
/// up to 2^44 blocks (64 PiB at 4 KiB), and 2^20 distinct objects (disks).
pub const BLOCK_INDEX_BITS: u32 = 44;

/// Splits requests into accesses, numbering them with logical time.
#[derive(Clone, Debug)]
pub struct Splitter {
    unit: Unit,
    time: u64,
}

impl Splitter {
    /// A splitter starting at logical time 0.
    pub fn new(unit: Unit) -> Self {
        Self { unit, time: 0 }
    }

    /// Appends the accesses of `request` to `out` (without clearing it).
    /// In object mode the request's `next` carries over; block mode leaves
    /// [`NEVER`] (the simulator computes next-access times itself when OPT runs).
    #[inline]
    pub fn split(&mut self, request: &Request, out: &mut Vec<Access>) {
        match self.unit {
            Unit::Object => {
                out.push(Access {
                    key: request.object,
                    size: request.size,
                    op: request.op,
                    object: request.object,
                    block: 0,
                    group: 0,
                    time: self.time,
                    next: request.next,
                });
                self.time += 1;
            }
            Unit::Block { block_size } => {
                let block_size = u64::from(block_size.max(1));
                let first = request.offset / block_size;
                let end = request.offset + u64::from(request.size.max(1));
                let last = (end - 1) / block_size;
                let object_bits =
                    (request.object & ((1 << (64 - BLOCK_INDEX_BITS)) - 1)) << BLOCK_INDEX_BITS;
                for block in first..=last {
                    out.push(Access {
                        key: object_bits | (block & ((1 << BLOCK_INDEX_BITS) - 1)),
                        size: block_size as u32,
                        op: request.op,
                        object: request.object,
                        block,
                        group: 0,
                        time: self.time,
                        next: NEVER,
                    });
                    self.time += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_covers_every_block_it_overlaps() {
        let mut splitter = Splitter::new(Unit::Block { block_size: 4096 });
        let mut out = vec![];
        let request = Request {
            object: 1,
            offset: 4000,
            size: 200,
            ..Request::default()
        };
        splitter.split(&request, &mut out);
        let keys: Vec<u64> = out
            .iter()
            .map(|a| a.key & ((1 << BLOCK_INDEX_BITS) - 1))
            .collect();
        assert_eq!(keys, [0, 1]);
        assert_eq!(out[1].time, 1);
        assert_eq!(out[0].key >> BLOCK_INDEX_BITS, 1);
    }
}
