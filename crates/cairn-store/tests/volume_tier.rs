//! Volumes with a cache tier (`kind = "tier"`): the spec's fields parse,
//! validate and name themselves in errors; a tier formats its cache device,
//! closes cleanly and reopens warm; dropped without a close it recovers its
//! data and warns; a cache device holding anything else is refused with
//! nothing written; a failure marker makes the next open start afresh;
//! pass-through writes every dirty block back and detaches the cache at the
//! stop; and a tier stacks with the other kinds (a DRAM cache over it, it
//! over a log disk, over a throttled device, over a file).
#![allow(clippy::unwrap_used)]

mod common;

use common::volume::{open, parse, parse_error};

use cairn_store::Device;
use cairn_store::tier::open::{Probe, probe};
use cairn_store::volume::{DeviceSpec, OpenOptions, TierMode, Volume, VolumeSpec};
use cairn_store::{FileDevice, device::FileOptions};

/// A tier over a 16 MiB file, its cache an 8 MiB file (64 KiB buckets),
/// with `extra` lines in its table.
fn tier_spec(extra: &str) -> VolumeSpec {
    parse(&tier_text(&format!("bucket_size = \"64KiB\"\n{extra}")))
}

/// The text of [`tier_spec`], without its bucket size.
fn tier_text(extra: &str) -> String {
    format!(
        r#"
        data_dir = "data"
        [[export]]
        name = "disk"
        device = "tier"

        [device.tier]
        kind = "tier"
        over = "hdd"
        cache = "ssd"
        {extra}

        [device.ssd]
        kind = "file"
        path = "ssd.img"
        size = "8MiB"

        [device.hdd]
        kind = "file"
        path = "hdd.img"
        size = "16MiB"
        "#
    )
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

fn device(volume: &Volume) -> &dyn Device {
    volume.exports()[0].device.as_ref()
}

fn read(volume: &Volume, at: u64, len: usize) -> Vec<u8> {
    let mut back = vec![0u8; len];
    device(volume).read_at(&mut back, at).unwrap();
    back
}

fn notes(volume: &Volume) -> String {
    volume.notes().join("\n")
}

fn warnings(volume: &Volume) -> String {
    volume.warnings().join("\n")
}

fn tier(volume: &Volume) -> &cairn_store::tier::Tier {
    volume.tiers().next().unwrap().1
}

#[test]
fn tier_spec_fields_have_defaults_round_trip_and_name_themselves_in_errors() {
    let spec = tier_spec("");
    spec.validate().unwrap();
    let DeviceSpec::Tier(t) = &spec.devices["tier"] else {
        panic!("not a tier")
    };
    assert_eq!(t.mode, TierMode::WriteBack);
    assert_eq!(
        t.policy.0,
        cairn_policy::PolicyConfig::default_for("s3fifo").unwrap()
    );
    assert_eq!(t.admission.0, cairn_policy::AdmissionConfig::default());
    assert_eq!(
        (
            t.sequential_cutoff.get(),
            t.block_size.get(),
            t.bucket_size.get()
        ),
        (4 << 20, 4096, 64 << 10)
    );
    assert_eq!(
        (t.writeback_percent, t.overprovision, t.shards),
        (10, 0.1, 0)
    );
    // Admission: a name, or a table; written back as the name when it has
    // its defaults.
    let named = tier_spec("admission = \"nhit\"\nmode = \"write-around\"");
    let DeviceSpec::Tier(n) = &named.devices["tier"] else {
        unreachable!()
    };
    assert_eq!(
        n.admission.0,
        cairn_policy::AdmissionConfig::default_for("nhit").unwrap()
    );
    let text = toml::to_string(&named).unwrap();
    assert!(text.contains("admission = \"nhit\""), "{text}");
    assert!(text.contains("mode = \"write-around\""), "{text}");
    assert_eq!(parse(&text), named);
    let table = tier_spec("admission = { filter = \"nhit\", threshold = 3 }");
    let DeviceSpec::Tier(n) = &table.devices["tier"] else {
        unreachable!()
    };
    assert_eq!(n.admission.0.name(), "nhit");
    assert!(format!("{:?}", n.admission.0).contains("threshold: 3"));
    let text = toml::to_string(&table).unwrap();
    assert_eq!(parse(&text), table, "{text}");

    // Mistakes the parser sees.
    let missing = parse_error(&tier_text("").replace("cache = \"ssd\"", ""));
    assert!(missing.contains("missing field `cache`"), "{missing}");
    for (extra, says) in [
        ("mode = \"write-sometimes\"", "write-sometimes"),
        (
            "admission = \"lottery\"",
            "unknown admission filter `lottery`",
        ),
        ("admission = { filter = \"nhit\", bogus = 1 }", "bogus"),
        ("policy = \"nosuch\"", "unknown policy `nosuch`"),
        ("colour = 1", "colour"),
        ("sequential_cutoff = \"4 lots\"", "4 lots"),
    ] {
        let error = parse_error(&tier_text(extra));
        assert!(error.contains(says), "{extra}: {error}");
    }

    // Mistakes the validation sees, each naming its field.
    for (extra, field, says) in [
        (
            "block_size = \"3KiB\"",
            "device.tier.block_size",
            "power of two",
        ),
        (
            "block_size = \"128KiB\"",
            "device.tier.block_size",
            "power of two",
        ),
        (
            "bucket_size = \"6KiB\"",
            "device.tier.bucket_size",
            "multiple",
        ),
        (
            "bucket_size = \"4KiB\"",
            "device.tier.bucket_size",
            "at least 2 blocks",
        ),
        (
            "writeback_percent = 101",
            "device.tier.writeback_percent",
            "0 to 100",
        ),
        (
            "overprovision = 1.0",
            "device.tier.overprovision",
            "fraction",
        ),
        (
            "overprovision = -0.5",
            "device.tier.overprovision",
            "fraction",
        ),
        ("shards = 3", "device.tier.shards", "power of two"),
        ("policy = \"opt\"", "device.tier.policy", "future"),
        (
            "policy = { policy = \"ons\", threshold = 0 }",
            "device.tier.policy",
            "threshold",
        ),
        (
            "admission = { filter = \"nhit\", threshold = 0 }",
            "device.tier.admission",
            "threshold",
        ),
    ] {
        let error = parse(&tier_text(extra)).validate().unwrap_err();
        assert_eq!(error.field, field, "{extra}: {error}");
        assert!(error.message.contains(says), "{extra}: {error}");
    }

    // References: both `over` and `cache` name devices, each used once.
    let base = tier_text("");
    let error = parse(&base.replace("cache = \"ssd\"", "cache = \"nvme\""))
        .validate()
        .unwrap_err();
    assert_eq!(error.field, "device.tier.cache", "{error}");
    assert!(
        error.message.contains("no device named \"nvme\""),
        "{error}"
    );
    let error = parse(&base.replace("cache = \"ssd\"", "cache = \"hdd\""))
        .validate()
        .unwrap_err();
    // `over` and `cache` both name hdd: the second use is the error, and
    // ssd is then unused.
    assert_eq!(error.field, "device.tier.cache", "{error}");
    assert!(
        error.message.contains("already used by device.tier.over"),
        "{error}"
    );
    let twice = format!("{base}\n[[export]]\nname = \"raw\"\ndevice = \"ssd\"\n");
    let error = parse(&twice).validate().unwrap_err();
    assert_eq!(error.field, "device.tier.cache", "{error}");
    assert!(
        error.message.contains("already used by export[1].device"),
        "{error}"
    );
    let spare = format!("{base}\n[device.nvme]\nkind = \"memory\"\nsize = \"1MiB\"\n");
    let error = parse(&spare).validate().unwrap_err();
    assert_eq!(error.field, "device.nvme", "{error}");
}

#[test]
fn a_tier_formats_then_closes_cleanly_and_reopens_warm_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tier_spec("");
    let data = pattern(7, 2 << 20);
    {
        let volume = open(&spec, dir.path()).unwrap();
        assert!(
            notes(&volume).contains("device.tier: formatted tier (write-back"),
            "{}",
            notes(&volume)
        );
        assert!(tier(&volume).recovered().formatted);
        assert_eq!(device(&volume).len(), 16 << 20);
        device(&volume).write_at(&data, 1 << 20).unwrap();
        assert!(read(&volume, 1 << 20, data.len()) == data);
        volume.close().unwrap();
        let report = volume.tier_report();
        assert_eq!(report.len(), 1);
        assert!(
            report[0].starts_with("device.tier: tier: 512 hits, 0 misses (100.0 % hit ratio), "),
            "{report:?}"
        );
        for word in ["dirty", "cleaned", "relocated", "0 errors"] {
            assert!(report[0].contains(word), "{report:?}");
        }
    }
    let volume = open(&spec, dir.path()).unwrap();
    let recovered = tier(&volume).recovered().clone();
    assert!(recovered.clean && !recovered.formatted, "{recovered:?}");
    assert_eq!(
        recovered.records, 0,
        "a clean stop leaves nothing to replay"
    );
    assert_eq!(recovered.cached, 512, "{recovered:?}");
    assert!(volume.warnings().is_empty(), "{}", warnings(&volume));
    assert!(
        notes(&volume).contains("device.tier: opened after a clean stop: 512 blocks warm"),
        "{}",
        notes(&volume)
    );
    assert!(read(&volume, 1 << 20, data.len()) == data);
    let m = tier(&volume).metrics();
    assert_eq!((m.hits, m.misses), (512, 0), "warm: every block is a hit");
    volume.close().unwrap();
}

#[test]
fn a_tier_dropped_without_close_recovers_its_data_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tier_spec("writeback_percent = 0");
    let data = pattern(3, 1 << 20);
    {
        let volume = open(&spec, dir.path()).unwrap();
        device(&volume).write_at(&data, 4 << 20).unwrap();
        device(&volume).write_at(&data[..4096], 0).unwrap();
        // Dropped without close: a crash, as far as the tier knows.
    }
    let volume = open(&spec, dir.path()).unwrap();
    let r = tier(&volume).recovered().clone();
    assert!(!r.clean && !r.formatted, "{r:?}");
    assert!(r.records > 0, "{r:?}");
    let warned = warnings(&volume);
    assert!(
        warned.contains("device.tier: recovered after an unclean stop:")
            && warned.contains("journal records replayed"),
        "{warned}"
    );
    assert!(read(&volume, 4 << 20, data.len()) == data);
    assert!(read(&volume, 0, 4096) == data[..4096]);
    volume.close().unwrap();
    drop(volume);
    // And the stop after the recovery was clean.
    let volume = open(&spec, dir.path()).unwrap();
    assert!(tier(&volume).recovered().clean);
    assert!(volume.warnings().is_empty(), "{}", warnings(&volume));
    assert!(read(&volume, 4 << 20, data.len()) == data);
}

/// [`tier_spec`] with the files named in `images` (`"ssd.img"`, the cache
/// device; `"hdd.img"`, the backing device) opened `O_DIRECT`.
fn tier_spec_direct(extra: &str, images: &[&str]) -> VolumeSpec {
    let mut text = tier_text(&format!("bucket_size = \"64KiB\"\n{extra}"));
    for image in images {
        let path = format!("path = \"{image}\"");
        text = text.replace(&path, &format!("{path}\n        direct = true"));
    }
    parse(&text)
}

/// [`tier_spec`] with both its devices opened `O_DIRECT`.
fn direct_tier_spec(extra: &str) -> VolumeSpec {
    tier_spec_direct(extra, &["ssd.img", "hdd.img"])
}

/// A tier whose cache and backing devices are opened `O_DIRECT` (as bcache
/// and Open CAS use theirs: no second copy in the page cache) formats,
/// takes writes from a caller's unaligned buffer (cached, and past the
/// sequential cutoff straight to the backing device), recovers them after a
/// drop, and closes clean: every read and write it makes of either device
/// (probe, superblock, checkpoints, journal blocks, slots, backing reads and
/// writes) is whole aligned blocks from aligned buffers. Made in the target
/// directory: tmpfs before Linux 6.6 refuses `O_DIRECT`.
#[test]
fn a_tier_over_direct_devices_formats_recovers_and_reopens_clean() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let spec = direct_tier_spec("writeback_percent = 0\nsequential_cutoff = \"256KiB\"");
    // One byte in: the caller's buffer is not page-aligned (an allocation
    // is at least 16-byte aligned).
    let owned = pattern(5, (1 << 20) + 1);
    let data = &owned[1..];
    {
        let volume = open(&spec, dir.path()).unwrap();
        assert!(tier(&volume).recovered().formatted);
        assert!(notes(&volume).contains("(O_DIRECT)"), "{}", notes(&volume));
        device(&volume).write_at(data, 4 << 20).unwrap();
        device(&volume).write_at(&data[..4096], 0).unwrap();
        for i in 0..8u64 {
            // Scattered 4 KiB writes: cached, not past the cutoff.
            device(&volume)
                .write_at(&data[4096 * i as usize..][..4096], (9 << 20) + i * 65536)
                .unwrap();
        }
        assert!(
            tier(&volume).metrics().bypassed_bytes >= 512 << 10,
            "the sequential run went past the cutoff to the backing device"
        );
        device(&volume).flush().unwrap();
        // Dropped without close: a crash, as far as the tier knows.
    }
    let volume = open(&spec, dir.path()).unwrap();
    let r = tier(&volume).recovered().clone();
    assert!(!r.clean && !r.formatted && r.records > 0, "{r:?}");
    assert!(read(&volume, 4 << 20, data.len()) == data);
    assert!(read(&volume, 0, 4096) == data[..4096]);
    // Part of two blocks: read whole, then copied out.
    assert!(read(&volume, (4 << 20) + 1000, 5000) == data[1000..6000]);
    for i in 0..8u64 {
        let at = (9 << 20) + i * 65536;
        assert!(read(&volume, at, 4096) == data[4096 * i as usize..][..4096]);
    }
    let m = tier(&volume).metrics();
    assert_eq!(m.errors, 0, "{m:?}");
    volume.close().unwrap();
    drop(volume);
    let volume = open(&spec, dir.path()).unwrap();
    let r = tier(&volume).recovered().clone();
    assert!(r.clean && r.records == 0, "{r:?}");
    assert!(read(&volume, 4 << 20, data.len()) == data);
    assert_eq!(tier(&volume).metrics().errors, 0);
    volume.close().unwrap();
}

/// A block size smaller than a direct cache device's unit is refused at
/// open, naming the field and what to do, whether asked for at format or
/// found in a tier formatted earlier without direct I/O.
#[test]
fn a_block_size_under_a_direct_devices_unit_is_refused_naming_it() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let asked = open(&direct_tier_spec("block_size = \"1KiB\""), dir.path())
        .err()
        .unwrap();
    assert!(
        asked.contains("device.tier.block_size")
            && asked.contains("takes I/O in units of 4096 bytes")
            && asked.contains("(asked for) is 1024 bytes")
            && asked.contains("at least 4096 bytes"),
        "{asked}"
    );
    let buffered = tier_spec("block_size = \"1KiB\"");
    open(&buffered, dir.path()).unwrap().close().unwrap();
    let found = open(&direct_tier_spec("block_size = \"1KiB\""), dir.path())
        .err()
        .unwrap();
    assert!(
        found.contains("(it was formatted with) is 1024 bytes"),
        "{found}"
    );
    let backing_only = tier_spec_direct("block_size = \"1KiB\"", &["hdd.img"]);
    let backing = open(&backing_only, dir.path()).err().unwrap();
    assert!(
        backing.contains("device.tier.block_size")
            && backing.contains("the backing device file")
            && backing.contains("open the backing device without direct I/O"),
        "{backing}"
    );
    // Nothing was changed: the buffered spec still opens it warm.
    let volume = open(&buffered, dir.path()).unwrap();
    assert!(tier(&volume).recovered().clean);
    volume.close().unwrap();
}

#[test]
fn a_cache_device_holding_anything_else_is_refused_with_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tier_spec("");
    let data_dir = dir.path().join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let ssd = data_dir.join("ssd.img");
    let hdd = data_dir.join("hdd.img");
    // At the start (the tier's own probe sees it), and beyond the first MiB
    // (only the file check does); each file smaller than its `size`, so the
    // open grows it before judging it.
    for at in [1024usize, 3 << 20] {
        let mut foreign = vec![0u8; 4 << 20];
        foreign[at..at + 6].copy_from_slice(b"ext4!!");
        std::fs::write(&ssd, &foreign).unwrap();
        let error = open(&spec, dir.path()).err().unwrap();
        assert!(
            error.starts_with("device.tier.cache:")
                && error.contains("ssd.img")
                && error.contains(&format!("offset {at}"))
                && error.contains("refusing to format"),
            "{error}"
        );
        assert!(std::fs::read(&ssd).unwrap() == foreign, "left as it was");
        assert!(!hdd.exists(), "the backing device is not even created");
    }
    // Zeroes are blank: formatted.
    std::fs::write(&ssd, vec![0u8; 4 << 20]).unwrap();
    let volume = open(&spec, dir.path()).unwrap();
    assert!(tier(&volume).recovered().formatted);
    volume.close().unwrap();
}

#[test]
fn a_tier_is_refused_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tier_spec("");
    open(&spec, dir.path()).unwrap().close().unwrap();
    let options = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let error = Volume::open(&spec, dir.path(), &options).err().unwrap();
    assert_eq!(error.field, "device.tier", "{error}");
    assert!(error.message.contains("read-only"), "{error}");
}

#[test]
fn a_failure_marker_naming_the_cache_makes_the_next_open_start_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tier_spec("");
    let data = pattern(5, 64 << 10);
    {
        // Written through: the backing device has every block at the stop
        // (a real fallback writes dirty blocks back before the marker).
        let volume = open(&tier_spec("mode = \"write-through\""), dir.path()).unwrap();
        device(&volume).write_at(&data, 0).unwrap();
        volume.close().unwrap();
    }
    let ssd = dir.path().join("data/ssd.img");
    let id = {
        let dev = FileDevice::open(&ssd, &FileOptions::default()).unwrap();
        let Probe::Ours(sb) = probe(&dev).unwrap() else {
            panic!("not a tier")
        };
        sb.cache_id
    };
    // What the tier writes when its cache device fails (it writes dirty
    // blocks back first; here they were written back at the close).
    let marker = dir.path().join("data/tier.tier-failed");
    std::fs::write(
        &marker,
        format!("cairn tier {id:016x} failed over to pass-through: EIO; 0 dirty blocks lost\n"),
    )
    .unwrap();
    {
        let volume = open(&spec, dir.path()).unwrap();
        let r = tier(&volume).recovered();
        assert!(r.formatted && r.dropped_stale, "{r:?}");
        let warned = warnings(&volume);
        assert!(
            warned.contains("device.tier: the cache device failed in an earlier run (cairn tier")
                && warned.contains("formatted it afresh"),
            "{warned}"
        );
        assert!(!marker.exists(), "the open removes the marker");
        assert!(
            read(&volume, 0, data.len()) == data,
            "from the backing device"
        );
        volume.close().unwrap();
    }
    // A marker naming another cache device is stale: removed, nothing else.
    std::fs::write(&marker, "cairn tier 0123456789abcdef failed over\n").unwrap();
    let volume = open(&spec, dir.path()).unwrap();
    assert!(tier(&volume).recovered().clean);
    assert!(!marker.exists());
    assert!(notes(&volume).contains("which named another cache device"));
}

#[test]
fn pass_through_writes_back_then_detaches_so_the_backing_device_stands_alone() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(11, 1 << 20);
    let dirty = {
        // Write-back, cleaned only when idle for a second: dirty at the stop
        // (unless this machine is slow enough for the idle cleaner).
        let volume = open(&tier_spec("writeback_percent = 100"), dir.path()).unwrap();
        device(&volume).write_at(&data, 2 << 20).unwrap();
        volume.close().unwrap();
        tier(&volume).metrics().dirty_blocks
    };
    let hdd = dir.path().join("data/hdd.img");
    if dirty == 256 {
        let on_disk = std::fs::read(&hdd).unwrap();
        assert!(
            on_disk[2 << 20..3 << 20] != data[..],
            "dirty: only the cache has it"
        );
    } else {
        eprintln!("{dirty} of 256 blocks dirty at the stop: the idle cleaner ran");
    }
    let spec = tier_spec("mode = \"pass-through\"");
    {
        let volume = open(&spec, dir.path()).unwrap();
        let said = notes(&volume);
        assert!(
            said.contains(
                "mode changed from write-back to pass-through (dirty blocks written back first)"
            ),
            "{said}"
        );
        assert_eq!(tier(&volume).recovered().dirty, 0);
        let on_disk = std::fs::read(&hdd).unwrap();
        assert!(
            on_disk[2 << 20..3 << 20] == data[..],
            "written back at the open"
        );
        volume.close().unwrap();
    }
    // Detached at the stop: the next open starts afresh.
    let volume = open(&spec, dir.path()).unwrap();
    assert!(tier(&volume).recovered().dropped_stale);
    assert!(
        notes(&volume).contains("had been detached"),
        "{}",
        notes(&volume)
    );
    volume.close().unwrap();
    drop(volume);
    // The backing device alone.
    let alone = parse(
        r#"
        data_dir = "data"
        [[export]]
        name = "disk"
        device = "hdd"
        [device.hdd]
        kind = "file"
        path = "hdd.img"
        "#,
    );
    let volume = open(&alone, dir.path()).unwrap();
    assert!(read(&volume, 2 << 20, data.len()) == data);
}

/// A DRAM cache over a tier over a log disk over a throttled file; and a
/// tier over a throttled file: both keep their data across a clean stop and
/// a crash.
#[test]
fn a_tier_stacks_under_a_dram_cache_and_over_a_log_disk_or_a_throttled_file() {
    let dir = tempfile::tempdir().unwrap();
    let spec = parse(
        r#"
        data_dir = "data"
        [[export]]
        name = "cached"
        device = "dram"

        [[export]]
        name = "plain"
        device = "tier2"

        [device.dram]
        kind = "cache"
        over = "tier1"
        size = "1MiB"
        block_size = "4KiB"
        shards = 2

        [device.tier1]
        kind = "tier"
        over = "log"
        cache = "ssd1"
        bucket_size = "64KiB"
        mode = "write-through"
        admission = { filter = "nhit", threshold = 2 }

        [device.log]
        kind = "log"
        over = "slow1"
        size = "8MiB"
        segment_size = "64KiB"
        nv_cache = { path = "log.nv", size = "2MiB" }

        [device.slow1]
        kind = "throttled"
        over = "hdd1"
        latency_us = 1
        bandwidth_mb_s = 10000

        [device.hdd1]
        kind = "file"
        path = "hdd1.img"
        size = "12MiB"

        [device.ssd1]
        kind = "file"
        path = "ssd1.img"
        size = "4MiB"

        [device.tier2]
        kind = "tier"
        over = "slow2"
        cache = "ssd2"
        block_size = "8KiB"
        bucket_size = "128KiB"
        policy = { policy = "arc" }

        [device.slow2]
        kind = "throttled"
        over = "hdd2"
        latency_us = 1
        bandwidth_mb_s = 10000

        [device.hdd2]
        kind = "file"
        path = "hdd2.img"
        size = "8MiB"

        [device.ssd2]
        kind = "file"
        path = "ssd2.img"
        size = "4MiB"
        "#,
    );
    let data = pattern(9, 512 << 10);
    let check = |volume: &Volume| {
        for export in volume.exports() {
            let mut back = vec![0u8; data.len()];
            export.device.read_at(&mut back, 1 << 20).unwrap();
            assert!(back == data, "{}", export.name);
        }
    };
    {
        let volume = open(&spec, dir.path()).unwrap();
        assert_eq!(volume.tiers().count(), 2);
        assert!(
            volume.exports()[0]
                .device
                .describe()
                .contains("over tier (write-through"),
            "{}",
            volume.exports()[0].device.describe()
        );
        for export in volume.exports() {
            export.device.write_at(&data, 1 << 20).unwrap();
        }
        check(&volume);
        volume.close().unwrap();
        assert_eq!(volume.tier_report().len(), 2);
    }
    {
        let volume = open(&spec, dir.path()).unwrap();
        assert!(volume.warnings().is_empty(), "{}", warnings(&volume));
        for (name, t) in volume.tiers() {
            assert!(t.recovered().clean, "{name}: {:?}", t.recovered());
        }
        check(&volume);
        for export in volume.exports() {
            export.device.write_at(&data[..8192], 0).unwrap();
        }
        // A crash.
    }
    let volume = open(&spec, dir.path()).unwrap();
    let warned = warnings(&volume);
    for field in ["device.tier1", "device.tier2", "device.log"] {
        assert!(
            warned.contains(&format!("{field}: recovered after an unclean stop")),
            "{field}: {warned}"
        );
    }
    check(&volume);
    for export in volume.exports() {
        let mut back = vec![0u8; 8192];
        export.device.read_at(&mut back, 0).unwrap();
        assert!(back == data[..8192], "{}", export.name);
    }
    volume.close().unwrap();
}

/// The cache device keeps its layout (a spec that changes it is warned
/// about), and a cache device formatted for a backing device of another
/// size is refused, naming `cache`.
#[test]
fn a_cache_device_keeps_its_layout_and_refuses_another_backing_size() {
    let dir = tempfile::tempdir().unwrap();
    open(&tier_spec(""), dir.path()).unwrap().close().unwrap();
    let other = parse(&tier_text("bucket_size = \"128KiB\""));
    let volume = open(&other, dir.path()).unwrap();
    assert!(tier(&volume).recovered().clean);
    let warned = warnings(&volume);
    assert!(
        warned.contains(
            "device.tier: the cache device was formatted with block_size 4096 and bucket_size 65536"
        ),
        "{warned}"
    );
    volume.close().unwrap();
    drop(volume);
    let bigger = parse(
        &tier_text("bucket_size = \"64KiB\"").replace("size = \"16MiB\"", "size = \"20MiB\""),
    );
    let error = open(&bigger, dir.path()).err().unwrap();
    assert!(
        error.starts_with("device.tier.cache:") && error.contains("another volume"),
        "{error}"
    );
    // The backing file the refused open grew is as it was, and the old spec
    // opens again.
    let hdd = dir.path().join("data/hdd.img");
    assert_eq!(std::fs::metadata(&hdd).unwrap().len(), 16 << 20);
    let volume = open(&tier_spec(""), dir.path()).unwrap();
    assert!(tier(&volume).recovered().clean);
}

#[test]
fn a_cache_device_too_small_for_its_buckets_names_cache() {
    // Not room for the metadata; room for it and two buckets but not for
    // the three kept free; room for it, not for two buckets.
    for (size, says) in [
        ("128KiB", "too small for the tier's metadata"),
        ("512KiB", "kept free"),
        ("320KiB", "too small"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let spec = parse(
            &tier_text("bucket_size = \"64KiB\"")
                .replace("size = \"8MiB\"", &format!("size = \"{size}\"")),
        );
        let error = open(&spec, dir.path()).err().unwrap();
        assert!(
            error.starts_with("device.tier.cache:") && error.contains(says),
            "{size}: {error}"
        );
    }
}
