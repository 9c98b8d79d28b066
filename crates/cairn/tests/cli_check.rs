//! `cairn fsck` and `cairn inspect` on real image files: a clean log disk is
//! clean and described; a flipped data byte is found, named, and fails fsck.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use cairn_store::device::FileOptions;
use cairn_store::logdisk::{Geometry, LogDisk, Options};
use cairn_store::{Device, FileDevice};

fn cairn(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("cairn runs");
    (
        output.status.success(),
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
    let g = Geometry {
        block_size: 4096,
        segment_blocks: 32,
        segments: 16,
        logical_blocks: 200,
    };
    let physical = {
        let dev = FileDevice::open(
            &path,
            &FileOptions {
                create_len: Some(g.image_blocks() * 4096),
                ..FileOptions::default()
            },
        )
        .unwrap();
        let disk = LogDisk::format(dev, g, None, Options::default()).unwrap();
        for round in 0..4u8 {
            for l in 0..200 {
                disk.write_blocks(l, &[round ^ l as u8; 4096]).unwrap();
            }
        }
        disk.close().unwrap();
        // Where logical block 9 lives: the first data slot holding its bytes.
        let mut block = vec![0u8; 4096];
        (g.segment_start(0)..g.image_blocks())
            .find(|&p| {
                disk.device().read_at(&mut block, p * 4096).unwrap();
                block.iter().all(|&b| b == 3 ^ 9)
            })
            .unwrap()
    };
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
    let dev = FileDevice::open(&path, &FileOptions::default()).unwrap();
    dev.write_at(&[0xee], physical * 4096 + 17).unwrap();
    dev.flush().unwrap();
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
    let (ok, out) = cairn(&["fsck".as_ref(), path.as_os_str()]);
    assert!(!ok && out.contains("block 5"), "{out}");
}
