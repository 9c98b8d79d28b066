//! `cairn serve` as a process: SIGTERM finishes and exits 0, a file volume
//! keeps its data across a restart, `--stdio` serves one connection on
//! stdin/stdout, and systemd socket activation works (through libnbd's
//! `nbdinfo -- [ cmd ]`, which starts servers that way).
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_nbd::codec::handshake::{InfoRequest, OptionHeader};
use cairn_nbd::codec::transmission::RequestHeader;
use cairn_nbd::proto::{
    CMD_DISC, CMD_FLUSH, CMD_READ, CMD_WRITE, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, OPT_GO,
    REP_ACK,
};

fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

/// A minimal client over any byte stream: handshake with GO, simple replies.
struct Raw<R, W> {
    reader: R,
    writer: W,
}

impl<R: Read, W: Write> Raw<R, W> {
    fn handshake(&mut self) -> u64 {
        let mut greeting = [0u8; 18];
        self.reader.read_exact(&mut greeting).unwrap();
        assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
        let flags = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;
        self.writer.write_all(&flags.to_be_bytes()).unwrap();
        let data = InfoRequest {
            name: String::new(),
            items: vec![],
        }
        .encode();
        let header = OptionHeader {
            option: OPT_GO,
            length: data.len() as u32,
        };
        self.writer.write_all(&header.encode()).unwrap();
        self.writer.write_all(&data).unwrap();
        let mut size = 0;
        loop {
            let mut head = [0u8; 20];
            self.reader.read_exact(&mut head).unwrap();
            let reply_type = u32::from_be_bytes(head[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(head[16..20].try_into().unwrap()) as usize;
            let mut data = vec![0u8; len];
            self.reader.read_exact(&mut data).unwrap();
            if reply_type == REP_ACK {
                return size;
            }
            assert!(reply_type & (1 << 31) == 0, "GO failed: {reply_type:#x}");
            if data[..2] == [0, 0] {
                size = u64::from_be_bytes(data[2..10].try_into().unwrap());
            }
        }
    }

    fn request(&mut self, command: u16, offset: u64, length: u32, payload: &[u8]) -> Vec<u8> {
        let header = RequestHeader {
            flags: 0,
            command,
            cookie: 1,
            offset,
            length,
        };
        self.writer.write_all(&header.encode()).unwrap();
        self.writer.write_all(payload).unwrap();
        if command == CMD_DISC {
            return Vec::new();
        }
        let mut reply = [0u8; 16];
        self.reader.read_exact(&mut reply).unwrap();
        assert_eq!(reply[4..8], [0, 0, 0, 0], "request failed");
        let mut data = vec![
            0u8;
            if command == CMD_READ {
                length as usize
            } else {
                0
            }
        ];
        self.reader.read_exact(&mut data).unwrap();
        data
    }
}

fn connect(path: &Path) -> Raw<UnixStream, UnixStream> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(stream) = UnixStream::connect(path) {
            return Raw {
                reader: stream.try_clone().unwrap(),
                writer: stream,
            };
        }
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn terminate(mut child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "cairn serve exited with {status}");
}

#[test]
fn a_file_volume_keeps_its_data_across_sigterm_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cairn.sock");
    let volume = dir.path().join("volume.img");
    let listen = format!("unix:{}", socket.display());
    let serve = |extra: &[&str]| {
        cairn()
            .args(["serve", "--quiet", "--listen", &listen, "--file"])
            .arg(&volume)
            .args(extra)
            .spawn()
            .unwrap()
    };
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 253) as u8).collect();

    let child = serve(&["--size", "8MiB"]);
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 8 << 20);
    client.request(CMD_WRITE, 4096, data.len() as u32, &data);
    client.request(CMD_FLUSH, 0, 0, &[]);
    terminate(child);
    assert!(!socket.exists(), "the socket is removed on exit");

    let child = serve(&[]);
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 8 << 20);
    assert_eq!(client.request(CMD_READ, 4096, data.len() as u32, &[]), data);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
}

#[test]
fn stdio_mode_serves_one_connection_and_exits() {
    let mut child = cairn()
        .args(["serve", "--stdio", "--memory", "4MiB"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = Raw {
        reader: child.stdout.take().unwrap(),
        writer: child.stdin.take().unwrap(),
    };
    assert_eq!(client.handshake(), 4 << 20);
    client.request(CMD_WRITE, 0, 4, &[1, 2, 3, 4]);
    assert_eq!(client.request(CMD_READ, 0, 4, &[]), [1, 2, 3, 4]);
    client.request(CMD_DISC, 0, 0, &[]);
    drop(client);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn systemd_socket_activation_through_nbdinfo() {
    let Ok(output) = Command::new("nbdinfo")
        .args(["--json", "--", "["])
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(["serve", "--memory", "8MiB", "]"])
        .output()
    else {
        eprintln!("SKIPPED: nbdinfo is not installed (test.sh installs libnbd-bin)");
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("\"export-size\": 8388608"), "{text}");
}

#[test]
fn bad_serve_arguments_are_clear_errors() {
    for (args, expected) in [
        (
            &["serve", "--listen", "http://x"][..],
            "expected unix:PATH or tcp:HOST:PORT",
        ),
        (&["serve", "--memory", "lots"], "size \"lots\""),
        (&["serve", "--memory", "0"], "more than 0 bytes"),
        (
            &["serve", "--file", "/nonexistent/dir/v.img"],
            "/nonexistent/dir/v.img",
        ),
    ] {
        let output = cairn().args(args).output().unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn a_server_whose_stdout_and_stderr_closed_keeps_serving_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cairn.sock");
    let mut child = cairn()
        .args(["serve", "--memory", "4MiB", "--listen"])
        .arg(format!("unix:{}", socket.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = connect(&socket);
    // The starter goes away: every later log line or print fails with EPIPE.
    drop(child.stdout.take());
    drop(child.stderr.take());
    assert_eq!(client.handshake(), 4 << 20);
    client.request(CMD_WRITE, 0, 4, &[1, 2, 3, 4]);
    assert_eq!(client.request(CMD_READ, 0, 4, &[]), [1, 2, 3, 4]);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
}
