//! Trace writers: libCacheSim's oracleGeneral and oracleSysTwrNS, our
//! canonical CSV, text ids, VSCSI v1; and [`convert`] from any reader to any
//! writer. oracleSysTwrNS and the CSV (with a `ttl` column) keep requests'
//! TTLs; the others have no field for them. [`create`] writes
//! the format a file's name says ([`format_of_name`], the names
//! [`crate::read::Format::detect`] reads back), zstd-compressed when the name
//! ends in `.zst`.
//!
//! The CSV, text and VSCSI writers stream. The oracle writers need the index
//! of each request's next access to the same object, which is known only
//! when the trace has been seen to the end: they keep every request (16 bytes
//! each; 24 for oracleSysTwrNS, which keeps the op and TTL too) and one map
//! entry per distinct object (about 16 bytes plus hash table slack) until
//! [`TraceWriter::finish`], then fill the indices in one backward pass and
//! write the file. 100 M requests need about 1.6 GB (2.4 GB).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use hashbrown::HashMap;

use crate::error::TraceError;
use crate::read::{Format, Reader, oracle_general, oracle_sys_twr_ns, vscsi};
use crate::split::start_sector_key;
use crate::{NEVER, Op, Request, Result};

/// The headers of the canonical CSV, without and with a TTL column; they
/// belong to the CSV reader, beside [`crate::read::CsvConfig::canonical`],
/// and are re-exported here for writers.
pub use crate::read::csv::{CSV_HEADER, CSV_TTL_HEADER};

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

/// Writes the canonical CSV: [`CSV_HEADER`], then `time_us,object,offset,size,r|w`;
/// or, [`with_ttl`](Self::with_ttl), [`CSV_TTL_HEADER`] and each request's
/// TTL (seconds, 0 for none) in a sixth column.
pub struct CsvWriter<W: Write> {
    sink: W,
    path: PathBuf,
    header_written: bool,
    ttl: bool,
}

impl<W: Write> CsvWriter<W> {
    /// A writer into `sink`; `path` names it in errors.
    pub fn new(sink: W, path: &Path) -> Self {
        Self {
            sink,
            path: path.to_path_buf(),
            header_written: false,
            ttl: false,
        }
    }

    /// Writes the TTL column too.
    #[must_use]
    pub fn with_ttl(mut self) -> Self {
        self.ttl = true;
        self
    }

    fn header(&self) -> &'static str {
        if self.ttl { CSV_TTL_HEADER } else { CSV_HEADER }
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
            writeln!(self.sink, "{}", self.header()).map_err(|e| self.io(e))?;
            self.header_written = true;
        }
        let op = match request.op {
            Op::Read => 'r',
            Op::Write => 'w',
        };
        let written = if self.ttl {
            writeln!(
                self.sink,
                "{},{},{},{},{op},{}",
                request.time_us, request.object, request.offset, request.size, request.ttl
            )
        } else {
            writeln!(
                self.sink,
                "{},{},{},{},{op}",
                request.time_us, request.object, request.offset, request.size
            )
        };
        written.map_err(|e| self.io(e))
    }

    fn finish(&mut self) -> Result<()> {
        if !self.header_written {
            writeln!(self.sink, "{}", self.header()).map_err(|e| self.io(e))?;
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

/// Writes VSCSI v1 records (see [`crate::read::vscsi`]): `sn` = the record's
/// index (mod 2^32), `nSG` = 1, `cmd` = 0x28 or 0x2a, `lbn` = offset / 512.
/// VSCSI holds one disk at sector granularity, so a request of another object
/// than 0, or at an offset that is not a whole sector, is an error rather
/// than a silent change.
pub struct VscsiWriter<W: Write> {
    sink: W,
    path: PathBuf,
    index: u64,
}

impl<W: Write> VscsiWriter<W> {
    /// A writer into `sink`; `path` names it in errors.
    pub fn new(sink: W, path: &Path) -> Self {
        Self {
            sink,
            path: path.to_path_buf(),
            index: 0,
        }
    }

    fn malformed(&self, field: &'static str, reason: String) -> TraceError {
        TraceError::Malformed {
            path: self.path.clone(),
            position: crate::error::Position::Record(self.index),
            field,
            reason,
        }
    }
}

impl<W: Write> TraceWriter for VscsiWriter<W> {
    fn write(&mut self, request: &Request) -> Result<()> {
        if request.object != 0 {
            return Err(self.malformed(
                "object",
                format!(
                    "object {}: VSCSI holds one disk (object 0); write oracleGeneral or CSV, \
                     or generate with layout=\"blocks\"",
                    request.object
                ),
            ));
        }
        if !request.offset.is_multiple_of(512) {
            return Err(self.malformed(
                "offset",
                format!(
                    "{} bytes is not a whole 512-byte sector (VSCSI stores sectors)",
                    request.offset
                ),
            ));
        }
        let record = vscsi::encode(request, self.index as u32);
        self.index += 1;
        self.sink
            .write_all(&record)
            .map_err(|source| TraceError::Io {
                path: self.path.clone(),
                source,
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
            ObjectKey::StartSector => start_sector_key(request),
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
        let next = next_indices(pending.iter().map(|p| p.object));
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
                ttl: 0,
                next,
            };
            self.sink
                .write_all(&oracle_general::encode(&request))
                .map_err(io)?;
        }
        self.sink.flush().map_err(io)
    }
}

/// For each of `objects` (one per request, in order), the index of the
/// next request to the same object ([`NEVER`] for none), in one backward
/// pass.
fn next_indices(objects: impl DoubleEndedIterator<Item = u64> + ExactSizeIterator) -> Vec<u64> {
    let mut next = vec![NEVER; objects.len()];
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for (index, object) in objects.enumerate().rev() {
        if let Some(later) = seen.insert(object, index as u64) {
            next[index] = later;
        }
    }
    next
}

/// One buffered request of the oracleSysTwrNS writer.
#[derive(Clone, Copy)]
struct PendingTtl {
    object: u64,
    time_s: u32,
    size: u32,
    ttl: u32,
    op: Op,
}

/// Writes libCacheSim's oracleSysTwrNS (Twitter's format, which carries a
/// TTL per request), computing next-access indices (memory: see the module
/// docs). Key size 0, the size as the value size, ops `get` and `set`.
pub struct OracleSysTwrNsWriter<W: Write> {
    sink: W,
    path: PathBuf,
    pending: Vec<PendingTtl>,
}

impl<W: Write> OracleSysTwrNsWriter<W> {
    /// A writer into `sink`; `path` names it in errors.
    pub fn new(sink: W, path: &Path) -> Self {
        Self {
            sink,
            path: path.to_path_buf(),
            pending: Vec::new(),
        }
    }

    fn malformed(&self, field: &'static str, reason: String) -> TraceError {
        TraceError::Malformed {
            path: self.path.clone(),
            position: crate::error::Position::Record(self.pending.len() as u64),
            field,
            reason,
        }
    }
}

impl<W: Write> TraceWriter for OracleSysTwrNsWriter<W> {
    fn write(&mut self, request: &Request) -> Result<()> {
        let time_s = u32::try_from(request.time_us / 1_000_000).map_err(|_| {
            self.malformed(
                "time",
                format!("{} µs does not fit u32 seconds", request.time_us),
            )
        })?;
        if i32::try_from(request.ttl).is_err() {
            return Err(self.malformed(
                "ttl",
                format!(
                    "{} s is over oracleSysTwrNS's 2,147,483,647 (a signed 32-bit field)",
                    request.ttl
                ),
            ));
        }
        self.pending.push(PendingTtl {
            object: request.object,
            time_s,
            size: request.size,
            ttl: request.ttl,
            op: request.op,
        });
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let next = next_indices(pending.iter().map(|p| p.object));
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
                op: item.op,
                ttl: item.ttl,
                next,
            };
            self.sink
                .write_all(&oracle_sys_twr_ns::encode(&request))
                .map_err(io)?;
        }
        self.sink.flush().map_err(io)
    }
}

/// The output names [`create_by_name`] understands, for messages.
pub const OUTPUT_NAMES: &str = "NAME.oracleGeneral.bin or NAME.oracle (oracleGeneral), \
     NAME.oracleSysTwrNS (oracleSysTwrNS, with TTLs), NAME.csv (canonical CSV), NAME.txt \
     (text ids), NAME.vscsi (VSCSI v1), each optionally followed by .zst (zstd-compressed)";

/// The format a file's name says, as [`Format::detect`] reads it back (after
/// dropping `.zst`): `.vscsi` → VSCSI; a name containing `oracleGeneral`, or
/// ending `.oracle` → oracleGeneral; a name containing `oracleSysTwrNS` →
/// oracleSysTwrNS; `.txt` → text; `.csv` → the canonical CSV.
/// `None` for any other name (`zipf.bin`): a reader could not tell it.
pub fn format_of_name(path: &Path) -> Option<Format> {
    Format::named(path)
}

/// Whether a file's name asks for zstd compression (`.zst` or `.zstd`).
pub fn is_zstd_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("zst") || e.eq_ignore_ascii_case("zstd"))
}

/// A file being written, plain or zstd-compressed. Flushing a compressed sink
/// ends the zstd frame (a write after it starts another frame, which readers
/// take as one stream), so [`TraceWriter::finish`] leaves a complete file.
pub enum FileSink {
    /// Bytes as written.
    Plain(BufWriter<File>),
    /// zstd at the default level.
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

impl FileSink {
    /// Creates `path`, compressed when its name ends in `.zst`.
    pub fn create(path: &Path) -> Result<Self> {
        let io = |source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io)?);
        Ok(if is_zstd_name(path) {
            FileSink::Zstd(zstd::stream::write::Encoder::new(file, 0).map_err(io)?)
        } else {
            FileSink::Plain(file)
        })
    }
}

impl Write for FileSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            FileSink::Plain(sink) => sink.write(bytes),
            FileSink::Zstd(sink) => sink.write(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            FileSink::Plain(sink) => sink.flush(),
            FileSink::Zstd(sink) => {
                sink.do_finish()?;
                sink.get_mut().flush()
            }
        }
    }
}

/// Creates a writer of `format` at `path` ([`create_keyed`] with
/// [`ObjectKey::Object`]).
pub fn create(path: &Path, format: &Format) -> Result<Box<dyn TraceWriter>> {
    create_keyed(path, format, ObjectKey::Object)
}

/// Creates a writer of `format` at `path`: oracleGeneral (keyed by `key`),
/// oracleSysTwrNS, CSV (always the canonical CSV, with the TTL column when
/// the map has a `ttl_column`), text or VSCSI; other formats are read-only,
/// and [`ObjectKey::StartSector`] goes with oracleGeneral only. Compressed
/// with zstd when the name ends in `.zst`. [`Format::carries_ttl`] says
/// whether the TTLs of the requests written are kept.
pub fn create_keyed(path: &Path, format: &Format, key: ObjectKey) -> Result<Box<dyn TraceWriter>> {
    let refuse = |reason: String| {
        Err(TraceError::Format {
            path: path.to_path_buf(),
            reason,
        })
    };
    if key == ObjectKey::StartSector && *format != Format::OracleGeneral {
        return refuse("start-sector object keys go with oracleGeneral output".to_owned());
    }
    if !matches!(
        format,
        Format::OracleGeneral
            | Format::OracleSysTwrNs
            | Format::Csv(_)
            | Format::Text
            | Format::Vscsi
    ) {
        return refuse(format!(
            "cannot write {format} traces (oracle, oraclesystwrns, csv, text, vscsi)"
        ));
    }
    let sink = FileSink::create(path)?;
    Ok(match format {
        Format::OracleGeneral => Box::new(OracleGeneralWriter::new(sink, path, key)),
        Format::OracleSysTwrNs => Box::new(OracleSysTwrNsWriter::new(sink, path)),
        Format::Csv(config) if config.ttl_column.is_some() => {
            Box::new(CsvWriter::new(sink, path).with_ttl())
        }
        Format::Csv(_) => Box::new(CsvWriter::new(sink, path)),
        Format::Text => Box::new(TextWriter::new(sink, path)),
        _ => Box::new(VscsiWriter::new(sink, path)),
    })
}

/// Creates the writer `path`'s name asks for ([`format_of_name`], `.zst`
/// compressed), refusing a name whose format a reader could not tell.
pub fn create_by_name(path: &Path, key: ObjectKey) -> Result<(Format, Box<dyn TraceWriter>)> {
    let Some(format) = format_of_name(path) else {
        return Err(TraceError::Format {
            path: path.to_path_buf(),
            reason: format!(
                "cannot tell the format to write from the name; name it {OUTPUT_NAMES}"
            ),
        });
    };
    let writer = create_keyed(path, &format, key)?;
    Ok((format, writer))
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
                ttl: 0,
                next: NEVER,
            });
        }
        out
    }

    fn reader_of(requests: Vec<Request>) -> Reader {
        crate::read::boxed(requests.into_iter().map(Ok))
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
    fn vscsi_round_trips_and_refuses_what_it_cannot_hold() {
        let blocks: Vec<Request> = requests()
            .into_iter()
            .map(|r| Request {
                object: 0,
                offset: r.object * 4096,
                ..r
            })
            .collect();
        let mut bytes = vec![];
        let mut writer = VscsiWriter::new(&mut bytes, Path::new("v"));
        convert(reader_of(blocks.clone()), &mut writer).unwrap();
        drop(writer);
        let source = Box::new(std::io::Cursor::new(bytes));
        let back: Vec<Request> = read::from_source(source, Path::new("v"), &Format::Vscsi)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(back, blocks);
        let mut sink = vec![];
        let mut writer = VscsiWriter::new(&mut sink, Path::new("v"));
        let error = writer.write(&requests()[0]).unwrap_err().to_string();
        assert!(error.contains("one disk"), "{error}");
        let unaligned = Request {
            object: 0,
            offset: 100,
            ..requests()[0]
        };
        let error = writer.write(&unaligned).unwrap_err().to_string();
        assert!(error.contains("512-byte sector"), "{error}");
    }

    #[test]
    fn names_choose_the_format_a_reader_detects() {
        for (name, want) in [
            ("a.vscsi", Some("vscsi")),
            ("a.vscsi.zst", Some("vscsi")),
            ("a.oracleGeneral.bin", Some("oracle")),
            ("a.oracleGeneral.bin.zst", Some("oracle")),
            ("a.oracle", Some("oracle")),
            ("a.csv", Some("csv")),
            ("a.txt.zst", Some("text")),
            ("a.bin", None),
            ("a.zst", None),
            ("a", None),
        ] {
            assert_eq!(
                format_of_name(Path::new(name)).map(|f| f.name()),
                want,
                "{name}"
            );
        }
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
