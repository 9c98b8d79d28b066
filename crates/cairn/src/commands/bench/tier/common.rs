//! What the parts of `cairn bench tier` share: scratch space, sizes, files,
//! volumes and the tier's counters.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Bytes free for us under `dir`.
pub(super) fn room(dir: &Path) -> u64 {
    rustix::fs::statvfs(dir).map_or(0, |s| s.f_bavail.saturating_mul(s.f_frsize))
}

/// A temporary directory for `need` bytes of scratch files whose speed does
/// not matter: on /dev/shm when it has room, else in `dir`.
pub(super) fn scratch(dir: &Path, need: u64) -> Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && room(shm) > need + (256 << 20)
        && let Ok(tmp) = tempfile::tempdir_in(shm)
    {
        return Ok(tmp);
    }
    tempfile::tempdir_in(dir).with_context(|| format!("temporary directory in {}", dir.display()))
}

/// "1 GiB", "64 MiB".
pub(super) fn size_text(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// The cache device that caches `cache` bytes of 4 KiB blocks with the
/// default layout and over-provisioning.
pub(super) fn cache_device_bytes(cache: u64) -> u64 {
    cairn_store::tier::open::device_bytes_for(
        cache / 4096,
        &cairn_store::tier::Layout::default(),
        0.1,
    )
}

/// A file device of `len` bytes at `path`, created (sparse) when missing.
pub(super) fn file(path: &Path, len: u64) -> Result<cairn_store::device::SharedDevice> {
    let device = cairn_store::device::FileDevice::open(
        path,
        &cairn_store::device::FileOptions {
            create_len: Some(len),
            ..cairn_store::device::FileOptions::default()
        },
    )
    .with_context(|| format!("creating {}", path.display()))?;
    Ok(std::sync::Arc::new(device))
}

/// Opens the volume of spec text `spec` (`origin` names it in errors).
pub(super) fn open(spec: &str, origin: &str) -> Result<cairn_store::Volume> {
    let spec = crate::volume_spec::parse(spec, origin)?;
    cairn_store::Volume::open(
        &spec,
        Path::new(""),
        &cairn_store::volume::OpenOptions::default(),
    )
    .with_context(|| format!("{origin}: opening the volume"))
}

/// The (first) tier of `volume`.
pub(super) fn the_tier(volume: &cairn_store::Volume) -> Result<&cairn_store::tier::Tier> {
    volume
        .tiers()
        .next()
        .map(|(_, tier)| tier)
        .context("the volume has no tier")
}

/// A path as a TOML string.
pub(super) fn toml_path(path: &Path) -> String {
    toml::Value::String(path.display().to_string()).to_string()
}

/// Read hits over reads between two snapshots of a tier's counters.
pub(super) fn hit_ratio(from: &cairn_store::tier::Metrics, to: &cairn_store::tier::Metrics) -> f64 {
    let hits = to.hits - from.hits;
    let all = hits + (to.misses - from.misses);
    if all == 0 {
        0.0
    } else {
        hits as f64 / all as f64
    }
}

/// The `cairn` binary, to run a part's child process.
pub(super) fn this_binary() -> Result<PathBuf> {
    std::env::current_exe().context("finding the cairn binary")
}
