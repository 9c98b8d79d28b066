//! `cairn fsck` and `cairn inspect` on real image files: a clean log disk is
//! clean and described; a flipped data byte is found, named, and fails fsck;
//! fsck's exit status is e2fsck's (0 clean, 4 problems left uncorrected, 8
//! operational error, 16 usage error, never 1), so scripts written for fsck
//! read it right.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

fn cairn(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let (status, text) = cairn_status(args);
    (status == 0, text)
}

/// The exit status (-1 if killed by a signal) and stdout then stderr.
fn cairn_status(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("cairn runs");
    (
        output.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[test]
fn fsck_and_inspect_a_log_disk_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ld.img");
    let physical = common::log_disk_image(&path);
    let img = path.as_os_str();
    let (ok, text) = cairn(&["fsck".as_ref(), img]);
    assert!(ok, "{text}");
    assert!(text.contains("clean log disk (200 of 200"), "{text}");
    let (ok, text) = cairn(&["inspect".as_ref(), img]);
    assert!(ok, "{text}");
    for want in [
        "segments       16 of 32 blocks",
        "write amplification",
        "clean: no problem found",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    // Flip one byte of block 9's data.
    common::damage(&path, physical * 4096 + 17, &[0xee]);
    let (ok, text) = cairn(&["fsck".as_ref(), img]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("logical block 9") && text.contains("checksum"),
        "{text}"
    );
    assert!(text.contains("1 problems found"), "{text}");
    let (ok, text) = cairn(&["fsck".as_ref(), dir.path().join("missing").as_os_str()]);
    assert!(!ok && text.contains("missing"), "{text}");
    std::fs::write(dir.path().join("junk"), [7u8; 4096]).unwrap();
    let (ok, text) = cairn(&["fsck".as_ref(), dir.path().join("junk").as_os_str()]);
    assert!(!ok && text.contains("not a Cairn image"), "{text}");
}

#[test]
fn fsck_and_inspect_an_ntl_image_and_its_in_place_flag() {
    use cairn_store::Device;
    use cairn_store::ntl::{
        Btt, Geometry as NtlGeometry, MmapRegion, NtlDevice, PersistenceRequest, Region, WriteMode,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ntl.img");
    let g = NtlGeometry {
        block_size: 4096,
        lbas: 64,
        data_blocks: 80,
    };
    let open = || MmapRegion::open(&path, g.region_len(), true, PersistenceRequest::None).unwrap();
    NtlDevice::new(Btt::format(open(), g).unwrap())
        .write_at(&[7; 9000], 100)
        .unwrap();
    let (ok, out) = cairn(&["fsck".as_ref(), path.as_os_str()]);
    assert!(ok, "{out}");
    assert!(
        out.contains("3 mapped") && out.contains("atomic only"),
        "{out}"
    );
    let (ok, out) = cairn(&["inspect".as_ref(), path.as_os_str()]);
    assert!(ok && out.contains("NTL image"), "{out}");
    // In-place writes are flagged for good.
    NtlDevice::new(Btt::open_with(open(), WriteMode::InPlace).unwrap())
        .write_at(&[8; 10], 5)
        .unwrap();
    let (ok, out) = cairn(&["fsck".as_ref(), path.as_os_str()]);
    assert!(ok && out.contains("may have torn"), "{out}");
    // A map entry pointing past the data area is refused, by block number.
    open()
        .store_u64(64 + 8 * 5, cairn_store::ntl::map::encode(80))
        .unwrap();
    let (status, out) = cairn_status(&["fsck".as_ref(), path.as_os_str()]);
    assert!(status == 4 && out.contains("block 5"), "{status}: {out}");
}

#[test]
fn fsck_exit_status_is_e2fsck_s() {
    let dir = tempfile::tempdir().unwrap();
    let fsck = |path: &std::path::Path| cairn_status(&["fsck".as_ref(), path.as_os_str()]);
    let clean = dir.path().join("clean.img");
    common::log_disk_image(&clean);
    let (status, text) = fsck(&clean);
    assert_eq!(status, 0, "a clean image: {text}");
    assert!(text.contains("clean log disk"), "{text}");

    // A flipped data byte: reported, left as it is.
    let data = dir.path().join("data.img");
    let physical = common::log_disk_image(&data);
    common::damage(&data, physical * 4096 + 100, &[0x5a, 0xa5]);
    let (status, text) = fsck(&data);
    assert_eq!(status, 4, "a damaged data block: {text}");
    assert!(text.contains("logical block 9"), "{text}");
    assert_eq!(fsck(&data).0, 4, "still damaged: fsck repaired nothing");

    // A damaged superblock (its magic intact): no report is possible, but it
    // is a problem in the image, not an operational error.
    let superblock = dir.path().join("superblock.img");
    common::log_disk_image(&superblock);
    common::damage(&superblock, 24, &[0xff; 8]);
    let (status, text) = fsck(&superblock);
    assert_eq!(status, 4, "a damaged superblock: {text}");
    assert!(text.contains("not a usable log disk"), "{text}");

    // Operational errors: nothing to examine.
    let (status, text) = fsck(&dir.path().join("missing.img"));
    assert_eq!(status, 8, "a missing file: {text}");
    assert!(text.contains("missing.img"), "{text}");
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, [7u8; 8192]).unwrap();
    let (status, text) = fsck(&junk);
    assert_eq!(status, 8, "not a Cairn image: {text}");
    assert!(text.contains("not a Cairn image"), "{text}");
    let empty = dir.path().join("empty.img");
    std::fs::write(&empty, []).unwrap();
    assert_eq!(fsck(&empty).0, 8, "an empty file");
    assert_eq!(fsck(dir.path()).0, 8, "a directory");

    // Usage errors, as e2fsck's.
    assert_eq!(cairn_status(&["fsck".as_ref()]).0, 16);
    assert_eq!(
        cairn_status(&["-q".as_ref(), "fsck".as_ref(), "a".as_ref(), "b".as_ref()]).0,
        16
    );
    // A global flag's value before the command is not the command.
    let global = [
        "--log-level",
        "warn",
        "--log-format",
        "json",
        "fsck",
        "--bogus",
    ];
    let global: Vec<&std::ffi::OsStr> = global.iter().map(std::ffi::OsStr::new).collect();
    assert_eq!(cairn_status(&global).0, 16);
    // Help says so.
    let (status, text) = cairn_status(&["fsck".as_ref(), "--help".as_ref()]);
    assert_eq!(status, 0);
    for want in [
        "0   the image is clean",
        "4   problems found",
        "8   operational error",
        "never 1",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// A flash tier's cache device image at `cache`, over a backing file beside
/// it: blocks written (write-back: some dirty), flushed, read, the tier
/// closed cleanly. Returns the geometry and the checkpoint in use.
fn tier_image(cache: &std::path::Path) -> (cairn_store::tier::Geometry, u64) {
    use std::sync::Arc;

    use cairn_store::device::FileOptions;
    use cairn_store::tier::open::{Want, open_or_format};
    use cairn_store::tier::{Layout, Mode, Options};
    use cairn_store::{Device, FileDevice};
    let file = |path: &std::path::Path, len: u64| -> cairn_store::device::SharedDevice {
        Arc::new(
            FileDevice::open(
                path,
                &FileOptions {
                    create_len: Some(len),
                    ..FileOptions::default()
                },
            )
            .unwrap(),
        )
    };
    let want = Want {
        layout: Layout {
            block_size: 4096,
            bucket_size: 16 * 4096,
            journal_blocks: 16,
        },
        options: Options {
            mode: Mode::WriteBack,
            policy: cairn_policy::PolicyConfig::default_for("lru").unwrap(),
            shards: 1,
            background: false,
            ..Options::default()
        },
        marker: None,
    };
    let tier = open_or_format(
        file(cache, 4 << 20),
        file(&cache.with_extension("backing"), 16 << 20),
        &want,
    )
    .unwrap();
    for b in 0..200u64 {
        tier.write_at(&[b as u8; 4096], b * 4096).unwrap();
    }
    tier.flush().unwrap();
    let mut buf = [0u8; 4096];
    for b in 1000..1100u64 {
        tier.read_at(&mut buf, b * 4096).unwrap();
    }
    tier.close().unwrap();
    let report = cairn_store::tier::check::fsck(cache).unwrap();
    (report.superblock.geometry, report.checkpoint.number)
}

#[test]
fn fsck_and_inspect_a_tier_cache_device() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.img");
    let (g, number) = tier_image(&path);
    let fsck = || cairn_status(&["fsck".as_ref(), path.as_os_str()]);
    let inspect = || cairn_status(&["inspect".as_ref(), path.as_os_str()]);
    let (status, text) = fsck();
    assert_eq!(status, 0, "{text}");
    assert!(
        text.contains("clean flash tier cache device (300 of")
            && text.contains("200 dirty")
            && text.contains(&format!("checkpoint #{number}, 0 journal blocks")),
        "{text}"
    );
    let (status, text) = inspect();
    assert_eq!(status, 0, "{text}");
    for want in [
        "flash tier cache device v1",
        "4096 bytes; backing device 4096 blocks (16 MiB)",
        "blocks (64 KiB)",
        "clean stop",
        "journal        16 blocks in the ring",
        "cached         300 blocks",
        "clean: no problem found",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }

    // The checkpoint in use damaged: recovery falls back to the older one;
    // fsck says so (4), inspect describes what it falls back to.
    let slot = g.checkpoint_start(number % 2) * 4096;
    common::damage(&path, slot + 100, &[0xa5]);
    let (status, text) = fsck();
    assert_eq!(status, 4, "{text}");
    assert!(
        text.contains("does not decode") && text.contains(&format!("claims #{number}, newer")),
        "{text}"
    );
    assert!(text.contains("1 problems found"), "{text}");
    let (status, text) = inspect();
    assert_eq!(status, 0, "{text}");
    assert!(
        text.contains(&format!("#{} replaying from", number - 1)),
        "{text}"
    );

    // A damaged superblock (its magic intact): no report, a problem (4).
    common::damage(&path, 20, &[0xff; 4]);
    let (status, text) = fsck();
    assert_eq!(status, 4, "{text}");
    assert!(text.contains("not a usable tier cache device"), "{text}");
    assert!(text.contains("tier superblock"), "{text}");
    let (status, text) = inspect();
    assert_ne!(status, 0, "{text}");
    assert!(text.contains("not a usable tier cache device"), "{text}");
}

#[test]
fn fsck_of_a_held_tier_image_says_so_and_reads_it() {
    use cairn_store::FileDevice;
    use cairn_store::device::{Claim, FileOptions};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.img");
    tier_image(&path);
    let _held = FileDevice::open(
        &path,
        &FileOptions {
            claim: Claim::Exclusive,
            ..FileOptions::default()
        },
    )
    .unwrap();
    let (status, text) = cairn_status(&["fsck".as_ref(), path.as_os_str()]);
    assert_eq!(status, 0, "{text}");
    assert!(
        text.contains("is in use by PID") && text.contains("clean flash tier"),
        "{text}"
    );
}
