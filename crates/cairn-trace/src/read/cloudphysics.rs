//! `CloudPhysics` block traces as CSV (the form libCacheSim ships):
//!
//! ```text
//! version,time,op,size,lbn
//! 1,5633898,2a,512,42932745
//! ```
//!
//! `time` is whole **seconds** (the same trace in VSCSI form carries µs, and
//! `time = floor(ts_us / 10^6)` on every record of the sample), so
//! `time_us = time × 10^6`: sub-second order is lost in this form. `op` is
//! the SCSI opcode in hex (`28`/`88` read, `2a`/`8a` write), `size` is bytes,
//! `lbn` is the first 512-byte sector: `offset = lbn × 512`. The object is 0
//! (one virtual disk). The header line is optional.

use std::io::BufRead;
use std::path::Path;

use super::lines::{
    FIELDS_MAX, FieldError, LineParser, LineReader, clip, field, parse_size, parse_u64, scale,
    split_fields,
};
use crate::{NEVER, Op, Request};

/// The header line of the format.
pub const HEADER: &str = "version,time,op,size,lbn";

/// Parses `CloudPhysics` lines.
#[derive(Debug, Default)]
pub(crate) struct CloudPhysicsParser;

impl LineParser for CloudPhysicsParser {
    fn parse(&mut self, line: &str, number: u64) -> Result<Option<Request>, FieldError> {
        if line.trim().is_empty() || (number == 1 && line.trim() == HEADER) {
            return Ok(None);
        }
        let mut fields = [""; FIELDS_MAX];
        let count = split_fields(line, Some(','), &mut fields);
        let fields = &fields[..count];
        parse_u64(field(fields, 0, "version")?, "version")?;
        let time_s = parse_u64(field(fields, 1, "time")?, "time")?;
        let op = scsi_op(field(fields, 2, "op")?)?;
        let size = parse_size(field(fields, 3, "size")?, "size")?;
        let lbn = parse_u64(field(fields, 4, "lbn")?, "lbn")?;
        Ok(Some(Request {
            time_us: scale(time_s, 1_000_000, "time")?,
            object: 0,
            offset: scale(lbn, 512, "lbn")?,
            size,
            op,
            ttl: 0,
            next: NEVER,
        }))
    }
}

/// The operation of a SCSI opcode given in hex (`2a`, `0x28`).
fn scsi_op(text: &str) -> Result<Op, FieldError> {
    let text = text.trim();
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    let code = u16::from_str_radix(digits, 16)
        .map_err(|e| FieldError::new("op", format!("`{}`: {e}", clip(text))))?;
    super::vscsi::op_of(code).ok_or_else(|| {
        FieldError::new(
            "op",
            format!(
                "`{}`: not a SCSI read or write (28, 88, 2a, 8a)",
                clip(text)
            ),
        )
    })
}

/// Streams the requests of a `CloudPhysics` CSV trace.
pub fn reader<R: BufRead + Send + 'static>(source: R, path: &Path) -> super::Reader {
    Box::new(LineReader::new(source, path, CloudPhysicsParser))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_seconds_and_sectors() {
        let text =
            "version,time,op,size,lbn\n1,5633898,2a,512,42932745\n1,7,28,4096,1\n1,7,35,1,1\n";
        let mut reader = reader(text.as_bytes(), Path::new("cp.csv"));
        let first = reader.next().unwrap().unwrap();
        assert_eq!(first.time_us, 5_633_898_000_000);
        assert_eq!(
            (first.offset, first.size, first.op),
            (42_932_745 * 512, 512, Op::Write)
        );
        assert_eq!(reader.next().unwrap().unwrap().op, Op::Read);
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert!(
            error.starts_with("cp.csv: line 4: field `op`: `35`"),
            "{error}"
        );
    }
}
