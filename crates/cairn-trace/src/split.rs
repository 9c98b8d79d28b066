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
    /// One request is one access keyed by where it starts (libCacheSim's
    /// reading of block traces, e.g. VSCSI `obj_id = lbn`): key =
    /// `object << 44 | offset / 512`, the first 512-byte sector, size =
    /// request size. For object traces (offset 0) this is the object key up
    /// to the shift.
    StartSector,
}

/// Bytes per sector in [`Unit::StartSector`] keys.
pub const SECTOR_BYTES: u64 = 512;

/// The [`Unit::StartSector`] key of a request: its object in the top 20 bits,
/// its first 512-byte sector below (the oracleGeneral writer's
/// `ObjectKey::StartSector` uses the same key).
#[inline]
pub fn start_sector_key(request: &Request) -> u64 {
    let object_bits = (request.object & ((1 << (64 - BLOCK_INDEX_BITS)) - 1)) << BLOCK_INDEX_BITS;
    object_bits | ((request.offset / SECTOR_BYTES) & ((1 << BLOCK_INDEX_BITS) - 1))
}

/// Bits of the key that hold the block index in [`Unit::Block`] mode: objects
/// up to 2^44 blocks (64 PiB at 4 KiB), and 2^20 distinct objects (disks).
pub const BLOCK_INDEX_BITS: u32 = 44;

/// The one access of `request` in [`Unit::Object`] mode, at logical `time`:
/// key = object id, and the request's `next` carried over.
#[inline]
fn object_access(request: &Request, time: u64) -> Access {
    Access {
        key: request.object,
        size: request.size,
        op: request.op,
        object: request.object,
        block: 0,
        group: 0,
        time,
        clock: request.time_us / 1_000_000,
        next: request.next,
    }
}

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

    /// Appends the accesses of `requests` to `out`, as [`split`](Self::split)
    /// of each in turn, until `out` holds at least `until` accesses; returns
    /// how many requests were used (all, or up to the one that reached
    /// `until`). In object mode, one access a request, this is one
    /// reserve-and-extend: no per-request call or capacity check.
    #[inline]
    pub fn split_until(
        &mut self,
        requests: &[Request],
        out: &mut Vec<Access>,
        until: usize,
    ) -> usize {
        if self.unit == Unit::Object {
            let used = requests.len().min(until.saturating_sub(out.len()).max(1));
            let time = self.time;
            out.extend(
                requests[..used]
                    .iter()
                    .zip(time..)
                    .map(|(request, time)| object_access(request, time)),
            );
            self.time += used as u64;
            return used;
        }
        let mut used = 0;
        for request in requests {
            used += 1;
            self.split(request, out);
            if out.len() >= until {
                break;
            }
        }
        used
    }

    /// Appends the accesses of `request` to `out` (without clearing it).
    /// In object mode the request's `next` carries over; start-sector and
    /// block mode leave [`NEVER`] (the simulator computes next-access times itself when OPT runs).
    #[inline]
    pub fn split(&mut self, request: &Request, out: &mut Vec<Access>) {
        match self.unit {
            Unit::Object => {
                out.push(object_access(request, self.time));
                self.time += 1;
            }
            Unit::StartSector => {
                out.push(Access {
                    key: start_sector_key(request),
                    size: request.size,
                    op: request.op,
                    object: request.object,
                    block: request.offset / SECTOR_BYTES,
                    group: 0,
                    time: self.time,
                    clock: request.time_us / 1_000_000,
                    next: NEVER,
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
                        clock: request.time_us / 1_000_000,
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

    #[test]
    fn start_sector_mode_keys_a_request_by_where_it_starts() {
        let mut splitter = Splitter::new(Unit::StartSector);
        let mut out = vec![];
        for (object, offset, size) in [
            (0, 4096, 8192),
            (0, 4096, 512),
            (0, 4608, 512),
            (2, 4096, 1),
        ] {
            let request = Request {
                object,
                offset,
                size,
                ..Request::default()
            };
            splitter.split(&request, &mut out);
        }
        let keys: Vec<u64> = out.iter().map(|a| a.key).collect();
        assert_eq!(keys, [8, 8, 9, (2 << BLOCK_INDEX_BITS) | 8]);
        let sizes: Vec<u32> = out.iter().map(|a| a.size).collect();
        assert_eq!(sizes, [8192, 512, 512, 1]);
        assert_eq!(out[3].time, 3);
    }

    proptest::proptest! {
        /// `split_until` over a batch gives what `split` of each request
        /// gives, stops at the request that reaches `until`, and numbers time
        /// on from where it left off.
        #[test]
        fn split_until_is_split_of_each_request(
            requests in proptest::collection::vec((0u64..4, 0u64..20_000, 1u32..10_000, 0u64..3_000_000), 0..40),
            unit in 0usize..3,
            untils in proptest::collection::vec(1usize..30, 1..10),
        ) {
            let unit = [Unit::Object, Unit::StartSector, Unit::Block { block_size: 4096 }][unit];
            let requests: Vec<Request> = requests
                .into_iter()
                .map(|(object, offset, size, time_us)| Request { object, offset, size, time_us, next: object * 7, ..Request::default() })
                .collect();
            let mut one = Splitter::new(unit);
            let mut expected = vec![];
            for request in &requests {
                one.split(request, &mut expected);
            }
            let mut many = Splitter::new(unit);
            let mut out = vec![];
            let mut at = 0;
            for until in untils.iter().cycle() {
                if at == requests.len() {
                    break;
                }
                let before = out.len();
                let used = many.split_until(&requests[at..], &mut out, before + until);
                proptest::prop_assert!(used >= 1 && at + used <= requests.len());
                // Stopped at `until` or at the end, and not a request later.
                proptest::prop_assert!(out.len() >= before + until || at + used == requests.len());
                let mut check = Splitter::new(unit);
                let mut without_last = vec![];
                for request in &requests[..at + used - 1] {
                    check.split(request, &mut without_last);
                }
                proptest::prop_assert!(without_last.len() < before + until);
                at += used;
            }
            proptest::prop_assert_eq!(out, expected);
        }
    }
}
