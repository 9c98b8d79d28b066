//! `[[files]]`: file exports `cairn serve --config` runs beside the volume's
//! block exports — the file gateway (`crates/cairn-files`) over directories
//! or origins, each on its own HTTP listener. The volume itself does not use
//! them (as `listen` and `[tls]`); `cairn serve` builds each one exactly as
//! its `--files` flags would (`docs/files.md`), fields for flags.

use std::path::PathBuf;

use cairn_policy::Bytes;
use serde::{Deserialize, Serialize};

use super::named::CachePolicy;

/// One `[[files]]` table.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSpec {
    /// The bucket: requests are `/NAME/KEY` (`--export`).
    pub name: String,
    /// What it serves, each as `--files` takes it: a directory (relative to
    /// `data_dir`), several separated by commas (striped), or an origin URL
    /// (`http://…`, `https://…`, `s3://BUCKET`); several are a union, first
    /// first.
    pub source: Vec<String>,
    /// Where it listens: `tcp:HOST:PORT` (`--listen`; each file export has
    /// its own).
    pub listen: String,
    /// The cache block (`--block-size`). Default 1 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<Bytes>,
    /// The DRAM cache's capacity (`--cache-size`). Default 256 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<Bytes>,
    /// The replacement policy, a name or a table of its parameters
    /// (`--policy`). Default `"ons"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<CachePolicy>,
    /// Connections at once (`--connections-max`). Default 256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections_max: Option<usize>,
    /// Each source slowed, `OP,BANDWIDTH` or `none` (`--throttle`): one for
    /// all, or one per source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttle: Vec<String>,
    /// How long the backend's answer for an object is trusted
    /// (`--revalidate`, e.g. `"500ms"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revalidate: Option<String>,
    /// papers/001's readahead, stripes (`--prefetch-stripes`). Default 0.
    #[serde(default)]
    pub prefetch_stripes: u64,
    /// A second level on a local SSD (`--spill`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill: Option<SpillSpec>,
}

/// `[files.spill]`: the SSD level of a file export's cache.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpillSpec {
    /// The cache file or block device, relative to `data_dir` (`--spill`).
    pub path: PathBuf,
    /// Create the file, or grow it, to this size (`--spill-size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Bytes>,
    /// Its map file (`--spill-map`). Default `PATH.map`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<PathBuf>,
    /// The SSD tier's policy (`--spill-policy`). Default `"s3fifo"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<CachePolicy>,
    /// Open it with `O_DIRECT` (`--spill-direct`). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
    /// Hold only what the DRAM cache drops (`--spill-exclusive`). Default
    /// false: inclusive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
    /// Exclusive only: a block DRAM reads from the SSD moves up (true), or
    /// is served from the SSD and stays there (false, `--spill-no-promote`).
    /// Default true.
    #[serde(default = "promotes", skip_serializing_if = "Clone::clone")]
    pub promote: bool,
}

fn promotes() -> bool {
    true
}
