//! Many clients reading the same cold object at once, each on its own
//! connection, cause one backend read per block (papers/000's setting: tens
//! of viewers of one film), and every client gets every byte.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

use cairn_files::MemoryBackend;
use common::{pattern, start};

#[test]
fn concurrent_clients_of_a_cold_object_share_one_read_per_block() {
    let backend = MemoryBackend::new();
    let film = pattern(2 << 20, 11); // 8 blocks of 256 KiB
    backend.put("film.bin", film.clone(), SystemTime::UNIX_EPOCH);
    backend.set_delay(Duration::from_millis(30));
    let server = start(backend, |_| {});
    let clients = 20;
    let barrier = Arc::new(Barrier::new(clients));
    let readers: Vec<_> = (0..clients)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            let addr = server.addr;
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).expect("connect");
                stream
                    .set_read_timeout(Some(Duration::from_secs(20)))
                    .expect("timeout");
                barrier.wait();
                stream
                    .write_all(
                        b"GET /media/film.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    )
                    .expect("send");
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer).expect("read");
                answer
            })
        })
        .collect();
    for reader in readers {
        let answer = reader.join().expect("join");
        let at = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head");
        assert!(answer.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(answer[at + 4..] == film[..], "a client got other bytes");
    }
    let stats = server.cache.stats();
    assert_eq!(server.cache.backend().reads(), 8, "{stats:?}");
    assert_eq!(stats.misses, 8);
    assert_eq!(stats.hits + stats.coalesced, 8 * (clients as u64 - 1));
    assert!(stats.coalesced > 0, "{stats:?}");
    assert_eq!(
        server
            .counters
            .connections
            .load(std::sync::atomic::Ordering::Relaxed),
        clients
    );
}
