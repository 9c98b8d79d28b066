//! What is on a device before we use it: ours (a magic we wrote), blank (never
//! written, or only zeroes), or someone else's data that formatting would
//! destroy.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

/// Bytes read per step when checking a range for zeroes.
const CHUNK: usize = 1 << 20;

/// Where a file first holds a non-zero byte, or `None` if it is blank: it has
/// no data at all (a sparse file, found with `SEEK_DATA`, so a large empty
/// file costs nothing) or only zeroes. A block device is judged by its first
/// MiB (reading a whole disk to decide would take minutes).
pub fn first_nonzero(path: &Path) -> std::io::Result<Option<u64>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let mut buf = vec![0u8; CHUNK];
    if meta.file_type().is_block_device() || meta.file_type().is_char_device() {
        let n = read_some(&file, &mut buf, 0)?;
        return Ok(nonzero_in(&buf[..n]).map(|i| i as u64));
    }
    let len = meta.len();
    let mut pos = 0u64;
    while pos < len {
        let start = match rustix::fs::seek(&file, rustix::fs::SeekFrom::Data(pos)) {
            Ok(start) => start,
            Err(rustix::io::Errno::NXIO) => return Ok(None),
            // No SEEK_DATA here: read everything from `pos`.
            Err(_) => pos,
        };
        let end = rustix::fs::seek(&file, rustix::fs::SeekFrom::Hole(start)).unwrap_or(len);
        let mut at = start;
        while at < end {
            let want = ((end - at) as usize).min(CHUNK);
            let n = read_some(&file, &mut buf[..want], at)?;
            if n == 0 {
                return Ok(None);
            }
            if let Some(i) = nonzero_in(&buf[..n]) {
                return Ok(Some(at + i as u64));
            }
            at += n as u64;
        }
        pos = end.max(start + 1);
    }
    Ok(None)
}

fn read_some(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    loop {
        match file.read_at(buf, at) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

fn nonzero_in(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b != 0)
}

/// The first `N` bytes of a file (zero-padded if shorter; `None` if missing).
pub fn head<const N: usize>(path: &Path) -> std::io::Result<Option<[u8; N]>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = [0u8; N];
    let mut got = 0;
    while got < N {
        match file.read(&mut out[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(out))
}

/// Whether `path` (or, for a file not there yet, its directory) is on a file
/// system whose contents are RAM: tmpfs or ramfs.
pub fn on_ram(path: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let probe = if path.exists() {
        path
    } else {
        match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    };
    rustix::fs::statfs(probe).is_ok_and(|s| {
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let kind = s.f_type as i64;
        kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
    })
}

/// A short printable sample of `bytes` (for "this is not ours" errors).
pub fn sample(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_and_zero_files_are_blank_and_data_is_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        assert_eq!(first_nonzero(&path).expect("missing"), None);
        let file = File::create(&path).expect("create");
        file.set_len(64 << 20).expect("sparse");
        assert_eq!(first_nonzero(&path).expect("sparse"), None);
        file.write_all_at(&[0u8; 8192], 1 << 20).expect("zeroes");
        assert_eq!(first_nonzero(&path).expect("zeroes"), None);
        file.write_all_at(&[0, 0, 7], (40 << 20) + 5).expect("data");
        assert_eq!(first_nonzero(&path).expect("data"), Some((40 << 20) + 7));
        assert_eq!(head::<4>(&path).expect("head"), Some([0; 4]));
    }
}
