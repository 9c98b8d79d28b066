//! MSR Cambridge block traces (SNIA IOTTA): CSV without a header.
//!
//! ```text
//! Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime
//! 128166385295514663,hm,0,Write,9056014336,2048,2833
//! ```
//!
//! Timestamp is a Windows filetime (100 ns ticks since 1601); it becomes
//! `time_us = Timestamp / 10`, not rebased. The object is the disk number;
//! Offset and Size are bytes; Type is `Read` or `Write` (any case). Hostname
//! and `ResponseTime` are not kept. Blank lines are skipped.

use std::io::BufRead;
use std::path::Path;

use super::lines::{
    FIELDS_MAX, FieldError, LineParser, LineReader, field, parse_size, parse_u64, split_fields,
};
use crate::{NEVER, Op, Request};

/// Parses MSR lines.
#[derive(Debug, Default)]
pub(crate) struct MsrParser;

impl LineParser for MsrParser {
    fn parse(&mut self, line: &str, _number: u64) -> Result<Option<Request>, FieldError> {
        if line.trim().is_empty() {
            return Ok(None);
        }
        let mut fields = [""; FIELDS_MAX];
        let count = split_fields(line, Some(','), &mut fields);
        let fields = &fields[..count];
        let ticks = parse_u64(field(fields, 0, "Timestamp")?, "Timestamp")?;
        let object = parse_u64(field(fields, 2, "DiskNumber")?, "DiskNumber")?;
        let op = parse_op(field(fields, 3, "Type")?)?;
        let offset = parse_u64(field(fields, 4, "Offset")?, "Offset")?;
        let size = parse_size(field(fields, 5, "Size")?, "Size")?;
        Ok(Some(Request {
            time_us: ticks / 10,
            object,
            offset,
            size,
            op,
            ttl: 0,
            next: NEVER,
        }))
    }
}

fn parse_op(text: &str) -> Result<Op, FieldError> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("read") {
        Ok(Op::Read)
    } else if text.eq_ignore_ascii_case("write") {
        Ok(Op::Write)
    } else {
        Err(FieldError::new(
            "Type",
            format!("`{}`: not Read or Write", super::lines::clip(text)),
        ))
    }
}

/// Streams the requests of an MSR trace from `source`; `path` names it in errors.
pub fn reader<R: BufRead + Send + 'static>(source: R, path: &Path) -> super::Reader {
    Box::new(LineReader::new(source, path, MsrParser))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_filetime_and_names_bad_fields() {
        let text = "128166385295514663,hm,0,Write,9056014336,2048,2833\n\n\
                    128166385295514673,hm,1,read,512,4096,1\n\
                    128166385295514683,hm,1,Trim,512,4096,1\n";
        let mut reader = reader(text.as_bytes(), Path::new("msr.csv"));
        let first = reader.next().unwrap().unwrap();
        assert_eq!(first.time_us, 12_816_638_529_551_466);
        assert_eq!(
            (first.object, first.offset, first.size),
            (0, 9_056_014_336, 2048)
        );
        assert_eq!(first.op, Op::Write);
        let second = reader.next().unwrap().unwrap();
        assert_eq!((second.object, second.op), (1, Op::Read));
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert_eq!(
            error,
            "msr.csv: line 4: field `Type`: `Trim`: not Read or Write"
        );
        assert!(reader.next().is_none());
    }
}
