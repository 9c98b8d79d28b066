//! A malformed or hostile client gets the protocol's error or a closed
//! connection; the server never panics, keeps serving every other client, and
//! loses nothing it acknowledged. (Debian's nbdkit 1.32 crashes when a client
//! disconnects with replies in flight; this file keeps us from doing the same.)
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use cairn_nbd::codec::handshake::OptionHeader;
use cairn_nbd::codec::transmission::RequestHeader;
use cairn_nbd::proto::*;
use common::{Client, TestServer, pattern};

/// After whatever happened, a fresh client still gets correct service and
/// the sentinel write made before is intact.
fn assert_still_serving(server: &TestServer, sentinel: &[u8]) {
    let mut client = Client::connected(&server.path, true);
    assert_eq!(client.read(0, sentinel.len() as u32), sentinel);
    assert_eq!(client.write(1 << 20, &[1, 2, 3]), 0);
    client.disconnect();
}

fn with_sentinel() -> (TestServer, Vec<u8>) {
    let (server, _) = TestServer::memory(4 << 20);
    let sentinel = pattern(42, 4096);
    let mut client = Client::connected(&server.path, false);
    assert_eq!(client.write(0, &sentinel), 0);
    client.disconnect();
    (server, sentinel)
}

/// True when the server closed the connection (EOF or reset).
fn closed(stream: &mut UnixStream) -> bool {
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

#[test]
fn bad_request_magic_closes_only_that_connection() {
    let (server, sentinel) = with_sentinel();
    let mut bystander = Client::connected(&server.path, true);
    let mut client = Client::connected(&server.path, false);
    let mut bytes = RequestHeader {
        flags: 0,
        command: CMD_READ,
        cookie: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    bytes[0] = 0xff;
    client.stream.write_all(&bytes).unwrap();
    assert!(closed(&mut client.stream));
    assert_eq!(bystander.read(0, 4096), sentinel);
    assert_still_serving(&server, &sentinel);
}

#[test]
fn unknown_commands_and_flags_get_einval_and_the_connection_goes_on() {
    let (server, sentinel) = with_sentinel();
    for structured in [false, true] {
        let mut client = Client::connected(&server.path, structured);
        assert_eq!(client.command(200, 0, 0, 0), Errno::Inval.code());
        assert_eq!(
            client.command(CMD_FLUSH, 1 << 15, 0, 0),
            Errno::Inval.code()
        );
        assert_eq!(
            client.command(CMD_TRIM, CMD_FLAG_REQ_ONE, 0, 512),
            Errno::Inval.code()
        );
        assert_eq!(
            client.command(CMD_READ, CMD_FLAG_PAYLOAD_LEN, 0, 512),
            Errno::Inval.code()
        );
        // A WRITE with bad flags: refused, its payload skipped, stream in sync.
        client.send(CMD_WRITE, CMD_FLAG_DF, 0, 4096, &[0xee; 4096]);
        assert_eq!(client.reply().error, Errno::Inval.code());
        assert_eq!(client.read(0, 4096), sentinel);
        client.disconnect();
    }
    assert_still_serving(&server, &sentinel);
}

#[test]
fn out_of_range_requests_get_einval_or_enospc() {
    let (server, sentinel) = with_sentinel();
    let mut client = Client::connected(&server.path, false);
    let size = client.size;
    assert_eq!(client.command(CMD_READ, 0, size, 1), Errno::Inval.code());
    assert_eq!(
        client.command(CMD_READ, 0, u64::MAX, 2),
        Errno::Inval.code()
    );
    client.send(CMD_WRITE, 0, size - 1, 2, &[1, 2]);
    assert_eq!(client.reply().error, Errno::NoSpc.code());
    assert_eq!(
        client.command(CMD_WRITE_ZEROES, 0, size, 512),
        Errno::NoSpc.code()
    );
    assert_eq!(
        client.command(CMD_TRIM, 0, size - 1, 512),
        Errno::Inval.code()
    );
    assert_eq!(
        client.command(CMD_CACHE, 0, u64::MAX, 1),
        Errno::Inval.code()
    );
    client.disconnect();
    assert_still_serving(&server, &sentinel);
}

#[test]
fn oversized_payloads_are_refused_without_losing_sync() {
    let (server, sentinel) = with_sentinel();
    let mut client = Client::connected(&server.path, true);
    let too_big = (64 << 20) + 1;
    assert_eq!(client.command(CMD_READ, 0, 0, too_big), Errno::Inval.code());
    // A 64 MiB + 1 write: refused with EINVAL, payload drained, in sync.
    let payload = vec![0xabu8; too_big as usize];
    let writer = {
        let mut stream = client.stream.try_clone().unwrap();
        std::thread::spawn(move || {
            let header = RequestHeader {
                flags: 0,
                command: CMD_WRITE,
                cookie: 99,
                offset: 0,
                length: too_big,
            };
            stream.write_all(&header.encode()).unwrap();
            stream.write_all(&payload).unwrap();
        })
    };
    let reply = client.reply();
    writer.join().unwrap();
    assert_eq!((reply.cookie, reply.error), (99, Errno::Inval.code()));
    assert_eq!(client.read(0, 4096), sentinel);
    client.disconnect();
}

#[test]
fn truncated_frames_close_the_connection() {
    let (server, sentinel) = with_sentinel();
    // Truncated request header.
    let mut client = Client::connected(&server.path, false);
    client.stream.write_all(&[0x25, 0x60, 0x95]).unwrap();
    client.stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed(&mut client.stream));
    // Truncated write payload.
    let mut client = Client::connected(&server.path, false);
    let header = RequestHeader {
        flags: 0,
        command: CMD_WRITE,
        cookie: 1,
        offset: 0,
        length: 4096,
    };
    client.stream.write_all(&header.encode()).unwrap();
    client.stream.write_all(&[0xee; 100]).unwrap();
    client.stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed(&mut client.stream));
    // Truncated option.
    let mut stream = UnixStream::connect(&server.path).unwrap();
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).unwrap();
    stream.write_all(&3u32.to_be_bytes()).unwrap();
    let option = OptionHeader {
        option: OPT_GO,
        length: 100,
    };
    stream.write_all(&option.encode()).unwrap();
    stream.write_all(&[0; 10]).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed(&mut stream));
    // The unwritten payload never reached the device.
    assert_still_serving(&server, &sentinel);
}

#[test]
fn garbage_handshakes_close_the_connection() {
    let (server, sentinel) = with_sentinel();
    let cases: [&[u8]; 4] = [
        &[0, 0, 0, 0],                                   // not fixed newstyle
        &[0xff, 0xff, 0xff, 0xff],                       // unknown client flags
        b"\0\0\0\x03NOTMAGIC\0\0\0\x07\0\0\0\0",         // bad option magic
        b"\0\0\0\x03IHAVEOPT\0\0\0\x07\xff\xff\xff\xff", // 4 GiB option
    ];
    for bytes in cases {
        let mut stream = UnixStream::connect(&server.path).unwrap();
        let mut greeting = [0u8; 18];
        stream.read_exact(&mut greeting).unwrap();
        stream.write_all(bytes).unwrap();
        assert!(closed(&mut stream), "{bytes:?}");
    }
    // EXPORT_NAME for an unknown export: the spec says close.
    let mut client = Client::connect(&server.path);
    client.greet();
    let option = OptionHeader {
        option: OPT_EXPORT_NAME,
        length: 4,
    };
    client.stream.write_all(&option.encode()).unwrap();
    client.stream.write_all(b"nope").unwrap();
    assert!(closed(&mut client.stream));
    // ABORT is acknowledged, then closed.
    let mut client = Client::connect(&server.path);
    client.greet();
    assert_eq!(client.option(OPT_ABORT, &[])[0].reply_type, REP_ACK);
    assert!(closed(&mut client.stream));
    assert_still_serving(&server, &sentinel);
}

#[test]
fn disconnecting_with_replies_in_flight_harms_no_one() {
    let (server, sentinel) = with_sentinel();
    let mut bystander = Client::connected(&server.path, true);
    for round in 0..5 {
        let mut client = Client::connected(&server.path, round % 2 == 0);
        for i in 0..64u64 {
            if i % 4 == 0 {
                let offset = (1 << 20) + i * 4096;
                client.send(CMD_WRITE, 0, offset, 4096, &pattern(i, 4096));
            } else {
                client.send(CMD_READ, 0, 0, 1 << 20, &[]);
            }
        }
        drop(client); // hang up without reading a single reply
        assert_eq!(bystander.read(0, 4096), sentinel);
    }
    assert_still_serving(&server, &sentinel);
    bystander.disconnect();
    server.stop().unwrap();
}

#[test]
fn a_client_that_never_reads_replies_does_not_block_others() {
    let (server, sentinel) = with_sentinel();
    let hog = Client::connected(&server.path, true);
    // Far more reply bytes than any socket buffer holds; never read them.
    let writer = {
        let mut stream = hog.stream.try_clone().unwrap();
        std::thread::spawn(move || {
            for cookie in 0..512u64 {
                let header = RequestHeader {
                    flags: 0,
                    command: CMD_READ,
                    cookie,
                    offset: 0,
                    length: 1 << 20,
                };
                if stream.write_all(&header.encode()).is_err() {
                    return;
                }
            }
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_still_serving(&server, &sentinel);
    hog.stream.shutdown(std::net::Shutdown::Both).unwrap();
    writer.join().unwrap();
    drop(hog);
    assert_still_serving(&server, &sentinel);
}
