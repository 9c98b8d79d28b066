//! Trace writers: libCacheSim's oracleGeneral, our canonical CSV, text ids;
//! and [`convert`] from any reader to any writer.
//!
//! The CSV and text writers stream. The oracleGeneral writer needs the index
//! of each request's next access to the same object, which is known only
//! when the trace has been seen to the end: it keeps every request (16 bytes
//! each) and one map entry per distinct object (about 16 bytes plus hash
//! table slack) until [`TraceWriter::finish`], then fills the indices in one
//! backward pass and writes the file. 100 M requests need about 1.6 GB.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use hashbrown::HashMap;

use crate::error::TraceError;
use crate::read::{Format, Reader, oracle_general};
use crate::split::BLOCK_INDEX_BITS;
use crate::{NEVER, Op, Request, Result};

/// The header of the canonical CSV; it belongs to the CSV reader, beside
/// [`crate::read::CsvConfig::canonical`], and is re-exported here for writers.
pub use crate::read::csv::CSV_HEADER;

/// A sink of requests in some trace format.
pub trait TraceWriter {
    /// Appends one request.
    fn write(&mut self, request: &Request) -> Result<()>;
    /// Writes what is buffered and flushes; call once, after the last request.
    fn finish(&mut self) -> Result<()>;
}

/// What becomes the oracleGeneral `obj_id` of a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ObjectKey {
    /// The request's object (object traces).
    #[default]
    Object,
    /// The request's first 512-byte sector, with the object in the top
    /// 20 bits as in [`crate::Splitter`]'s block keys: for object 0 this is
    /// the lbn, which is how libCacheSim turns block traces into objects.
    StartSector,
}

/// Writes the canonical CSV: [`CSV_HEADER`], then `time_us,object,offset,size,r|w`.
pub struct CsvWriter<W: Write> {
    sink: W,
    path: PathBuf,
    header_written: bool,
}

impl<W: Write> CsvWriter<W> {
    /// A writer into `sink`; `path` names it in errors.
    pub fn new(sink: W, path: &Path) -> Self {
        Self {
            sink,
            path: path.to_path_buf(),
            header_written: false,
        }
    }

    fn io(&self, source: std::io::Error) -> TraceError {
        TraceError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

impl<W: Write> TraceWriter for CsvWriter<W> {
    fn write(&mut self, request: &Request) -> Result<()> {
        if !self.header_written {
            writeln!(self.sink, "{CSV_HEADER}").map_err(|e| self.io(e))?;
            self.header_written = true;
        }
        let op = match request.op {
            Op::Read => 'r',
            Op::Write => 'w',
        };
        writeln!(
            self.sink,
            "{},{},{},{},{op}",
            request.time_us, request.object, request.offset, request.size
        )
        .map_err(|e| self.io(e))
    }

    fn finish(&mut self) -> Result<()> {
        if !self.header_written {
            writeln!(self.sink, "{CSV_HEADER}").map_err(|e| self.io(e))?;
            self.header_written = true;
        }
        self.sink.flush().map_err(|e| self.io(e))
    }
}

/// Writes one `object size` line per request (see [`crate::read::text`]).
pub struct TextWriter<W: Write> {
    sink: W,
    path: PathBuf,
}

impl<W: Write> TextWriter<W> {
    /// A writer into `sink`; `path` names it in errors.
    pub fn new(sink: W, path: &Path) -> Self {
        Self {
            sink,
            path: path.to_path_buf(),
        }
    }
}

impl<W: Write> TraceWriter for TextWriter<W> {
    fn write(&mut self, request: &Request) -> Result<()> {
        writeln!(self.sink, "{} {}", request.object, request.size).map_err(|source| {
            TraceError::Io {
                path: self.path.clone(),
                source,
            }
        })
    }

    fn finish(&mut self) -> Result<()> {
        self.sink.flush().map_err(|source| TraceError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// One buffered request of the oracleGeneral writer.
#[derive(Clone, Copy)]
struct Pending {
    object: u64,
    time_s: u32,
    size: u32,
}

/// Writes libCacheSim's oracleGeneral, computing next-access indices
/// (memory: see the module docs). Operations are not kept: the format has none.
pub struct OracleGeneralWriter<W: Write> {
    sink: W,
    path: PathBuf,
    key: ObjectKey,
    pending: Vec<Pending>,
}

impl<W: Write> OracleGeneralWriter<W> {
    /// A writer into `sink`; `path` names it in errors.
    pub fn new(sink: W, path: &Path, key: ObjectKey) -> Self {
        Self {
            sink,
            path: path.to_path_buf(),
            key,
            pending: Vec::new(),
        }
    }
}

impl<W: Write> TraceWriter for OracleGeneralWriter<W> {
    fn write(&mut self, request: &Request) -> Result<()> {
        let object = match self.key {
            ObjectKey::Object => request.object,
            ObjectKey::StartSector => {
                let object_bits =
                    (request.object & ((1 << (64 - BLOCK_INDEX_BITS)) - 1)) << BLOCK_INDEX_BITS;
                object_bits | ((request.offset / 512) & ((1 << BLOCK_INDEX_BITS) - 1))
            }
        };
        let time_s =
            u32::try_from(request.time_us / 1_000_000).map_err(|_| TraceError::Malformed {
                path: self.path.clone(),
                position: crate::error::Position::Record(self.pending.len() as u64),
                field: "time",
                reason: format!("{} µs does not fit u32 seconds", request.time_us),
            })?;
        self.pending.push(Pending {
            object,
            time_s,
            size: request.size,
        });
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let mut next = vec![NEVER; pending.len()];
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for (index, item) in pending.iter().enumerate().rev() {
            if let Some(later) = seen.insert(item.object, index as u64) {
                next[index] = later;
            }
        }
        drop(seen);
        let io = |source| TraceError::Io {
            path: self.path.clone(),
            source,
        };
        for (item, next) in pending.iter().zip(next) {
            let request = Request {
                time_us: u64::from(item.time_s) * 1_000_000,
                object: item.object,
                offset: 0,
                size: item.size,
                op: Op::Read,
                next,
            };
            self.sink
                .write_all(&oracle_general::encode(&request))
                .map_err(io)?;
        }
        self.sink.flush().map_err(io)
    }
}

/// Creates a writer of `format` at `path`: oracleGeneral (keyed by
/// [`ObjectKey::Object`]), CSV (always the canonical CSV, whatever the map)
/// or text; other formats are read-only.
pub fn create(path: &Path, format: &Format) -> Result<Box<dyn TraceWriter>> {
    let file = std::fs::File::create(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let sink = BufWriter::with_capacity(1 << 20, file);
    Ok(match format {
        Format::OracleGeneral => Box::new(OracleGeneralWriter::new(sink, path, ObjectKey::Object)),
        Format::Csv(_) => Box::new(CsvWriter::new(sink, path)),
        Format::Text => Box::new(TextWriter::new(sink, path)),
        other => {
            return Err(TraceError::Format {
                path: path.to_path_buf(),
                reason: format!("cannot write {other} traces (oracle, csv, text)"),
            });
        }
    })
}

/// Copies every request of `reader` into `writer` and finishes it; returns
/// the number of requests. Stops at the first error.
pub fn convert(reader: Reader, writer: &mut dyn TraceWriter) -> Result<u64> {
    let mut count = 0;
    for request in reader {
        writer.write(&request?)?;
        count += 1;
    }
    writer.finish()?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::{self, CsvConfig};

    fn requests() -> Vec<Request> {
        let mut out = vec![];
        for (index, object) in [5u64, 7, 5, 9, 7, 5].into_iter().enumerate() {
            out.push(Request {
                time_us: index as u64 * 1_000_000,
                object,
                offset: 0,
                size: 100 + object as u32,
                op: if index % 2 == 0 { Op::Read } else { Op::Write },
                next: NEVER,
            });
        }
        out
    }

    fn reader_of(requests: Vec<Request>) -> Reader {
        Box::new(requests.into_iter().map(Ok))
    }

    #[test]
    fn oracle_general_gets_next_access_indices() {
        let mut bytes = vec![];
        let mut writer = OracleGeneralWriter::new(&mut bytes, Path::new("o"), ObjectKey::Object);
        assert_eq!(convert(reader_of(requests()), &mut writer).unwrap(), 6);
        drop(writer);
        let source = Box::new(std::io::Cursor::new(bytes));
        let back: Vec<Request> = read::from_source(source, Path::new("o"), &Format::OracleGeneral)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        let next: Vec<u64> = back.iter().map(|r| r.next).collect();
        assert_eq!(next, [2, 4, 5, NEVER, NEVER, NEVER]);
        assert_eq!(back[3].object, 9);
        assert_eq!(back[3].size, 109);
    }

    #[test]
    fn canonical_csv_round_trips() {
        let mut bytes = vec![];
        let mut writer = CsvWriter::new(&mut bytes, Path::new("c"));
        convert(reader_of(requests()), &mut writer).unwrap();
        drop(writer);
        let format = Format::Csv(CsvConfig::canonical());
        let source = Box::new(std::io::Cursor::new(bytes));
        let back: Vec<Request> = read::from_source(source, Path::new("c"), &format)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(back, requests());
    }

    #[test]
    fn text_ids_round_trip_objects_and_sizes() {
        let mut bytes = vec![];
        let mut writer = TextWriter::new(&mut bytes, Path::new("t"));
        convert(reader_of(requests()), &mut writer).unwrap();
        drop(writer);
        let source = Box::new(std::io::Cursor::new(bytes));
        let back: Vec<(u64, u32)> = read::from_source(source, Path::new("t"), &Format::Text)
            .unwrap()
            .map(|r| r.map(|r| (r.object, r.size)))
            .collect::<Result<_>>()
            .unwrap();
        let want: Vec<(u64, u32)> = requests().iter().map(|r| (r.object, r.size)).collect();
        assert_eq!(back, want);
    }
}
