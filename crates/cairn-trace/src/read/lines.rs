//! The machinery shared by the text formats: bounded line reading, field
//! parsing, and errors that name the file, the line and the field.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use crate::error::{Position, TraceError};
use crate::{Request, Result};

/// The longest line a text trace may hold, in bytes. A longer line is an error
/// rather than a reason to grow the buffer without bound.
pub const LINE_BYTES_MAX: usize = 64 * 1024;

/// What is wrong with one field of a line.
#[derive(Debug)]
pub(crate) struct FieldError {
    pub field: &'static str,
    pub reason: String,
}

impl FieldError {
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// Parses one line of a text format.
pub(crate) trait LineParser: Send {
    /// The request on `line` (without its end of line), or `None` for a line
    /// that carries none (a header, a comment, a blank line). `number` is 1-based.
    fn parse(&mut self, line: &str, number: u64) -> Result<Option<Request>, FieldError>;
}

/// Streams the requests of a line-oriented trace.
pub(crate) struct LineReader<R, P> {
    source: R,
    parser: P,
    path: PathBuf,
    line: u64,
    buffer: Vec<u8>,
    done: bool,
}

impl<R: BufRead, P: LineParser> LineReader<R, P> {
    pub(crate) fn new(source: R, path: &Path, parser: P) -> Self {
        Self {
            source,
            parser,
            path: path.to_path_buf(),
            line: 0,
            buffer: Vec::with_capacity(256),
            done: false,
        }
    }

    fn fail(&mut self, field: &'static str, reason: String) -> TraceError {
        self.done = true;
        TraceError::Malformed {
            path: self.path.clone(),
            position: Position::Line(self.line),
            field,
            reason,
        }
    }
}

impl<R: BufRead, P: LineParser> Iterator for LineReader<R, P> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buffer.clear();
            self.line += 1;
            let limit = LINE_BYTES_MAX as u64 + 1;
            let read = (&mut self.source)
                .take(limit)
                .read_until(b'\n', &mut self.buffer);
            match read {
                Ok(0) => {
                    self.done = true;
                    return None;
                }
                Ok(_) => {}
                Err(source) => {
                    self.done = true;
                    return Some(Err(TraceError::Io {
                        path: self.path.clone(),
                        source,
                    }));
                }
            }
            if self.buffer.last() == Some(&b'\n') {
                self.buffer.pop();
            } else if self.buffer.len() > LINE_BYTES_MAX {
                return Some(Err(
                    self.fail("line", format!("longer than {LINE_BYTES_MAX} bytes"))
                ));
            }
            if self.buffer.last() == Some(&b'\r') {
                self.buffer.pop();
            }
            let Ok(text) = std::str::from_utf8(&self.buffer) else {
                return Some(Err(self.fail("line", "not UTF-8".to_string())));
            };
            match self.parser.parse(text, self.line) {
                Ok(Some(request)) => return Some(Ok(request)),
                Ok(None) => {}
                Err(FieldError { field, reason }) => return Some(Err(self.fail(field, reason))),
            }
        }
        None
    }
}

/// Parses a decimal unsigned integer field.
pub(crate) fn parse_u64(text: &str, field: &'static str) -> Result<u64, FieldError> {
    let text = text.trim();
    text.parse::<u64>()
        .map_err(|e| FieldError::new(field, format!("`{}`: {e}", clip(text))))
}

/// Parses a size field that must fit a request (`u32` bytes).
pub(crate) fn parse_size(text: &str, field: &'static str) -> Result<u32, FieldError> {
    let value = parse_u64(text, field)?;
    u32::try_from(value).map_err(|_| FieldError::new(field, format!("{value} exceeds 4 GiB - 1")))
}

/// Multiplies, naming the field when the product overflows 64 bits.
pub(crate) fn scale(value: u64, factor: u64, field: &'static str) -> Result<u64, FieldError> {
    value
        .checked_mul(factor)
        .ok_or_else(|| FieldError::new(field, format!("{value} × {factor} overflows 64 bits")))
}

/// At most 40 characters of `text`, for quoting it in an error.
pub(crate) fn clip(text: &str) -> &str {
    match text.char_indices().nth(40) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// The `index`-th (0-based) field of `fields`, or an error naming it.
pub(crate) fn field<'a>(
    fields: &[&'a str],
    index: usize,
    field: &'static str,
) -> Result<&'a str, FieldError> {
    fields.get(index).copied().ok_or_else(|| {
        FieldError::new(
            field,
            format!("missing (the line has {} fields)", fields.len()),
        )
    })
}

/// The most fields a line may split into; later fields are ignored.
pub(crate) const FIELDS_MAX: usize = 64;

/// Splits `line` at `delimiter` into `out` without allocating; returns the
/// number of fields filled (at most [`FIELDS_MAX`]). `None` as the delimiter
/// splits at runs of whitespace.
pub(crate) fn split_fields<'a>(
    line: &'a str,
    delimiter: Option<char>,
    out: &mut [&'a str; FIELDS_MAX],
) -> usize {
    let mut count = 0;
    let mut put = |field: &'a str| {
        if count < FIELDS_MAX {
            out[count] = field;
            count += 1;
        }
    };
    match delimiter {
        Some(delimiter) => line.split(delimiter).for_each(&mut put),
        None => line.split_whitespace().for_each(&mut put),
    }
    count
}

impl<R: BufRead + Send, P: LineParser + Send> crate::read::RequestSource for LineReader<R, P> {}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::LINE_BYTES_MAX;

    #[test]
    fn an_overlong_or_non_utf8_line_is_an_error_not_a_growing_buffer() {
        let mut long = vec![b'7'; LINE_BYTES_MAX + 10];
        long.push(b'\n');
        let mut reader = super::super::text::reader(std::io::Cursor::new(long), Path::new("l"));
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert_eq!(
            error,
            format!("l: line 1: field `line`: longer than {LINE_BYTES_MAX} bytes")
        );
        assert!(reader.next().is_none());
        let bytes = b"1\n\xff\xfe\n".to_vec();
        let mut reader = super::super::text::reader(std::io::Cursor::new(bytes), Path::new("u"));
        assert_eq!(reader.next().unwrap().unwrap().object, 1);
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert_eq!(error, "u: line 2: field `line`: not UTF-8");
    }
}
