//! Shared by the `cairn serve` process tests: the binary, a minimal NBD
//! client over any byte stream, and a small copy of the default volume spec.
#![allow(dead_code, unused_imports, clippy::unwrap_used)]

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use cairn_nbd::codec::handshake::{InfoRequest, OptionHeader};
use cairn_nbd::codec::transmission::RequestHeader;
use cairn_nbd::proto::{
    CMD_DISC, CMD_READ, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, OPT_GO, REP_ACK,
};

pub mod examples;
pub mod metrics;

#[path = "../../../cairn-nbd/tests/common/certificates.rs"]
mod certificates;
pub use certificates::certificates;

/// A server child, killed (and reaped) if the test fails before it stops it.
pub struct Server(pub Option<Child>);

impl Server {
    /// The child, for the test to stop or kill itself.
    pub fn take(&mut self) -> Child {
        self.0.take().expect("the server was taken already")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

/// A minimal client over any byte stream: handshake with GO, simple replies.
pub struct Raw<R, W> {
    pub reader: R,
    pub writer: W,
}

impl<R: Read, W: Write> Raw<R, W> {
    /// Negotiates the default export; returns its size.
    pub fn handshake(&mut self) -> u64 {
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

    /// One request, its simple reply checked for success.
    pub fn request(&mut self, command: u16, offset: u64, length: u32, payload: &[u8]) -> Vec<u8> {
        self.try_request(command, offset, length, payload)
            .unwrap_or_else(|e| panic!("request {command} at {offset}: {e}"))
    }

    /// One request; `Err` if the connection fails or the server replies
    /// with an error.
    pub fn try_request(
        &mut self,
        command: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> io::Result<Vec<u8>> {
        let header = RequestHeader {
            flags: 0,
            command,
            cookie: 1,
            offset,
            length,
        };
        self.writer.write_all(&header.encode())?;
        self.writer.write_all(payload)?;
        if command == CMD_DISC {
            return Ok(Vec::new());
        }
        let mut reply = [0u8; 16];
        self.reader.read_exact(&mut reply)?;
        if reply[4..8] != [0, 0, 0, 0] {
            return Err(io::Error::other(format!(
                "the server replied with error {:?}",
                &reply[4..8]
            )));
        }
        let mut data = vec![
            0u8;
            if command == CMD_READ {
                length as usize
            } else {
                0
            }
        ];
        self.reader.read_exact(&mut data)?;
        Ok(data)
    }
}

/// Connects to a server's Unix socket, waiting up to 20 s for it to listen.
pub fn connect(path: &Path) -> Raw<UnixStream, UnixStream> {
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

/// Waits until a `cairn serve` started in `dir` with the default sockets
/// (`cairn-data/cairn.sock`, `cairn-data/cairn.ctl`) answers on both.
pub fn wait_for_sockets(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for socket in ["cairn-data/cairn.sock", "cairn-data/cairn.ctl"] {
        while UnixStream::connect(dir.join(socket)).is_err() {
            assert!(Instant::now() < deadline, "{socket} never answered");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// SIGTERM, and the server must exit 0.
pub fn terminate(mut child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "cairn serve exited with {status}");
}

/// The embedded default spec (`--print-default-config`) at test sizes: a
/// `volume`-byte log disk over a file 25 % larger, its NV cache (16 MiB) in
/// `nv_dir` — on /dev/shm where it exists, so declared `volatile` (the
/// default keeps it in the data directory, on disk).
pub fn small_default_spec(volume: &str, file: &str, nv_dir: &Path) -> String {
    let output = cairn()
        .args(["serve", "--print-default-config"])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let small = text
        .replace("size = \"1GiB\"", &format!("size = \"{volume}\""))
        .replace("size = \"1280MiB\"", &format!("size = \"{file}\""))
        .replace(
            "nv_cache = { size = \"64MiB\" }",
            &format!(
                "nv_cache = {{ path = \"{}\", size = \"16MiB\", volatile = true }}",
                nv_dir.join("log.nv").display()
            ),
        );
    for wanted in [
        format!("size = \"{volume}\""),
        format!("size = \"{file}\""),
        "log.nv".to_owned(),
        "kind = \"cache\"".to_owned(),
    ] {
        assert!(
            small.contains(&wanted),
            "the default spec changed shape:\n{text}"
        );
    }
    small
}

/// A directory for NV regions: on /dev/shm when present (as the default
/// spec does), else in the system temporary directory.
pub fn nv_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Runs `qemu_io -f raw -c C … uri` with each of `commands` and asserts
/// that it succeeded with no command failed and no pattern mismatched
/// (`read -P`); `context` prefixes the message.
pub fn qemu_io(qemu_io: &Path, uri: &str, commands: &[impl AsRef<str>], context: &str) {
    let mut command = std::process::Command::new(qemu_io);
    command.args(["-f", "raw"]);
    for c in commands {
        command.args(["-c", c.as_ref()]);
    }
    let output = command.arg(uri).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && !text.contains("failed") && !text.contains("Pattern"),
        "{context}qemu-io {:?}:\n{text}",
        commands.iter().map(AsRef::as_ref).collect::<Vec<_>>()
    );
}

/// The path of a tool on PATH, or `None`.
pub fn tool(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

/// A small clean log-disk image at `path` (200 logical blocks of 4 KiB,
/// written four times over, closed cleanly); returns where logical block 9's
/// data lives, as a physical block number.
pub fn log_disk_image(path: &Path) -> u64 {
    use cairn_store::device::FileOptions;
    use cairn_store::logdisk::{Geometry, LogDisk, Options};
    use cairn_store::{Device, FileDevice};
    let g = Geometry {
        block_size: 4096,
        segment_blocks: 32,
        segments: 16,
        logical_blocks: 200,
    };
    let dev = FileDevice::open(
        path,
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
}

/// Overwrites `bytes` at `offset` in the file at `path`.
pub fn damage(path: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, offset).unwrap();
    file.sync_all().unwrap();
}

/// `examples/volumes/objects.toml` pointed at the test cluster (`config`)
/// under `prefix`, 256 MiB with 1 MiB segments, then `edits` (each a line's
/// text and its replacement); panics if the example no longer has a line an
/// edit expects.
pub fn objects_example(
    config: &cairn_objects::S3Config,
    prefix: &str,
    edits: &[(&str, &str)],
) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/volumes/objects.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let bucket = format!("bucket = \"{}\"", config.bucket);
    let prefix = format!("prefix = \"{prefix}\"");
    let base = [
        ("http://127.0.0.1:7480", config.endpoint.as_str()),
        ("bucket = \"cairn\"", bucket.as_str()),
        ("prefix = \"volumes/vm1/\"", prefix.as_str()),
        ("size = \"16GiB\"", "size = \"256MiB\""),
        ("object_size = \"8MiB\"", "object_size = \"1MiB\""),
    ];
    let mut spec = text.clone();
    for (from, to) in base.iter().chain(edits) {
        assert!(
            spec.contains(from),
            "the example changed shape (no {from}):\n{text}"
        );
        spec = spec.replace(from, to);
    }
    spec
}
