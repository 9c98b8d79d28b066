//! Volumes from specs: every kind parses and assembles, a log disk is
//! formatted on first open and recovered on later ones with its data, nothing
//! is formatted over storage that is not ours, and spec mistakes are errors
//! that name the field.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::volume::{open, parse, parse_error};

use cairn_policy::PolicyConfig;
use cairn_store::Device;
use cairn_store::volume::{DeviceSpec, ObjectsCleaner, OpenOptions, Volume, VolumeSpec};

/// A log disk over a file, NV cache in the data directory (not /dev/shm, so
/// tests never share one).
fn log_spec(nv: bool) -> VolumeSpec {
    log_spec_with(
        if nv {
            r#"nv_cache = { path = "log.nv", size = "2MiB" }"#
        } else {
            ""
        },
        "",
    )
}

/// A log disk over a file, with `log` added to the log's table and `file`
/// to the file's.
fn log_spec_with(log: &str, file: &str) -> VolumeSpec {
    parse(&format!(
        r#"
        data_dir = "data"
        [[export]]
        name = "disk"
        device = "log"

        [device.log]
        kind = "log"
        over = "file"
        size = "8MiB"
        segment_size = "64KiB"
        {log}

        [device.file]
        kind = "file"
        path = "disk.img"
        size = "12MiB"
        {file}
        "#
    ))
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn device(volume: &Volume) -> &dyn Device {
    volume.exports()[0].device.as_ref()
}

/// A log disk over a file opened with `O_DIRECT` formats, takes data and
/// opens again: every read of the probe is a whole aligned block. (Before,
/// the probe read 8 bytes of the superblock and the device refused it.)
/// Made in the target directory: tmpfs refuses `O_DIRECT`.
#[test]
fn a_log_disk_over_a_direct_file_formats_and_reopens() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let spec = log_spec_with("", "direct = true");
    let data = pattern(7, 1 << 16);
    let volume = open(&spec, dir.path()).unwrap();
    device(&volume).write_at(&data, 1 << 20).unwrap();
    volume.close().unwrap();
    drop(volume);
    let volume = open(&spec, dir.path()).unwrap();
    let mut back = vec![0u8; data.len()];
    device(&volume).read_at(&mut back, 1 << 20).unwrap();
    assert_eq!(back, data);
}

/// A direct file takes only whole aligned units. Under a log disk (through
/// a throttle) the log disk makes every request so; exported as it is, or
/// under a DRAM cache or a throttle alone, the volume puts an aligning layer
/// over the file, says so, and a client's byte-sized writes and reads work
/// and come back after a reopen. Made in the target directory: tmpfs refuses
/// `O_DIRECT`.
#[test]
fn a_direct_file_takes_any_request_with_or_without_a_log_disk_above_it() {
    let file = "[device.f]\nkind = \"file\"\npath = \"f.img\"\nsize = \"8MiB\"\ndirect = true\n";
    let spec = |top: &str, layers: &str| {
        parse(&format!(
            "data_dir = \"data\"\n[[export]]\nname = \"e\"\ndevice = \"{top}\"\n{layers}\n{file}"
        ))
    };
    let cache =
        "[device.c]\nkind = \"cache\"\nover = \"f\"\nsize = \"1MiB\"\nblock_size = \"4KiB\"\n";
    let slow = "[device.t]\nkind = \"throttled\"\nover = \"f\"\nprofile = \"ssd\"\n";
    let log =
        "[device.l]\nkind = \"log\"\nover = \"t\"\nsize = \"4MiB\"\nsegment_size = \"64KiB\"\n";
    let cached =
        "[device.c]\nkind = \"cache\"\nover = \"l\"\nsize = \"1MiB\"\nblock_size = \"4KiB\"\n";
    let stacks = [
        ("f", String::new(), true),
        ("c", cache.to_owned(), true),
        ("t", slow.to_owned(), true),
        ("l", format!("{log}{slow}"), false),
        ("c", format!("{cached}{log}{slow}"), false),
    ];
    for (top, layers, aligning) in stacks {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let spec = spec(top, &layers);
        let volume = open(&spec, dir.path()).unwrap();
        let says = volume
            .notes()
            .iter()
            .any(|n| n.contains("device.f: O_DIRECT with no log disk or tier above it"));
        assert_eq!(
            says,
            aligning,
            "{top} over {layers:?}: {:?}",
            volume.notes()
        );
        let data = pattern(3, 5000);
        device(&volume).write_at(&data, 4093).unwrap();
        device(&volume).write_at(b"x", 1 << 20).unwrap();
        let mut back = vec![0u8; data.len() + 6];
        device(&volume).read_at(&mut back, 4090).unwrap();
        assert_eq!(back[3..5003], data[..], "{top} over {layers:?}");
        assert_eq!(back[..3], [0; 3]);
        device(&volume).flush().unwrap();
        volume.close().unwrap();
        drop(volume);
        let volume = open(&spec, dir.path()).unwrap();
        device(&volume).read_at(&mut back, 4090).unwrap();
        assert_eq!(back[3..5003], data[..], "{top} over {layers:?}, reopened");
        let mut one = [0u8];
        device(&volume).read_at(&mut one, 1 << 20).unwrap();
        assert_eq!(one, *b"x");
    }
}

#[test]
fn every_kind_parses_and_assembles() {
    let dir = tempfile::tempdir().unwrap();
    let spec = parse(
        r#"
        [[export]]
        name = "fast"
        device = "ntl"
        description = "persistent memory"

        [[export]]
        name = "tiered"
        device = "log"
        read_only = false

        [[export]]
        name = "wide"
        device = "stripes"

        [device.ntl]
        kind = "ntl"
        path = "pm.ntl"
        size = "4MiB"
        persistence = "msync"

        [device.log]
        kind = "log"
        over = "both"
        cleaner = "cost-benefit"
        partial_segments = "close"
        nv_cache = { path = "nv", size = "1MiB", persistence = "none" }

        [device.both]
        kind = "concat"
        parts = ["ssd", "hdd"]

        [device.ssd]
        kind = "throttled"
        over = "a"
        profile = "ssd"
        latency_us = 0

        [device.hdd]
        kind = "throttled"
        over = "b"
        latency_us = 0
        seek_us = 0
        bandwidth_mb_s = 100000

        [device.a]
        kind = "memory"
        size = "4MiB"

        [device.b]
        kind = "file"
        path = "b.img"
        size = 4194304

        [device.stripes]
        kind = "striped"
        parts = ["c", "d"]
        stripe = "64KiB"

        [device.c]
        kind = "memory"
        size = "1MiB"

        [device.d]
        kind = "memory"
        size = "1MiB"
        "#,
    );
    let volume = open(&spec, dir.path()).unwrap();
    let names: Vec<_> = volume.exports().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["fast", "tiered", "wide"]);
    assert_eq!(volume.exports()[0].description, "persistent memory");
    assert_eq!(volume.exports()[0].device.len(), 4 << 20);
    assert_eq!(volume.exports()[2].device.len(), 2 << 20);
    // The log disk exports 80 % of the data slots of 8 MiB by default.
    let log = volume.exports()[1].device.len();
    assert!(log > 5 << 20 && log < 7 << 20, "{log}");
    assert!(volume.exports()[1].description.contains("log disk"));
    for export in volume.exports() {
        let data = pattern(3, 8192);
        export.device.write_at(&data, 4096).unwrap();
        let mut back = vec![0u8; data.len()];
        export.device.read_at(&mut back, 4096).unwrap();
        assert_eq!(back, data, "{}", export.name);
    }
    volume.close().unwrap();
    assert!(
        dir.path().join("cairn-data/pm.ntl").exists(),
        "data_dir defaults to cairn-data"
    );
}

#[test]
fn a_log_disk_is_formatted_once_then_recovered_with_its_data() {
    for nv in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let spec = log_spec(nv);
        let data = pattern(9, 256 << 10);
        {
            let volume = open(&spec, dir.path()).unwrap();
            assert!(
                volume.notes()[0].contains("formatted"),
                "{:?}",
                volume.notes()
            );
            assert_eq!(device(&volume).len(), 8 << 20);
            device(&volume).write_at(&data, 1 << 20).unwrap();
            device(&volume).flush().unwrap();
            // Dropped without close: a crash, as far as the disk knows.
        }
        let volume = open(&spec, dir.path()).unwrap();
        assert!(
            volume.notes()[0].contains("recovered"),
            "{:?}",
            volume.notes()
        );
        let mut back = vec![0u8; data.len()];
        device(&volume).read_at(&mut back, 1 << 20).unwrap();
        assert_eq!(back, data, "nv = {nv}");
        volume.close().unwrap();
        drop(volume);
        let volume = open(&spec, dir.path()).unwrap();
        device(&volume).read_at(&mut back, 1 << 20).unwrap();
        assert_eq!(back, data, "nv = {nv}, after a clean close");
    }
}

#[test]
fn a_lost_nv_cache_is_replaced_after_a_clean_stop_and_refused_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let spec = log_spec(true);
    let nv = dir.path().join("data/log.nv");
    let data = pattern(1, 64 << 10);
    {
        let volume = open(&spec, dir.path()).unwrap();
        device(&volume).write_at(&data, 0).unwrap();
        volume.close().unwrap();
    }
    // A reboot empties /dev/shm.
    std::fs::remove_file(&nv).unwrap();
    {
        let volume = open(&spec, dir.path()).unwrap();
        assert!(
            volume.notes()[0].contains("stopped cleanly"),
            "{:?}",
            volume.notes()
        );
        let mut back = vec![0u8; data.len()];
        device(&volume).read_at(&mut back, 0).unwrap();
        assert_eq!(back, data);
        // This write reaches only the NV cache: then a crash and a reboot.
        device(&volume).write_at(&pattern(2, 4096), 0).unwrap();
    }
    std::fs::remove_file(&nv).unwrap();
    let error = open(&spec, dir.path()).err().unwrap();
    assert!(
        error.contains("device.log.nv_cache") && error.contains("accept-lost-nv-cache"),
        "{error}"
    );
    let options = OpenOptions {
        accept_lost_nv_cache: true,
        ..OpenOptions::default()
    };
    let volume = Volume::open(&spec, dir.path(), &options).unwrap();
    let mut back = vec![0u8; data.len()];
    device(&volume).read_at(&mut back, 0).unwrap();
    assert_eq!(back, data, "the data destaged before the crash is intact");
}

#[test]
fn nothing_is_formatted_over_data_that_is_not_ours() {
    let dir = tempfile::tempdir().unwrap();
    let spec = log_spec(false);
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let image = dir.path().join("data/disk.img");
    let mut foreign = vec![0u8; 12 << 20];
    foreign[1024..1030].copy_from_slice(b"ext4!!");
    std::fs::write(&image, &foreign).unwrap();
    let error = open(&spec, dir.path()).err().unwrap();
    assert!(
        error.starts_with("device.log.over:")
            && error.contains("disk.img")
            && error.contains("refusing to format"),
        "{error}"
    );
    assert_eq!(std::fs::read(&image).unwrap(), foreign, "untouched");
    // Zeroes are blank: formatted.
    std::fs::write(&image, vec![0u8; 12 << 20]).unwrap();
    open(&spec, dir.path()).unwrap().close().unwrap();
    // An NTL region file with someone else's bytes.
    let ntl = parse(
        r#"
        data_dir = "data"
        [[export]]
        name = "pm"
        device = "pm"
        [device.pm]
        kind = "ntl"
        path = "pm.img"
        size = "1MiB"
        "#,
    );
    std::fs::write(dir.path().join("data/pm.img"), b"hello").unwrap();
    let error = open(&ntl, dir.path()).err().unwrap();
    assert!(
        error.contains("device.pm.path") && error.contains("not an NTL image"),
        "{error}"
    );
}

#[test]
fn a_spec_that_disagrees_with_the_disk_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    open(&log_spec(false), dir.path()).unwrap().close().unwrap();
    let mut spec = log_spec(false);
    let cairn_store::volume::DeviceSpec::Log(log) = spec.devices.get_mut("log").unwrap() else {
        unreachable!()
    };
    log.size = Some(cairn_policy::Bytes(4 << 20));
    let error = open(&spec, dir.path()).err().unwrap();
    assert!(
        error.starts_with("device.log.size:") && error.contains("8388608"),
        "{error}"
    );
}

#[test]
fn spec_mistakes_name_the_field() {
    let base = r#"
        [[export]]
        name = "x"
        device = "m"
        [device.m]
        kind = "memory"
        size = "1MiB"
    "#;
    assert!(parse(base).validate().is_ok());
    let unknown = parse_error(&format!("{base}\nsizee = 3"));
    assert!(unknown.contains("sizee"), "{unknown}");
    let unknown = parse_error(&base.replace("size = \"1MiB\"", "size = \"1MiB\"\ncolour = 1"));
    assert!(unknown.contains("colour"), "{unknown}");
    let kind = parse_error(&base.replace("\"memory\"", "\"tape\""));
    assert!(kind.contains("tape"), "{kind}");
    let size = parse_error(&base.replace("\"1MiB\"", "\"1 lot\""));
    assert!(size.contains("1 lot"), "{size}");
    for (text, field) in [
        (
            base.replace("device = \"m\"", "device = \"n\""),
            "export[0].device",
        ),
        (
            format!("{base}\n[device.spare]\nkind = \"memory\"\nsize = 1"),
            "device.spare",
        ),
        (
            format!("{base}\n[[export]]\nname = \"y\"\ndevice = \"m\""),
            "export[1].device",
        ),
        (
            format!("{base}\n[[export]]\nname = \"x\"\ndevice = \"m\""),
            "export[1].name",
        ),
        (base.replace("\"1MiB\"", "0"), "device.m.size"),
        (
            base.replace("device = \"m\"", "device = \"c\"")
                + "\n[device.c]\nkind = \"log\"\nover = \"m\"\nsegment_size = \"5KiB\"",
            "device.c.segment_size",
        ),
        (
            base.replace("device = \"m\"", "device = \"t\"")
                + "\n[device.t]\nkind = \"throttled\"\nover = \"m\"",
            "device.t.bandwidth_mb_s",
        ),
        (
            base.replace("device = \"m\"", "device = \"c\"")
                + "\n[device.c]\nkind = \"log\"\nover = \"m\"\nlive_read_below = 1.5",
            "device.c.live_read_below",
        ),
        (
            base.replace("device = \"m\"", "device = \"c\"")
                + "\n[device.c]\nkind = \"log\"\nover = \"m\"\ncleaner_read_threads = 0",
            "device.c.cleaner_read_threads",
        ),
    ] {
        let error = parse(&text).validate().unwrap_err();
        assert_eq!(error.field, field, "{error}\n{text}");
    }
    // The read cache layer: mistakes name the cache's field.
    let cache = |fields: &str| {
        base.replace("device = \"m\"", "device = \"c\"")
            + "\n[device.c]\nkind = \"cache\"\nover = \"m\"\n"
            + fields
    };
    for (fields, field, says) in [
        (
            "block_size = \"3KiB\"",
            "device.c.block_size",
            "power of two",
        ),
        (
            "block_size = \"4MiB\"",
            "device.c.block_size",
            "power of two",
        ),
        (
            "cost_smoothing = 2.0",
            "device.c.cost_smoothing",
            "not in [0, 1]",
        ),
        ("shards = 3", "device.c.shards", "power of two"),
        (
            "size = \"64KiB\"\nshards = 4",
            "device.c.size",
            "less than one",
        ),
    ] {
        let error = parse(&cache(fields)).validate().unwrap_err();
        assert_eq!(error.field, field, "{error}\n{fields}");
        assert!(error.message.contains(says), "{error}");
    }
    for (fields, says) in [
        ("policy = \"nosuch\"", "unknown policy `nosuch`"),
        ("policy = { policy = \"ons\", nosuch = 1 }", "nosuch"),
        ("write_mode = \"back\"", "back"),
        ("nosuch = 1", "nosuch"),
    ] {
        let error = parse_error(&cache(fields));
        assert!(error.contains(says), "{error}\n{fields}");
    }
    // Names and tables both give policies; the spec writes the name back
    // when the policy has its defaults.
    let spec = parse(&cache(
        "policy = \"s3fifo\"\n[device.c2]\nkind = \"memory\"\nsize = \"1MiB\"",
    ));
    let DeviceSpec::Cache(c) = &spec.devices["c"] else {
        panic!("not a cache")
    };
    assert_eq!(c.policy.0, PolicyConfig::default_for("s3fifo").unwrap());
    let table = parse(&cache("policy = { policy = \"ons\", threshold = 7 }"));
    let DeviceSpec::Cache(t) = &table.devices["c"] else {
        panic!("not a cache")
    };
    let PolicyConfig::Ons(ons) = &t.policy.0 else {
        panic!("not ons: {:?}", t.policy)
    };
    assert_eq!(ons.threshold, 7);
    let text = toml::to_string(&spec).unwrap();
    assert!(text.contains("policy = \"s3fifo\""), "{text}");
    assert_eq!(parse(&text), spec);
    let text = toml::to_string(&table).unwrap();
    assert_eq!(parse(&text), table, "{text}");
}

/// An object volume's outage options: the upload queue's default follows
/// the local write log; a queue below one object, or one the log cannot
/// hold twice over with the open segment, is refused naming the field.
#[test]
fn object_volume_upload_queue_is_checked_against_the_local_log() {
    let spec = |fields: &str| {
        format!(
            r#"
            [[export]]
            name = "x"
            device = "o"
            [device.o]
            kind = "objects"
            endpoint = "http://127.0.0.1:7480"
            bucket = "b"
            {fields}
            "#
        )
    };
    let objects = |fields: &str| {
        let s = parse(&spec(fields));
        match &s.devices["o"] {
            DeviceSpec::Objects(o) => (o.clone(), s.validate()),
            _ => panic!("not objects"),
        }
    };
    let (o, ok) = objects("");
    ok.unwrap();
    assert_eq!((o.upload_queue_bytes(), o.stall_timeout), (256 << 20, 120));
    // A 64 MiB log holds (64 MiB - 4 KiB) / 2 - 8 MiB: two 8 MiB objects.
    let (o, ok) = objects("local_log_size = \"64MiB\"");
    ok.unwrap();
    assert_eq!(o.upload_queue_bytes(), 16 << 20);
    let (o, ok) = objects("flush = \"remote\"\nupload_queue = \"1GiB\"\nstall_timeout = 0");
    ok.unwrap();
    assert_eq!((o.upload_queue_bytes(), o.stall_timeout), (1 << 30, 0));
    for (fields, field, says) in [
        (
            "upload_queue = \"4MiB\"",
            "device.o.upload_queue",
            "less than one segment",
        ),
        (
            "upload_queue = \"512MiB\"",
            "device.o.upload_queue",
            "must hold twice",
        ),
        (
            "local_log_size = \"16MiB\"",
            "device.o.local_log_size",
            "at least 32772KiB",
        ),
    ] {
        let error = objects(fields).1.unwrap_err();
        assert_eq!(error.field, field, "{error}\n{fields}");
        assert!(error.message.contains(says), "{error}");
    }
}

/// An object volume's cleaner: greedy by default, cost-benefit or none by
/// name; another name is refused.
#[test]
fn object_volume_cleaner_is_chosen_by_name() {
    let spec = |fields: &str| {
        format!(
            "[[export]]\nname = \"x\"\ndevice = \"o\"\n[device.o]\nkind = \"objects\"\n\
             endpoint = \"http://127.0.0.1:7480\"\nbucket = \"b\"\n{fields}\n"
        )
    };
    let cleaner = |fields: &str| match &parse(&spec(fields)).devices["o"] {
        DeviceSpec::Objects(o) => o.cleaner,
        _ => panic!("not objects"),
    };
    assert_eq!(cleaner(""), ObjectsCleaner::Greedy);
    assert_eq!(
        cleaner("cleaner = \"cost-benefit\""),
        ObjectsCleaner::CostBenefit
    );
    assert_eq!(cleaner("cleaner = \"none\""), ObjectsCleaner::Off);
    let error = parse_error(&spec("cleaner = \"age-sort\""));
    assert!(error.contains("age-sort"), "{error}");
}

/// A log disk with its NV cache under a read cache, as the default stack.
fn cached_log_spec() -> VolumeSpec {
    let mut text = toml::to_string(&log_spec(true)).unwrap();
    text = text.replace("device = \"log\"", "device = \"cache\"");
    parse(&format!(
        "{text}\n[device.cache]\nkind = \"cache\"\nover = \"log\"\nsize = \"1MiB\"\n\
         block_size = \"16KiB\"\nshards = 2\npolicy = \"s3fifo\"\n"
    ))
}

#[test]
fn a_read_cache_over_the_log_disk_serves_new_data_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let spec = cached_log_spec();
    let volume = open(&spec, dir.path()).unwrap();
    let dev = device(&volume);
    assert!(
        dev.describe()
            .starts_with("block cache (s3fifo, 1048576 B, 16384 B blocks, 2 shards) over log disk"),
        "{}",
        dev.describe()
    );
    // Read (caching the zeroes), overwrite part of a cached block, read
    // again: the cache never serves the old bytes.
    let mut buf = vec![0xffu8; 64 << 10];
    dev.read_at(&mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    let first = pattern(1, 4096);
    dev.write_at(&first, 8192).unwrap();
    dev.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[8192..12288], &first[..]);
    assert!(buf[..8192].iter().all(|&b| b == 0));
    // Many writes, more than the cache holds, then a flush.
    for i in 0..512u64 {
        dev.write_at(&pattern(i as u8, 4096), i * 4096).unwrap();
    }
    dev.flush().unwrap();
    let mut one = vec![0u8; 4096];
    for i in (0..512u64).step_by(7) {
        dev.read_at(&mut one, i * 4096).unwrap();
        assert_eq!(one, pattern(i as u8, 4096), "block {i}");
    }
    volume.close().unwrap();
    drop(volume);
    let volume = open(&spec, dir.path()).unwrap();
    for i in 0..512u64 {
        device(&volume).read_at(&mut one, i * 4096).unwrap();
        assert_eq!(one, pattern(i as u8, 4096), "block {i} after restart");
    }
}

#[test]
fn a_read_cache_over_parts_gets_a_cost_group_pair_per_part() {
    let dir = tempfile::tempdir().unwrap();
    let spec = parse(
        r#"
        [[export]]
        name = "tiered"
        device = "cache"

        [device.cache]
        kind = "cache"
        over = "both"
        size = "256KiB"
        block_size = "4KiB"
        policy = "cost"

        [device.both]
        kind = "throttled"
        over = "stripes"
        latency_us = 0
        bandwidth_mb_s = 100000

        [device.stripes]
        kind = "striped"
        parts = ["ssd", "hdd"]
        stripe = "64KiB"

        [device.ssd]
        kind = "memory"
        size = "1MiB"

        [device.hdd]
        kind = "memory"
        size = "1MiB"
        "#,
    );
    let volume = open(&spec, dir.path()).unwrap();
    assert!(
        volume
            .notes()
            .iter()
            .any(|n| n.starts_with("device.cache: block cache (cost")
                && n.ends_with("of 4 cost group(s)")),
        "{:?}",
        volume.notes()
    );
    let dev = device(&volume);
    dev.write_at(&pattern(9, 8192), 60 << 10).unwrap();
    let mut buf = vec![0u8; 8192];
    dev.read_at(&mut buf, 60 << 10).unwrap();
    assert_eq!(buf, pattern(9, 8192));
    // Over a single device there is one pair.
    let single = parse(
        "[[export]]\nname = \"x\"\ndevice = \"c\"\n[device.c]\nkind = \"cache\"\nover = \"m\"\n\
         size = \"256KiB\"\nblock_size = \"4KiB\"\n[device.m]\nkind = \"memory\"\nsize = \"1MiB\"\n",
    );
    let volume = open(&single, dir.path()).unwrap();
    assert!(
        volume
            .notes()
            .iter()
            .any(|n| n.ends_with("of 2 cost group(s)")),
        "{:?}",
        volume.notes()
    );
}

/// The cleaner's read options, the background destage and its writer
/// threads are spec fields: they round-trip through TOML (and 17 writer
/// threads are refused), and a log disk opened with every victim read
/// live blocks only, one thread, no background writer, cleans and reads back
/// after a reopen.
#[test]
fn log_cleaner_read_and_destage_options_are_spec_fields() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = log_spec(true);
    let DeviceSpec::Log(log) = spec.devices.get_mut("log").unwrap() else {
        unreachable!()
    };
    assert_eq!(
        (
            log.live_read_below,
            log.live_read_gap,
            log.cleaner_read_threads,
            log.batch_reads,
            log.background_destage,
            log.writer_threads,
            log.background_clean
        ),
        (0.25, 2, 16, true, true, 2, true),
        "defaults are the log disk's"
    );
    log.writer_threads = 17;
    let e = open(&spec, dir.path())
        .err()
        .expect("17 writer threads refused");
    assert!(e.contains("writer_threads"), "{e}");
    let DeviceSpec::Log(log) = spec.devices.get_mut("log").unwrap() else {
        unreachable!()
    };
    log.writer_threads = 1;
    log.live_read_below = 1.0;
    log.live_read_gap = 0;
    log.cleaner_read_threads = 1;
    log.batch_reads = false;
    log.background_destage = false;
    log.background_clean = false;
    let text = toml::to_string(&spec).unwrap();
    assert!(text.contains("background_destage = false"), "{text}");
    assert!(text.contains("background_clean = false"), "{text}");
    assert!(text.contains("writer_threads = 1"), "{text}");
    assert!(text.contains("batch_reads = false"), "{text}");
    assert_eq!(parse(&text), spec);
    let volume = open(&spec, dir.path()).unwrap();
    let dev = device(&volume);
    // Three times the volume's size in 64 KiB writes: the cleaner runs.
    for round in 0..3u8 {
        for at in (0..dev.len()).step_by(64 << 10) {
            dev.write_at(&pattern(round ^ (at >> 16) as u8, 64 << 10), at)
                .unwrap();
        }
    }
    volume.close().unwrap();
    drop(volume);
    let volume = open(&spec, dir.path()).unwrap();
    let dev = device(&volume);
    let mut back = vec![0u8; 64 << 10];
    for at in (0..dev.len()).step_by(64 << 10) {
        dev.read_at(&mut back, at).unwrap();
        assert_eq!(back, pattern(2 ^ (at >> 16) as u8, 64 << 10), "at {at}");
    }
    volume.close().unwrap();
}

#[test]
fn an_ntl_image_on_dev_shm_reopens_with_huge_pages_unless_told_not_to() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("SKIPPED: no /dev/shm");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let spec = |huge: bool| {
        parse(&format!(
            r#"
            [[export]]
            name = "pm"
            device = "ntl"

            [device.ntl]
            kind = "ntl"
            path = "pm.ntl"
            size = "8MiB"
            huge_pages = {huge}
            "#
        ))
    };
    let data = pattern(5, 8 << 20);
    {
        let volume = open(&spec(true), dir.path()).unwrap();
        assert!(
            volume.notes()[0].contains("formatted"),
            "{:?}",
            volume.notes()
        );
        device(&volume).write_at(&data, 0).unwrap();
        volume.close().unwrap();
    }
    let volume = open(&spec(true), dir.path()).unwrap();
    let notes = volume.notes().join("\n");
    assert!(notes.contains("opened the NTL image"), "{notes}");
    if notes.contains("2 MiB pages on 0 of") {
        eprintln!("SKIPPED: this kernel does not collapse tmpfs pages: {notes}");
    } else {
        assert!(notes.contains("2 MiB pages"), "{notes}");
    }
    let mut back = vec![0u8; data.len()];
    device(&volume).read_at(&mut back, 0).unwrap();
    assert!(back == data, "the data read back after collapsing differs");
    volume.close().unwrap();
    drop(volume);
    let volume = open(&spec(false), dir.path()).unwrap();
    let notes = volume.notes().join("\n");
    assert!(!notes.contains("MiB pages"), "{notes}");
    volume.close().unwrap();
}
