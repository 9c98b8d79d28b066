//! libCacheSim's `oracleGeneral` binary format.
//!
//! 24-byte packed little-endian records:
//!
//! ```text
//! offset  0: u32 time (seconds)
//! offset  4: u64 obj_id
//! offset 12: u32 obj_size (bytes)
//! offset 16: i64 next_access_vtime (1-based index of the next request to the
//!            same object; -1 or 0 for never)
//! ```

use std::io::BufReader;
use std::path::Path;

use super::record::{Decode, RecordReader};
use crate::error::TraceError;
use crate::{NEVER, Op, Request, Result};

/// Bytes per record.
pub const RECORD_BYTES: usize = 24;

/// Decodes one record. `index` is the record's 0-based position, used to turn
/// the 1-based next-access index into our 0-based one.
pub fn decode(record: &[u8; RECORD_BYTES]) -> Request {
    let time_s = u32::from_le_bytes([record[0], record[1], record[2], record[3]]);
    let mut id = [0u8; 8];
    id.copy_from_slice(&record[4..12]);
    let size = u32::from_le_bytes([record[12], record[13], record[14], record[15]]);
    let mut next = [0u8; 8];
    next.copy_from_slice(&record[16..24]);
    let next = i64::from_le_bytes(next);
    Request {
        time_us: u64::from(time_s) * 1_000_000,
        object: u64::from_le_bytes(id),
        offset: 0,
        size,
        op: Op::Read,
        ttl: 0,
        next: if next <= 0 { NEVER } else { next as u64 - 1 },
    }
}

/// Encodes one request as a record (the inverse of [`decode`]).
pub fn encode(request: &Request) -> [u8; RECORD_BYTES] {
    let mut record = [0u8; RECORD_BYTES];
    record[0..4].copy_from_slice(&((request.time_us / 1_000_000) as u32).to_le_bytes());
    record[4..12].copy_from_slice(&request.object.to_le_bytes());
    record[12..16].copy_from_slice(&request.size.to_le_bytes());
    let next: i64 = if request.next == NEVER {
        -1
    } else {
        request.next as i64 + 1
    };
    record[16..24].copy_from_slice(&next.to_le_bytes());
    record
}

/// Streams the records of any byte source (see [`RecordReader`]).
pub type OracleGeneralReader<R> = RecordReader<R, OracleGeneral, RECORD_BYTES>;

/// The oracleGeneral record, for [`RecordReader`].
#[derive(Debug)]
pub struct OracleGeneral;

impl Decode<RECORD_BYTES> for OracleGeneral {
    #[inline]
    fn decode(record: &[u8; RECORD_BYTES]) -> Request {
        decode(record)
    }
}

/// Opens an oracleGeneral file.
pub fn open(path: &Path) -> Result<OracleGeneralReader<BufReader<std::fs::File>>> {
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(OracleGeneralReader::new(
        BufReader::with_capacity(1 << 20, file),
        path,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reports_truncation() {
        let request = Request {
            time_us: 7_000_000,
            object: 42,
            offset: 0,
            size: 4096,
            op: Op::Read,
            ttl: 0,
            next: 9,
        };
        let mut bytes = encode(&request).to_vec();
        assert_eq!(decode(&encode(&request)), request);
        bytes.extend_from_slice(&[1, 2, 3]);
        let mut reader = OracleGeneralReader::new(&bytes[..], Path::new("t.bin"));
        assert_eq!(reader.next().unwrap().unwrap(), request);
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert_eq!(error, "t.bin: record 1: truncated: 3 of 24 bytes");
        assert!(reader.next().is_none());
    }

    /// The batch path (`RequestSource::fill`) reads what `next` reads, whatever
    /// the buffer's size against the record's (records straddling its end
    /// included), mixes with `next`, and reports a truncated last record after
    /// the whole ones.
    #[test]
    fn batches_read_what_next_reads() {
        use crate::read::RequestSource;
        let requests: Vec<Request> = (0..100u64)
            .map(|i| Request {
                time_us: i * 1_000_000,
                object: i * 7,
                offset: 0,
                size: 512 + i as u32,
                op: Op::Read,
                ttl: 0,
                next: i + 3,
            })
            .collect();
        let mut bytes: Vec<u8> = requests.iter().flat_map(encode).collect();
        bytes.extend_from_slice(&[9; 5]);
        for capacity in [1, 7, 24, 25, 100, 4096] {
            let source = std::io::BufReader::with_capacity(capacity, &bytes[..]);
            let mut reader = OracleGeneralReader::new(source, Path::new("t.bin"));
            let mut got = vec![reader.next().unwrap().unwrap()];
            let mut error = None;
            for max in [1, 3, 17, 1000].into_iter().cycle() {
                let before = got.len();
                error = reader.fill(&mut got, max);
                assert!(
                    got.len() - before <= max,
                    "capacity {capacity}: more than asked"
                );
                if error.is_some() || got.len() == before {
                    break;
                }
            }
            assert_eq!(got, requests, "capacity {capacity}");
            assert_eq!(
                error.map(|e| e.to_string()).as_deref(),
                Some("t.bin: record 100: truncated: 5 of 24 bytes"),
                "capacity {capacity}"
            );
            assert!(reader.fill(&mut got, 10).is_none());
            assert_eq!(got.len(), 100);
        }
    }
}
