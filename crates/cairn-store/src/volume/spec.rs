//! The volume spec: what `cairn serve --config FILE` reads (TOML; the format is
//! documented field by field in `docs/volumes.md`).
//!
//! A spec names devices in `[device.NAME]` tables, each of one `kind`; layers
//! (`throttled`, `striped`, `concat`, `log`, `cache`, `tier`) name the devices
//! they sit on (a tier two: `over` and `cache`), and
//! each `[[export]]` names the device at the top of its stack. Every device is
//! used exactly once (by one export or one layer), so no two stacks share
//! storage. Unknown fields are errors; sizes are [`Bytes`] (`4096`, `"64MiB"`).
//!
//! The types derive `serde::Deserialize` and `Serialize`; parsing TOML text is
//! the binary's job (this crate does not depend on a TOML parser).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cairn_policy::Bytes;
use serde::{Deserialize, Serialize};

use crate::logdisk::{CleanerPolicy, PartialSegments};
use crate::ntl::PersistenceRequest;

use super::named::name_or_table;
pub use super::named::{CachePolicy, CachePrefetch};

pub use crate::limits::{DEVICES_MAX, EXPORTS_MAX};

/// A whole spec: devices, and the exports that serve them.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    /// Where relative paths (files, NTL regions, NV caches off `/dev/shm`)
    /// live; created at open. A relative `data_dir` is relative to the
    /// directory of the spec file (the current directory for a spec given as
    /// text). Default `cairn-data`.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Where `cairn serve` listens (`unix:PATH` or `tcp:HOST:PORT`); default
    /// `unix:<data_dir>/cairn.sock`. `--listen` overrides it. Not used by the
    /// volume itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// TLS for `cairn serve` (`[tls]`); absent means off. `--tls` and
    /// `--tls-certificates` override it. Not used by the volume itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// `cairn serve`'s log level on stderr: `error`, `warn`, `info`,
    /// `debug`, `trace` or `off`, or `RUST_LOG`-style directives
    /// (`info,cairn_nbd=debug`); re-read on SIGHUP. Default `info`; `-q`,
    /// `-v` and `RUST_LOG` override it. Not used by the volume itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// The exports, in order; the first is also the default export (the one a
    /// client asking for the empty name gets). Empty only in a spec of
    /// `[[files]]` alone (checked by `validate`).
    #[serde(rename = "export", default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<ExportSpec>,
    /// The devices, by name.
    #[serde(rename = "device", default)]
    pub devices: BTreeMap<String, DeviceSpec>,
    /// File exports `cairn serve` runs beside the block exports, each on
    /// its own HTTP listener (`[[files]]`; [`FilesSpec`](super::FilesSpec)).
    /// Not used by the volume itself.
    #[serde(rename = "files", default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<super::FilesSpec>,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("cairn-data")
}

/// `[tls]`: how `cairn serve` offers TLS (`NBD_OPT_STARTTLS`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    /// `off` (default), `on` (clients may upgrade), or `require` (every
    /// option but STARTTLS and ABORT refused until TLS is up).
    #[serde(default)]
    pub mode: TlsModeSpec,
    /// Directory holding `server-cert.pem` and `server-key.pem` (and the
    /// `ca-cert.pem` clients check against); relative to the spec file's
    /// directory. Required unless `mode` is `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<PathBuf>,
    /// Clients must present a certificate signed by the directory's
    /// `ca-cert.pem` (nbdkit's `--tls-verify-peer`). Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify_peer: bool,
}

/// `[tls] mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsModeSpec {
    /// No TLS.
    #[default]
    Off,
    /// TLS offered, plaintext still served.
    On,
    /// TLS required.
    Require,
}

/// One NBD export: a name and the device at the top of its stack.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExportSpec {
    /// The name clients ask for (`nbd+unix:///NAME?socket=...`).
    pub name: String,
    /// The device at the top of the stack (a key of `[device]`).
    pub device: String,
    /// Shown by `nbdinfo --list`; default: the stack's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Serve read-only (default false): writes are refused (EPERM), and the
    /// export's whole stack is opened read-only — files `O_RDONLY` with a
    /// shared lock, a log disk recovered in memory, nothing written at start
    /// or stop. A spec whose exports are all read-only creates nothing, not
    /// even its data directory.
    #[serde(default)]
    pub read_only: bool,
}

/// One device, by kind.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DeviceSpec {
    /// A regular file or block device.
    File(FileSpec),
    /// DRAM; empty at every start.
    Memory(MemorySpec),
    /// Another device slowed to a latency and bandwidth.
    Throttled(ThrottledSpec),
    /// Devices striped round robin (RAID-0).
    Striped(StripedSpec),
    /// Devices laid end to end.
    Concat(ConcatSpec),
    /// The NVM translation layer over a memory-mapped region file.
    Ntl(NtlSpec),
    /// The log-structured disk over another device, with an optional NV write
    /// cache.
    Log(LogSpec),
    /// The DRAM read cache over another device.
    Cache(CacheSpec),
    /// A persistent cache tier: a cache device in front of a backing device.
    Tier(TierSpec),
    /// A log-structured volume whose segments are objects in an object
    /// store (S3 or a Ceph pool).
    Objects(Box<ObjectsSpec>),
}

impl DeviceSpec {
    /// The kind's name, as written in `kind = "..."`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::File(_) => "file",
            Self::Memory(_) => "memory",
            Self::Throttled(_) => "throttled",
            Self::Striped(_) => "striped",
            Self::Concat(_) => "concat",
            Self::Ntl(_) => "ntl",
            Self::Log(_) => "log",
            Self::Cache(_) => "cache",
            Self::Tier(_) => "tier",
            Self::Objects(_) => "objects",
        }
    }

    /// Whether the device keeps data in a file, region or block device (which
    /// the volume then claims, with its data directory).
    pub fn is_persistent(&self) -> bool {
        // A tier keeps its failure marker in the data directory.
        matches!(
            self,
            Self::File(_) | Self::Ntl(_) | Self::Log(_) | Self::Tier(_)
        ) || matches!(self, Self::Objects(o) if o.flush == ObjectsFlush::Local)
    }

    /// The devices this one sits on, in order.
    pub fn children(&self) -> Vec<&str> {
        self.references().into_iter().map(|(_, to)| to).collect()
    }

    /// The devices this one sits on, in order, each with the field that
    /// names it (`over`, `parts`, `cache`).
    pub fn references(&self) -> Vec<(&'static str, &str)> {
        match self {
            Self::File(_) | Self::Memory(_) | Self::Ntl(_) | Self::Objects(_) => Vec::new(),
            Self::Throttled(t) => vec![("over", t.over.as_str())],
            Self::Log(l) => vec![("over", l.over.as_str())],
            Self::Cache(c) => vec![("over", c.over.as_str())],
            Self::Tier(t) => vec![("over", t.over.as_str()), ("cache", t.cache.as_str())],
            Self::Striped(s) => s.parts.iter().map(|p| ("parts", p.as_str())).collect(),
            Self::Concat(c) => c.parts.iter().map(|p| ("parts", p.as_str())).collect(),
        }
    }
}

/// `kind = "file"`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    /// The file or block device; relative to `data_dir`.
    pub path: PathBuf,
    /// Create the file sparse, or grow it, to this size. Without it the file
    /// must exist and its size is the device's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Bytes>,
    /// Open with `O_DIRECT` (bypass the page cache). Default false.
    #[serde(default)]
    pub direct: bool,
}

/// `kind = "memory"`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// Size.
    pub size: Bytes,
}

/// A device speed preset for `kind = "throttled"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThrottleProfile {
    /// A 7,200 rpm disk: 8 ms per seek, 150 MB/s.
    Hdd,
    /// A SATA SSD: 80 µs per operation, 500 MB/s.
    Ssd,
}

/// `kind = "throttled"`: every operation costs `latency_us`, plus `seek_us`
/// when it does not continue the previous one, plus its length over
/// `bandwidth_mb_s`; the thread sleeps that long, one operation at a time.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottledSpec {
    /// The device slowed down.
    pub over: String,
    /// Start from a preset; the fields below override it. Without a preset
    /// every field defaults to 0 except `bandwidth_mb_s`, which is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ThrottleProfile>,
    /// Fixed cost of every operation, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
    /// Extra cost of a non-sequential operation, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seek_us: Option<f64>,
    /// Transfer rate, MB/s (10^6 bytes per second), positive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mb_s: Option<f64>,
}

/// `kind = "striped"`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StripedSpec {
    /// The devices, in stripe order (at least one).
    pub parts: Vec<String>,
    /// Stripe size; default 64KiB.
    #[serde(default = "default_stripe")]
    pub stripe: Bytes,
}

fn default_stripe() -> Bytes {
    Bytes(64 << 10)
}

/// `kind = "concat"`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConcatSpec {
    /// The devices, first to last (at least one).
    pub parts: Vec<String>,
}

/// How a persistent-memory region is made durable (serde form of
/// [`PersistenceRequest`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Persistence {
    /// Cache-line flushes on DAX mappings, `msync` otherwise.
    #[default]
    Auto,
    /// Force cache-line flushes.
    CacheLine,
    /// Force `msync`.
    Msync,
    /// No persistence work (benchmarks, eADR); not crash-safe otherwise.
    None,
}

impl From<Persistence> for PersistenceRequest {
    fn from(p: Persistence) -> Self {
        match p {
            Persistence::Auto => Self::Auto,
            Persistence::CacheLine => Self::CacheLine,
            Persistence::Msync => Self::Msync,
            Persistence::None => Self::None,
        }
    }
}

/// `kind = "ntl"`: byte-addressable persistent memory (a file on `/dev/shm`
/// or fs-DAX, or a device-DAX node) served as a block device with atomic
/// block writes.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NtlSpec {
    /// The region file; relative to `data_dir`. Default `<data_dir>/<name>.ntl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Bytes exported (a multiple of `block_size`).
    pub size: Bytes,
    /// Block size: the unit of atomic writes. Default 4KiB.
    #[serde(default = "default_block")]
    pub block_size: Bytes,
    /// Spare data blocks beyond `size` (each concurrent writer needs one).
    /// Default 256.
    #[serde(default = "default_spare")]
    pub spare_blocks: u64,
    /// How stores are made durable. Default `auto`.
    #[serde(default)]
    pub persistence: Persistence,
    /// Back an existing image on tmpfs or `/dev/shm` with 2 MiB pages at open
    /// (`MADV_COLLAPSE`), as DAX on real persistent memory does: random block
    /// access then misses the TLB far less. Default true.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub huge_pages: bool,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if signature
fn is_false(b: &bool) -> bool {
    !*b
}

fn default_true() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if signature
fn is_true(b: &bool) -> bool {
    *b
}

fn default_block() -> Bytes {
    Bytes(4096)
}

fn default_spare() -> u64 {
    256
}

/// The cleaner's victim choice (serde form of [`CleanerPolicy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cleaner {
    /// Fewest live blocks first (papers/003).
    #[default]
    Greedy,
    /// Rosenblum and Ousterhout's cost-benefit.
    CostBenefit,
    /// Cost-benefit, survivors written oldest first (hot/cold separation).
    AgeSort,
}

impl From<Cleaner> for CleanerPolicy {
    fn from(c: Cleaner) -> Self {
        match c {
            Cleaner::Greedy => Self::Greedy,
            Cleaner::CostBenefit => Self::CostBenefit,
            Cleaner::AgeSort => Self::AgeSort,
        }
    }
}

/// Partial segment handling (serde form of [`PartialSegments`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partial {
    /// The next write continues in the same segment.
    #[default]
    Append,
    /// A partial write closes its segment (the paper's LLD).
    Close,
}

impl From<Partial> for PartialSegments {
    fn from(p: Partial) -> Self {
        match p {
            Partial::Append => Self::Append,
            Partial::Close => Self::Close,
        }
    }
}

/// `kind = "log"`: the log-structured disk of papers/003.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[allow(clippy::struct_excessive_bools)] // one per switch of the log disk's options
pub struct LogSpec {
    /// The device the log is written to.
    pub over: String,
    /// Bytes exported (a multiple of `block_size`). Default: 80 % of the
    /// data blocks the device holds (the rest is the cleaner's room).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Bytes>,
    /// Block size, a power of two from 512 to 64KiB. Default 4KiB.
    #[serde(default = "default_block")]
    pub block_size: Bytes,
    /// Segment size, summary block included: a multiple of `block_size`.
    /// Default 512KiB (the paper's 128 blocks of 4 KiB).
    #[serde(default = "default_segment")]
    pub segment_size: Bytes,
    /// Victim choice. Default `greedy`.
    #[serde(default)]
    pub cleaner: Cleaner,
    /// Cleaning starts at this many free segments (at least 2). Default 2.
    #[serde(default = "default_clean_low")]
    pub clean_low_segments: u32,
    /// Cleaning stops at this many free segments; 0 = automatic. Default 0.
    #[serde(default)]
    pub clean_high_segments: u32,
    /// Destaging starts when this fraction of NV slots is dirty. Default 0.75.
    #[serde(default = "default_destage")]
    pub destage_threshold: f64,
    /// What a partial segment write does to its segment. Default `append`.
    #[serde(default)]
    pub partial_segments: Partial,
    /// Segment writes between checkpoints; 0 = automatic. Default 0.
    #[serde(default)]
    pub checkpoint_interval_segments: u64,
    /// A victim less live than this fraction is read live blocks only; 0
    /// reads every victim whole, 1 none. Default 0.25.
    #[serde(default = "default_live_read_below")]
    pub live_read_below: f64,
    /// Dead blocks a live-only read bridges to make one I/O of two runs.
    /// Default 2.
    #[serde(default = "default_live_read_gap")]
    pub live_read_gap: u32,
    /// Threads the cleaner reads victims with, 1 to 64, where its reads are
    /// not batched. Default 16.
    #[serde(default = "default_cleaner_read_threads")]
    pub cleaner_read_threads: u32,
    /// Issue each cleaner pass's reads as one batch where the device can
    /// (a file, through `io_uring`); false: on the reader threads. Default
    /// true.
    #[serde(default = "default_batch_reads")]
    pub batch_reads: bool,
    /// Destage segment writes (with an NV cache) or full segment buffers
    /// (without), cleaner writes and checkpoints on background writer
    /// threads. Default true.
    #[serde(default = "default_background_destage")]
    pub background_destage: bool,
    /// Threads of the background writer, 1 to 16: with 2, two segment
    /// writes are on the device at once (flushes stay barriers). Default 2.
    #[serde(default = "default_writer_threads")]
    pub writer_threads: u32,
    /// Clean in the background: the cleaner's reads overlap user writes
    /// (false: clean only synchronously, at the low watermark). Default true.
    #[serde(default = "default_background_clean")]
    pub background_clean: bool,
    /// Each segment names the next and each checkpoint the first, so
    /// recovery after a crash reads only the segments written since the
    /// checkpoint (false: it reads the first block of every segment).
    /// Default true.
    #[serde(default = "default_recovery_chain")]
    pub recovery_chain: bool,
    /// The non-volatile write cache; without it a flush writes a partial
    /// segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nv_cache: Option<NvCacheSpec>,
}

fn default_segment() -> Bytes {
    Bytes(512 << 10)
}

fn default_clean_low() -> u32 {
    2
}

fn default_destage() -> f64 {
    0.75
}

fn default_live_read_below() -> f64 {
    crate::logdisk::Options::default().live_read_below
}

fn default_live_read_gap() -> u32 {
    crate::logdisk::Options::default().live_read_gap
}

fn default_cleaner_read_threads() -> u32 {
    crate::logdisk::Options::default().cleaner_read_threads
}

fn default_batch_reads() -> bool {
    crate::logdisk::Options::default().batch_reads
}

fn default_writer_threads() -> u32 {
    crate::logdisk::Options::default().writer_threads
}

fn default_background_destage() -> bool {
    crate::logdisk::Options::default().background_destage
}

fn default_background_clean() -> bool {
    crate::logdisk::Options::default().background_clean
}

fn default_recovery_chain() -> bool {
    crate::logdisk::Options::default().chain
}

/// A log disk's `nv_cache` table.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NvCacheSpec {
    /// The region file. Default `<data_dir>/<name>.nv`: a file on the data
    /// directory's disk, made durable with `msync` before a write is
    /// acknowledged (or persistent memory, when the file is on fs-DAX). With
    /// `volatile = true`, `/dev/shm/cairn-<id>-<name>.nv` (`<id>` derived
    /// from the absolute `data_dir`, so two data directories never share one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The region may be RAM (tmpfs, `/dev/shm`): acknowledged writes then
    /// survive a crash of the server, but not a power loss, a kernel crash or
    /// a reboot. Default false: a region on RAM is refused, so that a FLUSH
    /// means what the operator was told. Set it for benchmarks, or for
    /// machines that keep that memory across crashes; the server says at
    /// every start that the cache is volatile, and removes the region at a
    /// clean stop.
    #[serde(default, skip_serializing_if = "is_false")]
    pub volatile: bool,
    /// Region size (header and slot table included). Default 64MiB.
    #[serde(default = "default_nv")]
    pub size: Bytes,
    /// How stores are made durable. Default `auto`.
    #[serde(default)]
    pub persistence: Persistence,
}

fn default_nv() -> Bytes {
    Bytes(64 << 20)
}

/// `kind = "cache"`: the DRAM read cache ([`BlockCache`](crate::cache::BlockCache))
/// over another device.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// The device cached.
    pub over: String,
    /// Capacity. Default 64MiB.
    #[serde(default = "default_cache_size")]
    pub size: Bytes,
    /// Cache block size, a power of two from 4KiB to 2MiB. Default 64KiB.
    #[serde(default = "default_cache_block")]
    pub block_size: Bytes,
    /// The replacement policy: a name (`"lru"`, `"s3fifo"`, `"ons"`, `"cost"`,
    /// ... with its defaults) or a table with the policy's parameters
    /// (`{ policy = "ons", threshold = 5 }`). Default `"lru"`.
    #[serde(default = "default_cache_policy")]
    pub policy: CachePolicy,
    /// What writes do to cached copies. Default `update`.
    #[serde(default)]
    pub write_mode: CacheWriteMode,
    /// How far past a sequential request to read ahead; 0 turns it off.
    /// Default 1MiB.
    #[serde(default = "default_readahead")]
    pub readahead: Bytes,
    /// What loads blocks ahead of their first read: `"readahead"` (the
    /// stream readahead above), or a prefetcher of `cairn sim --prefetch`
    /// (`"obl"`, `"pg"`, `"mithril"`, or a table with its parameters), which turns
    /// readahead off. Default `"readahead"`.
    #[serde(default)]
    pub prefetch: CachePrefetch,
    /// Number of shards (a power of two); 0 chooses from the core count.
    /// Default 0.
    #[serde(default)]
    pub shards: usize,
    /// Weight of each new service-time sample in a cost group's average, in
    /// [0, 1]; 0 keeps the costs the `cost` policy was configured with.
    /// Default 0.1.
    #[serde(default = "default_cost_smoothing")]
    pub cost_smoothing: f64,
}

fn default_cache_size() -> Bytes {
    Bytes(64 << 20)
}

fn default_cache_block() -> Bytes {
    Bytes(64 << 10)
}

fn default_cache_policy() -> CachePolicy {
    CachePolicy(cairn_policy::PolicyConfig::Lru(
        cairn_policy::lru::LruConfig::default(),
    ))
}

fn default_readahead() -> Bytes {
    Bytes(1 << 20)
}

fn default_cost_smoothing() -> f64 {
    0.1
}

/// Write handling (serde form of [`WriteMode`](crate::cache::WriteMode)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheWriteMode {
    /// Write through, then replace the cached copy.
    #[default]
    Update,
    /// Write through, then drop the cached copy.
    Invalidate,
    /// As `update`, and whole blocks written are cached.
    Allocate,
}

impl From<CacheWriteMode> for crate::cache::WriteMode {
    fn from(m: CacheWriteMode) -> Self {
        match m {
            CacheWriteMode::Update => Self::Update,
            CacheWriteMode::Invalidate => Self::Invalidate,
            CacheWriteMode::Allocate => Self::Allocate,
        }
    }
}

/// `kind = "objects"`: a log-structured volume in an object store
/// ([`ObjectDisk`](crate::objdisk::ObjectDisk)): segments and checkpoints
/// are immutable objects under `prefix`, one writer at a time by lease. The
/// store is an S3-compatible one (`backend = "s3"`, the default: `endpoint`,
/// `bucket`, keys from the environment variables named by `access_key_env`
/// and `secret_key_env`, never from the spec) or a Ceph pool through
/// librados (`backend = "rados"`: `ceph_conf`, `pool`, `client`,
/// `namespace`). A field of the other backend is an error.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectsSpec {
    /// The store: `"s3"` or `"rados"`. Default `"s3"`.
    #[serde(default)]
    pub backend: ObjectsBackend,
    /// (s3, required) The store's URL: `http://127.0.0.1:7480` (Ceph RGW),
    /// `https://…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// (s3, required) The bucket; it must exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// Key prefix of the volume's objects, ending in `/`. Default
    /// `volumes/<device name>/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// (s3) The SigV4 region. Default `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// (rados) The Ceph configuration (monitors, and the keyring where
    /// cephx is on); relative to `data_dir`. Default `/etc/ceph/ceph.conf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceph_conf: Option<PathBuf>,
    /// (rados, required) The pool; it must exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// (rados) The Ceph client id (`admin` is `client.admin`). Default
    /// `admin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// (rados) A namespace of the pool for the objects. Default: the pool's
    /// default namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The volume's size, to create it when the prefix holds none; without
    /// it the volume must exist. An existing volume of another size is
    /// refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Bytes>,
    /// Data bytes of a full segment object, to create the volume. Default
    /// 8MiB.
    #[serde(default = "default_object_size")]
    pub object_size: Bytes,
    /// Block size, to create the volume. Default 4KiB.
    #[serde(default = "default_block")]
    pub block_size: Bytes,
    /// Parallel uploads. Default 8.
    #[serde(default = "default_uploaders")]
    pub uploaders: usize,
    /// Bytes of sealed segment objects kept in DRAM until the store has
    /// them: past it, writers wait for uploads (back-pressure, up to
    /// `stall_timeout`). At least `object_size`; with `flush = "local"` the
    /// local write log must hold twice it and `object_size` (see
    /// [`ObjectsSpec::upload_queue_bytes`]). Default 256MiB, or what a
    /// smaller local write log allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_queue: Option<Bytes>,
    /// Segments between checkpoints. Default 64.
    #[serde(default = "default_checkpoint_every")]
    pub checkpoint_every: u64,
    /// (s3) Environment variable holding the access key. Default
    /// `AWS_ACCESS_KEY_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_env: Option<String>,
    /// (s3) Environment variable holding the secret key. Default
    /// `AWS_SECRET_ACCESS_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_env: Option<String>,
    /// Seconds one request may take (rados: also connecting to the
    /// cluster). Default 30.
    #[serde(default = "default_request_timeout")]
    pub request_timeout: u64,
    /// Seconds a failing request is retried (backoff with jitter) before
    /// it fails: a read then fails; an upload is tried again (after a
    /// pause) until the store answers, while writers wait. Default 120.
    #[serde(default = "default_retry_for")]
    pub retry_for: u64,
    /// Seconds a write or FLUSH waits for the store (room in the upload
    /// queue or the local write log, or its segments uploaded) before it
    /// fails (EIO); while the store takes nothing, later ones give up
    /// sooner. 0 = wait without limit. Default 120.
    #[serde(default = "default_stall_timeout")]
    pub stall_timeout: u64,
    /// Take the volume over from a server that holds its lease (crashed, or
    /// gone for good). That server's writes after the takeover are void.
    /// Default false.
    #[serde(default)]
    pub force_takeover: bool,
    /// Where a FLUSH is durable: `"local"` (in the local write log, a file
    /// under `data_dir`; the segments follow to the store) or `"remote"`
    /// (in the store). Default `"local"`.
    #[serde(default)]
    pub flush: ObjectsFlush,
    /// The local write log (`flush = "local"`), relative to `data_dir`.
    /// Default `<device name>.wlog`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_log: Option<PathBuf>,
    /// The local write log's size (created sparse). Writes wait when it is
    /// full of blocks not yet in the store. Default 1GiB.
    #[serde(default = "default_local_log_size")]
    pub local_log_size: Bytes,
    /// DRAM for 1 MiB chunks of segment objects read lately (a read that
    /// misses fetches its whole chunk). Default 256MiB; 0 = none.
    #[serde(default = "default_read_cache")]
    pub read_cache: Bytes,
    /// The local segment cache, relative to `data_dir`: whole segment
    /// objects, installed as they are uploaded, read instead of the store;
    /// kept across restarts. Default `<device name>.segcache`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_cache: Option<PathBuf>,
    /// The local segment cache's size (created sparse); 0 = none. Default
    /// 2GiB.
    #[serde(default = "default_local_cache_size")]
    pub local_cache_size: Bytes,
    /// The cleaner moves the live blocks of segments with at most this
    /// share of their blocks live, so they die whole and are deleted; in
    /// [0, 1), 0 = no cleaner (only wholly dead segments are deleted).
    /// Default 0.6 (LSVD's).
    #[serde(default = "default_clean_below")]
    pub clean_below: f64,
    /// Which segments the cleaner takes: `"greedy"` (at most `clean_below`
    /// live, the emptiest first), `"cost-benefit"` (LFS's `(1 − u)·age /
    /// (1 + u)`, at least that of a segment `clean_below` live and one
    /// volume-write old), or `"none"`. Default `"greedy"`.
    #[serde(default)]
    pub cleaner: ObjectsCleaner,
}

/// The object disk's cleaner (serde form of [`crate::objdisk::Cleaner`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectsCleaner {
    /// At most `clean_below` live, the emptiest first (LSVD's).
    #[default]
    Greedy,
    /// Rosenblum and Ousterhout's cost-benefit.
    CostBenefit,
    /// No cleaner.
    #[serde(rename = "none")]
    Off,
}

impl From<ObjectsCleaner> for crate::objdisk::Cleaner {
    fn from(c: ObjectsCleaner) -> Self {
        match c {
            ObjectsCleaner::Greedy => Self::Greedy,
            ObjectsCleaner::CostBenefit => Self::CostBenefit,
            ObjectsCleaner::Off => Self::Off,
        }
    }
}

fn default_clean_below() -> f64 {
    crate::objdisk::ObjectDiskOptions::default().clean_below
}

fn default_local_cache_size() -> Bytes {
    Bytes(2 << 30)
}

impl ObjectsSpec {
    /// The upload queue's bound in bytes: `upload_queue`, or 256 MiB; with
    /// `flush = "local"`, by default no more than the local write log holds
    /// with room to spare (`local_log_size` less a block, halved, less
    /// `object_size`, in whole objects: a flush of one block takes two
    /// blocks of the log, and the open segment is not in the queue), and
    /// never less than one object.
    pub fn upload_queue_bytes(&self) -> u64 {
        if let Some(q) = self.upload_queue {
            return q.get();
        }
        let default = crate::objdisk::ObjectDiskOptions::default().upload_queue;
        let object = self.object_size.get().max(1);
        match self.flush {
            ObjectsFlush::Remote => default,
            ObjectsFlush::Local => {
                let most = (self
                    .local_log_size
                    .get()
                    .saturating_sub(self.block_size.get())
                    / 2)
                .saturating_sub(object);
                default.min(most / object * object).max(object)
            }
        }
    }
}

fn default_stall_timeout() -> u64 {
    120
}

fn default_read_cache() -> Bytes {
    Bytes(crate::objdisk::ObjectDiskOptions::default().read_cache)
}

impl ObjectsSpec {
    /// The fields that belong to `backend` alone, each with whether it is
    /// set.
    pub fn backend_fields(&self, backend: ObjectsBackend) -> Vec<(&'static str, bool)> {
        match backend {
            ObjectsBackend::S3 => vec![
                ("endpoint", self.endpoint.is_some()),
                ("bucket", self.bucket.is_some()),
                ("region", self.region.is_some()),
                ("access_key_env", self.access_key_env.is_some()),
                ("secret_key_env", self.secret_key_env.is_some()),
            ],
            ObjectsBackend::Rados => vec![
                ("ceph_conf", self.ceph_conf.is_some()),
                ("pool", self.pool.is_some()),
                ("client", self.client.is_some()),
                ("namespace", self.namespace.is_some()),
            ],
        }
    }

    /// `region`, or its default.
    pub fn region(&self) -> &str {
        self.region.as_deref().unwrap_or("us-east-1")
    }

    /// `access_key_env`, or its default.
    pub fn access_key_env(&self) -> &str {
        self.access_key_env
            .as_deref()
            .unwrap_or("AWS_ACCESS_KEY_ID")
    }

    /// `secret_key_env`, or its default.
    pub fn secret_key_env(&self) -> &str {
        self.secret_key_env
            .as_deref()
            .unwrap_or("AWS_SECRET_ACCESS_KEY")
    }

    /// `ceph_conf`, or its default.
    pub fn ceph_conf(&self) -> &Path {
        self.ceph_conf
            .as_deref()
            .unwrap_or(Path::new("/etc/ceph/ceph.conf"))
    }

    /// `client`, or its default.
    pub fn client(&self) -> &str {
        self.client.as_deref().unwrap_or("admin")
    }
}

/// Which object store an object volume lives in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectsBackend {
    /// An S3-compatible store over HTTP(S) (Ceph RGW, MinIO, AWS).
    #[default]
    S3,
    /// A Ceph pool through librados (`librados.so.2`, loaded when used).
    Rados,
}

impl ObjectsBackend {
    /// The name written in `backend = "..."`.
    pub fn name(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Rados => "rados",
        }
    }
}

/// Where an object volume's FLUSH is durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectsFlush {
    /// In the local write log.
    #[default]
    Local,
    /// In the object store.
    Remote,
}

fn default_local_log_size() -> Bytes {
    Bytes(1 << 30)
}

fn default_object_size() -> Bytes {
    Bytes(u64::from(
        crate::objdisk::ObjectDiskOptions::default().object_size,
    ))
}

fn default_uploaders() -> usize {
    crate::objdisk::ObjectDiskOptions::default().uploaders
}

fn default_checkpoint_every() -> u64 {
    crate::objdisk::ObjectDiskOptions::default().checkpoint_every
}

fn default_request_timeout() -> u64 {
    30
}

fn default_retry_for() -> u64 {
    120
}

/// `kind = "tier"`: a persistent cache tier ([`Tier`](crate::tier::Tier)): a
/// cache device (an SSD, or a file on one) in front of a slower backing
/// device, as bcache or Open CAS. Its contents survive restarts and crashes.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TierSpec {
    /// The backing device: what clients see, and where every block ends up.
    pub over: String,
    /// The cache device: a device name, usually a file on the fast medium.
    /// Formatted when blank; a device holding anything else is refused.
    pub cache: String,
    /// The cache mode. Default `write-back`.
    #[serde(default)]
    pub mode: TierMode,
    /// The replacement policy, as for `kind = "cache"`: a name or a table
    /// of its parameters. Default `"s3fifo"`.
    #[serde(default = "default_tier_policy")]
    pub policy: CachePolicy,
    /// Which read misses are promoted into the cache: a filter name
    /// (`"always"`, `"nhit"`, `"frequency"`, `"bloom"`, `"size"`,
    /// `"probabilistic"`, `"size-probabilistic"`, `"adaptsize"`) or a table
    /// (`{ filter = "nhit", threshold = 3 }`). Default `"always"`.
    #[serde(default)]
    pub admission: Admission,
    /// A sequential stream (one request or several back to back) that reaches
    /// this length bypasses the cache from then on; 0 = off.
    /// Default 4MiB.
    #[serde(default = "default_sequential_cutoff")]
    pub sequential_cutoff: Bytes,
    /// Bytes per cached block, a power of two from 512 to 64KiB; fixed when
    /// the cache device is formatted. Default 4KiB.
    #[serde(default = "default_block")]
    pub block_size: Bytes,
    /// Bytes per bucket (filled in order, reclaimed whole): a multiple of
    /// `block_size`, at least two blocks, at most 1GiB; fixed when the cache
    /// device is formatted. Default 1MiB.
    #[serde(default = "default_bucket")]
    pub bucket_size: Bytes,
    /// Dirty data the background cleaner aims at, percent of the cache's
    /// capacity, 0 to 100 (write-back). Default 10.
    #[serde(default = "default_writeback_percent")]
    pub writeback_percent: u32,
    /// Share of the cache's slots kept out of the policy's capacity so that
    /// buckets can be reclaimed cheaply, in [0, 1) (at least 3 buckets).
    /// Default 0.1.
    #[serde(default = "default_overprovision")]
    pub overprovision: f64,
    /// Policy shards (0 or a power of two); 0 chooses from the core count.
    /// Default 0.
    #[serde(default)]
    pub shards: usize,
}

fn default_tier_policy() -> CachePolicy {
    CachePolicy(crate::tier::Options::default().policy)
}

fn default_sequential_cutoff() -> Bytes {
    Bytes(crate::tier::Options::default().sequential_cutoff_bytes)
}

fn default_bucket() -> Bytes {
    Bytes(u64::from(crate::tier::Layout::default().bucket_size))
}

fn default_writeback_percent() -> u32 {
    crate::tier::Options::default().writeback_percent
}

fn default_overprovision() -> f64 {
    crate::tier::Options::default().overprovision
}

/// A tier's cache mode (serde form of [`Mode`](crate::tier::Mode)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TierMode {
    /// Writes go to the cache device and the backing device.
    WriteThrough,
    /// Writes go to the cache device; a cleaner writes them back later.
    #[default]
    WriteBack,
    /// Writes go to the backing device (dropping cached copies); reads are
    /// cached.
    WriteAround,
    /// Nothing new is cached; dirty blocks are written back at the open and
    /// the cache is detached at a clean stop.
    PassThrough,
}

impl From<TierMode> for crate::tier::Mode {
    fn from(m: TierMode) -> Self {
        match m {
            TierMode::WriteThrough => Self::WriteThrough,
            TierMode::WriteBack => Self::WriteBack,
            TierMode::WriteAround => Self::WriteAround,
            TierMode::PassThrough => Self::PassThrough,
        }
    }
}

/// A tier's admission filter: written as a name (the filter with its
/// defaults) or a table of its parameters (`filter = "name"`); written back
/// as the name when it has its defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Admission(pub cairn_policy::AdmissionConfig);

impl Serialize for Admission {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let name = self.0.name();
        if cairn_policy::AdmissionConfig::default_for(name).as_ref() == Some(&self.0) {
            serializer.serialize_str(name)
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Admission {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        name_or_table(
            deserializer,
            "an admission filter name or a table with `filter = \"name\"` and its parameters",
            |name| {
                cairn_policy::AdmissionConfig::default_for(name)
                    .map(Admission)
                    .ok_or_else(|| {
                        format!(
                            "unknown admission filter `{name}` (known: {})",
                            cairn_policy::AdmissionConfig::NAMES.join(", ")
                        )
                    })
            },
            Admission,
        )
    }
}
