//! `BLOCK_STATUS` from the device: a log disk and an NTL volume report blocks
//! never written and blocks trimmed as holes that read as zeroes, through the
//! raw client (with and without `REQ_ONE`, partial blocks, a wrapping block
//! cache) and through nbdinfo `--map`.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_nbd::proto::*;
use cairn_store::logdisk::{Geometry, LogDisk, Options};
use cairn_store::ntl::{Btt, NtlDevice, SimRegion};
use cairn_store::{BlockCache, CacheConfig, Device, MemoryDevice};
use common::{Client, TestServer, export, pattern};

const B: u64 = 4096;

/// A 4 MiB log disk (volatile mode) over memory.
fn log_disk() -> Arc<dyn Device> {
    let geo = Geometry {
        block_size: B as u32,
        segment_blocks: 32,
        segments: 48,
        logical_blocks: 1024,
    };
    let dev = MemoryDevice::new(geo.image_blocks() * B);
    Arc::new(LogDisk::format(dev, geo, None, Options::default()).unwrap())
}

/// A 4 MiB NTL volume over a simulated persistent-memory region.
fn ntl() -> Arc<dyn Device> {
    let geo = cairn_store::ntl::Geometry {
        block_size: B,
        lbas: 1024,
        data_blocks: 1040,
    };
    let btt = Btt::format(SimRegion::new(geo.region_len()), geo).unwrap();
    Arc::new(NtlDevice::new(btt))
}

/// (length, flags) pairs of a `BLOCK_STATUS` payload (context id first).
fn extents(data: &[u8]) -> Vec<(u32, u32)> {
    assert_eq!(
        data[..4],
        1u32.to_be_bytes(),
        "base:allocation is context 1"
    );
    data[4..]
        .chunks_exact(8)
        .map(|c| {
            (
                u32::from_be_bytes(c[..4].try_into().unwrap()),
                u32::from_be_bytes(c[4..].try_into().unwrap()),
            )
        })
        .collect()
}

fn status(client: &mut Client, flags: u16, offset: u64, length: u32) -> Vec<(u32, u32)> {
    client.send(CMD_BLOCK_STATUS, flags, offset, length, &[]);
    let reply = client.reply();
    assert_eq!(reply.error, 0);
    assert_eq!(reply.chunks, [REPLY_TYPE_BLOCK_STATUS]);
    extents(&reply.data)
}

const HOLE: u32 = STATE_HOLE | STATE_ZERO;

#[test]
fn a_log_disk_and_an_ntl_volume_report_unwritten_and_trimmed_blocks_as_holes() {
    for (name, cached) in [("log", false), ("log", true), ("ntl", false), ("ntl", true)] {
        let disk = if name == "log" { log_disk() } else { ntl() };
        let device: Arc<dyn Device> = if cached {
            let config = CacheConfig {
                capacity_bytes: 1 << 20,
                block_size_bytes: B,
                ..CacheConfig::default()
            };
            Arc::new(BlockCache::new(disk, &config).unwrap())
        } else {
            disk
        };
        let server = TestServer::start(vec![export("disk", device)]);
        let mut client = Client::connected(&server.path, true);
        // Nothing written yet: one hole.
        assert_eq!(status(&mut client, 0, 0, 1 << 20), [(1 << 20, HOLE)]);
        // Blocks 4..8 and 16..24 written, then 18..20 trimmed.
        assert_eq!(client.write(4 * B, &pattern(1, 4 * B as usize)), 0);
        assert_eq!(client.write(16 * B, &pattern(2, 8 * B as usize)), 0);
        assert_eq!(client.command(CMD_TRIM, 0, 18 * B, 2 * B as u32), 0);
        let want = [
            (4 * B as u32, HOLE),
            (4 * B as u32, 0),
            (8 * B as u32, HOLE),
            (2 * B as u32, 0),
            (2 * B as u32, HOLE),
            (4 * B as u32, 0),
            (8 * B as u32, HOLE),
        ];
        assert_eq!(
            status(&mut client, 0, 0, 32 * B as u32),
            want,
            "{name} cached={cached}"
        );
        // REQ_ONE: the first extent only.
        assert_eq!(
            status(&mut client, CMD_FLAG_REQ_ONE, 0, 32 * B as u32),
            [(4 * B as u32, HOLE)]
        );
        // Partial blocks at both ends take their blocks' state.
        assert_eq!(
            status(&mut client, 0, 5 * B + 100, (3 * B) as u32),
            [((3 * B - 100) as u32, 0), (100, HOLE)]
        );
        // The trimmed blocks read zeroes; their neighbours keep their bytes.
        assert_eq!(client.read(18 * B, 2 * B as u32), vec![0u8; 2 * B as usize]);
        assert_eq!(
            client.read(16 * B, 2 * B as u32),
            pattern(2, 8 * B as usize)[..2 * B as usize]
        );
        // A trim that covers only part of a block leaves it as it was.
        assert_eq!(client.command(CMD_TRIM, 0, 4 * B + 1, B as u32), 0);
        assert_eq!(
            status(&mut client, CMD_FLAG_REQ_ONE, 4 * B, 4 * B as u32),
            [(4 * B as u32, 0)]
        );
        client.disconnect();
        server.stop().unwrap();
    }
}

/// `WRITE_ZEROES` with `FAST_ZERO`: an NTL volume unmaps the whole blocks
/// (holes in `BLOCK_STATUS`, zeroes on read); the log disk has no fast path
/// (its trims are advisory across a crash), so `ENOTSUP` and nothing changes,
/// while a plain `WRITE_ZEROES` still zeroes by writing.
#[test]
fn fast_zero_where_the_device_can_and_enotsup_where_it_cannot() {
    for (name, fast) in [("ntl", true), ("log", false)] {
        let disk = if name == "ntl" { ntl() } else { log_disk() };
        let server = TestServer::start(vec![export("disk", disk)]);
        let mut client = Client::connected(&server.path, true);
        let data = pattern(5, 16 * B as usize);
        assert_eq!(client.write(0, &data), 0);
        let reply = client.command(
            CMD_WRITE_ZEROES,
            CMD_FLAG_FAST_ZERO,
            2 * B + 10,
            8 * B as u32,
        );
        if fast {
            assert_eq!(reply, 0, "{name}");
            let mut want = data.clone();
            want[2 * B as usize + 10..10 * B as usize + 10].fill(0);
            assert_eq!(client.read(0, 16 * B as u32), want, "{name}");
            assert_eq!(
                status(&mut client, 0, 0, 16 * B as u32),
                [(3 * B as u32, 0), (7 * B as u32, HOLE), (6 * B as u32, 0)],
                "{name}: blocks 3..10 unmapped"
            );
        } else {
            assert_eq!(reply, Errno::NotSup.code(), "{name}");
            assert_eq!(client.read(0, 16 * B as u32), data, "{name}: unchanged");
            assert_eq!(
                client.command(CMD_WRITE_ZEROES, 0, 2 * B + 10, 8 * B as u32),
                0
            );
            assert_eq!(
                client.read(2 * B + 10, 8 * B as u32),
                vec![0u8; 8 * B as usize]
            );
        }
        client.disconnect();
        server.stop().unwrap();
    }
}

/// A file volume zeroes by punching a hole where its file system can (the
/// test's temporary directory): `FAST_ZERO` succeeds, the range reads zeroes,
/// its whole pages become a `BLOCK_STATUS` hole, the bytes around it stay.
/// Where the file system cannot punch, `ENOTSUP` and nothing changed.
#[test]
fn fast_zero_punches_a_hole_in_a_file_volume() {
    use cairn_store::device::{FileDevice, FileOptions};
    let dir = tempfile::tempdir().unwrap();
    let file = FileDevice::open(
        dir.path().join("volume"),
        &FileOptions {
            create_len: Some(64 * B),
            ..FileOptions::default()
        },
    )
    .unwrap();
    let server = TestServer::start(vec![export("disk", Arc::new(file))]);
    let mut client = Client::connected(&server.path, true);
    let data = pattern(6, 16 * B as usize);
    assert_eq!(client.write(0, &data), 0);
    assert_eq!(client.command(CMD_FLUSH, 0, 0, 0), 0);
    let reply = client.command(
        CMD_WRITE_ZEROES,
        CMD_FLAG_FAST_ZERO,
        2 * B + 10,
        8 * B as u32,
    );
    let mut want = data.clone();
    if reply == 0 {
        want[2 * B as usize + 10..10 * B as usize + 10].fill(0);
        let extents = status(&mut client, 0, 0, 16 * B as u32);
        assert_eq!(
            extents,
            [(3 * B as u32, 0), (7 * B as u32, HOLE), (6 * B as u32, 0)],
            "blocks 3..10 a hole"
        );
    } else {
        assert_eq!(reply, Errno::NotSup.code());
        eprintln!("SKIPPED: this file system cannot punch holes");
    }
    assert_eq!(client.read(0, 16 * B as u32), want);
    client.disconnect();
    server.stop().unwrap();
}

#[test]
fn nbdinfo_maps_the_holes_of_a_log_disk() {
    let Some(nbdinfo) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nbdinfo"))
            .find(|path| path.is_file())
    }) else {
        eprintln!("SKIPPED: nbdinfo is not installed (test.sh installs it)");
        return;
    };
    let server = TestServer::start(vec![export("disk", log_disk())]);
    let mut client = Client::connected(&server.path, false);
    assert_eq!(client.write(64 * B, &pattern(3, 64 * B as usize)), 0);
    assert_eq!(client.command(CMD_TRIM, 0, 96 * B, 16 * B as u32), 0);
    client.disconnect();
    let uri = format!("nbd+unix:///disk?socket={}", server.path.display());
    let output = std::process::Command::new(nbdinfo)
        .args(["--map", &uri])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let map = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<Vec<&str>> = map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let expect = [
        ["0", "262144", "3"],
        ["262144", "131072", "0"],
        ["393216", "65536", "3"],
        ["458752", "65536", "0"],
        ["524288", "3670016", "3"],
    ];
    assert_eq!(rows.len(), expect.len(), "{map}");
    for (row, want) in rows.iter().zip(expect) {
        assert_eq!(row[..3], want, "{map}");
    }
    server.stop().unwrap();
}

/// `NBD_CMD_CACHE` loads the range into the block cache: the device is read
/// then, and a later READ of the range does not reach it.
#[test]
fn cache_command_prefetches_into_the_block_cache() {
    use cairn_store::FaultyDevice;
    let dev = Arc::new(FaultyDevice::new(4 << 20, 1));
    let config = CacheConfig {
        capacity_bytes: 2 << 20,
        block_size_bytes: B,
        readahead_bytes: 0,
        ..CacheConfig::default()
    };
    let cache = Arc::new(BlockCache::new(dev.clone(), &config).unwrap());
    let server = TestServer::start(vec![export("disk", cache.clone())]);
    let mut client = Client::connected(&server.path, true);
    let data = pattern(9, 256 << 10);
    assert_eq!(client.write(64 << 10, &data), 0);
    let before = dev.counts().reads;
    assert_eq!(client.command(CMD_CACHE, 0, 1 << 20, 256 << 10), 0);
    let loaded = dev.counts().reads - before;
    assert!(loaded > 0, "CACHE read nothing from the device");
    let hits = cache.metrics().hits();
    assert_eq!(client.read(1 << 20, 256 << 10), vec![0u8; 256 << 10]);
    assert_eq!(
        dev.counts().reads - before,
        loaded,
        "the READ after CACHE reached the device"
    );
    assert!(
        cache.metrics().hits() >= hits + 64,
        "64 blocks should have hit"
    );
    // A hint past the end is an error, as READ's would be; a hint larger than
    // half the cache loads only its first half-capacity.
    assert_eq!(
        client.command(CMD_CACHE, 0, 4 << 20, 1),
        Errno::Inval.code()
    );
    assert_eq!(client.command(CMD_CACHE, 0, 0, 4 << 20), 0);
    client.disconnect();
    server.stop().unwrap();
}
