//! Exclusive ownership of the files a volume opens.
//!
//! Two processes writing one disk image, one NV region or one data directory
//! lose data silently: each believes it alone knows which blocks are live,
//! each writes checkpoints over the other's. So every persistent object a
//! volume opens is *claimed* for as long as it is open:
//!
//! - files, NV regions and the data directory: `flock(2)`, exclusive for a
//!   writer, shared for a read-only opener. The lock belongs to the open file
//!   description, so it lasts exactly as long as the handle that took it
//!   (closing another handle to the same file — a probe of its first bytes —
//!   does not drop it, as it would a POSIX record lock), it is released by
//!   the kernel when the process dies however it dies, and a second open in
//!   the same process conflicts too (a spec naming one file twice).
//! - block devices: `O_EXCL` as well (the kernel then refuses a second
//!   exclusive opener and a device that is mounted), and the `flock` on the
//!   device node, which names the holder.
//!
//! A refused claim names the holder: the kernel lists every `flock` in
//! `/proc/locks` with the PID that took it, matched here by device and inode.
//! Read-only inspection (`cairn fsck`, `cairn inspect`) takes no lock; it asks
//! [`holder`] and says the image is in use.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::FlockOperation;

/// How a file is claimed when it is opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Claim {
    /// No lock (benchmarks and tools that own their files by other means).
    #[default]
    None,
    /// A shared lock: other readers may hold it too; a writer may not.
    Shared,
    /// An exclusive lock (and `O_EXCL` on a block device): nobody else.
    Exclusive,
}

/// A process holding a lock on a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its process ID.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`), when readable.
    pub command: Option<String>,
    /// Whether the lock is exclusive (a writer) rather than shared.
    pub exclusive: bool,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pid == std::process::id() {
            return write!(f, "this process (PID {})", self.pid);
        }
        write!(f, "PID {}", self.pid)?;
        if let Some(command) = &self.command {
            write!(f, " ({command})")?;
        }
        Ok(())
    }
}

/// Takes `claim` on `file` (opened from `path`) without waiting. A file held
/// in a conflicting way by anyone — another process, or another handle in this
/// one — is refused with [`io::ErrorKind::ResourceBusy`] and a message naming
/// the path and the holder.
pub fn claim(file: &File, path: &Path, claim: Claim) -> io::Result<()> {
    let operation = match claim {
        Claim::None => return Ok(()),
        Claim::Shared => FlockOperation::NonBlockingLockShared,
        Claim::Exclusive => FlockOperation::NonBlockingLockExclusive,
    };
    match rustix::fs::flock(file, operation) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let meta = file.metadata()?;
            Err(in_use(path, holders(&meta).first(), claim))
        }
        // A file system without flock support (some network mounts) cannot
        // be claimed; say so rather than serve it unprotected.
        Err(e) => Err(io::Error::new(
            io::Error::from(e).kind(),
            format!(
                "{}: cannot be locked for exclusive use ({e}); a volume must own its files",
                path.display()
            ),
        )),
    }
}

/// The error for a refused claim.
pub(crate) fn in_use(path: &Path, holder: Option<&Holder>, claim: Claim) -> io::Error {
    let who = holder.map_or_else(|| "another process".to_owned(), Holder::to_string);
    let advice = match (holder, claim) {
        (Some(h), _) if h.pid == std::process::id() => {
            "it is opened twice by this volume (two devices name the same file?)"
        }
        (_, Claim::Shared) => "it is being written; stop that server first",
        _ => {
            "a Cairn volume owns its files exclusively; stop that server first (read-only inspection with `cairn fsck`/`cairn inspect` stays allowed)"
        }
    };
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!("{} is in use by {who}: {advice}", path.display()),
    )
}

/// Who holds a lock on the file at `path` (`flock`, POSIX or OFD), writers
/// first; empty when nobody does or the path cannot be read.
pub fn holder(path: &Path) -> Option<Holder> {
    let meta = std::fs::metadata(path).ok()?;
    holders(&meta).into_iter().next()
}

fn holders(meta: &std::fs::Metadata) -> Vec<Holder> {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    let dev = meta.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev),
        meta.ino()
    );
    let mut found: Vec<Holder> = text
        .lines()
        .filter_map(|line| parse_lock_line(line, &id))
        .collect();
    found.sort_by_key(|h| !h.exclusive);
    found
}

/// One `/proc/locks` line (`1: FLOCK  ADVISORY  WRITE 4090 fe:00:5308770 0 EOF`)
/// on the file `id` (`major:minor:inode`), as its holder. Waiters (`-> ...`)
/// and OFD locks (PID -1) hold nothing nameable.
fn parse_lock_line(line: &str, id: &str) -> Option<Holder> {
    let mut fields = line.split_whitespace().skip(1);
    let kind = fields.next()?;
    if kind == "->" {
        return None;
    }
    let _mode = fields.next()?;
    let access = fields.next()?;
    let pid: u32 = fields.next()?.parse().ok()?;
    if fields.next()? != id {
        return None;
    }
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim_end().to_owned());
    Some(Holder {
        pid,
        command,
        exclusive: access == "WRITE",
    })
}

/// A data directory, claimed for the life of the value (the lock is on the
/// directory itself, so a read-only medium can be claimed too and nothing is
/// written into it).
#[derive(Debug)]
pub struct DirClaim {
    _dir: File,
}

impl DirClaim {
    /// Claims the directory `path`.
    pub fn take(path: &Path, how: Claim) -> io::Result<Self> {
        let dir = File::open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        claim(&dir, path, how).map_err(|e| {
            if e.kind() != io::ErrorKind::ResourceBusy {
                return e;
            }
            let who = holder(path).map_or_else(|| "another process".to_owned(), |h| h.to_string());
            io::Error::new(
                e.kind(),
                format!(
                    "{} is in use by {who}: another server is serving from it; stop that \
                     server first, or give this one a data directory of its own",
                    path.display()
                ),
            )
        })?;
        Ok(Self { _dir: dir })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_second_exclusive_claim_is_refused_naming_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        std::fs::write(&path, b"x").unwrap();
        let first = File::open(&path).unwrap();
        claim(&first, &path, Claim::Exclusive).unwrap();
        let second = File::open(&path).unwrap();
        let err = claim(&second, &path, Claim::Exclusive).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ResourceBusy);
        let text = err.to_string();
        assert!(
            text.contains(&format!("PID {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains("image"), "{text}");
        assert!(claim(&second, &path, Claim::Shared).is_err());
        assert_eq!(holder(&path).unwrap().pid, std::process::id());
        assert!(holder(&path).unwrap().exclusive);
        drop(first);
        claim(&second, &path, Claim::Exclusive).unwrap();
    }

    #[test]
    fn shared_claims_coexist_and_keep_a_writer_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        std::fs::write(&path, b"x").unwrap();
        let a = File::open(&path).unwrap();
        let b = File::open(&path).unwrap();
        claim(&a, &path, Claim::Shared).unwrap();
        claim(&b, &path, Claim::Shared).unwrap();
        let c = File::open(&path).unwrap();
        assert!(claim(&c, &path, Claim::Exclusive).is_err());
        assert!(!holder(&path).unwrap().exclusive);
    }

    #[test]
    fn closing_another_handle_keeps_the_claim() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        std::fs::write(&path, b"x").unwrap();
        let held = File::open(&path).unwrap();
        claim(&held, &path, Claim::Exclusive).unwrap();
        drop(File::open(&path).unwrap());
        let other = File::open(&path).unwrap();
        assert!(claim(&other, &path, Claim::Exclusive).is_err());
    }

    #[test]
    fn directories_are_claimed() {
        let dir = tempfile::tempdir().unwrap();
        let _held = DirClaim::take(dir.path(), Claim::Exclusive).unwrap();
        let err = DirClaim::take(dir.path(), Claim::Exclusive).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ResourceBusy);
    }

    #[test]
    fn lock_lines_parse() {
        let id = "fe:00:5308770";
        let h = parse_lock_line("2: FLOCK  ADVISORY  WRITE 2261 fe:00:5308770 0 EOF", id).unwrap();
        assert_eq!((h.pid, h.exclusive), (2261, true));
        assert!(
            parse_lock_line("2: -> FLOCK  ADVISORY  WRITE 4090 fe:00:5308770 0 EOF", id).is_none()
        );
        assert!(
            parse_lock_line("1: FLOCK  ADVISORY  READ 4090 fe:00:10051587 0 EOF", id).is_none()
        );
        assert!(parse_lock_line("3: OFDLCK ADVISORY  WRITE -1 fe:00:5308770 0 EOF", id).is_none());
        assert!(parse_lock_line("garbage", id).is_none());
    }
}
