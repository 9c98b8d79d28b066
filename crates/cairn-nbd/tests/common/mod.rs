//! A server on a Unix socket in a temporary directory, and a raw NBD client
//! that speaks the protocol byte by byte (through the codec's client-side
//! encoders), so tests can send anything a hostile client would.
#![allow(
    dead_code,
    unused_imports,
    clippy::missing_panics_doc,
    clippy::unwrap_used
)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_nbd::codec::handshake::{
    InfoRequest, MetaRequest, OptionHeader, OptionReply, decode_option_replies,
};
use cairn_nbd::codec::transmission::{ReplyHeader, RequestHeader};
use cairn_nbd::proto::*;
use cairn_nbd::{Export, ListenAddress, Listener, Server, Shutdown, TlsConfig};
use cairn_store::{Device, MemoryDevice};

mod certificates;
pub use certificates::certificates;

pub struct TestServer {
    pub path: PathBuf,
    pub shutdown: Shutdown,
    /// The server being served (for `reload_tls`).
    pub server: Server,
    thread: Option<JoinHandle<Result<(), cairn_nbd::ServerError>>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// Serve one memory export named "disk" of `size` bytes.
    pub fn memory(size: u64) -> (Self, Arc<MemoryDevice>) {
        let device = Arc::new(MemoryDevice::new(size));
        let server = Self::start(vec![export("disk", device.clone())]);
        (server, device)
    }

    pub fn start(exports: Vec<Export>) -> Self {
        Self::start_with_tls(exports, TlsConfig::off())
    }

    pub fn start_with_tls(exports: Vec<Export>, tls: TlsConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nbd.sock");
        let listener = Listener::bind(&ListenAddress::Unix(path.clone())).unwrap();
        let server = Server::with_tls(exports, tls).unwrap();
        let shutdown = server.shutdown_handle();
        let serving = server.clone();
        let thread = std::thread::spawn(move || serving.serve(&listener));
        Self {
            path,
            shutdown,
            server,
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub fn uri(&self) -> String {
        format!("nbd+unix:///disk?socket={}", self.path.display())
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.path)
    }

    /// Trigger shutdown and wait for the server to finish.
    pub fn stop(mut self) -> Result<(), cairn_nbd::ServerError> {
        self.shutdown.trigger();
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shutdown.trigger();
            let _ = thread.join();
        }
    }
}

pub fn export(name: &str, device: Arc<dyn Device>) -> Export {
    Export {
        name: name.into(),
        description: String::new(),
        device,
        read_only: false,
    }
}

/// A reply as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub cookie: u64,
    /// 0 on success.
    pub error: u32,
    /// READ data, or the raw `BLOCK_STATUS` payload.
    pub data: Vec<u8>,
    /// Chunk types received (structured replies only).
    pub chunks: Vec<u16>,
}

pub struct Client {
    pub stream: UnixStream,
    pub structured: bool,
    pub size: u64,
    pub flags: u16,
    /// cookie → (offset, length) of outstanding reads (simple replies need it).
    reads: HashMap<u64, (u64, u32)>,
    next_cookie: u64,
}

impl Client {
    pub fn connect(path: &std::path::Path) -> Self {
        let stream = UnixStream::connect(path).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Self {
            stream,
            structured: false,
            size: 0,
            flags: 0,
            reads: HashMap::new(),
            next_cookie: 1,
        }
    }

    /// Read the greeting and send the client flags.
    pub fn greet(&mut self) {
        let mut greeting = [0u8; 18];
        self.stream.read_exact(&mut greeting).unwrap();
        assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
        self.stream
            .write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
            .unwrap();
    }

    /// Send one option and read replies up to a final one (ACK or error).
    pub fn option(&mut self, option: u32, data: &[u8]) -> Vec<OptionReply> {
        let header = OptionHeader {
            option,
            length: data.len() as u32,
        };
        self.stream.write_all(&header.encode()).unwrap();
        self.stream.write_all(data).unwrap();
        let mut replies = Vec::new();
        loop {
            let mut head = [0u8; 20];
            self.stream.read_exact(&mut head).unwrap();
            let len = u32::from_be_bytes(head[16..20].try_into().unwrap()) as usize;
            let mut bytes = head.to_vec();
            bytes.resize(20 + len, 0);
            self.stream.read_exact(&mut bytes[20..]).unwrap();
            let reply = decode_option_replies(&bytes).unwrap().remove(0);
            let last = reply.reply_type == REP_ACK || reply.reply_type & REP_FLAG_ERROR != 0;
            replies.push(reply);
            if last {
                return replies;
            }
        }
    }

    /// The whole handshake as libnbd does it: structured replies and
    /// `base:allocation` when `structured`, then GO with `BLOCK_SIZE`.
    pub fn handshake(&mut self, name: &str, structured: bool) {
        self.greet();
        if structured {
            let replies = self.option(OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(replies[0].reply_type, REP_ACK);
            let meta = MetaRequest {
                name: name.into(),
                queries: vec![META_BASE_ALLOCATION.into()],
            };
            let replies = self.option(OPT_SET_META_CONTEXT, &meta.encode());
            assert_eq!(replies[0].reply_type, REP_META_CONTEXT);
            self.structured = true;
        }
        let go = InfoRequest {
            name: name.into(),
            items: vec![INFO_BLOCK_SIZE],
        };
        let replies = self.option(OPT_GO, &go.encode());
        assert_eq!(replies.last().unwrap().reply_type, REP_ACK, "{replies:?}");
        let export = replies
            .iter()
            .find(|r| r.reply_type == REP_INFO && r.data[..2] == INFO_EXPORT.to_be_bytes())
            .unwrap();
        self.size = u64::from_be_bytes(export.data[2..10].try_into().unwrap());
        self.flags = u16::from_be_bytes(export.data[10..12].try_into().unwrap());
    }

    pub fn connected(path: &std::path::Path, structured: bool) -> Self {
        let mut client = Self::connect(path);
        client.handshake("disk", structured);
        client
    }

    /// Send a request; returns its cookie.
    pub fn send(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> u64 {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.send_with_cookie(cookie, command, flags, offset, length, payload);
        cookie
    }

    pub fn send_with_cookie(
        &mut self,
        cookie: u64,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) {
        let header = RequestHeader {
            flags,
            command,
            cookie,
            offset,
            length,
        };
        if command == CMD_READ {
            self.reads.insert(cookie, (offset, length));
        }
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(payload);
        self.stream.write_all(&bytes).unwrap();
    }

    /// Read one whole reply (all chunks of a structured one).
    pub fn reply(&mut self) -> Reply {
        self.try_reply().expect("a reply")
    }

    /// `None` if the server closed the connection.
    pub fn try_reply(&mut self) -> Option<Reply> {
        let mut magic = [0u8; 4];
        self.stream.read_exact(&mut magic).ok()?;
        let len = ReplyHeader::header_len(u32::from_be_bytes(magic)).expect("reply magic");
        let mut head = magic.to_vec();
        head.resize(len, 0);
        self.stream.read_exact(&mut head[4..]).ok()?;
        match ReplyHeader::parse(&head).unwrap() {
            ReplyHeader::Simple { error, cookie } => {
                let mut data = Vec::new();
                if let Some((_, length)) = self.reads.remove(&cookie)
                    && error == 0
                {
                    data.resize(length as usize, 0);
                    self.stream.read_exact(&mut data).ok()?;
                }
                Some(Reply {
                    cookie,
                    error,
                    data,
                    chunks: Vec::new(),
                })
            }
            ReplyHeader::Chunk { .. } => self.structured_reply(head),
        }
    }

    fn structured_reply(&mut self, mut head: Vec<u8>) -> Option<Reply> {
        let mut reply = Reply {
            cookie: 0,
            error: 0,
            data: Vec::new(),
            chunks: Vec::new(),
        };
        loop {
            let Some(ReplyHeader::Chunk {
                flags,
                reply_type,
                cookie,
                length,
            }) = ReplyHeader::parse(&head)
            else {
                panic!("expected a structured chunk");
            };
            reply.cookie = cookie;
            reply.chunks.push(reply_type);
            let mut payload = vec![0u8; length as usize];
            self.stream.read_exact(&mut payload).ok()?;
            match reply_type {
                REPLY_TYPE_OFFSET_DATA => {
                    let offset = u64::from_be_bytes(payload[..8].try_into().unwrap());
                    let (start, _) = self.reads[&cookie];
                    let at = (offset - start) as usize;
                    let data = &payload[8..];
                    if reply.data.len() < at + data.len() {
                        reply.data.resize(at + data.len(), 0);
                    }
                    reply.data[at..at + data.len()].copy_from_slice(data);
                }
                REPLY_TYPE_ERROR | REPLY_TYPE_ERROR_OFFSET => {
                    reply.error = u32::from_be_bytes(payload[..4].try_into().unwrap());
                }
                REPLY_TYPE_BLOCK_STATUS => reply.data = payload,
                _ => {}
            }
            if flags & REPLY_FLAG_DONE != 0 {
                self.reads.remove(&cookie);
                return Some(reply);
            }
            head = vec![0u8; 20];
            self.stream.read_exact(&mut head).ok()?;
        }
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> u32 {
        self.send(CMD_WRITE, 0, offset, data.len() as u32, data);
        self.reply().error
    }

    pub fn read(&mut self, offset: u64, length: u32) -> Vec<u8> {
        self.send(CMD_READ, 0, offset, length, &[]);
        let reply = self.reply();
        assert_eq!(reply.error, 0);
        reply.data
    }

    pub fn command(&mut self, command: u16, flags: u16, offset: u64, length: u32) -> u32 {
        self.send(command, flags, offset, length, &[]);
        self.reply().error
    }

    /// Send `NBD_CMD_DISC` and wait for the server to close.
    pub fn disconnect(mut self) {
        self.send(CMD_DISC, 0, 0, 0, &[]);
        let mut rest = Vec::new();
        let _ = self.stream.read_to_end(&mut rest);
    }
}

/// A recognisable pattern for `len` bytes starting at byte `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((seed + i) * 31 % 251) as u8)
        .collect()
}
