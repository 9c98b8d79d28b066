//! Streaming trace readers: each yields [`Request`]s in constant memory.
//!
//! [`open`] reads a file in a given [`Format`] ([`Format::detect`] guesses it);
//! [`from_source`] reads any byte source. A source that starts with the zstd
//! magic is decompressed on the fly, whatever the format. Readers never panic
//! on input: a malformed record is an `Err` naming the file, the line or
//! record, and the field, and the reader ends after it.

pub mod cloudphysics;
pub mod csv;
mod lines;
pub mod msr;
pub mod oracle_general;
pub mod oracle_sys_twr_ns;
mod record;
mod stream;
pub mod text;
pub mod vscsi;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::str::FromStr;

pub use csv::{CSV_HEADER, CSV_TTL_HEADER, CsvConfig, OffsetUnit, TimeUnit};
pub use lines::LINE_BYTES_MAX;
pub(crate) use stream::fill;
pub use stream::{Capped, Reader, RequestSource, Requests, boxed};

use crate::Result;
use crate::error::TraceError;

/// A buffered byte source.
pub type Source = Box<dyn BufRead + Send>;

/// The first bytes of a zstd frame (0xFD2FB528, little-endian).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Bytes of read buffer per open trace.
const BUFFER_BYTES: usize = 1 << 16;

/// A trace format.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// MSR Cambridge CSV (`msr`), see [`msr`].
    Msr,
    /// libCacheSim oracleGeneral binary (`oracle`), see [`oracle_general`].
    OracleGeneral,
    /// libCacheSim oracleSysTwrNS binary, Twitter's traces with TTLs
    /// (`oraclesystwrns`), see [`oracle_sys_twr_ns`].
    OracleSysTwrNs,
    /// VSCSI v1 binary (`vscsi`), see [`vscsi`].
    Vscsi,
    /// `CloudPhysics` CSV (`cloudphysics`), see [`cloudphysics`].
    CloudPhysics,
    /// One object id per line (`text`), see [`text`].
    Text,
    /// Delimited text through a column map (`csv`), see [`csv`].
    Csv(CsvConfig),
}

impl Format {
    /// The name the CLI uses for the format.
    pub fn name(&self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::OracleGeneral => "oracle",
            Format::OracleSysTwrNs => "oraclesystwrns",
            Format::Vscsi => "vscsi",
            Format::CloudPhysics => "cloudphysics",
            Format::Text => "text",
            Format::Csv(_) => "csv",
        }
    }

    /// Whether the format can carry a TTL per request (oracleSysTwrNS; a CSV
    /// with a `ttl_column`).
    pub fn carries_ttl(&self) -> bool {
        match self {
            Format::OracleSysTwrNs => true,
            Format::Csv(config) => config.ttl_column.is_some(),
            _ => false,
        }
    }

    /// Whether requests of this format address sectors of a disk (VSCSI,
    /// `CloudPhysics`, MSR): keyed by object, a whole disk would be one key.
    pub fn is_block(&self) -> bool {
        matches!(self, Format::Vscsi | Format::CloudPhysics | Format::Msr)
    }

    /// The format a file's name says, after dropping `.zst`/`.zstd`: `.vscsi`
    /// → VSCSI; a name containing `oracleGeneral`, or ending `.oracle` →
    /// oracleGeneral; a name containing `oracleSysTwrNS` → oracleSysTwrNS; `.txt` → text; `.csv` → the canonical CSV (a reader
    /// still looks at the header). `None` for any other name (`zipf.bin`).
    pub fn named(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_string_lossy().into_owned();
        let base = name
            .strip_suffix(".zst")
            .or_else(|| name.strip_suffix(".zstd"))
            .unwrap_or(&name);
        let extension = base.rsplit_once('.').map_or("", |(_, e)| e);
        if extension.eq_ignore_ascii_case("vscsi") {
            Some(Format::Vscsi)
        } else if base.contains("oracleGeneral") || extension.eq_ignore_ascii_case("oracle") {
            Some(Format::OracleGeneral)
        } else if base.contains("oracleSysTwrNS") {
            Some(Format::OracleSysTwrNs)
        } else if extension.eq_ignore_ascii_case("txt") {
            Some(Format::Text)
        } else if extension.eq_ignore_ascii_case("csv") {
            Some(Format::Csv(CsvConfig::canonical()))
        } else {
            None
        }
    }

    /// Guesses the format of the file at `path`: by extension first (after
    /// stripping `.zst`), then by the content of its first line or record.
    ///
    /// `.vscsi` → VSCSI; a name containing `oracleGeneral` → oracleGeneral;
    /// `.txt` → text; `.csv` → `CloudPhysics` if the header is
    /// [`cloudphysics::HEADER`], the canonical CSV if it is
    /// [`CSV_HEADER`] (with a TTL column if [`CSV_TTL_HEADER`]), MSR if the
    /// first line has 7 fields with a
    /// `Read`/`Write` fourth. Any other CSV needs its column map, so it is
    /// never guessed.
    pub fn detect(path: &Path) -> Result<Format> {
        if let Some(format) = Format::named(path).filter(|f| !matches!(f, Format::Csv(_))) {
            return Ok(format);
        }
        let mut source = open_source(path)?;
        let head = source.fill_buf().map_err(|source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        detect_content(head).ok_or_else(|| TraceError::Format {
            path: path.to_path_buf(),
            reason: "cannot tell the trace format; name it (msr, oracle, oraclesystwrns, vscsi, \
                     cloudphysics, text, csv)"
                .to_string(),
        })
    }
}

/// Guesses a format from the first bytes of a trace.
fn detect_content(head: &[u8]) -> Option<Format> {
    let first_line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let first_line = std::str::from_utf8(first_line).ok().map(str::trim);
    if let Some(line) = first_line {
        if line == cloudphysics::HEADER {
            return Some(Format::CloudPhysics);
        }
        if line == CSV_HEADER {
            return Some(Format::Csv(CsvConfig::canonical()));
        }
        if line == CSV_TTL_HEADER {
            return Some(Format::Csv(CsvConfig::canonical_with_ttl()));
        }
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() == 7
            && (fields[3].eq_ignore_ascii_case("read") || fields[3].eq_ignore_ascii_case("write"))
        {
            return Some(Format::Msr);
        }
    }
    vscsi::looks_like(head).then_some(Format::Vscsi)
}

impl FromStr for Format {
    type Err = String;

    /// Parses a CLI name; `csv` takes the default [`CsvConfig`].
    fn from_str(name: &str) -> std::result::Result<Self, Self::Err> {
        match name.to_ascii_lowercase().as_str() {
            "msr" => Ok(Format::Msr),
            "oracle" | "oraclegeneral" => Ok(Format::OracleGeneral),
            "oraclesystwrns" => Ok(Format::OracleSysTwrNs),
            "vscsi" => Ok(Format::Vscsi),
            "cloudphysics" => Ok(Format::CloudPhysics),
            "text" | "txt" => Ok(Format::Text),
            "csv" => Ok(Format::Csv(CsvConfig::default())),
            _ => Err(format!(
                "unknown trace format `{name}` (msr, oracle, oraclesystwrns, vscsi, cloudphysics, \
                 text, csv)"
            )),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Opens the file at `path`, decompressing it if it starts with the zstd magic.
pub fn open_source(path: &Path) -> Result<Source> {
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    decompress(Box::new(BufReader::with_capacity(BUFFER_BYTES, file)), path)
}

/// Wraps `source` in a zstd decoder if it starts with the zstd magic.
fn decompress(mut source: Source, path: &Path) -> Result<Source> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let head = source.fill_buf().map_err(io)?;
    if !head.starts_with(&ZSTD_MAGIC) {
        return Ok(source);
    }
    let decoder = zstd::stream::read::Decoder::with_buffer(source).map_err(io)?;
    Ok(Box::new(BufReader::with_capacity(BUFFER_BYTES, decoder)))
}

/// Opens the trace at `path` in `format`.
pub fn open(path: &Path, format: &Format) -> Result<Reader> {
    from_source(open_source(path)?, path, format)
}

/// Reads a trace in `format` from any source (zstd-compressed or not);
/// `path` names it in errors.
pub fn from_source(source: Source, path: &Path, format: &Format) -> Result<Reader> {
    let source = decompress(source, path)?;
    Ok(match format {
        Format::Msr => msr::reader(source, path),
        Format::OracleGeneral => Box::new(oracle_general::OracleGeneralReader::new(source, path)),
        Format::OracleSysTwrNs => {
            Box::new(oracle_sys_twr_ns::OracleSysTwrNsReader::new(source, path))
        }
        Format::Vscsi => vscsi::reader(source, path),
        Format::CloudPhysics => cloudphysics::reader(source, path),
        Format::Text => text::reader(source, path),
        Format::Csv(config) => {
            config.validate().map_err(|reason| TraceError::Format {
                path: path.to_path_buf(),
                reason,
            })?;
            csv::reader(source, path, config.clone())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;

    #[test]
    fn names_parse_and_display() {
        for name in [
            "msr",
            "oracle",
            "oraclesystwrns",
            "vscsi",
            "cloudphysics",
            "text",
            "csv",
        ] {
            let format: Format = name.parse().unwrap();
            assert_eq!(format.to_string(), name);
        }
        assert!("spc".parse::<Format>().is_err());
    }

    #[test]
    fn detects_by_name_and_content() {
        let directory = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = directory.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let msr = write(
            "a.csv",
            b"128166385295514663,hm,0,Write,9056014336,2048,2833\n",
        );
        assert_eq!(Format::detect(&msr).unwrap(), Format::Msr);
        let cp = write("b.csv", b"version,time,op,size,lbn\n1,2,28,512,1\n");
        assert_eq!(Format::detect(&cp).unwrap(), Format::CloudPhysics);
        let request = Request::default();
        let vs = write("c.bin", &vscsi::encode(&request, 0));
        assert_eq!(Format::detect(&vs).unwrap(), Format::Vscsi);
        let og = write("d.oracleGeneral.bin.zst", b"");
        assert_eq!(Format::detect(&og).unwrap(), Format::OracleGeneral);
        let twr = write("cluster52.oracleSysTwrNS.zst", b"");
        assert_eq!(Format::detect(&twr).unwrap(), Format::OracleSysTwrNs);
        let unknown = write("e.csv", b"1,2,3\n");
        assert!(Format::detect(&unknown).is_err());
    }

    #[test]
    fn reads_zstd_compressed_traces() {
        let request = Request {
            time_us: 3_000_000,
            object: 7,
            size: 100,
            ..Request::default()
        };
        let mut plain = oracle_general::encode(&request).to_vec();
        plain.extend_from_slice(&oracle_general::encode(&request));
        let compressed = zstd::stream::encode_all(&plain[..], 3).unwrap();
        let source: Source = Box::new(std::io::Cursor::new(compressed));
        let requests: Vec<Request> = from_source(
            source,
            Path::new("t.oracleGeneral.zst"),
            &Format::OracleGeneral,
        )
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[1].object, 7);
    }
}
