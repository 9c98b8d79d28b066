//! [`SpillBackend`]: the gateway's second level, a local SSD in front of any
//! backend, through the store's flash tier (`cairn_store::tier`), so that
//! what the DRAM cache drops is read back from flash rather than the origin,
//! and a restart finds the cache warm.
//!
//! The tier caches a block device by address; objects have names. So each
//! object version (key, size, modification time) is given a *span* of a
//! virtual backing device (2^60 bytes; [`VIRTUAL_BYTES`]): its size rounded
//! up to the span unit (the gateway's block size), at the next free
//! address, never reused. The virtual device ([`Origin`]) answers a read of
//! a span by reading the object from the backend, so the tier does all the
//! rest as it does for a volume: it looks blocks up, reads misses from the
//! origin, promotes them under its policy (S3-FIFO by default; no
//! sequential cutoff, since whole files are the point), reclaims buckets,
//! journals, checkpoints at a clean stop and recovers after a crash.
//!
//! A version's span is recorded in the map file ([`map`], beside the cache
//! device) and the record made durable before any block of it is read
//! through the tier: after a crash the map names every span the tier may
//! hold blocks of, and a span is never given to a second version. A changed
//! object (another size or time) gets a new span; its old blocks are never
//! read again and age out. The map names the tier it belongs to (the tier's
//! identity, made at format); a map that is missing, damaged or another
//! tier's makes the open format the tier afresh, since its blocks could no
//! longer be told apart.
//!
//! Inclusive by default: every block the DRAM cache reads from the backend
//! passes through the tier (a tier hit is served from flash, a miss from the
//! origin and promoted). The cache's readahead and single-flight sit above
//! it unchanged. The writes it makes are the tier's (promotions, journal);
//! nothing is ever written to the origin.
//!
//! Exclusive ([`SpillConfig::exclusive`]): the tier promotes no read miss
//! (`promote_reads` off) and holds only what the DRAM cache drops, handed
//! down by [`Backend::demote`] and put in by [`Tier::fill`]; a block the DRAM
//! cache reads from the tier leaves it ([`Tier::evict`]), so the two levels
//! hold different blocks and together hold their sum. A span's bytes never
//! change, so a crash that brings an evicted copy back brings back the
//! right bytes. A clean stop hands the DRAM cache's blocks down first
//! ([`FileCache::demote_all`](crate::FileCache::demote_all)), so a restart
//! is warm with both levels' blocks. Not promoting
//! ([`SpillConfig::promote`] off), a read the tier serves whole
//! ([`Tier::read_cached`]) for a cache above that asks by
//! [`Backend::read_kept`] stays on the SSD, and the cache above does not
//! take it: an SSD hit is a read and no write.

pub mod map;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use cairn_policy::PolicyConfig;
use cairn_store::device::{
    Claim, Device, DeviceError, DeviceOp, FileDevice, FileOptions, SharedDevice, check_range,
};
use cairn_store::stats::{Metric, MetricSink};
use cairn_store::tier::open::{self as tier_open, Probe};
use cairn_store::tier::{self, Tier};
use hashbrown::HashMap;

use self::map::{Entry, MapFile};
use super::{Backend, BackendError, BackendErrorKind, ListEntry, ObjectInfo};

/// Bytes of the virtual device the spans are cut from: every version ever
/// spilled gets a fresh span, and at one per gateway block size (256 KiB at
/// least) this is 2^42 of them.
pub const VIRTUAL_BYTES: u64 = 1 << 60;

/// What a spill is built from.
#[derive(Clone, Debug)]
pub struct SpillConfig {
    /// The cache device: a file (created or grown to `size`) or a block
    /// device.
    pub path: PathBuf,
    /// Create the file, or grow it, to this many bytes.
    pub size: Option<u64>,
    /// The map file; default `PATH.map`.
    pub map: Option<PathBuf>,
    /// The tier's block size, bytes (512 B – 64 KiB). Default 64 KiB.
    pub block_size: u32,
    /// The tier's replacement policy. Default S3-FIFO.
    pub policy: PolicyConfig,
    /// Span alignment, bytes: the gateway's block size.
    pub unit: u64,
    /// Open the cache device with `O_DIRECT`: what the spill holds is not
    /// held a second time in the page cache, so the gateway's memory is its
    /// DRAM cache. The tier's block size must then be a multiple of 4 KiB.
    pub direct: bool,
    /// Hold only what the DRAM cache drops, and let go of what it takes
    /// back (see the module docs). Default off (inclusive).
    pub exclusive: bool,
    /// Exclusive only: a block the DRAM cache reads from the SSD moves up
    /// into DRAM and leaves the SSD (true, the default), or is served from
    /// the SSD and stays there (false: DRAM takes blocks only from the
    /// origin, and an SSD hit costs no write).
    pub promote: bool,
}

impl SpillConfig {
    /// A spill on `path` for a gateway of `unit`-byte blocks, with the
    /// defaults.
    pub fn new(path: impl Into<PathBuf>, unit: u64) -> Self {
        Self {
            path: path.into(),
            size: None,
            map: None,
            block_size: 64 << 10,
            policy: tier::Options::default().policy,
            unit,
            direct: false,
            exclusive: false,
            promote: true,
        }
    }

    /// The tier's layout on the cache device.
    fn layout(&self) -> tier::Layout {
        tier::Layout {
            block_size: self.block_size,
            bucket_size: (self.block_size * 16).max(1 << 20),
            journal_blocks: 0,
        }
    }

    /// The smallest cache device on which this spill caches at least
    /// `bytes` (its metadata and the tier's overprovision beside them).
    pub fn device_bytes_for(&self, bytes: u64) -> u64 {
        tier_open::device_bytes_for(
            bytes.div_ceil(u64::from(self.block_size)),
            &self.layout(),
            tier::Options::default().overprovision,
        )
    }

    /// The map file's path.
    pub fn map_path(&self) -> PathBuf {
        self.map.clone().unwrap_or_else(|| {
            let mut name = self.path.as_os_str().to_os_string();
            name.push(".map");
            PathBuf::from(name)
        })
    }
}

/// One version's span, and the backend part that holds it.
struct Span {
    entry: Entry,
    part: AtomicU16,
}

/// Every live span, by key and by address.
#[derive(Default)]
struct Table {
    by_key: HashMap<String, Arc<Span>>,
    by_base: std::collections::BTreeMap<u64, Arc<Span>>,
}

/// What the spill and its virtual device share.
struct Spans {
    table: RwLock<Table>,
    /// The map file and the first free virtual byte (none until the tier
    /// is open); held while a new span is recorded, not while spans are
    /// looked up.
    map: Mutex<Option<(MapFile, u64)>>,
    unit: u64,
}

impl Spans {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(table: &mut Table, span: Arc<Span>) {
        if let Some(old) = table
            .by_key
            .insert(span.entry.key.clone(), Arc::clone(&span))
        {
            table.by_base.remove(&old.entry.base);
        }
        table.by_base.insert(span.entry.base, span);
    }

    /// The span of `key` as `info` describes it, recorded (durably) first
    /// if it is a new version.
    fn span(&self, key: &str, info: ObjectInfo, part: u16) -> Result<Arc<Span>, BackendError> {
        let same = |s: &Span| s.entry.size == info.size && s.entry.modified == info.modified;
        if let Some(s) = self.read().by_key.get(key)
            && same(s)
        {
            s.part.store(part, Ordering::Relaxed);
            return Ok(Arc::clone(s));
        }
        let mut guard = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = self.read().by_key.get(key)
            && same(s)
        {
            return Ok(Arc::clone(s));
        }
        let Some(map) = guard.as_mut() else {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!("{key}: the spill is still opening"),
            ));
        };
        let len = info.size.div_ceil(self.unit).max(1) * self.unit;
        let base = map.1;
        if base + len > VIRTUAL_BYTES {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "{key}: the spill's {VIRTUAL_BYTES}-byte address space is used up; \
                     delete its map file to start it afresh"
                ),
            ));
        }
        let entry = Entry {
            key: key.to_owned(),
            size: info.size,
            modified: info.modified,
            base,
            len,
        };
        if let Err(e) = map.0.append(&entry) {
            // The old version's span must not serve the new one: without a
            // span the key is read from the backend, bypassing the SSD.
            let mut table = self.write();
            if let Some(old) = table.by_key.remove(key) {
                table.by_base.remove(&old.entry.base);
            }
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!("{key}: spill map: {e}"),
            ));
        }
        map.1 = base + len;
        let span = Arc::new(Span {
            entry,
            part: AtomicU16::new(part),
        });
        Self::insert(&mut self.write(), Arc::clone(&span));
        Ok(span)
    }
}

/// The tier's backing device: the spans, each read from its object.
struct Origin {
    backend: Arc<dyn Backend>,
    spans: Arc<Spans>,
}

/// The kind of I/O error a backend error travels through the tier as.
fn io_kind(kind: BackendErrorKind) -> std::io::ErrorKind {
    match kind {
        BackendErrorKind::NotFound => std::io::ErrorKind::NotFound,
        BackendErrorKind::Forbidden => std::io::ErrorKind::PermissionDenied,
        BackendErrorKind::Timeout => std::io::ErrorKind::TimedOut,
        BackendErrorKind::Retryable => std::io::ErrorKind::ConnectionReset,
        BackendErrorKind::Other => std::io::ErrorKind::Other,
    }
}

/// A tier error as a backend error: the origin's, as it failed, else the
/// tier's own.
fn backend_error(key: &str, e: &DeviceError) -> BackendError {
    if let DeviceError::Io { source, device, .. } = e
        && device == ORIGIN
    {
        let kind = match source.kind() {
            std::io::ErrorKind::NotFound => BackendErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => BackendErrorKind::Forbidden,
            std::io::ErrorKind::TimedOut => BackendErrorKind::Timeout,
            std::io::ErrorKind::ConnectionReset => BackendErrorKind::Retryable,
            _ => BackendErrorKind::Other,
        };
        return BackendError::new(kind, source.to_string());
    }
    BackendError::new(BackendErrorKind::Other, format!("{key}: spill: {e}"))
}

/// How the virtual device names itself (and tells its errors apart).
const ORIGIN: &str = "the spill's origin";

impl Device for Origin {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, VIRTUAL_BYTES)?;
        let total = buf.len() as u64;
        let fail = |source: std::io::Error| DeviceError::Io {
            op: DeviceOp::Read,
            offset,
            len: total,
            device: ORIGIN.to_owned(),
            source,
        };
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let span = self
                .spans
                .read()
                .by_base
                .range(..=at)
                .next_back()
                .map(|(_, s)| Arc::clone(s))
                .filter(|s| at < s.entry.base + s.entry.len);
            let Some(span) = span else {
                // A span whose object changed while it was read: the
                // version being read is gone.
                return Err(fail(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    format!("byte {at} of the spill is no object's now (it changed while read)"),
                )));
            };
            let e = &span.entry;
            let within = at - e.base;
            let piece = ((e.base + e.len - at) as usize).min(buf.len() - done);
            let out = &mut buf[done..done + piece];
            let data = (e.size.saturating_sub(within) as usize).min(piece);
            if data > 0 {
                self.backend
                    .read_part(
                        span.part.load(Ordering::Relaxed),
                        &e.key,
                        within,
                        &mut out[..data],
                    )
                    .map_err(|b| fail(std::io::Error::new(io_kind(b.kind), b.message)))?;
            }
            out[data..].fill(0);
            done += piece;
        }
        Ok(())
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> Result<(), DeviceError> {
        Err(DeviceError::ReadOnly {
            op: DeviceOp::Write,
        })
    }

    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn discard(&self, _offset: u64, _len: u64) -> Result<(), DeviceError> {
        Ok(())
    }

    fn len(&self) -> u64 {
        VIRTUAL_BYTES
    }

    fn describe(&self) -> String {
        ORIGIN.to_owned()
    }
}

/// A spill that cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    /// The cache device.
    #[error("{path}: {message}")]
    Device {
        /// The cache device's path.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The map file.
    #[error(transparent)]
    Map(#[from] map::MapError),
}

/// What opening found: logged by the caller.
#[derive(Clone, Debug, Default)]
pub struct Opened {
    /// The tier was formatted, and why.
    pub formatted: Option<String>,
    /// Blocks cached after the open, and the objects the map names.
    pub cached_blocks: u64,
    /// Objects the map names.
    pub objects: usize,
    /// The last stop was clean.
    pub clean: bool,
    /// Journal records replayed (after a crash).
    pub replayed: u64,
}

/// A backend behind a flash tier. See the module docs.
pub struct SpillBackend {
    inner: Arc<dyn Backend>,
    tier: Tier,
    spans: Arc<Spans>,
    opened: Opened,
    closed: std::sync::atomic::AtomicBool,
    exclusive: bool,
    promote: bool,
    /// Reads served from the SSD and kept there (`promote` off).
    kept: AtomicU64,
}

impl SpillBackend {
    /// Opens (or formats) the spill `config` names in front of `inner`.
    pub fn open(inner: Arc<dyn Backend>, config: &SpillConfig) -> Result<Self, SpillError> {
        let cache: SharedDevice = Arc::new(
            FileDevice::open(
                &config.path,
                &FileOptions {
                    create_len: config.size,
                    direct: config.direct,
                    read_only: false,
                    claim: Claim::Exclusive,
                },
            )
            .map_err(|e| SpillError::Device {
                path: config.path.clone(),
                message: e.to_string(),
            })?,
        );
        Self::open_on(inner, &cache, config)
    }

    /// [`open`](Self::open) on a cache device already opened (a faulty one,
    /// in tests); `config.path` only names it and places the map.
    pub fn open_on(
        inner: Arc<dyn Backend>,
        cache: &SharedDevice,
        config: &SpillConfig,
    ) -> Result<Self, SpillError> {
        let unit = config.unit;
        let device_error = |message: String| SpillError::Device {
            path: config.path.clone(),
            message,
        };
        if !config.promote && !config.exclusive {
            return Err(device_error(
                "a spill that does not promote must be exclusive (an inclusive spill keeps \
                 what DRAM takes anyway): add `exclusive = true` (--spill-exclusive)"
                    .into(),
            ));
        }
        let map_path = config.map_path();
        let loaded = match map::load(&map_path) {
            Ok(loaded) => Ok(loaded),
            Err(e @ map::MapError::Damaged { .. }) => Err(e.to_string()),
            Err(e) => return Err(e.into()),
        };
        let spans = Arc::new(Spans {
            table: RwLock::new(Table::default()),
            map: Mutex::new(None),
            unit,
        });
        let backing: SharedDevice = Arc::new(Origin {
            backend: Arc::clone(&inner),
            spans: Arc::clone(&spans),
        });
        let want = tier_open::Want {
            layout: config.layout(),
            options: tier::Options {
                mode: tier::Mode::WriteAround,
                policy: config.policy.clone(),
                sequential_cutoff_bytes: 0,
                promote_reads: !config.exclusive,
                ..tier::Options::default()
            },
            marker: Some(with_suffix(&map_path, ".failed")),
        };
        let probe = tier_open::probe(&**cache).map_err(|e| device_error(e.to_string()))?;
        let stale = match (&probe, &loaded) {
            (Probe::Ours(_), Err(why)) => Some(format!("its map is damaged ({why})")),
            (Probe::Ours(_), Ok(None)) => Some(format!("it has no map ({})", map_path.display())),
            (Probe::Ours(sb), Ok(Some(l))) if l.cache_id != sb.cache_id => Some(format!(
                "its map ({}) belongs to another cache device",
                map_path.display()
            )),
            _ => None,
        };
        let opened_tier = match &stale {
            Some(_) => tier_open::format(Arc::clone(cache), backing, &want, true),
            None => tier_open::open_or_format(Arc::clone(cache), backing, &want),
        }
        .map_err(|e| device_error(e.to_string()))?;
        let recovered = opened_tier.recovered().clone();
        let mut opened = Opened {
            formatted: recovered.formatted.then(|| {
                stale.unwrap_or_else(|| {
                    if recovered.dropped_stale {
                        "its contents were stale (it had failed or been detached)".into()
                    } else {
                        "it was blank".into()
                    }
                })
            }),
            cached_blocks: recovered.cached,
            clean: recovered.clean,
            replayed: recovered.records,
            objects: 0,
        };
        // The map: rewritten with one record per key (the last), or
        // started afresh for a new tier.
        let (entries, floor) = match loaded {
            Ok(Some(l)) if !recovered.formatted => {
                let mut last: HashMap<String, Entry> = HashMap::new();
                let mut floor = l.floor;
                for e in l.entries {
                    floor = floor.max(e.base + e.len);
                    last.insert(e.key.clone(), e);
                }
                let mut entries: Vec<Entry> = last.into_values().collect();
                entries.sort_by_key(|e| e.base);
                (entries, floor)
            }
            _ => (Vec::new(), 0),
        };
        let floor = floor.div_ceil(unit) * unit;
        let file = MapFile::create(&map_path, opened_tier.cache_id(), floor, &entries)?;
        {
            let mut table = spans.write();
            for entry in entries {
                Spans::insert(
                    &mut table,
                    Arc::new(Span {
                        entry,
                        part: AtomicU16::new(0),
                    }),
                );
            }
            opened.objects = table.by_key.len();
        }
        *spans.map.lock().unwrap_or_else(PoisonError::into_inner) = Some((file, floor));
        Ok(Self {
            inner,
            tier: opened_tier,
            spans,
            opened,
            closed: std::sync::atomic::AtomicBool::new(false),
            exclusive: config.exclusive,
            promote: config.promote,
            kept: AtomicU64::new(0),
        })
    }

    /// What the open found.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The tier (its metrics, its geometry).
    pub fn tier(&self) -> &Tier {
        &self.tier
    }

    /// The tier, described.
    pub fn describe(&self) -> String {
        self.tier.describe()
    }

    /// A clean stop: the tier checkpoints, so the next open is warm at once.
    pub fn close(&self) -> Result<(), DeviceError> {
        self.closed.store(true, Ordering::Relaxed);
        self.tier.close()
    }

    /// Reads `key` through its span on the SSD tier, or with no span (its
    /// record could not be written when [`locate`](Backend::locate) opened
    /// it, which logged why) from the backend by `from_backend`: no second
    /// backend lookup or map append for every block of such a key; the next
    /// open tries to record it again. With `may_keep` (the cache above asks
    /// by [`Backend::read_kept`]) and a spill that does not promote, a read
    /// the SSD served whole stays there and `true` says so.
    fn read(
        &self,
        key: &str,
        offset: u64,
        buf: &mut [u8],
        may_keep: bool,
        from_backend: impl FnOnce(&mut [u8]) -> Result<(), BackendError>,
    ) -> Result<bool, BackendError> {
        let Some(span) = self.spans.read().by_key.get(key).map(Arc::clone) else {
            return from_backend(buf).map(|()| false);
        };
        if offset + buf.len() as u64 > span.entry.size {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "{key}: {} bytes at {offset} are past its {} bytes",
                    buf.len(),
                    span.entry.size
                ),
            ));
        }
        let at = span.entry.base + offset;
        let cached = self
            .tier
            .read_cached(buf, at)
            .map_err(|e| backend_error(key, &e))?;
        if !self.exclusive {
            return Ok(false);
        }
        if cached && may_keep && !self.promote {
            self.kept.fetch_add(1, Ordering::Relaxed);
            return Ok(true);
        }
        // The DRAM cache holds it now.
        self.let_go(key, &span, offset, buf.len() as u64);
        Ok(false)
    }

    /// Drops the tier's copy of `len` bytes of `span` at `offset`; the
    /// object's last block counts its span's padding, which no read asks for.
    fn let_go(&self, key: &str, span: &Span, offset: u64, len: u64) {
        let block = u64::from(self.tier.geometry().block_size);
        let end = (offset + len)
            .div_ceil(block)
            .saturating_mul(block)
            .min(span.entry.len);
        if offset >= end {
            return;
        }
        if let Err(e) = self.tier.evict(span.entry.base + offset, end - offset) {
            tracing::debug!("{key}: spill: {e}");
        }
    }

    /// With an exclusive spill, the span of `key` if it is the version
    /// `info` describes (a block of another version is not its to hold).
    fn exclusive_span(&self, key: &str, info: ObjectInfo) -> Option<Arc<Span>> {
        if !self.exclusive {
            return None;
        }
        let span = self.spans.read().by_key.get(key).map(Arc::clone)?;
        (span.entry.size == info.size && span.entry.modified == info.modified).then_some(span)
    }

    /// Whether this spill holds only what the cache above drops.
    pub fn exclusive(&self) -> bool {
        self.exclusive
    }

    /// Whether a block the cache above reads from the SSD moves up
    /// ([`SpillConfig::promote`]).
    pub fn promotes(&self) -> bool {
        self.promote
    }

    /// Reads served from the SSD and kept there (a spill that does not
    /// promote).
    pub fn kept(&self) -> u64 {
        self.kept.load(Ordering::Relaxed)
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

impl Backend for SpillBackend {
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
        self.locate(key).map(|(info, _)| info)
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        self.read(key, offset, buf, false, |buf| {
            self.inner.read_at(key, offset, buf)
        })
        .map(drop)
    }

    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError> {
        self.inner.list(prefix, after, max, out)
    }

    fn parts(&self) -> u16 {
        self.inner.parts()
    }

    fn locate(&self, key: &str) -> Result<(ObjectInfo, u16), BackendError> {
        let (info, part) = self.inner.locate(key)?;
        if let Err(e) = self.spans.span(key, info, part) {
            // A spill that cannot record spans (its map's disk full or
            // failing) passes reads to the backend; it never fails them.
            tracing::warn!("{e}; reading it from the backend, not the SSD");
        }
        Ok((info, part))
    }

    fn read_part(
        &self,
        part: u16,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        self.read(key, offset, buf, false, |buf| {
            self.inner.read_part(part, key, offset, buf)
        })
        .map(drop)
    }

    fn read_kept(
        &self,
        part: u16,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<bool, BackendError> {
        self.read(key, offset, buf, true, |buf| {
            self.inner.read_part(part, key, offset, buf)
        })
    }

    fn busy_ns(&self, part: u16) -> Option<u64> {
        self.inner.busy_ns(part)
    }

    fn takes_demotions(&self) -> bool {
        self.exclusive
    }

    fn demote(&self, key: &str, info: ObjectInfo, offset: u64, data: &[u8]) {
        let Some(span) = self.exclusive_span(key, info) else {
            return;
        };
        let e = &span.entry;
        let end = offset + data.len() as u64;
        if end > e.size {
            return;
        }
        let block = u64::from(self.tier.geometry().block_size);
        let filled = if (data.len() as u64).is_multiple_of(block) {
            self.tier.fill(e.base + offset, data)
        } else if end == e.size {
            // The object's last part, padded as its span is.
            let mut padded =
                vec![0u8; (data.len() as u64).div_ceil(block) as usize * block as usize];
            padded[..data.len()].copy_from_slice(data);
            self.tier.fill(e.base + offset, &padded)
        } else {
            return;
        };
        if let Err(e) = filled {
            tracing::debug!("{key}: spill: {e}");
        }
    }

    fn retract(&self, key: &str, info: ObjectInfo, offset: u64, len: u64) {
        if let Some(span) = self.exclusive_span(key, info) {
            self.let_go(key, &span, offset, len);
        }
    }

    fn metrics(&self, out: &mut Vec<Metric>) {
        let t = self.tier.metrics();
        let block = u64::from(self.tier.geometry().block_size);
        let mut m = MetricSink(out);
        m.counter(
            "spill_hits",
            t.hits,
            "spill blocks read from the SSD (the tier's block size)",
        );
        m.counter(
            "spill_misses",
            t.misses,
            "spill blocks read from the backend through the SSD tier",
        );
        m.counter(
            "spill_promotions",
            t.promotions,
            "blocks the SSD tier took in: on a miss, or (exclusive) as the DRAM cache dropped them",
        );
        m.counter(
            "spill_evictions",
            t.clean_evictions,
            "blocks the SSD tier's policy evicted to make room",
        );
        m.counter(
            "spill_taken",
            t.taken_blocks,
            "blocks an exclusive spill let go as the DRAM cache read them",
        );
        m.counter(
            "spill_kept",
            self.kept.load(Ordering::Relaxed),
            "reads a spill that does not promote served from the SSD and kept there",
        );
        m.gauge(
            "spill_cached_bytes",
            t.cached_blocks * block,
            "bytes the SSD tier holds now",
        );
        m.gauge(
            "spill_capacity_bytes",
            self.tier.capacity_blocks() * block,
            "bytes the SSD tier's policy may hold",
        );
        m.counter(
            "spill_errors",
            t.errors,
            "SSD errors (I/O errors, blocks failing their CRC)",
        );
        m.gauge(
            "spill_failed",
            u64::from(t.failed),
            "1 once SSD errors made the tier pass every read to the backend",
        );
        m.gauge(
            "spill_objects",
            self.spans.read().by_key.len() as u64,
            "object versions the spill's map names",
        );
    }
}

impl Drop for SpillBackend {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Relaxed) {
            let _ = self.tier.close();
        }
    }
}

#[cfg(test)]
mod tests;
