//! kill -9 during writes loses nothing it promised: the default volume stack
//! (read cache over the log disk with its NV write cache over a file, at test sizes) and the same
//! stack without the NV cache are killed with SIGKILL while four connections
//! write 4 KiB blocks and flush, then restarted, three times each. After each
//! restart every block holds, whole and untorn, the last write acknowledged
//! before its connection's last completed flush or a write sent after that
//! flush; with the NV cache, the last *acknowledged* write or the one in
//! flight (an acknowledged write is durable there without a flush).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use cairn_nbd::proto::{CMD_DISC, CMD_FLUSH, CMD_READ, CMD_WRITE};
use common::{cairn, connect, nv_dir, small_default_spec, terminate};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BLOCK: usize = 4096;
/// Blocks written: 32 MiB, twice the NV cache, so destaging runs mid-crash.
const BLOCKS: u64 = 8192;
const CONNECTIONS: u64 = 4;
/// Kill-and-restart cycles per test; `CAIRN_CRASH_CYCLES` sets more
/// (`bench/kill9-stress.sh` runs 200).
fn rounds() -> u32 {
    std::env::var("CAIRN_CRASH_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

type Client = common::Raw<std::os::unix::net::UnixStream, std::os::unix::net::UnixStream>;

/// Block `block` as written by generation `generation` (0 = never written:
/// zeroes).
fn contents(block: u64, generation: u64) -> Vec<u8> {
    if generation == 0 {
        return vec![0; BLOCK];
    }
    let mut data = vec![0u8; BLOCK];
    let mut state = (block << 32) ^ generation ^ 0x5DEE_CE66_D1CE_4E5B;
    for chunk in data.chunks_exact_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    data[..8].copy_from_slice(&block.to_le_bytes());
    data[8..16].copy_from_slice(&generation.to_le_bytes());
    data
}

/// What one connection knows when the server dies.
#[derive(Default)]
struct Known {
    /// Per owned block: generation acknowledged before the last completed flush.
    flushed: Vec<(u64, u64)>,
    /// Per owned block: the last acknowledged generation.
    acked: Vec<(u64, u64)>,
    /// (block, generation) sent after the last completed flush, acknowledged
    /// or not.
    since_flush: Vec<(u64, u64)>,
    /// The write sent but not acknowledged when the connection died.
    in_flight: Option<(u64, u64)>,
    writes: u64,
}

fn writer(
    mut client: Client,
    lane: u64,
    seed: u64,
    first_generation: u64,
    on_disk: &[u64],
) -> Known {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ lane);
    let owned: Vec<u64> = (lane..BLOCKS).step_by(CONNECTIONS as usize).collect();
    let start: Vec<(u64, u64)> = owned.iter().map(|&b| (b, on_disk[b as usize])).collect();
    let mut known = Known {
        flushed: start.clone(),
        acked: start,
        ..Known::default()
    };
    let index = |block: u64| (block / CONNECTIONS) as usize;
    let mut generation = first_generation + lane;
    loop {
        let block = owned[rng.random_range(0..owned.len())];
        generation += CONNECTIONS;
        known.since_flush.push((block, generation));
        known.in_flight = Some((block, generation));
        let data = contents(block, generation);
        if client
            .try_request(CMD_WRITE, block * BLOCK as u64, BLOCK as u32, &data)
            .is_err()
        {
            return known;
        }
        known.in_flight = None;
        known.acked[index(block)].1 = generation;
        known.writes += 1;
        if rng.random_ratio(1, 16) {
            if client.try_request(CMD_FLUSH, 0, 0, &[]).is_err() {
                return known;
            }
            known.flushed.clone_from(&known.acked);
            known.since_flush.clear();
        }
    }
}

/// A server on `config`; what it logs goes to `log`.
fn start(dir: &Path, config: &Path, socket: &Path, log: &Path) -> Child {
    cairn()
        .args(["serve", "--quiet", "--config"])
        .arg(config)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .current_dir(dir)
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// Reads every block; returns each block's generation, checking the block
/// is whole.
fn read_all(socket: &Path) -> Vec<u64> {
    let mut client = connect(socket);
    assert_eq!(client.handshake(), 64 << 20);
    let chunk = 256u64;
    let mut generations = Vec::with_capacity(BLOCKS as usize);
    for first in (0..BLOCKS).step_by(chunk as usize) {
        let data = client.request(
            CMD_READ,
            first * BLOCK as u64,
            (chunk as usize * BLOCK) as u32,
            &[],
        );
        for (i, block) in data.chunks_exact(BLOCK).enumerate() {
            let b = first + i as u64;
            let generation = u64::from_le_bytes(block[8..16].try_into().unwrap());
            assert!(
                block == contents(b, generation).as_slice(),
                "block {b} is torn or foreign (claims generation {generation})"
            );
            generations.push(generation);
        }
    }
    client.request(CMD_DISC, 0, 0, &[]);
    generations
}

/// `min_writes`: acknowledged writes needed before a kill for the round to
/// test anything (a durable NV cache on a slow disk takes fewer per second).
fn crash_cycles(name: &str, spec: &str, nv: bool, min_writes: u64) {
    // CAIRN_SEED replays a failure; otherwise a new seed each run.
    let seed: u64 = std::env::var("CAIRN_SEED").map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        },
        |s| s.parse().unwrap(),
    );
    eprintln!("{name}: seed {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("volume.toml");
    std::fs::write(&config, spec).unwrap();
    let socket = dir.path().join("cairn.sock");
    let mut on_disk = vec![0u64; BLOCKS as usize];
    let mut generation = 0;
    let log = dir.path().join("stderr.txt");
    let rounds = rounds();
    let mut recoveries = 0;
    for round in 0..rounds {
        let mut server = start(dir.path(), &config, &socket, &log);
        // Connected before the clock starts, so a slow start is never killed
        // before it serves.
        let clients: Vec<Client> = (0..CONNECTIONS)
            .map(|_| {
                let mut client = connect(&socket);
                assert_eq!(client.handshake(), 64 << 20);
                client
            })
            .collect();
        let known: Vec<Known> = std::thread::scope(|scope| {
            let lanes: Vec<_> = clients
                .into_iter()
                .zip(0..)
                .map(|(client, lane)| {
                    let on_disk = &on_disk;
                    let round_seed = seed ^ u64::from(round) << 40;
                    scope.spawn(move || writer(client, lane, round_seed, generation, on_disk))
                })
                .collect();
            std::thread::sleep(Duration::from_millis(rng.random_range(300..900)));
            server.kill().unwrap(); // SIGKILL
            server.wait().unwrap();
            lanes.into_iter().map(|l| l.join().unwrap()).collect()
        });
        let writes: u64 = known.iter().map(|k| k.writes).sum();
        eprintln!("{name}: round {round}: killed after {writes} acknowledged writes");
        assert!(
            writes > min_writes,
            "{writes} writes before the kill: too few to test anything"
        );
        std::fs::remove_file(&socket).ok();
        let server = start(dir.path(), &config, &socket, &log);
        let found = read_all(&socket);
        // It listens only after opening the volume, so the log is complete.
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(
            logged.contains("recovered after an unclean stop"),
            "{name} seed {seed} round {round}: the restart after kill -9 was not reported \
             as a crash recovery:\n{logged}"
        );
        recoveries += 1;
        for (lane, k) in known.iter().enumerate() {
            for (&(block, flushed), &(_, acked)) in k.flushed.iter().zip(&k.acked) {
                let got = found[block as usize];
                let later = |g: u64| k.since_flush.contains(&(block, g));
                assert!(
                    got == flushed || later(got),
                    "{name} seed {seed} round {round} lane {lane}: block {block} holds generation \
                     {got}; flushed {flushed}, acknowledged {acked}"
                );
                if nv {
                    assert!(
                        got == acked || k.in_flight == Some((block, got)),
                        "{name} seed {seed} round {round}: block {block} holds generation {got}, \
                         but {acked} was acknowledged (durable in the NV cache)"
                    );
                }
            }
            generation = generation.max(k.since_flush.iter().map(|&(_, g)| g).max().unwrap_or(0));
            generation = generation.max(k.acked.iter().map(|&(_, g)| g).max().unwrap_or(0));
        }
        on_disk = found;
        generation += CONNECTIONS;
        terminate(server);
    }
    eprintln!(
        "{name}: {rounds} kill -9 cycles, {recoveries} reported as crash recoveries, \
         0 acknowledged-and-flushed writes lost (seed {seed})"
    );
}

#[test]
fn kill_9_loses_no_acknowledged_write_on_the_default_stack() {
    let nv = nv_dir();
    let spec = small_default_spec("64MiB", "96MiB", nv.path());
    crash_cycles("with NV cache", &spec, true, 100);
}

/// The default as shipped: the NV write cache is a file in the data
/// directory, synced at every flush (not RAM); kill -9 keeps every
/// acknowledged write (the page cache outlives the process).
#[test]
fn kill_9_loses_no_acknowledged_write_on_the_durable_default_stack() {
    let nv = nv_dir();
    let spec = small_default_spec("64MiB", "96MiB", nv.path());
    let durable: String = spec
        .lines()
        .map(|line| {
            if line.starts_with("nv_cache") {
                "nv_cache = { size = \"16MiB\" }"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(durable.contains("nv_cache = { size"), "{durable}");
    crash_cycles("durable NV cache", &durable, true, 10);
}

#[test]
fn kill_9_loses_no_flushed_write_on_a_log_disk_without_nv_cache() {
    let nv = nv_dir();
    let spec = small_default_spec("64MiB", "96MiB", nv.path());
    let without: String = spec
        .lines()
        .filter(|line| !line.starts_with("nv_cache"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(without, spec);
    crash_cycles("without NV cache", &without, false, 100);
}
