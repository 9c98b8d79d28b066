//! Any delimited text trace, read through a column map ([`CsvConfig`]).
//!
//! Columns are numbered from 1. Each of time, object, offset, size, op and
//! ttl is optional; a missing column takes a neutral value (time 0, object 0,
//! offset 0, size [`CsvConfig::size_default_bytes`], read, no TTL). Time may be an
//! integer or a decimal fraction in [`CsvConfig::time_unit`]s. Quoted fields
//! are not supported (trace columns are numbers and short words).

use std::io::BufRead;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::lines::{
    FIELDS_MAX, FieldError, LineParser, LineReader, clip, field, parse_size, parse_u64, scale,
    split_fields,
};
use crate::{NEVER, Op, Request};

/// The unit of a time column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Seconds.
    S,
    /// Milliseconds.
    Ms,
    /// Microseconds (the default).
    #[default]
    Us,
    /// Nanoseconds.
    Ns,
    /// Windows filetime: 100 ns ticks.
    Filetime,
}

impl TimeUnit {
    /// Converts `value` in this unit to µs (rounding down), or `None` on overflow.
    fn to_us(self, value: u64) -> Option<u64> {
        match self {
            TimeUnit::S => value.checked_mul(1_000_000),
            TimeUnit::Ms => value.checked_mul(1_000),
            TimeUnit::Us => Some(value),
            TimeUnit::Ns => Some(value / 1_000),
            TimeUnit::Filetime => Some(value / 10),
        }
    }

    /// µs per unit, for fractional values.
    fn us_per_unit(self) -> f64 {
        match self {
            TimeUnit::S => 1e6,
            TimeUnit::Ms => 1e3,
            TimeUnit::Us => 1.0,
            TimeUnit::Ns => 1e-3,
            TimeUnit::Filetime => 0.1,
        }
    }
}

/// The unit of an offset column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffsetUnit {
    /// Bytes (the default).
    #[default]
    Bytes,
    /// 512-byte sectors.
    Sectors,
}

/// The column map of a delimited trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CsvConfig {
    /// Field separator. Default `,`.
    pub delimiter: char,
    /// Whether the first line is a header to skip. Default false.
    pub has_header: bool,
    /// 1-based column of the time. Default none (time 0).
    pub time_column: Option<usize>,
    /// 1-based column of the object (disk, volume, file) id. Default 1.
    pub object_column: Option<usize>,
    /// 1-based column of the offset. Default none (offset 0).
    pub offset_column: Option<usize>,
    /// 1-based column of the size in bytes. Default none.
    pub size_column: Option<usize>,
    /// 1-based column of the operation. Default none (all reads).
    pub op_column: Option<usize>,
    /// 1-based column of the time to live, in whole seconds (0: none), as
    /// Twitter's cache traces carry it. Default none.
    pub ttl_column: Option<usize>,
    /// Op values meaning read, compared ignoring ASCII case. Default `r`, `read`, `28`.
    pub read_values: Vec<String>,
    /// Op values meaning write, compared ignoring ASCII case. Default `w`, `write`, `2a`.
    pub write_values: Vec<String>,
    /// Unit of the time column. Default µs.
    pub time_unit: TimeUnit,
    /// Unit of the offset column. Default bytes.
    pub offset_unit: OffsetUnit,
    /// Size of a request when there is no size column, in bytes. Default 4096.
    pub size_default_bytes: u32,
}

impl Default for CsvConfig {
    fn default() -> Self {
        Self {
            delimiter: ',',
            has_header: false,
            time_column: None,
            object_column: Some(1),
            offset_column: None,
            size_column: None,
            op_column: None,
            ttl_column: None,
            read_values: vec!["r".into(), "read".into(), "28".into()],
            write_values: vec!["w".into(), "write".into(), "2a".into()],
            time_unit: TimeUnit::default(),
            offset_unit: OffsetUnit::default(),
            size_default_bytes: 4096,
        }
    }
}

/// The header of the canonical CSV (what `write::CsvWriter` writes; read it
/// back with [`CsvConfig::canonical`]).
pub const CSV_HEADER: &str = "time_us,object,offset,size,op";

/// The header of the canonical CSV with a TTL column (what
/// `write::CsvWriter` writes for requests that carry TTLs; read it back
/// with [`CsvConfig::canonical_with_ttl`]).
pub const CSV_TTL_HEADER: &str = "time_us,object,offset,size,op,ttl";

impl CsvConfig {
    /// The map of the canonical CSV that `write::CsvWriter` writes:
    /// header [`CSV_HEADER`], op `r`/`w`.
    pub fn canonical() -> Self {
        Self {
            has_header: true,
            time_column: Some(1),
            object_column: Some(2),
            offset_column: Some(3),
            size_column: Some(4),
            op_column: Some(5),
            ..Self::default()
        }
    }

    /// The canonical CSV with a sixth column, each request's TTL in seconds
    /// (0: none): header [`CSV_TTL_HEADER`].
    pub fn canonical_with_ttl() -> Self {
        Self {
            ttl_column: Some(6),
            ..Self::canonical()
        }
    }

    /// Checks the map: columns are 1 to 64, and no op value means both.
    pub fn validate(&self) -> Result<(), String> {
        let columns = [
            ("time_column", self.time_column),
            ("object_column", self.object_column),
            ("offset_column", self.offset_column),
            ("size_column", self.size_column),
            ("op_column", self.op_column),
            ("ttl_column", self.ttl_column),
        ];
        for (name, column) in columns {
            if let Some(column) = column
                && !(1..=FIELDS_MAX).contains(&column)
            {
                return Err(format!("{name} = {column}: columns are 1 to {FIELDS_MAX}"));
            }
        }
        for value in &self.read_values {
            if self
                .write_values
                .iter()
                .any(|w| w.eq_ignore_ascii_case(value))
            {
                return Err(format!("op value `{value}` means both read and write"));
            }
        }
        Ok(())
    }
}

/// Parses lines through a [`CsvConfig`].
#[derive(Debug)]
pub(crate) struct CsvParser {
    config: CsvConfig,
}

impl CsvParser {
    fn op(&self, text: &str) -> Result<Op, FieldError> {
        let text = text.trim();
        if self
            .config
            .read_values
            .iter()
            .any(|v| v.eq_ignore_ascii_case(text))
        {
            Ok(Op::Read)
        } else if self
            .config
            .write_values
            .iter()
            .any(|v| v.eq_ignore_ascii_case(text))
        {
            Ok(Op::Write)
        } else {
            Err(FieldError::new(
                "op",
                format!("`{}`: neither a read nor a write value", clip(text)),
            ))
        }
    }

    fn time_us(&self, text: &str) -> Result<u64, FieldError> {
        let text = text.trim();
        let unit = self.config.time_unit;
        if !text.contains(['.', 'e', 'E']) {
            let value = parse_u64(text, "time")?;
            return unit
                .to_us(value)
                .ok_or_else(|| FieldError::new("time", format!("{value}: overflows µs")));
        }
        let value: f64 = text
            .parse()
            .map_err(|e| FieldError::new("time", format!("`{}`: {e}", clip(text))))?;
        let us = value * unit.us_per_unit();
        if !(0.0..1.8e19).contains(&us) {
            return Err(FieldError::new(
                "time",
                format!("`{}`: not a time in range", clip(text)),
            ));
        }
        Ok(us as u64)
    }
}

impl LineParser for CsvParser {
    fn parse(&mut self, line: &str, number: u64) -> Result<Option<Request>, FieldError> {
        if line.trim().is_empty() || (number == 1 && self.config.has_header) {
            return Ok(None);
        }
        let mut fields = [""; FIELDS_MAX];
        let count = split_fields(line, Some(self.config.delimiter), &mut fields);
        let fields = &fields[..count];
        let config = &self.config;
        let time_us = match config.time_column {
            Some(column) => self.time_us(field(fields, column - 1, "time")?)?,
            None => 0,
        };
        let object = match config.object_column {
            Some(column) => parse_u64(field(fields, column - 1, "object")?, "object")?,
            None => 0,
        };
        let offset = match config.offset_column {
            Some(column) => {
                let value = parse_u64(field(fields, column - 1, "offset")?, "offset")?;
                match config.offset_unit {
                    OffsetUnit::Bytes => value,
                    OffsetUnit::Sectors => scale(value, 512, "offset")?,
                }
            }
            None => 0,
        };
        let size = match config.size_column {
            Some(column) => parse_size(field(fields, column - 1, "size")?, "size")?,
            None => config.size_default_bytes,
        };
        let op = match config.op_column {
            Some(column) => self.op(field(fields, column - 1, "op")?)?,
            None => Op::Read,
        };
        let ttl = match config.ttl_column {
            Some(column) => {
                let seconds = parse_u64(field(fields, column - 1, "ttl")?, "ttl")?;
                u32::try_from(seconds).map_err(|_| {
                    FieldError::new("ttl", format!("{seconds}: over 4,294,967,295 seconds"))
                })?
            }
            None => 0,
        };
        Ok(Some(Request {
            time_us,
            object,
            offset,
            size,
            op,
            ttl,
            next: NEVER,
        }))
    }
}

/// Streams the requests of a delimited trace read through `config`, which
/// must be valid ([`CsvConfig::validate`]); `open` checks it.
pub fn reader<R: BufRead + Send + 'static>(
    source: R,
    path: &Path,
    config: CsvConfig,
) -> super::Reader {
    Box::new(LineReader::new(source, path, CsvParser { config }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_columns_and_units() {
        let config = CsvConfig {
            delimiter: ';',
            has_header: true,
            time_column: Some(1),
            object_column: Some(2),
            offset_column: Some(4),
            size_column: Some(5),
            op_column: Some(3),
            time_unit: TimeUnit::S,
            offset_unit: OffsetUnit::Sectors,
            ..CsvConfig::default()
        };
        config.validate().unwrap();
        let text = "t;disk;op;lba;len\n1.5;3;W;8;4096\n2;3;x;8;4096\n";
        let mut reader = reader(text.as_bytes(), Path::new("g.csv"), config);
        let first = reader.next().unwrap().unwrap();
        assert_eq!(first.time_us, 1_500_000);
        assert_eq!((first.object, first.offset, first.size), (3, 4096, 4096));
        assert_eq!(first.op, Op::Write);
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert_eq!(
            error,
            "g.csv: line 3: field `op`: `x`: neither a read nor a write value"
        );
    }

    #[test]
    fn reads_a_ttl_column_in_seconds() {
        // Twitter's cache-trace columns: time, key, key size, value size,
        // client, op, ttl (keys here numeric).
        let config = CsvConfig {
            time_column: Some(1),
            object_column: Some(2),
            size_column: Some(4),
            op_column: Some(6),
            ttl_column: Some(7),
            time_unit: TimeUnit::S,
            read_values: vec!["get".into()],
            write_values: vec!["set".into()],
            ..CsvConfig::default()
        };
        config.validate().unwrap();
        let text = "0,17,9,120,3,get,0\n5,18,9,80,3,set,3600\n6,19,9,80,3,set,4294967296\n";
        let mut reader = reader(text.as_bytes(), Path::new("t.csv"), config);
        let first = reader.next().unwrap().unwrap();
        assert_eq!((first.object, first.ttl), (17, 0));
        let second = reader.next().unwrap().unwrap();
        assert_eq!(
            (second.time_us, second.object, second.ttl),
            (5_000_000, 18, 3600)
        );
        assert_eq!(second.op, Op::Write);
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert_eq!(
            error,
            "t.csv: line 3: field `ttl`: 4294967296: over 4,294,967,295 seconds"
        );
    }

    #[test]
    fn rejects_column_zero() {
        let config = CsvConfig {
            size_column: Some(0),
            ..CsvConfig::default()
        };
        assert!(config.validate().is_err());
    }
}
