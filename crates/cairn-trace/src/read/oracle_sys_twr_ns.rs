//! libCacheSim's `oracleSysTwrNS` binary format: Twitter's cache traces with
//! next-access times, as libCacheSim converts them (`ORACLE_SYS_TWRNS_TRACE`,
//! `traceReader/customizedReader/oracle/oracleTwrNSBin.h`). The one binary
//! format libCacheSim reads that carries a TTL and is recognised by name.
//!
//! 34-byte packed little-endian records:
//!
//! ```text
//! offset  0: u32 time (seconds)
//! offset  4: u64 obj_id
//! offset 12: u16 key_size (bytes)
//! offset 14: u32 val_size (bytes); the object's size is key + value
//! offset 18: u16 op (libCacheSim's req_op_e: 1 get, 2 gets, 3 set, 4 add,
//!            5 cas, 6 replace, 7 append, 8 prepend, 9 delete, 10 incr,
//!            11 decr, 12 read, 13 write, 14 update)
//! offset 20: u16 namespace (not read)
//! offset 22: i32 ttl (seconds; 0 or less: none)
//! offset 26: i64 next_access_vtime (1-based index of the next request to the
//!            same object; -1 or 0 for never)
//! ```
//!
//! Ops `get`, `gets` and `read` are reads; every other op is a write (a cache
//! simulator, libCacheSim's included, looks every request up alike).

use super::record::{Decode, RecordReader};
use crate::{NEVER, Op, Request};

/// Bytes per record.
pub const RECORD_BYTES: usize = 34;

/// libCacheSim's op codes that read: `OP_GET`, `OP_GETS`, `OP_READ`.
const READ_OPS: [u16; 3] = [1, 2, 12];
/// The op code [`encode`] writes for a write (`OP_SET`).
const OP_SET: u16 = 3;

fn u16_at(record: &[u8; RECORD_BYTES], at: usize) -> u16 {
    u16::from_le_bytes([record[at], record[at + 1]])
}

fn u32_at(record: &[u8; RECORD_BYTES], at: usize) -> u32 {
    u32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
}

fn u64_at(record: &[u8; RECORD_BYTES], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&record[at..at + 8]);
    u64::from_le_bytes(bytes)
}

/// Decodes one record.
pub fn decode(record: &[u8; RECORD_BYTES]) -> Request {
    let key_size = u32::from(u16_at(record, 12));
    let value_size = u32_at(record, 14);
    let op = if READ_OPS.contains(&u16_at(record, 18)) {
        Op::Read
    } else {
        Op::Write
    };
    let ttl = u32_at(record, 22) as i32;
    let next = u64_at(record, 26) as i64;
    Request {
        time_us: u64::from(u32_at(record, 0)) * 1_000_000,
        object: u64_at(record, 4),
        offset: 0,
        size: key_size.saturating_add(value_size),
        op,
        ttl: u32::try_from(ttl).unwrap_or(0),
        next: if next <= 0 { NEVER } else { next as u64 - 1 },
    }
}

/// Encodes one request as a record (the inverse of [`decode`] for requests
/// whose size fits the value field): key size 0, op `get` or `set`,
/// namespace 0.
pub fn encode(request: &Request) -> [u8; RECORD_BYTES] {
    let mut record = [0u8; RECORD_BYTES];
    record[0..4].copy_from_slice(&((request.time_us / 1_000_000) as u32).to_le_bytes());
    record[4..12].copy_from_slice(&request.object.to_le_bytes());
    record[14..18].copy_from_slice(&request.size.to_le_bytes());
    let op = match request.op {
        Op::Read => READ_OPS[0],
        Op::Write => OP_SET,
    };
    record[18..20].copy_from_slice(&op.to_le_bytes());
    let ttl = i32::try_from(request.ttl).unwrap_or(i32::MAX);
    record[22..26].copy_from_slice(&ttl.to_le_bytes());
    let next: i64 = if request.next == NEVER {
        -1
    } else {
        request.next as i64 + 1
    };
    record[26..34].copy_from_slice(&next.to_le_bytes());
    record
}

/// The oracleSysTwrNS record, for [`RecordReader`].
#[derive(Debug)]
pub struct OracleSysTwrNs;

impl Decode<RECORD_BYTES> for OracleSysTwrNs {
    #[inline]
    fn decode(record: &[u8; RECORD_BYTES]) -> Request {
        decode(record)
    }
}

/// Streams the records of any byte source.
pub type OracleSysTwrNsReader<R> = RecordReader<R, OracleSysTwrNs, RECORD_BYTES>;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn decodes_libcachesim_offsets_and_round_trips() {
        // A record laid out by hand as libCacheSim reads it: time 7 s, object
        // 42, key 10 B + value 90 B, op 9 (delete), ns 5, ttl 3600 s, next 3.
        let mut record = [0u8; RECORD_BYTES];
        record[0..4].copy_from_slice(&7u32.to_le_bytes());
        record[4..12].copy_from_slice(&42u64.to_le_bytes());
        record[12..14].copy_from_slice(&10u16.to_le_bytes());
        record[14..18].copy_from_slice(&90u32.to_le_bytes());
        record[18..20].copy_from_slice(&9u16.to_le_bytes());
        record[20..22].copy_from_slice(&5u16.to_le_bytes());
        record[22..26].copy_from_slice(&3600i32.to_le_bytes());
        record[26..34].copy_from_slice(&3i64.to_le_bytes());
        let request = decode(&record);
        assert_eq!(
            request,
            Request {
                time_us: 7_000_000,
                object: 42,
                offset: 0,
                size: 100,
                op: Op::Write,
                ttl: 3600,
                next: 2,
            }
        );
        // A get with a negative TTL and no next access.
        record[18..20].copy_from_slice(&1u16.to_le_bytes());
        record[22..26].copy_from_slice(&(-1i32).to_le_bytes());
        record[26..34].copy_from_slice(&(-1i64).to_le_bytes());
        let get = decode(&record);
        assert_eq!((get.op, get.ttl, get.next), (Op::Read, 0, NEVER));
        // encode ∘ decode is the identity on what the format carries.
        let back = decode(&encode(&request));
        assert_eq!(back, request);
        let mut bytes = encode(&request).to_vec();
        bytes.extend_from_slice(&encode(&get));
        bytes.extend_from_slice(&[0; 5]);
        let mut reader = OracleSysTwrNsReader::new(&bytes[..], Path::new("t.oracleSysTwrNS"));
        assert_eq!(reader.next().unwrap().unwrap(), request);
        assert_eq!(reader.next().unwrap().unwrap().ttl, 0);
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert_eq!(
            error,
            "t.oracleSysTwrNS: record 2: truncated: 5 of 34 bytes"
        );
    }
}
