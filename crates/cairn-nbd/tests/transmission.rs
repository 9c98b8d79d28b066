//! Every command, with simple and structured replies, through a raw client;
//! replies complete out of order; a flush on one connection covers writes
//! acknowledged on another (`MULTI_CONN`); many clients at once.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_nbd::codec::transmission::RequestHeader;
use cairn_nbd::proto::*;
use cairn_store::{Device, DeviceError, MemoryDevice};
use common::{Client, TestServer, export, pattern};

#[test]
fn every_command_works_with_simple_and_structured_replies() {
    let (server, device) = TestServer::memory(8 << 20);
    for structured in [false, true] {
        let mut client = Client::connected(&server.path, structured);
        assert_eq!(client.size, 8 << 20);
        let expected = FLAG_HAS_FLAGS
            | FLAG_SEND_FLUSH
            | FLAG_SEND_FUA
            | FLAG_SEND_TRIM
            | FLAG_SEND_WRITE_ZEROES
            | FLAG_CAN_MULTI_CONN
            | FLAG_SEND_CACHE
            | FLAG_SEND_FAST_ZERO
            | if structured { FLAG_SEND_DF } else { 0 };
        assert_eq!(client.flags, expected);

        let data = pattern(u64::from(structured), 1 << 20);
        assert_eq!(client.write(4096, &data), 0);
        assert_eq!(client.read(4096, 1 << 20), data);
        assert_eq!(client.read(4096 + 7, 13), data[7..20]);
        let mut direct = vec![0u8; 100];
        device.read_at(&mut direct, 4096).unwrap();
        assert_eq!(direct, data[..100]);

        // FUA write, flush, cache.
        client.send(CMD_WRITE, CMD_FLAG_FUA, 0, 512, &[9u8; 512]);
        assert_eq!(client.reply().error, 0);
        assert_eq!(client.command(CMD_FLUSH, 0, 0, 0), 0);
        assert_eq!(client.command(CMD_CACHE, 0, 0, 1 << 20), 0);

        // Write zeroes (with NO_HOLE and FUA), trim.
        assert_eq!(
            client.command(
                CMD_WRITE_ZEROES,
                CMD_FLAG_NO_HOLE | CMD_FLAG_FUA,
                4096,
                8192
            ),
            0
        );
        assert_eq!(client.read(4096, 8192), vec![0u8; 8192]);
        assert_eq!(client.read(4096 + 8192, 16), data[8192..8192 + 16]);
        // FAST_ZERO: memory zeroes without a payload, so it succeeds; with
        // NO_HOLE too the server will not punch holes, so ENOTSUP and nothing
        // changes.
        assert_eq!(
            client.command(
                CMD_WRITE_ZEROES,
                CMD_FLAG_FAST_ZERO | CMD_FLAG_NO_HOLE,
                4096 + 8192,
                16
            ),
            Errno::NotSup.code()
        );
        assert_eq!(client.read(4096 + 8192, 16), data[8192..8192 + 16]);
        assert_eq!(
            client.command(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 4096 + 8192, 16),
            0
        );
        assert_eq!(client.read(4096 + 8192, 16), vec![0u8; 16]);
        assert_eq!(client.command(CMD_TRIM, 0, 0, 4096), 0);
        // Zero-length requests are harmless.
        assert_eq!(client.command(CMD_TRIM, 0, 0, 0), 0);
        assert_eq!(client.read(0, 0), Vec::<u8>::new());
        client.disconnect();
    }
}

#[test]
fn block_status_reports_the_range_as_data() {
    let (server, _) = TestServer::memory(1 << 20);
    let mut client = Client::connected(&server.path, true);
    for flags in [0, CMD_FLAG_REQ_ONE] {
        client.send(CMD_BLOCK_STATUS, flags, 4096, 65536, &[]);
        let reply = client.reply();
        assert_eq!(reply.error, 0);
        assert_eq!(reply.chunks, [REPLY_TYPE_BLOCK_STATUS]);
        // context id 1, one extent of 65536 bytes with flags 0.
        assert_eq!(reply.data, [0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    }
    // Past the end: EINVAL.
    assert_eq!(
        client.command(CMD_BLOCK_STATUS, 0, 1 << 20, 1),
        Errno::Inval.code()
    );
    // Without SET_META_CONTEXT: EINVAL.
    let mut plain = Client::connected(&server.path, false);
    assert_eq!(
        plain.command(CMD_BLOCK_STATUS, 0, 0, 512),
        Errno::Inval.code()
    );
}

#[test]
fn structured_read_is_one_offset_data_chunk_and_errors_are_error_chunks() {
    let (server, _) = TestServer::memory(1 << 20);
    let mut client = Client::connected(&server.path, true);
    client.send(CMD_READ, CMD_FLAG_DF, 0, 65536, &[]);
    let reply = client.reply();
    assert_eq!(reply.chunks, [REPLY_TYPE_OFFSET_DATA]);
    assert_eq!(reply.data.len(), 65536);
    client.send(CMD_READ, 0, (1 << 20) - 1, 2, &[]);
    let reply = client.reply();
    assert_eq!(reply.chunks, [REPLY_TYPE_ERROR]);
    assert_eq!(reply.error, Errno::Inval.code());
}

/// A memory device whose reads at offset 0 wait until the test opens the gate.
struct GatedDevice {
    inner: MemoryDevice,
    gate: Mutex<mpsc::Receiver<()>>,
}

impl Device for GatedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        if offset == 0 {
            let _ = self
                .gate
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(20));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn describe(&self) -> String {
        "gated memory".into()
    }
}

#[test]
fn replies_complete_out_of_order_while_the_reader_keeps_reading() {
    let (open, gate) = mpsc::channel();
    let device = Arc::new(GatedDevice {
        inner: MemoryDevice::new(1 << 20),
        gate: Mutex::new(gate),
    });
    let server = TestServer::start(vec![export("disk", device)]);
    let mut client = Client::connected(&server.path, true);
    let slow = client.send(CMD_READ, 0, 0, 4096, &[]);
    // Requests sent after the blocked one are read, executed and answered.
    // (The read waits for the write's reply: the server may run requests in
    // flight concurrently, in any order.)
    let write = client.send(CMD_WRITE, 0, 8192, 4, &[1, 2, 3, 4]);
    let first = client.reply();
    assert_eq!((first.cookie, first.error), (write, 0));
    let fast = client.send(CMD_READ, 0, 8192, 4, &[]);
    let second = client.reply();
    assert_eq!(second.cookie, fast);
    assert_eq!(second.data, [1, 2, 3, 4]);
    open.send(()).unwrap();
    assert_eq!(client.reply().cookie, slow);
}

#[test]
fn a_flush_on_one_connection_covers_writes_acknowledged_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("volume");
    let options = cairn_store::device::FileOptions {
        create_len: Some(4 << 20),
        ..Default::default()
    };
    let device = Arc::new(cairn_store::FileDevice::open(&path, &options).unwrap());
    let server = TestServer::start(vec![export("disk", device)]);
    let mut writer = Client::connected(&server.path, true);
    let mut flusher = Client::connected(&server.path, false);
    let data = pattern(5, 65536);
    assert_eq!(writer.write(65536, &data), 0);
    // Acknowledged on one connection: visible on the other at once.
    assert_eq!(flusher.read(65536, 65536), data);
    assert_eq!(flusher.command(CMD_FLUSH, 0, 0, 0), 0);
    // Flushed: the file holds it (read past the server).
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk[65536..131_072], data[..]);
}

#[test]
fn many_clients_at_once_each_see_their_own_writes() {
    let (server, _) = TestServer::memory(16 << 20);
    let threads: Vec<_> = (0..6u64)
        .map(|id| {
            let path = server.path.clone();
            std::thread::spawn(move || {
                let mut client = Client::connected(&path, id % 2 == 0);
                let base = id << 21;
                for round in 0..20u64 {
                    let data = pattern(id * 1000 + round, 65536);
                    let offset = base + (round % 8) * 65536;
                    // Pipeline: write, then read before the write's reply.
                    let write = client.send(CMD_WRITE, 0, offset, 65536, &data);
                    let reply = client.reply();
                    assert_eq!((reply.cookie, reply.error), (write, 0));
                    assert_eq!(client.read(offset, 65536), data);
                }
                client.disconnect();
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn pipelined_requests_all_get_exactly_one_reply() {
    let (server, _) = TestServer::memory(4 << 20);
    let mut client = Client::connected(&server.path, true);
    let mut cookies = std::collections::BTreeSet::new();
    for i in 0..200u64 {
        let offset = (i % 64) * 65536;
        let cookie = if i % 3 == 0 {
            client.send(CMD_WRITE, 0, offset, 65536, &pattern(i, 65536))
        } else if i % 3 == 1 {
            client.send(CMD_READ, 0, offset, 65536, &[])
        } else {
            client.send(CMD_FLUSH, 0, 0, 0, &[])
        };
        cookies.insert(cookie);
    }
    for _ in 0..200 {
        let reply = client.reply();
        assert_eq!(reply.error, 0);
        assert!(cookies.remove(&reply.cookie), "one reply per cookie");
    }
    assert!(cookies.is_empty());
}

#[test]
fn more_requests_than_may_be_in_flight_all_get_replies() {
    // 3000 requests sent by one thread while another reads the replies: far
    // more than a connection may have in flight (256), so the server waits
    // for replies to go out before reading on, and every reply — refused
    // requests' too — must give its request's slot back, or the connection
    // stalls (a socket timeout fails the test; the server is never dropped,
    // since a stalled connection would hold up its shutdown).
    let (server, _) = TestServer::memory(1 << 20);
    let server = std::mem::ManuallyDrop::new(server);
    let mut client = Client::connected(&server.path, true);
    let mut stream = client.stream.try_clone().unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let sender = std::thread::spawn(move || {
        let mut expected = std::collections::BTreeMap::new();
        for cookie in 1..=3000u64 {
            let (command, length, error) = match cookie % 3 {
                0 => (CMD_FLUSH, 0, 0),
                1 => (200, 0, Errno::Inval.code()),
                _ => (CMD_WRITE, 4096, 0),
            };
            let header = RequestHeader {
                flags: 0,
                command,
                cookie,
                offset: (cookie % 256) * 4096,
                length,
            };
            stream.write_all(&header.encode()).unwrap();
            if command == CMD_WRITE {
                stream.write_all(&[7; 4096]).unwrap();
            }
            expected.insert(cookie, error);
        }
        expected
    });
    let mut replies = std::collections::BTreeMap::new();
    for _ in 0..3000 {
        let reply = client.reply();
        assert!(replies.insert(reply.cookie, reply.error).is_none());
    }
    assert_eq!(sender.join().unwrap(), replies);
    assert_eq!(client.read(4096, 4096), vec![7; 4096]);
}

#[test]
fn graceful_shutdown_finishes_in_flight_requests_and_flushes() {
    let (server, device) = TestServer::memory(4 << 20);
    let mut client = Client::connected(&server.path, false);
    let cookies: Vec<_> = (0..16u64)
        .map(|i| client.send(CMD_WRITE, 0, i * 65536, 65536, &pattern(i, 65536)))
        .collect();
    // Wait for the first reply so the requests are certainly received.
    let first = client.reply();
    assert_eq!(first.error, 0);
    let shutdown = server.shutdown.clone();
    let stopper = std::thread::spawn(move || server.stop());
    let mut seen = vec![first.cookie];
    while let Some(reply) = client.try_reply() {
        assert_eq!(reply.error, 0);
        seen.push(reply.cookie);
    }
    seen.sort_unstable();
    assert_eq!(seen, cookies);
    stopper.join().unwrap().unwrap();
    assert!(shutdown.is_requested());
    let mut back = vec![0u8; 65536];
    device.read_at(&mut back, 15 * 65536).unwrap();
    assert_eq!(back, pattern(15, 65536));
}

/// A block cache export lends its buffers and the server writes replies from
/// them (many blocks per reply, more than one `writev`'s worth): what comes
/// back is exactly what was written, in simple and structured replies, while
/// blocks are evicted and overwritten between reads.
#[test]
fn reads_from_a_block_cache_are_sent_from_its_buffers() {
    use cairn_store::cache::{BlockCache, CacheConfig};
    let size = 8u64 << 20;
    let cache = BlockCache::new(
        MemoryDevice::new(size),
        &CacheConfig {
            block_size_bytes: 4096,
            capacity_bytes: 1 << 20,
            shards: 4,
            ..CacheConfig::default()
        },
    )
    .unwrap();
    let cache = Arc::new(cache);
    let server = TestServer::start(vec![export("disk", cache.clone())]);
    for structured in [false, true] {
        let mut client = Client::connected(&server.path, structured);
        let data = pattern(u64::from(structured), 3 << 20);
        assert_eq!(client.write(4096 + 100, &data), 0);
        // 3 MiB through a 1 MiB cache: 769 blocks, 13 writev calls.
        assert_eq!(client.read(4096 + 100, data.len() as u32), data);
        // Overwrite part of a cached block; the next read sees it.
        let patch = pattern(99, 5000);
        assert_eq!(client.write(8192 + 7, &patch), 0);
        let back = client.read(4096, 16384);
        assert_eq!(&back[4096 + 7..4096 + 7 + 5000], &patch[..]);
        assert_eq!(&back[100..4096 + 7], &data[..4096 + 7 - 100]);
        // An empty read and an out-of-range one.
        assert!(client.read(0, 0).is_empty());
        assert_ne!(client.command(CMD_READ, 0, size - 4096, 8192), 0);
        client.disconnect();
    }
    assert!(cache.metrics().hits() > 0, "{:?}", cache.metrics());
    server.stop().unwrap();
}

/// A memory export takes whole-stripe WRITE payloads as its stripes and sends
/// large READs from its stripes: the bytes are exactly what was written,
/// including while another connection overwrites a stripe a READ's reply is
/// still being sent from (the reply has one version of each stripe, never a
/// mix).
#[test]
fn memory_volume_swaps_whole_stripe_writes_and_lends_stripes_to_reads() {
    const MIB: usize = 1 << 20;
    let (server, device) = TestServer::memory(8 << 20);
    for structured in [false, true] {
        let mut client = Client::connected(&server.path, structured);
        // Whole stripes (swapped in), then an unaligned megabyte (copied).
        let whole = pattern(10 + u64::from(structured), 3 * MIB);
        for (i, stripe) in whole.chunks(MIB).enumerate() {
            assert_eq!(client.write((i * MIB) as u64, stripe), 0);
        }
        let odd = pattern(20, MIB);
        assert_eq!(client.write((4 * MIB + 4096) as u64, &odd), 0);
        let mut back = vec![0u8; 3 * MIB];
        device.read_at(&mut back, 0).unwrap();
        assert!(back == whole, "whole-stripe writes read back");
        // Lent (≥ half a stripe) and copied reads, across stripe edges.
        assert!(client.read(0, 3 * MIB as u32) == whole);
        assert!(client.read(4 * MIB as u64 + 4096, MIB as u32) == odd);
        assert_eq!(client.read(MIB as u64 - 10, 20), whole[MIB - 10..MIB + 10]);
        client.disconnect();
    }
    // A 3 MiB READ whose reply the client does not take yet, and a second
    // connection overwriting its middle stripe meanwhile.
    let old = pattern(30, 3 * MIB);
    device.write_at(&old, 0).unwrap();
    let mut slow = Client::connected(&server.path, false);
    slow.send(CMD_READ, 0, 0, 3 * MIB as u32, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let mut other = Client::connected(&server.path, true);
    let new = pattern(31, MIB);
    assert_eq!(other.write(MIB as u64, &new), 0);
    assert_eq!(other.write(MIB as u64 - 4096, &new[..8192]), 0);
    // The device's three states: before, after the first write, after both.
    let mut states = vec![old.clone()];
    let mut state = old.clone();
    state[MIB..2 * MIB].copy_from_slice(&new);
    states.push(state.clone());
    state[MIB - 4096..MIB + 4096].copy_from_slice(&new[..8192]);
    states.push(state);
    let reply = slow.reply();
    assert_eq!(reply.error, 0);
    for (i, stripe) in reply.data.chunks(MIB).enumerate() {
        assert!(
            states.iter().any(|s| stripe == &s[i * MIB..(i + 1) * MIB]),
            "stripe {i} of the reply mixes two versions"
        );
    }
    assert!(reply.data == states[0], "the READ ran before the writes");
    let now = other.read(0, 3 * MIB as u32);
    assert!(now[MIB - 4096..MIB + 4096] == new[..8192]);
    assert!(now[MIB + 4096..2 * MIB] == new[4096..]);
    server.stop().unwrap();
}
