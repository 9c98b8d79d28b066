//! [`StripedBackend`]: one object striped round robin over N backends (the
//! I/O servers of papers/001), in stripe units of a fixed size.
//!
//! # Layout
//! Stripe `k` of an object (its bytes `k·U .. (k+1)·U`, the last one shorter)
//! lives on server `k mod N`. Every server holds the object under the same
//! key, its stripes concatenated in order, so server `s`'s copy of `KEY` is
//! stripes `s, s+N, s+2N, …` and stripe `k` is at offset `⌊k/N⌋·U` in it:
//!
//! ```text
//! object:  | 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 |9.|     (U bytes each; 9 is short)
//! server 0 KEY: | 0 | 4 | 8 |
//! server 1 KEY: | 1 | 5 |9.|
//! server 2 KEY: | 2 | 6 |
//! server 3 KEY: | 3 | 7 |
//! ```
//!
//! The object's size is the sum of its parts' sizes and its modification
//! time the latest part's; parts whose sizes do not fit that layout (a
//! server missing the key while another has it, a part of the wrong length)
//! are an error of kind [`Other`](super::BackendErrorKind::Other), a `502`,
//! never a wrong byte. [`stripe_file`] writes the layout from a plain file.
//!
//! A read is cut at stripe boundaries; the pieces of one server are read in
//! order by one thread, the servers in parallel (scoped threads, only when
//! a read spans more than one server). With the cache's block size equal to
//! the stripe unit, each block is one read on one server.

use std::io::{self, Write as _};
use std::path::Path;
use std::time::SystemTime;

use super::{Backend, BackendError, BackendErrorKind, ListEntry, ObjectInfo, check_key};

pub use crate::limits::SERVERS_MAX;

/// An object striped over several backends. See the module docs.
pub struct StripedBackend<B> {
    servers: Vec<B>,
    unit: u64,
}

impl<B: Backend> StripedBackend<B> {
    /// Stripes of `unit` bytes over `servers` (1 to [`SERVERS_MAX`]).
    pub fn new(servers: Vec<B>, unit: u64) -> Result<Self, BackendError> {
        if servers.is_empty() || servers.len() > SERVERS_MAX || unit == 0 {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "a striped backend needs 1 to {SERVERS_MAX} servers and a stripe unit of at \
                     least 1 byte, not {} servers of {unit}-byte stripes",
                    servers.len()
                ),
            ));
        }
        Ok(Self { servers, unit })
    }

    /// The servers, in stripe order.
    pub fn servers(&self) -> &[B] {
        &self.servers
    }

    /// The stripe unit, bytes.
    pub fn unit(&self) -> u64 {
        self.unit
    }
}

/// How many bytes of an object of `size` bytes server `server` of `servers`
/// holds with stripes of `unit` bytes.
pub fn part_size(size: u64, servers: usize, unit: u64, server: usize) -> u64 {
    let n = servers as u64;
    let s = server as u64;
    let full = size / unit;
    let rest = size % unit;
    let stripes = full / n + u64::from(s < full % n);
    stripes * unit + if rest > 0 && full % n == s { rest } else { 0 }
}

impl<B: Backend> Backend for StripedBackend<B> {
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
        check_key(key)?;
        let mut sizes = [0u64; SERVERS_MAX];
        let mut modified = SystemTime::UNIX_EPOCH;
        let mut missing = 0;
        for (server, backend) in self.servers.iter().enumerate() {
            match backend.stat(key) {
                Ok(info) => {
                    sizes[server] = info.size;
                    modified = modified.max(info.modified);
                }
                Err(e) if e.kind == BackendErrorKind::NotFound => missing += 1,
                Err(e) => return Err(e),
            }
        }
        let n = self.servers.len();
        if missing == n {
            return Err(BackendError::new(
                BackendErrorKind::NotFound,
                format!("{key}: on none of the {n} servers"),
            ));
        }
        let size: u64 = sizes[..n].iter().sum();
        let expected = (0..n).map(|s| part_size(size, n, self.unit, s));
        if missing > 0 || !expected.eq(sizes[..n].iter().copied()) {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "{key}: its parts ({:?} bytes on {n} servers, {missing} missing) are not a \
                     striping of {size} bytes in {}-byte stripes",
                    &sizes[..n],
                    self.unit
                ),
            ));
        }
        Ok(ObjectInfo { size, modified })
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let n = self.servers.len();
        let unit = self.unit;
        if buf.is_empty() {
            return Ok(());
        }
        let first = offset / unit;
        let last = (offset + buf.len() as u64 - 1) / unit;
        if n == 1 {
            return self.servers[0].read_at(key, offset, buf);
        }
        if first == last {
            let part_offset = first / n as u64 * unit + (offset - first * unit);
            return self.servers[(first % n as u64) as usize].read_at(key, part_offset, buf);
        }
        // Cut `buf` at stripe boundaries, piece `k` for server `k mod n`;
        // each server's thread fills its own pieces.
        let mut pieces: Vec<Vec<(u64, &mut [u8])>> = (0..n).map(|_| Vec::new()).collect();
        let mut rest = buf;
        let end = offset + rest.len() as u64;
        for stripe in first..=last {
            let start = (stripe * unit).max(offset);
            let stop = ((stripe + 1) * unit).min(end);
            let (piece, tail) = rest.split_at_mut((stop - start) as usize);
            rest = tail;
            let part_offset = stripe / n as u64 * unit + (start - stripe * unit);
            pieces[(stripe % n as u64) as usize].push((part_offset, piece));
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = pieces
                .into_iter()
                .enumerate()
                .filter(|(_, p)| !p.is_empty())
                .map(|(server, p)| {
                    let backend = &self.servers[server];
                    scope.spawn(move || {
                        for (part_offset, piece) in p {
                            backend.read_at(key, part_offset, piece)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BackendError::new(
                        BackendErrorKind::Other,
                        format!("{key}: a server's read panicked"),
                    ))
                })
            })
        })
    }

    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError> {
        // Every object has a part on server 0 (its stripe 0); sizes are the
        // whole object's.
        let first = out.len();
        let more = self.servers[0].list(prefix, after, max, out)?;
        for entry in &mut out[first..] {
            entry.info = self.stat(&entry.key)?;
        }
        Ok(more)
    }
}

/// Writes `source` striped over `dirs` as `key` (the layout of the module
/// docs) in stripes of `unit` bytes, creating directories below each root
/// as needed. Every server gets a part, empty if the object is short.
pub fn stripe_file(source: &Path, dirs: &[&Path], key: &str, unit: u64) -> io::Result<()> {
    check_key(key).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.message))?;
    if dirs.is_empty() || dirs.len() > SERVERS_MAX || unit == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("striping needs 1 to {SERVERS_MAX} directories and a stripe unit ≥ 1 byte"),
        ));
    }
    let bytes = std::fs::read(source)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", source.display())))?;
    let mut parts = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let path = dir.join(key);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = std::fs::File::create(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        parts.push(io::BufWriter::new(file));
    }
    let unit = usize::try_from(unit).unwrap_or(usize::MAX);
    for (stripe, chunk) in bytes.chunks(unit).enumerate() {
        parts[stripe % dirs.len()].write_all(chunk)?;
    }
    for part in parts {
        part.into_inner().map_err(io::IntoInnerError::into_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{DirBackend, MemoryBackend};

    fn bytes(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn part_sizes_sum_to_the_object() {
        for size in [0, 1, 9, 10, 39, 40, 41, 95, 1000] {
            for n in 1..6 {
                let parts: Vec<u64> = (0..n).map(|s| part_size(size, n, 10, s)).collect();
                assert_eq!(
                    parts.iter().sum::<u64>(),
                    size,
                    "{size} over {n}: {parts:?}"
                );
                let naive: Vec<u64> = (0..n)
                    .map(|s| (0..size).filter(|b| (b / 10) as usize % n == s).count() as u64)
                    .collect();
                assert_eq!(parts, naive, "{size} over {n}");
            }
        }
    }

    #[test]
    fn a_striped_file_reads_back_whole_and_in_any_range() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = dir.path().join("source");
        let data = bytes(10 * 1000 + 123);
        std::fs::write(&source, &data).expect("write");
        let roots: Vec<_> = (0..4).map(|i| dir.path().join(format!("s{i}"))).collect();
        let refs: Vec<&Path> = roots.iter().map(std::path::PathBuf::as_path).collect();
        stripe_file(&source, &refs, "a/b.bin", 1000).expect("stripe");
        let part0 = std::fs::read(roots[0].join("a/b.bin")).expect("part 0");
        assert_eq!(part0.len(), 3000, "stripes 0, 4, 8");
        assert_eq!(&part0[1000..2000], &data[4000..5000]);
        let servers = roots
            .iter()
            .map(|r| DirBackend::open(r).expect("open"))
            .collect();
        let striped = StripedBackend::new(servers, 1000).expect("striped");
        assert_eq!(
            striped.stat("a/b.bin").expect("stat").size,
            data.len() as u64
        );
        for (offset, len) in [
            (0, 10_123),
            (0, 1),
            (999, 2),
            (1500, 4000),
            (9999, 124),
            (10_000, 123),
        ] {
            let mut buf = vec![0u8; len];
            striped.read_at("a/b.bin", offset, &mut buf).expect("read");
            assert_eq!(
                buf,
                data[offset as usize..offset as usize + len],
                "{offset}+{len}"
            );
        }
        let mut out = Vec::new();
        assert!(!striped.list("", None, 10, &mut out).expect("list"));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].info.size, data.len() as u64);
    }

    #[test]
    fn inconsistent_or_missing_parts_are_errors_not_wrong_bytes() {
        let servers: Vec<MemoryBackend> = (0..3).map(|_| MemoryBackend::new()).collect();
        let at = SystemTime::UNIX_EPOCH;
        servers[0].put("k", vec![1; 10], at);
        servers[1].put("k", vec![2; 10], at);
        servers[2].put("k", vec![3; 4], at);
        servers[0].put("gap", vec![1; 10], at);
        servers[2].put("gap", vec![1; 10], at);
        servers[0].put("long", vec![1; 10], at);
        servers[1].put("long", vec![1; 12], at);
        let striped = StripedBackend::new(servers, 10).expect("striped");
        assert_eq!(striped.stat("k").expect("k").size, 24);
        let mut buf = [0u8; 24];
        striped.read_at("k", 0, &mut buf).expect("read");
        assert_eq!(buf[9..21], [1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3]);
        for key in ["gap", "long"] {
            assert_eq!(
                striped.stat(key).expect_err(key).kind,
                BackendErrorKind::Other
            );
        }
        assert_eq!(
            striped.stat("none").expect_err("none").kind,
            BackendErrorKind::NotFound
        );
        assert!(StripedBackend::<MemoryBackend>::new(vec![], 10).is_err());
    }

    #[test]
    fn a_read_across_servers_reads_them_in_parallel() {
        let servers: Vec<MemoryBackend> = (0..4).map(|_| MemoryBackend::new()).collect();
        for server in &servers {
            server.put("k", vec![5; 200], SystemTime::UNIX_EPOCH);
            server.set_delay(std::time::Duration::from_millis(150));
        }
        let striped = StripedBackend::new(servers, 100).expect("striped");
        let mut buf = vec![0u8; 800];
        let start = std::time::Instant::now();
        striped.read_at("k", 0, &mut buf).expect("read");
        let took = start.elapsed();
        // Two stripes on each of 4 servers: 2 × 150 ms, not 8 × 150 ms.
        assert!(took < std::time::Duration::from_millis(700), "{took:?}");
        assert!(buf.iter().all(|&b| b == 5));
        assert!(striped.servers().iter().all(|s| s.reads() == 2));
    }
}
