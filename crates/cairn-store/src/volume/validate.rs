//! Checking a spec before any file is touched: names, references (each
//! device used once, none left over), and each device's own fields, one
//! function per kind; and the configurations the checks and the builder
//! share (a cache's, a throttle's).

use std::sync::Arc;

use cairn_policy::Bytes;

use super::spec::{
    self, CacheSpec, DeviceSpec, LogSpec, NtlSpec, ThrottleProfile, ThrottledSpec, TierSpec,
    VolumeSpec,
};
use super::types::VolumeError;
use crate::cache::{CacheConfig, CacheError, Placement, SingleDevice};
use crate::device::{SECTOR, Throttle};
use crate::logdisk;

impl VolumeSpec {
    /// Checks names, references and sizes without touching any file; the
    /// error names the field.
    pub fn validate(&self) -> Result<(), VolumeError> {
        self.check_counts()?;
        for (name, device) in &self.devices {
            check_name(&format!("device.{name}"), name)?;
            check_device(name, device)?;
        }
        self.check_references()?;
        // A device nothing uses is a typo or a leftover: say so. (A cycle is
        // unreachable from the exports, so it shows up here too.)
        let reachable = self.reachable();
        if let Some(name) = self
            .devices
            .keys()
            .find(|n| !reachable.contains(n.as_str()))
        {
            return Err(VolumeError::new(
                format!("device.{name}"),
                "no export uses this device (directly or under a layer)",
            ));
        }
        Ok(())
    }

    /// At least one export, of blocks or of files; not more exports or
    /// devices than the limits.
    fn check_counts(&self) -> Result<(), VolumeError> {
        if self.exports.is_empty() && self.files.is_empty() {
            return Err(VolumeError::new(
                "export",
                "at least one [[export]] or [[files]] is needed",
            ));
        }
        if self.exports.len() > spec::EXPORTS_MAX {
            return Err(VolumeError::new(
                "export",
                format!(
                    "{} exports; at most {}",
                    self.exports.len(),
                    spec::EXPORTS_MAX
                ),
            ));
        }
        if self.devices.len() > spec::DEVICES_MAX {
            return Err(VolumeError::new(
                "device",
                format!(
                    "{} devices; at most {}",
                    self.devices.len(),
                    spec::DEVICES_MAX
                ),
            ));
        }
        Ok(())
    }

    /// Export names are valid and distinct; every reference resolves, and
    /// every device is used exactly once.
    fn check_references(&self) -> Result<(), VolumeError> {
        let mut used: std::collections::BTreeMap<String, String> =
            std::collections::BTreeMap::new();
        let mut refer = |by: String, to: &str| -> Result<(), VolumeError> {
            if !self.devices.contains_key(to) {
                return Err(VolumeError::new(
                    by,
                    format!("no device named {to:?} (define it as [device.{to}])"),
                ));
            }
            if let Some(first) = used.insert(to.to_owned(), by.clone()) {
                return Err(VolumeError::new(
                    by,
                    format!(
                        "device {to:?} is already used by {first}; a device belongs to one stack"
                    ),
                ));
            }
            Ok(())
        };
        for (index, export) in self.exports.iter().enumerate() {
            let field = format!("export[{index}]");
            if export.name.is_empty() || export.name.len() > 4096 || export.name.contains('\0') {
                return Err(VolumeError::new(
                    format!("{field}.name"),
                    "an export name is 1 to 4096 bytes without NUL",
                ));
            }
            if self.exports[..index].iter().any(|e| e.name == export.name) {
                return Err(VolumeError::new(
                    format!("{field}.name"),
                    format!("export name {:?} appears twice", export.name),
                ));
            }
            refer(format!("{field}.device"), &export.device)?;
        }
        for (name, device) in &self.devices {
            for (key, child) in device.references() {
                refer(format!("device.{name}.{key}"), child)?;
            }
        }
        Ok(())
    }

    /// The files opened `O_DIRECT` that some export reaches with no log
    /// disk or tier above them. Such a file takes only whole aligned 4 KiB
    /// units; a log disk and a tier make every read and write of the devices
    /// under them so, but an export, a DRAM cache (it passes writes through
    /// as they come), a throttle, stripes and a concatenation pass a client's
    /// offsets and lengths on. The volume puts an
    /// [`AligningDevice`](crate::device::AligningDevice) over each of these.
    pub(super) fn unaligned_direct_files(&self) -> std::collections::BTreeSet<&str> {
        let mut found = std::collections::BTreeSet::new();
        let mut stack: Vec<(&str, bool)> = self
            .exports
            .iter()
            .map(|e| (e.device.as_str(), false))
            .collect();
        while let Some((name, aligned)) = stack.pop() {
            let Some(device) = self.devices.get(name) else {
                continue;
            };
            match device {
                DeviceSpec::File(f) if f.direct && !aligned => {
                    found.insert(name);
                }
                DeviceSpec::Log(_) | DeviceSpec::Tier(_) => {
                    stack.extend(device.children().into_iter().map(|c| (c, true)));
                }
                _ => stack.extend(device.children().into_iter().map(|c| (c, aligned))),
            }
        }
        found
    }

    fn reachable(&self) -> std::collections::BTreeSet<&str> {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack: Vec<&str> = self.exports.iter().map(|e| e.device.as_str()).collect();
        while let Some(name) = stack.pop() {
            if seen.insert(name)
                && let Some(device) = self.devices.get(name)
            {
                stack.extend(device.children());
            }
        }
        seen
    }
}

fn check_name(field: &str, name: &str) -> Result<(), VolumeError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(VolumeError::new(
            field,
            format!("device name {name:?}: use 1 to 64 letters, digits, '-' or '_'"),
        ));
    }
    Ok(())
}

/// Checks one device's own fields (not its references).
fn check_device(name: &str, device: &DeviceSpec) -> Result<(), VolumeError> {
    let field = |f: &str| format!("device.{name}.{f}");
    match device {
        DeviceSpec::File(f) => f.size.map_or(Ok(()), |size| positive(&field("size"), size)),
        DeviceSpec::Memory(m) => positive(&field("size"), m.size),
        DeviceSpec::Throttled(t) => check_throttled(&field, t),
        DeviceSpec::Striped(s) => {
            check_parts(&field, &s.parts)?;
            positive(&field("stripe"), s.stripe)
        }
        DeviceSpec::Concat(c) => check_parts(&field, &c.parts),
        DeviceSpec::Ntl(n) => check_ntl(&field, n),
        DeviceSpec::Log(l) => check_log(&field, l),
        DeviceSpec::Cache(c) => cache_config(c, Arc::new(SingleDevice))
            .validate()
            .map(|_| ())
            .map_err(|e| cache_error(name, &e)),
        DeviceSpec::Tier(t) => check_tier(&field, t),
        DeviceSpec::Objects(o) => check_objects(&field, o),
    }
}

/// An object volume's geometry and where it lives (the store itself is
/// asked only at open).
fn check_objects(
    field: &dyn Fn(&str) -> String,
    o: &super::spec::ObjectsSpec,
) -> Result<(), VolumeError> {
    check_objects_backend(field, o)?;
    if !(0.0..1.0).contains(&o.clean_below) {
        return Err(VolumeError::new(
            field("clean_below"),
            format!(
                "{} is not a share in [0, 1) (0.6: clean segments at most 60 % live; 0: no cleaner)",
                o.clean_below
            ),
        ));
    }
    if o.prefix
        .as_ref()
        .is_some_and(|p| p.is_empty() || !p.ends_with('/') || p.starts_with('/'))
    {
        return Err(VolumeError::new(
            field("prefix"),
            "must end in / and not start with one (volumes/vm1/)",
        ));
    }
    let b = o.block_size.get();
    if !u32::try_from(b).is_ok_and(crate::codec::valid_block_size) {
        return Err(VolumeError::new(
            field("block_size"),
            format!("{} is not a power of two from 512 to 64KiB", o.block_size),
        ));
    }
    let obj = o.object_size.get();
    if !obj.is_multiple_of(b) || obj < b || obj > 1 << 30 {
        return Err(VolumeError::new(
            field("object_size"),
            format!(
                "{} is not a multiple of the block size {} up to 1GiB",
                o.object_size, o.block_size
            ),
        ));
    }
    if let Some(size) = o.size {
        positive(&field("size"), size)?;
        if !size.get().is_multiple_of(b) {
            return Err(VolumeError::new(
                field("size"),
                format!(
                    "{size} is not a multiple of the block size {}",
                    o.block_size
                ),
            ));
        }
    }
    if o.uploaders == 0 || o.uploaders > 256 {
        return Err(VolumeError::new(field("uploaders"), "must be 1 to 256"));
    }
    if o.request_timeout == 0 {
        return Err(VolumeError::new(
            field("request_timeout"),
            "must be at least 1 second",
        ));
    }
    check_upload_queue(field, o)
}

/// The upload queue holds one object at least, and the local write log has
/// room for everything not yet in the store: the queue and the open
/// segment, twice over (a flush of one block takes a header block and the
/// block), and its superblock.
fn check_upload_queue(
    field: &dyn Fn(&str) -> String,
    o: &super::spec::ObjectsSpec,
) -> Result<(), VolumeError> {
    let object = o.object_size.get();
    let queue = o.upload_queue_bytes();
    if queue < object {
        return Err(VolumeError::new(
            field("upload_queue"),
            format!(
                "{} is less than one segment object (object_size {})",
                Bytes(queue),
                o.object_size
            ),
        ));
    }
    if o.flush == super::spec::ObjectsFlush::Local {
        let need = queue
            .saturating_add(object)
            .saturating_mul(2)
            .saturating_add(o.block_size.get());
        if o.local_log_size.get() < need {
            let (name, what) = if o.upload_queue.is_some() {
                ("upload_queue", format!("{}", Bytes(queue)))
            } else {
                ("local_log_size", format!("{}", o.local_log_size))
            };
            return Err(VolumeError::new(
                field(name),
                format!(
                    "{what}: the local write log ({}) must hold twice the upload queue ({}) \
                     and a segment object ({}), and a block: at least {}; make the log larger \
                     or the queue smaller",
                    o.local_log_size,
                    Bytes(queue),
                    o.object_size,
                    Bytes(need)
                ),
            ));
        }
    }
    Ok(())
}

/// An object volume's store: the fields of its backend, none of the
/// other's, and names librados can take (C strings).
fn check_objects_backend(
    field: &dyn Fn(&str) -> String,
    o: &super::spec::ObjectsSpec,
) -> Result<(), VolumeError> {
    use super::spec::ObjectsBackend;
    let backend = o.backend;
    let other = match backend {
        ObjectsBackend::S3 => ObjectsBackend::Rados,
        ObjectsBackend::Rados => ObjectsBackend::S3,
    };
    if let Some((name, _)) = o.backend_fields(other).into_iter().find(|&(_, set)| set) {
        return Err(VolumeError::new(
            field(name),
            format!(
                "belongs to backend = \"{}\", and this device's backend is \"{}\"{}",
                other.name(),
                backend.name(),
                if backend == ObjectsBackend::S3 {
                    " (the default; set backend = \"rados\" for a Ceph pool)"
                } else {
                    ""
                }
            ),
        ));
    }
    let required = |name: &str, value: Option<&String>| match value {
        None => Err(VolumeError::new(
            field(name),
            format!("is required with backend = \"{}\"", backend.name()),
        )),
        Some(v) if v.is_empty() => Err(VolumeError::new(field(name), "is empty")),
        Some(_) => Ok(()),
    };
    // librados takes C strings.
    let no_nul = |name: &str, value: Option<&str>| {
        if value.is_some_and(|v| v.contains('\0')) {
            Err(VolumeError::new(field(name), "holds a NUL byte"))
        } else {
            Ok(())
        }
    };
    match backend {
        ObjectsBackend::S3 => {
            required("endpoint", o.endpoint.as_ref())?;
            let endpoint = o.endpoint.as_deref().unwrap_or_default();
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err(VolumeError::new(
                    field("endpoint"),
                    format!("{endpoint:?} is not an http:// or https:// URL"),
                ));
            }
            required("bucket", o.bucket.as_ref())?;
        }
        ObjectsBackend::Rados => {
            required("pool", o.pool.as_ref())?;
            no_nul("pool", o.pool.as_deref())?;
            if o.client.as_ref().is_some_and(String::is_empty) {
                return Err(VolumeError::new(
                    field("client"),
                    "is empty (omit it for admin)",
                ));
            }
            no_nul("client", o.client.as_deref())?;
            if o.namespace.as_ref().is_some_and(String::is_empty) {
                return Err(VolumeError::new(
                    field("namespace"),
                    "is empty (omit it for the pool's default namespace)",
                ));
            }
            no_nul("namespace", o.namespace.as_deref())?;
            if let Some(conf) = &o.ceph_conf {
                if conf.as_os_str().is_empty() {
                    return Err(VolumeError::new(field("ceph_conf"), "is empty"));
                }
                no_nul("ceph_conf", conf.to_str())?;
            }
        }
    }
    no_nul("prefix", o.prefix.as_deref())?;
    Ok(())
}

fn positive(field: &str, b: Bytes) -> Result<(), VolumeError> {
    if b.get() == 0 {
        Err(VolumeError::new(field, "must be more than 0 bytes"))
    } else {
        Ok(())
    }
}

fn check_parts(field: &dyn Fn(&str) -> String, parts: &[String]) -> Result<(), VolumeError> {
    if parts.is_empty() {
        return Err(VolumeError::new(
            field("parts"),
            "at least one part is needed",
        ));
    }
    Ok(())
}

fn check_throttled(field: &dyn Fn(&str) -> String, t: &ThrottledSpec) -> Result<(), VolumeError> {
    let th = throttle_of(t);
    if !(th.bandwidth_mb_s.is_finite() && th.bandwidth_mb_s > 0.0) {
        return Err(VolumeError::new(
            field("bandwidth_mb_s"),
            "a positive transfer rate in MB/s is needed (or a profile: \"hdd\", \"ssd\")",
        ));
    }
    for (f, v) in [("latency_us", th.op_us), ("seek_us", th.seek_us)] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(VolumeError::new(
                field(f),
                format!("{v} is not a time of 0 or more microseconds"),
            ));
        }
    }
    Ok(())
}

fn check_ntl(field: &dyn Fn(&str) -> String, n: &NtlSpec) -> Result<(), VolumeError> {
    let b = n.block_size.get();
    if !b.is_power_of_two() || !(SECTOR..=1 << 20).contains(&b) {
        return Err(VolumeError::new(
            field("block_size"),
            format!("{b} is not a power of two from 512 to 1MiB"),
        ));
    }
    if n.size.get() == 0 || !n.size.get().is_multiple_of(b) {
        return Err(VolumeError::new(
            field("size"),
            format!(
                "{} is not a positive multiple of the block size {}",
                n.size, n.block_size
            ),
        ));
    }
    if n.spare_blocks == 0 {
        return Err(VolumeError::new(
            field("spare_blocks"),
            "at least 1 spare block is needed (one per concurrent writer)",
        ));
    }
    Ok(())
}

/// A log disk's geometry, then its tunables.
fn check_log(field: &dyn Fn(&str) -> String, l: &LogSpec) -> Result<(), VolumeError> {
    let b = l.block_size.get();
    if !u32::try_from(b).is_ok_and(crate::codec::valid_block_size) {
        return Err(VolumeError::new(
            field("block_size"),
            format!("{b} is not a power of two from 512 to 64KiB"),
        ));
    }
    let s = l.segment_size.get();
    let max_blocks = logdisk::Geometry::max_entries(b as u32) + 1;
    if !s.is_multiple_of(b) || s / b < 2 || s / b > u64::from(max_blocks) {
        return Err(VolumeError::new(
            field("segment_size"),
            format!(
                "{} is not 2 to {max_blocks} blocks of {}",
                l.segment_size, l.block_size
            ),
        ));
    }
    if let Some(size) = l.size
        && (size.get() == 0 || !size.get().is_multiple_of(b))
    {
        return Err(VolumeError::new(
            field("size"),
            format!(
                "{size} is not a positive multiple of the block size {}",
                l.block_size
            ),
        ));
    }
    check_log_tunables(field, l)
}

fn check_log_tunables(field: &dyn Fn(&str) -> String, l: &LogSpec) -> Result<(), VolumeError> {
    if l.clean_low_segments < 2 {
        return Err(VolumeError::new(
            field("clean_low_segments"),
            "at least 2 (the cleaner needs a segment to write into)",
        ));
    }
    for (f, v) in [
        ("destage_threshold", l.destage_threshold),
        ("live_read_below", l.live_read_below),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return Err(VolumeError::new(
                field(f),
                format!("{v} is not a fraction from 0 to 1"),
            ));
        }
    }
    for (f, v, max) in [
        ("cleaner_read_threads", l.cleaner_read_threads, 64),
        ("writer_threads", l.writer_threads, 16),
    ] {
        if !(1..=max).contains(&v) {
            return Err(VolumeError::new(
                field(f),
                format!("{v} is not from 1 to {max}"),
            ));
        }
    }
    if let Some(nv) = &l.nv_cache
        && nv.size.get() < (1 << 20)
    {
        return Err(VolumeError::new(
            field("nv_cache.size"),
            format!("{} is too small; at least 1MiB", nv.size),
        ));
    }
    Ok(())
}

/// A tier's layout, then how it runs. The layout is what a blank cache
/// device is formatted with (the tier checks it again then).
fn check_tier(field: &dyn Fn(&str) -> String, t: &TierSpec) -> Result<(), VolumeError> {
    let b = t.block_size.get();
    if !u32::try_from(b).is_ok_and(crate::codec::valid_block_size) {
        return Err(VolumeError::new(
            field("block_size"),
            format!("{} is not a power of two from 512 to 64KiB", t.block_size),
        ));
    }
    let bucket = t.bucket_size.get();
    if !bucket.is_multiple_of(b) || bucket / b < 2 || bucket > 1 << 30 {
        return Err(VolumeError::new(
            field("bucket_size"),
            format!(
                "{} is not a multiple of the block size {}, at least 2 blocks and at most 1GiB",
                t.bucket_size, t.block_size
            ),
        ));
    }
    if t.writeback_percent > 100 {
        return Err(VolumeError::new(
            field("writeback_percent"),
            format!("{} is not a percentage from 0 to 100", t.writeback_percent),
        ));
    }
    if !(0.0..1.0).contains(&t.overprovision) {
        return Err(VolumeError::new(
            field("overprovision"),
            format!(
                "{} is not a fraction from 0 up to (not including) 1",
                t.overprovision
            ),
        ));
    }
    if t.shards != 0 && (!t.shards.is_power_of_two() || t.shards > crate::limits::SHARDS_MAX) {
        return Err(VolumeError::new(
            field("shards"),
            format!(
                "{} is not 0 (automatic) or a power of two up to {}",
                t.shards,
                crate::limits::SHARDS_MAX
            ),
        ));
    }
    check_tier_policy(field, t)
}

/// The tier's policy and admission filter build (with a nominal capacity of
/// 1024 blocks: a value out of range fails whatever the capacity).
fn check_tier_policy(field: &dyn Fn(&str) -> String, t: &TierSpec) -> Result<(), VolumeError> {
    let policy = &t.policy.0;
    if matches!(
        policy,
        cairn_policy::PolicyConfig::Opt(_) | cairn_policy::PolicyConfig::Dual(_)
    ) {
        return Err(VolumeError::new(
            field("policy"),
            "opt and dual need to know future requests (they are for `cairn sim`); choose \
             another policy, such as \"s3fifo\" or \"arc\"",
        ));
    }
    let capacity = cairn_policy::Capacity::Bytes(1024 * t.block_size.get());
    if let Err(e) = policy.build(capacity) {
        return Err(VolumeError::new(field("policy"), e.to_string()));
    }
    if let Err(e) = t.admission.0.validate() {
        return Err(VolumeError::new(field("admission"), e.to_string()));
    }
    Ok(())
}

/// The block cache configuration of a `kind = "cache"` spec.
pub(super) fn cache_config(c: &CacheSpec, placement: Arc<dyn Placement>) -> CacheConfig {
    CacheConfig {
        block_size_bytes: c.block_size.get(),
        capacity_bytes: c.size.get(),
        policy: c.policy.0.clone(),
        shards: c.shards,
        write_mode: c.write_mode.into(),
        readahead_bytes: c.readahead.get(),
        prefetch: c.prefetch.0.clone(),
        cost_smoothing: c.cost_smoothing,
        placement,
    }
}

/// A cache that cannot be built, as the spec field at fault.
pub(super) fn cache_error(name: &str, e: &CacheError) -> VolumeError {
    let field = match e {
        CacheError::BlockSize(_) => "block_size",
        CacheError::Shards(_) => "shards",
        CacheError::Capacity { .. } => "size",
        CacheError::Smoothing(_) => "cost_smoothing",
        CacheError::Policy(_) => "policy",
        CacheError::Prefetch(_) => "prefetch",
        _ => "over",
    };
    VolumeError::new(format!("device.{name}.{field}"), e.to_string())
}

pub(super) fn throttle_of(t: &ThrottledSpec) -> Throttle {
    let base = match t.profile {
        Some(ThrottleProfile::Hdd) => Throttle::hdd(),
        Some(ThrottleProfile::Ssd) => Throttle::ssd(),
        None => Throttle {
            op_us: 0.0,
            seek_us: 0.0,
            bandwidth_mb_s: 0.0,
        },
    };
    Throttle {
        op_us: t.latency_us.unwrap_or(base.op_us),
        seek_us: t.seek_us.unwrap_or(base.seek_us),
        bandwidth_mb_s: t.bandwidth_mb_s.unwrap_or(base.bandwidth_mb_s),
    }
}
