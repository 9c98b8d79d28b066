//! Volatile NV regions on `/dev/shm`: each beside an owner note naming
//! the data directory it was made for, so that the regions of volumes
//! deleted since can be found and removed.

use std::path::{Path, PathBuf};

/// The file beside a volatile region on `/dev/shm` naming the data
/// directory it belongs to.
pub(super) fn owner_file(region: &Path) -> PathBuf {
    let mut name = region.as_os_str().to_owned();
    name.push(".owner");
    PathBuf::from(name)
}

/// A volatile NV region on `/dev/shm` that Cairn made for a data directory
/// that no longer exists (deleted with its volume): RAM nobody will use again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrphanedRegion {
    /// The region file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// The data directory it was made for.
    pub owner: PathBuf,
}

impl OrphanedRegion {
    /// Removes the region and its owner note.
    pub fn remove(&self) -> std::io::Result<()> {
        let _ = std::fs::remove_file(owner_file(&self.path));
        std::fs::remove_file(&self.path)
    }
}

/// The volatile regions Cairn left on `/dev/shm` (`cairn-*.nv`) whose data
/// directory is gone and which no process holds. A region whose data
/// directory still exists is never listed: after a crash it holds that
/// volume's acknowledged writes until the next start recovers them.
pub fn orphaned_regions() -> Vec<OrphanedRegion> {
    orphaned_regions_in(Path::new("/dev/shm"))
}

fn orphaned_regions_in(dir: &Path) -> Vec<OrphanedRegion> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<OrphanedRegion> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension().is_some_and(|e| e == "nv")
                && path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("cairn-"))
        })
        .filter_map(|path| {
            let owner = std::fs::read_to_string(owner_file(&path)).ok()?;
            let owner = PathBuf::from(owner.trim_end());
            if owner.exists() || crate::device::holder(&path).is_some() {
                return None;
            }
            let bytes = std::fs::metadata(&path).ok()?.len();
            Some(OrphanedRegion { path, bytes, owner })
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::device::Claim;

    #[test]
    fn only_unheld_regions_of_vanished_data_directories_are_orphans() {
        let shm = tempfile::tempdir().unwrap();
        let live = tempfile::tempdir().unwrap();
        let region = |name: &str, owner: Option<&Path>| {
            let path = shm.path().join(name);
            std::fs::write(&path, vec![0u8; 4096]).unwrap();
            if let Some(owner) = owner {
                std::fs::write(owner_file(&path), format!("{}\n", owner.display())).unwrap();
            }
            path
        };
        let gone = region(
            "cairn-00000001-log.nv",
            Some(Path::new("/nonexistent/cairn-data")),
        );
        region("cairn-00000002-log.nv", Some(live.path()));
        region("cairn-00000003-log.nv", None);
        let held = region(
            "cairn-00000004-log.nv",
            Some(Path::new("/nonexistent/other")),
        );
        let holder = std::fs::File::open(&held).unwrap();
        crate::device::claim(&holder, &held, Claim::Exclusive).unwrap();
        region("other-file.nv", Some(Path::new("/nonexistent/x")));

        let found = orphaned_regions_in(shm.path());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, gone);
        assert_eq!(found[0].bytes, 4096);
        assert_eq!(found[0].owner, Path::new("/nonexistent/cairn-data"));
        found[0].remove().unwrap();
        assert!(!gone.exists() && !owner_file(&gone).exists());
        assert!(orphaned_regions_in(shm.path()).is_empty());
    }
}
