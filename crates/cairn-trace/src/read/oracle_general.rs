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

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::error::{Position, TraceError};
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

/// Records decoded per turn from the source's buffer.
const DECODE_BATCH: usize = 256;

/// Streams the records of any byte source.
///
/// Records are decoded in batches of up to 256 straight from the source's
/// buffer (one `fill_buf`/`consume` pair per batch rather than per record, which
/// matters when the source is a `Box<dyn BufRead>`); a record that straddles the
/// buffer's end is assembled byte by byte.
pub struct OracleGeneralReader<R> {
    source: R,
    path: PathBuf,
    /// Records taken from the source so far.
    index: u64,
    done: bool,
    decoded: Vec<Request>,
    at: usize,
}

impl<R: BufRead> OracleGeneralReader<R> {
    /// Reads records from `source`; `path` names it in errors.
    pub fn new(source: R, path: &Path) -> Self {
        Self {
            source,
            path: path.to_path_buf(),
            index: 0,
            done: false,
            decoded: Vec::with_capacity(DECODE_BATCH),
            at: 0,
        }
    }

    /// Decodes every whole record in the source's buffer (up to
    /// [`DECODE_BATCH`]); returns how many.
    fn decode_batch(&mut self) -> usize {
        self.decoded.clear();
        self.at = 0;
        let Ok(buffer) = self.source.fill_buf() else {
            return 0; // the slow path reports the error
        };
        let (records, _) = buffer.as_chunks::<RECORD_BYTES>();
        let records = &records[..records.len().min(DECODE_BATCH)];
        self.decoded.extend(records.iter().map(decode));
        let n = records.len();
        self.source.consume(n * RECORD_BYTES);
        self.index += n as u64;
        n
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

impl<R: BufRead> Iterator for OracleGeneralReader<R> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(&request) = self.decoded.get(self.at) {
            self.at += 1;
            return Some(Ok(request));
        }
        if self.done {
            return None;
        }
        // Fast path: decode a batch in place from the reader's buffer.
        if self.decode_batch() > 0 {
            self.at = 1;
            return Some(Ok(self.decoded[0]));
        }
        // A record straddles the buffer's end, the input ended, or an error:
        // assemble it byte-exactly and report what happened.
        let mut record = [0u8; RECORD_BYTES];
        let mut got = 0;
        while got < RECORD_BYTES {
            match self.source.read(&mut record[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    self.done = true;
                    return Some(Err(TraceError::Io {
                        path: self.path.clone(),
                        source,
                    }));
                }
            }
        }
        if got < RECORD_BYTES {
            self.done = true;
            if got == 0 {
                return None;
            }
            return Some(Err(TraceError::Truncated {
                path: self.path.clone(),
                position: Position::Record(self.index),
                got,
                want: RECORD_BYTES,
            }));
        }
        self.index += 1;
        Some(Ok(decode(&record)))
    }
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
}
