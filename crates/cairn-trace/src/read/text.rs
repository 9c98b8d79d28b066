//! Plain text object ids: one request per line.
//!
//! ```text
//! # comment
//! 42
//! 17 8192
//! ```
//!
//! The first whitespace-separated column is the object id (decimal, or hex
//! with `0x`); an optional second column is the size in bytes, otherwise
//! [`SIZE_DEFAULT_BYTES`] (1, so a capacity in bytes counts objects, as
//! libCacheSim does for such traces). Blank lines and lines starting with
//! `#` are skipped. Every request is a read at time 0.

use std::io::BufRead;
use std::path::Path;

use super::lines::{
    FIELDS_MAX, FieldError, LineParser, LineReader, clip, parse_size, split_fields,
};
use crate::{NEVER, Op, Request};

/// The size of a request whose line gives none.
pub const SIZE_DEFAULT_BYTES: u32 = 1;

/// Parses text id lines.
#[derive(Debug, Default)]
pub(crate) struct TextParser;

impl LineParser for TextParser {
    fn parse(&mut self, line: &str, _number: u64) -> Result<Option<Request>, FieldError> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Ok(None);
        }
        let mut fields = [""; FIELDS_MAX];
        let count = split_fields(line, None, &mut fields);
        let object = parse_id(fields[0])?;
        let size = if count > 1 {
            parse_size(fields[1], "size")?
        } else {
            SIZE_DEFAULT_BYTES
        };
        Ok(Some(Request {
            time_us: 0,
            object,
            offset: 0,
            size,
            op: Op::Read,
            ttl: 0,
            next: NEVER,
        }))
    }
}

fn parse_id(text: &str) -> Result<u64, FieldError> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse::<u64>(),
    };
    parsed.map_err(|e| FieldError::new("id", format!("`{}`: {e}", clip(text))))
}

/// Streams the requests of a text id trace.
pub fn reader<R: BufRead + Send + 'static>(source: R, path: &Path) -> super::Reader {
    Box::new(LineReader::new(source, path, TextParser))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_comments_and_reads_optional_sizes() {
        let text = "# ids\n\n42\n  0x10\t8192\nabc\n";
        let requests: Vec<_> = reader(text.as_bytes(), Path::new("ids.txt")).collect();
        let first = requests[0].as_ref().unwrap();
        assert_eq!((first.object, first.size), (42, 1));
        let second = requests[1].as_ref().unwrap();
        assert_eq!((second.object, second.size), (16, 8192));
        let error = requests[2].as_ref().unwrap_err().to_string();
        assert!(
            error.starts_with("ids.txt: line 5: field `id`: `abc`"),
            "{error}"
        );
        assert_eq!(requests.len(), 3);
    }
}
