//! The spill's map file: which object version owns which span of the
//! tier's virtual backing device. Appended one record per new version and
//! made durable before any block of that span is read through the tier, so
//! a span is never given to two versions, even across a crash. Byte diagram:
//! docs/formats.md, "Spill map".

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::limits::KEY_MAX_BYTES;

/// The header's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"CAIRNSPL";
/// The map format's version.
pub const VERSION: u32 = 1;
/// Header bytes.
pub const HEADER: usize = 64;
/// A record's fixed part, bytes (its key follows).
pub const RECORD_FIXED: usize = 48;

/// One version's span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The object's key.
    pub key: String,
    /// Its size, bytes.
    pub size: u64,
    /// Its modification time.
    pub modified: SystemTime,
    /// First byte of its span on the virtual device.
    pub base: u64,
    /// The span's length, bytes (the size rounded up to the span unit).
    pub len: u64,
}

/// A map file read back.
#[derive(Debug)]
pub struct Loaded {
    /// The tier (cache device) the map belongs to.
    pub cache_id: u64,
    /// The first virtual byte no record had reached when the file was last
    /// rewritten.
    pub floor: u64,
    /// Every record, oldest first (a key's later record supersedes).
    pub entries: Vec<Entry>,
    /// A torn last record was dropped (a crash while appending it, before
    /// any of its span was used).
    pub torn_tail: bool,
}

/// A map file that cannot be used; the spill then starts afresh.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// An I/O error.
    #[error("{path}: {source}")]
    Io {
        /// The map file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The contents are not a map, or are damaged before their end.
    #[error("{path}: {why}")]
    Damaged {
        /// The map file.
        path: PathBuf,
        /// What is wrong, and where.
        why: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> MapError + '_ {
    move |source| MapError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn header(cache_id: u64, floor: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&cache_id.to_le_bytes());
    h[24..32].copy_from_slice(&floor.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Seconds (signed) and nanoseconds of `t` around the epoch.
fn split_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(before) => {
            let d = before.duration();
            if d.subsec_nanos() == 0 {
                (-(d.as_secs() as i64), 0)
            } else {
                (-(d.as_secs() as i64) - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    }
}

fn join_time(secs: i64, nanos: u32) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nanos.into())
    }
}

/// Encodes `e` as a record.
pub fn encode(e: &Entry) -> Vec<u8> {
    let len = RECORD_FIXED + e.key.len();
    let mut r = vec![0u8; len];
    r[..4].copy_from_slice(&(len as u32).to_le_bytes());
    r[8..16].copy_from_slice(&e.base.to_le_bytes());
    r[16..24].copy_from_slice(&e.len.to_le_bytes());
    r[24..32].copy_from_slice(&e.size.to_le_bytes());
    let (secs, nanos) = split_time(e.modified);
    r[32..40].copy_from_slice(&secs.to_le_bytes());
    r[40..44].copy_from_slice(&nanos.to_le_bytes());
    r[44..46].copy_from_slice(&(e.key.len() as u16).to_le_bytes());
    r[RECORD_FIXED..].copy_from_slice(e.key.as_bytes());
    let crc = crc32c::crc32c(&r[8..]);
    r[4..8].copy_from_slice(&crc.to_le_bytes());
    r
}

/// Decodes the record at the start of `b`: the entry and its length, or
/// why it is not one.
fn decode(b: &[u8]) -> Result<(Entry, usize), String> {
    if b.len() < RECORD_FIXED {
        return Err(format!("{} bytes, shorter than a record", b.len()));
    }
    let len = u32_at(b, 0) as usize;
    if !(RECORD_FIXED..=RECORD_FIXED + KEY_MAX_BYTES).contains(&len) || len > b.len() {
        return Err(format!("a record of {len} bytes"));
    }
    let r = &b[..len];
    if crc32c::crc32c(&r[8..]) != u32_at(r, 4) {
        return Err("a record failing its CRC".into());
    }
    let key_len = usize::from(u16::from_le_bytes([r[44], r[45]]));
    if RECORD_FIXED + key_len != len || r[46..48] != [0, 0] {
        return Err("a record whose key length disagrees with its length".into());
    }
    let key = std::str::from_utf8(&r[RECORD_FIXED..])
        .map_err(|_| "a record whose key is not UTF-8".to_owned())?;
    let nanos = u32_at(r, 40);
    if nanos >= 1_000_000_000 {
        return Err("a record whose time has more than a second of nanoseconds".into());
    }
    let entry = Entry {
        key: key.to_owned(),
        base: u64_at(r, 8),
        len: u64_at(r, 16),
        size: u64_at(r, 24),
        modified: join_time(u64_at(r, 32) as i64, nanos),
    };
    if entry.len < entry.size || entry.base.checked_add(entry.len).is_none() {
        return Err("a record whose span is shorter than its object".into());
    }
    Ok((entry, len))
}

/// Reads the map at `path`; `Ok(None)` if there is none.
pub fn load(path: &Path) -> Result<Option<Loaded>, MapError> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io(path))?;
    let damaged = |why: String| MapError::Damaged {
        path: path.to_path_buf(),
        why,
    };
    if bytes.len() < HEADER
        || bytes[..8] != MAGIC
        || crc32c::crc32c(&bytes[..60]) != u32_at(&bytes, 60)
    {
        return Err(damaged("not a spill map (no valid header)".into()));
    }
    if u32_at(&bytes, 8) != VERSION {
        return Err(damaged(format!(
            "map format version {}, this build reads {VERSION}",
            u32_at(&bytes, 8)
        )));
    }
    let mut loaded = Loaded {
        cache_id: u64_at(&bytes, 16),
        floor: u64_at(&bytes, 24),
        entries: Vec::new(),
        torn_tail: false,
    };
    let mut at = HEADER;
    while at < bytes.len() {
        match decode(&bytes[at..]) {
            Ok((entry, len)) => {
                loaded.entries.push(entry);
                at += len;
            }
            // Records are appended one at a time, each made durable before
            // the next is written: only the last can be torn, and then
            // nothing follows it but what its own write left.
            Err(_) if bytes.len() - at <= RECORD_FIXED + KEY_MAX_BYTES => {
                loaded.torn_tail = true;
                break;
            }
            Err(why) => return Err(damaged(format!("{why} at byte {at}, with more after it"))),
        }
    }
    Ok(Some(loaded))
}

/// An open map file, appended to.
pub struct MapFile {
    file: File,
    path: PathBuf,
    end: u64,
}

impl MapFile {
    /// Writes a new map at `path` (through a temporary file renamed over
    /// it, then the directory synced): a header for `cache_id` and `floor`,
    /// and `entries`.
    pub fn create(
        path: &Path,
        cache_id: u64,
        floor: u64,
        entries: &[Entry],
    ) -> Result<Self, MapError> {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".new");
        let tmp = path.with_file_name(name);
        let mut bytes = header(cache_id, floor).to_vec();
        for e in entries {
            bytes.extend_from_slice(&encode(e));
        }
        {
            let mut file = File::create(&tmp).map_err(io(&tmp))?;
            file.write_all(&bytes).map_err(io(&tmp))?;
            file.sync_all().map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, path).map_err(io(path))?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io(path))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            end: bytes.len() as u64,
        })
    }

    /// Appends `e` and makes it durable.
    pub fn append(&mut self, e: &Entry) -> Result<(), MapError> {
        let record = encode(e);
        self.file
            .write_all_at(&record, self.end)
            .and_then(|()| self.file.sync_data())
            .map_err(io(&self.path))?;
        self.end += record.len() as u64;
        Ok(())
    }

    /// Makes every later append fail (the file reopened read-only), as a
    /// full or failing disk would: for tests.
    #[cfg(test)]
    pub fn fail_appends(&mut self) {
        self.file = File::open(&self.path).expect("the map");
    }

    /// Bytes in the file (a header at least).
    pub fn bytes(&self) -> u64 {
        self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, base: u64, secs: i64) -> Entry {
        Entry {
            key: key.to_owned(),
            size: 3 << 20,
            modified: join_time(secs, 123),
            base,
            len: 4 << 20,
        }
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill.map");
        assert!(load(&path).unwrap().is_none());
        let a = entry("videos/a.mp4", 0, 1_700_000_000);
        let b = entry("b", 4 << 20, -5);
        let mut map = MapFile::create(&path, 77, 0, std::slice::from_ref(&a)).unwrap();
        map.append(&b).unwrap();
        let loaded = load(&path).unwrap().unwrap();
        assert_eq!(loaded.cache_id, 77);
        assert_eq!(loaded.entries, vec![a.clone(), b.clone()]);
        assert!(!loaded.torn_tail);

        // Half a record at the end: a crash while appending.
        let c = encode(&entry("c", 8 << 20, 1));
        let end = map.bytes();
        map.file.write_all_at(&c[..30], end).unwrap();
        let loaded = load(&path).unwrap().unwrap();
        assert_eq!(loaded.entries, vec![a.clone(), b]);
        assert!(loaded.torn_tail);

        // A damaged record with whole records after it is not a crash.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.truncate(end as usize);
        bytes[HEADER + 20] ^= 1;
        for _ in 0..40 {
            bytes.extend_from_slice(&encode(&a));
        }
        std::fs::write(&path, &bytes).unwrap();
        let error = load(&path).unwrap_err().to_string();
        assert!(
            error.contains("CRC") && error.contains("more after it"),
            "{error}"
        );

        std::fs::write(
            &path,
            b"not a map at all, but long enough to hold a header........",
        )
        .unwrap();
        assert!(
            load(&path)
                .unwrap_err()
                .to_string()
                .contains("no valid header")
        );
    }

    #[test]
    fn times_before_the_epoch_survive() {
        for (secs, nanos) in [(-1, 5), (-100, 0), (0, 0), (1_800_000_000, 999_999_999)] {
            let t = join_time(secs, nanos);
            assert_eq!(split_time(t), (secs, nanos));
        }
    }
}
