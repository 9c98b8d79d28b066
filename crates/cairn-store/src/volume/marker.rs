//! Clean-stop markers: a file `<data_dir>/<log>.clean` written after a log
//! disk closed cleanly, naming the disk's id, and removed as soon as the
//! disk may take writes again. Found at the next open with the same id, it
//! says the disk stopped cleanly (nothing was lost with a missing NV cache).

use std::path::{Path, PathBuf};

/// The marker of log disk `name`.
pub(super) fn path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join(format!("{name}.clean"))
}

/// Records that the disk `id` closed cleanly.
pub(super) fn write(path: &Path, id: u64) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    writeln!(file, "cairn log disk {id:016x} closed cleanly")?;
    file.sync_all()?;
    sync_parent(path)
}

/// The id of the disk the marker says closed cleanly, if there is one.
pub(super) fn read(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let id = text.strip_prefix("cairn log disk ")?.split(' ').next()?;
    u64::from_str_radix(id, 16).ok()
}

/// Removes the marker (durably), if it is there.
pub(super) fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_parent(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_marker_names_the_disk_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let marker = path(dir.path(), "log");
        assert_eq!(read(&marker), None);
        write(&marker, 0x1234_5678_9abc_def0).unwrap();
        assert_eq!(read(&marker), Some(0x1234_5678_9abc_def0));
        remove(&marker).unwrap();
        assert_eq!(read(&marker), None);
        remove(&marker).unwrap();
    }
}
