//! [`DirBackend`]: the files under a local directory as objects.
//!
//! Keys are checked by [`check_key`] and then opened relative to the root
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, so the kernel
//! refuses any path — through `..` or a symlink, including one swapped in
//! while we look — that would resolve outside the root. A symlink that stays
//! inside the root is followed. Only regular files are objects; a directory
//! is not found.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::{Backend, BackendError, BackendErrorKind, ListEntry, ObjectInfo, check_key};
use crate::limits::LIST_SCAN_MAX;

/// Objects that are the regular files below a directory.
#[derive(Debug)]
pub struct DirBackend {
    root_path: PathBuf,
    root: OwnedFd,
}

impl DirBackend {
    /// The files below `root`, which must be a directory.
    pub fn open(root: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", root.display())))?;
        Ok(Self {
            root_path: root.to_path_buf(),
            root: fd,
        })
    }

    /// The directory served.
    pub fn root(&self) -> &Path {
        &self.root_path
    }

    fn open_key(&self, key: &str) -> Result<File, BackendError> {
        check_key(key)?;
        let fd = rustix::fs::openat2(
            &self.root,
            key,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| errno_error(key, e))?;
        Ok(File::from(fd))
    }
}

fn errno_error(key: &str, errno: rustix::io::Errno) -> BackendError {
    let kind = match errno {
        rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::ISDIR => {
            BackendErrorKind::NotFound
        }
        // EXDEV: the path resolves outside the root (RESOLVE_BENEATH).
        rustix::io::Errno::XDEV | rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => {
            BackendErrorKind::Forbidden
        }
        rustix::io::Errno::AGAIN | rustix::io::Errno::INTR => BackendErrorKind::Retryable,
        _ => BackendErrorKind::Other,
    };
    BackendError::new(kind, format!("{key}: {errno}"))
}

fn io_error(key: &str, error: &io::Error) -> BackendError {
    match error.raw_os_error() {
        Some(raw) => errno_error(key, rustix::io::Errno::from_raw_os_error(raw)),
        None => BackendError::new(BackendErrorKind::Other, format!("{key}: {error}")),
    }
}

fn info_of(key: &str, file: &File) -> Result<ObjectInfo, BackendError> {
    let meta = file.metadata().map_err(|e| io_error(key, &e))?;
    if !meta.is_file() {
        return Err(BackendError::new(
            BackendErrorKind::NotFound,
            format!("{key}: not a regular file"),
        ));
    }
    Ok(ObjectInfo {
        size: meta.len(),
        modified: meta.modified().map_err(|e| io_error(key, &e))?,
    })
}

impl Backend for DirBackend {
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
        let file = self.open_key(key)?;
        info_of(key, &file)
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let file = self.open_key(key)?;
        file.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                BackendError::new(
                    BackendErrorKind::Other,
                    format!(
                        "{key}: shorter than {} bytes (changed while read)",
                        offset + buf.len() as u64
                    ),
                )
            } else {
                io_error(key, &e)
            }
        })
    }

    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError> {
        let mut keys = Vec::new();
        let mut scanned = 0usize;
        walk(&self.root_path, "", prefix, &mut keys, &mut scanned)?;
        keys.sort_unstable();
        let mut matched = keys
            .into_iter()
            .filter(|k| after.is_none_or(|a| k.as_str() > a))
            .peekable();
        let mut taken = 0;
        while taken < max {
            let Some(key) = matched.next() else {
                return Ok(false);
            };
            // Through openat2 like a read, so a symlink out of the root is
            // neither listed nor stat'ed.
            match self.stat(&key) {
                Ok(info) => {
                    out.push(ListEntry { key, info });
                    taken += 1;
                }
                Err(e)
                    if matches!(
                        e.kind,
                        BackendErrorKind::NotFound | BackendErrorKind::Forbidden
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(matched.peek().is_some())
    }
}

/// Collects the keys of the files below `dir` (whose key prefix is `base`)
/// that could start with `prefix`; descends only where `prefix` allows.
fn walk(
    dir: &Path,
    base: &str,
    prefix: &str,
    keys: &mut Vec<String>,
    scanned: &mut usize,
) -> Result<(), BackendError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_error(base, &e))?;
    for entry in entries {
        *scanned += 1;
        if *scanned > LIST_SCAN_MAX {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!("listing {prefix:?}: more than {LIST_SCAN_MAX} entries below the root"),
            ));
        }
        let entry = entry.map_err(|e| io_error(base, &e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue; // not UTF-8: no key can name it
        };
        let key = format!("{base}{name}");
        let file_type = entry.file_type().map_err(|e| io_error(&key, &e))?;
        if file_type.is_dir() {
            let below = format!("{key}/");
            if below.starts_with(prefix) || prefix.starts_with(&below) {
                walk(&entry.path(), &below, prefix, keys, scanned)?;
            }
        } else if key.starts_with(prefix) && check_key(&key).is_ok() {
            keys.push(key);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, DirBackend) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::write(root.join("top.bin"), b"0123456789").expect("write");
        std::fs::write(root.join("a/b/deep.txt"), b"deep").expect("write");
        std::fs::write(dir.path().join("secret"), b"outside").expect("write");
        std::os::unix::fs::symlink("../secret", root.join("escape")).expect("symlink");
        std::os::unix::fs::symlink("/etc/passwd", root.join("absolute")).expect("symlink");
        std::os::unix::fs::symlink("top.bin", root.join("inside")).expect("symlink");
        let backend = DirBackend::open(&root).expect("open");
        (dir, backend)
    }

    #[test]
    fn reads_stats_and_lists_inside_the_root() {
        let (_dir, backend) = tree();
        assert_eq!(backend.stat("top.bin").expect("stat").size, 10);
        let mut buf = [0u8; 4];
        backend.read_at("top.bin", 3, &mut buf).expect("read");
        assert_eq!(&buf, b"3456");
        backend
            .read_at("inside", 0, &mut buf)
            .expect("an inside symlink is followed");
        assert_eq!(&buf, b"0123");
        let short = backend
            .read_at("top.bin", 8, &mut buf)
            .expect_err("past the end");
        assert_eq!(short.kind, BackendErrorKind::Other);
        assert_eq!(
            backend.stat("a").expect_err("dir").kind,
            BackendErrorKind::NotFound
        );
        assert_eq!(
            backend.stat("nope").expect_err("absent").kind,
            BackendErrorKind::NotFound
        );
        let mut out = Vec::new();
        assert!(!backend.list("", None, 100, &mut out).expect("list"));
        let keys: Vec<_> = out.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["a/b/deep.txt", "inside", "top.bin"]);
        out.clear();
        assert!(backend.list("", None, 1, &mut out).expect("list"));
        assert_eq!(out[0].key, "a/b/deep.txt");
        out.clear();
        assert!(
            !backend
                .list("a/", Some("a/b/deep.txt"), 10, &mut out)
                .expect("list")
        );
        assert!(out.is_empty());
        out.clear();
        backend.list("a/b/d", None, 10, &mut out).expect("list");
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn nothing_outside_the_root_is_read() {
        let (_dir, backend) = tree();
        let mut buf = [0u8; 7];
        for key in [
            "escape",
            "absolute",
            "../secret",
            "/etc/passwd",
            "a/../../secret",
        ] {
            let error = backend.read_at(key, 0, &mut buf).expect_err(key);
            assert_eq!(error.kind, BackendErrorKind::Forbidden, "{key}: {error}");
            assert_eq!(
                backend.stat(key).expect_err(key).kind,
                BackendErrorKind::Forbidden
            );
        }
        assert_eq!(buf, [0; 7]);
    }
}
