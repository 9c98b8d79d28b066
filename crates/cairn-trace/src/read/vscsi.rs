//! `VMware` VSCSI v1 binary traces (as libCacheSim reads them).
//!
//! 32-byte little-endian records, no header:
//!
//! | offset | width | field | meaning |
//! |---:|---:|---|---|
//! | 0 | u32 | `sn` | serial number (not kept) |
//! | 4 | u32 | `len` | request length in bytes |
//! | 8 | u32 | `nSG` | scatter-gather entries (not kept) |
//! | 12 | u16 | `cmd` | SCSI opcode: `0x28`/`0x88` read, `0x2a`/`0x8a` write |
//! | 14 | u16 | `ver` | format version in the high byte: `0x01xx` for v1 |
//! | 16 | u64 | `lbn` | first 512-byte sector: `offset = lbn × 512` |
//! | 24 | u64 | `ts` | time of issue in µs |
//!
//! The object is 0 (one virtual disk).

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use crate::error::{Position, TraceError};
use crate::{NEVER, Op, Request, Result};

/// Bytes per record.
pub const RECORD_BYTES: usize = 32;

/// The operation of a SCSI read or write opcode (10- and 16-byte forms).
pub(crate) fn op_of(code: u16) -> Option<Op> {
    match code {
        0x28 | 0x88 => Some(Op::Read),
        0x2a | 0x8a => Some(Op::Write),
        _ => None,
    }
}

/// Whether `record` looks like a VSCSI v1 record (for format detection).
pub(crate) fn looks_like(record: &[u8]) -> bool {
    record.len() >= RECORD_BYTES
        && op_of(u16::from_le_bytes([record[12], record[13]])).is_some()
        && record[15] == 1
}

/// Decodes one record; the error names the field at fault.
fn decode(record: &[u8; RECORD_BYTES]) -> Result<Request, (&'static str, String)> {
    let u32_at = |at: usize| {
        u32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
    };
    let u64_at = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&record[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    let command = u16::from_le_bytes([record[12], record[13]]);
    let version = u16::from_le_bytes([record[14], record[15]]);
    if version >> 8 != 1 {
        return Err(("ver", format!("{version:#06x}: not version 1 (0x01xx)")));
    }
    let op = op_of(command).ok_or_else(|| {
        (
            "cmd",
            format!("{command:#04x}: not a SCSI read or write (28, 88, 2a, 8a)"),
        )
    })?;
    let lbn = u64_at(16);
    let offset = lbn
        .checked_mul(512)
        .ok_or_else(|| ("lbn", format!("{lbn} × 512 overflows 64 bits")))?;
    Ok(Request {
        time_us: u64_at(24),
        object: 0,
        offset,
        size: u32_at(4),
        op,
        ttl: 0,
        next: NEVER,
    })
}

/// Streams the records of a VSCSI v1 trace.
struct VscsiReader<R> {
    source: R,
    path: PathBuf,
    index: u64,
    done: bool,
}

impl<R: Read + Send> crate::read::RequestSource for VscsiReader<R> {}

impl<R: Read> Iterator for VscsiReader<R> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut record = [0u8; RECORD_BYTES];
        let got = match super::fill(&mut self.source, &mut record) {
            Ok(got) => got,
            Err(source) => {
                self.done = true;
                return Some(Err(TraceError::Io {
                    path: self.path.clone(),
                    source,
                }));
            }
        };
        let position = Position::Record(self.index);
        if got < RECORD_BYTES {
            self.done = true;
            return (got > 0).then(|| {
                Err(TraceError::Truncated {
                    path: self.path.clone(),
                    position,
                    got,
                    want: RECORD_BYTES,
                })
            });
        }
        self.index += 1;
        Some(decode(&record).map_err(|(field, reason)| {
            self.done = true;
            TraceError::Malformed {
                path: self.path.clone(),
                position,
                field,
                reason,
            }
        }))
    }
}

/// Streams the requests of a VSCSI v1 trace from `source`.
pub fn reader<R: BufRead + Send + 'static>(source: R, path: &Path) -> super::Reader {
    Box::new(VscsiReader {
        source,
        path: path.to_path_buf(),
        index: 0,
        done: false,
    })
}

/// Encodes a request as a VSCSI v1 record (sn = `serial`, nSG = 1); the
/// offset is rounded down to a sector. For tests and fixtures.
pub fn encode(request: &Request, serial: u32) -> [u8; RECORD_BYTES] {
    let mut record = [0u8; RECORD_BYTES];
    record[0..4].copy_from_slice(&serial.to_le_bytes());
    record[4..8].copy_from_slice(&request.size.to_le_bytes());
    record[8..12].copy_from_slice(&1u32.to_le_bytes());
    let command: u16 = match request.op {
        Op::Read => 0x28,
        Op::Write => 0x2a,
    };
    record[12..14].copy_from_slice(&command.to_le_bytes());
    record[14..16].copy_from_slice(&0x0100u16.to_le_bytes());
    record[16..24].copy_from_slice(&(request.offset / 512).to_le_bytes());
    record[24..32].copy_from_slice(&request.time_us.to_le_bytes());
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_a_bad_command() {
        let request = Request {
            time_us: 5_633_898_368_802,
            object: 0,
            offset: 42_932_745 * 512,
            size: 512,
            op: Op::Write,
            ttl: 0,
            next: NEVER,
        };
        let mut bytes = encode(&request, 1).to_vec();
        let mut bad = encode(&request, 2);
        bad[12] = 0x35;
        bytes.extend_from_slice(&bad);
        let mut reader = reader(std::io::Cursor::new(bytes), Path::new("t.vscsi"));
        assert_eq!(reader.next().unwrap().unwrap(), request);
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert!(
            error.starts_with("t.vscsi: record 1: field `cmd`: 0x35"),
            "{error}"
        );
        assert!(reader.next().is_none());
    }
}
