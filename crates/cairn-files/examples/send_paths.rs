//! How should the gateway put a cached block on a socket? Issue 27 asks to
//! try `MSG_ZEROCOPY` and `vmsplice` + `splice` against the `writev` of the
//! cache's buffers and keep what measures faster; this measures the four
//! ways on loopback, as `cairn bench files` runs its gateways:
//!
//! - `writev`: a header and the block's bytes in one `writev` (the gateway's
//!   way; the kernel copies the block into the socket's buffers).
//! - `vmsplice`: the header sent with `MSG_MORE`, then the block's pages
//!   lent to a pipe (`vmsplice`) and moved to the socket (`splice`), no copy.
//! - `sendfile`: the block read from a memfd (page cache, as nginx serves its
//!   cache files with `sendfile`), no copy.
//! - `zerocopy`: `send(MSG_ZEROCOPY)`, the completions drained from the
//!   socket's error queue.
//!
//! Each client asks for a block (8 bytes: its number) on one kept-alive
//! connection, reads the header and the block, and checks one byte per 4 KiB;
//! a server thread per connection answers. Every round runs each way for the
//! given seconds; the table gives MB/s (10^6 B/s) per round and the ratio of
//! the best round to writev's best.
//!
//! ```text
//! cargo run --release -p cairn-files --example send_paths -- [CLIENTS [SECONDS [ROUNDS]]]
//! ```
//!
//! Defaults 40 clients, 3 s, 2 rounds, 1 MiB blocks, 64 distinct blocks.

// `vmsplice` and `MSG_ZEROCOPY` lend the kernel user memory and have no safe
// API; the blocks here live, unchanged, until the process exits.
#![allow(unsafe_code)]

use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::pipe::{IoSliceRaw, SpliceFlags};

const BLOCK: usize = 1 << 20;
const BLOCKS: usize = 64;
const HEADER: &[u8] = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 1048576\r\n\r\n";
const WAYS: [&str; 4] = ["writev", "vmsplice", "sendfile", "zerocopy"];

/// The blocks, in memory (block `i` filled with byte `i`) and in a memfd.
struct Blocks {
    memory: Vec<Vec<u8>>,
    memfd: OwnedFd,
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |a| {
            a.parse().unwrap_or_else(|_| {
                eprintln!("usage: send_paths [CLIENTS [SECONDS [ROUNDS]]] (numbers; got {a:?})");
                std::process::exit(2)
            })
        })
    };
    let clients = number(0, 40).max(1) as usize;
    let seconds = number(1, 3).max(1);
    let rounds = number(2, 2).max(1);
    let memory: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8; BLOCK]).collect();
    let memfd = rustix::fs::memfd_create("send_paths", rustix::fs::MemfdFlags::empty())?;
    for (i, block) in memory.iter().enumerate() {
        rustix::io::pwrite(&memfd, block, (i * BLOCK) as u64)?;
    }
    let blocks = Arc::new(Blocks { memory, memfd });
    println!("{clients} clients, {seconds} s per way and round, 1 MiB blocks, loopback");
    let mut best = [0f64; WAYS.len()];
    for round in 1..=rounds {
        for (w, way) in WAYS.iter().enumerate() {
            let rate = run(&blocks, way, clients, Duration::from_secs(seconds))?;
            println!("round {round}  {way:<9} {rate:>8.1} MB/s");
            best[w] = best[w].max(rate);
        }
    }
    println!("way        best MB/s  /writev");
    for (w, way) in WAYS.iter().enumerate() {
        println!("{way:<9} {:>10.1}  {:>6.2}", best[w], best[w] / best[0]);
    }
    Ok(())
}

/// MB/s of `clients` readers served `way` for `time`.
fn run(blocks: &Arc<Blocks>, way: &'static str, clients: usize, time: Duration) -> io::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for c in 0..clients {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let (stop, bytes) = (Arc::clone(&stop), Arc::clone(&bytes));
        readers.push(std::thread::spawn(move || {
            read_blocks(stream, c, &stop, &bytes)
        }));
        let (served, _) = listener.accept()?;
        // As the gateway and `cairn bench files`'s client do.
        served.set_nodelay(true)?;
        let blocks = Arc::clone(blocks);
        std::thread::spawn(move || {
            if let Err(e) = serve(served, &blocks, way) {
                // A reader hanging up at the end is the normal way out.
                if !matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::BrokenPipe
                        | io::ErrorKind::ConnectionReset
                ) {
                    eprintln!("{way}: {e}");
                }
            }
        });
    }
    let start = Instant::now();
    std::thread::sleep(time);
    let total = bytes.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.join().expect("a reader thread")?;
    }
    Ok(total as f64 / elapsed / 1e6)
}

/// A client: asks for block after block, checks them, counts the bytes.
fn read_blocks(
    mut stream: TcpStream,
    first: usize,
    stop: &AtomicBool,
    bytes: &AtomicU64,
) -> io::Result<()> {
    let mut buf = vec![0u8; HEADER.len() + BLOCK];
    let mut i = first;
    while !stop.load(Ordering::Relaxed) {
        let block = i % BLOCKS;
        stream.write_all(&(block as u64).to_le_bytes())?;
        stream.read_exact(&mut buf)?;
        let body = &buf[HEADER.len()..];
        if body.iter().step_by(4096).any(|&b| b != block as u8) || !buf.starts_with(HEADER) {
            return Err(io::Error::other(format!("block {block} came back wrong")));
        }
        bytes.fetch_add(BLOCK as u64, Ordering::Relaxed);
        i += 7;
    }
    Ok(())
}

/// A server connection: answers each request `way`.
fn serve(mut stream: TcpStream, blocks: &Blocks, way: &str) -> io::Result<()> {
    let (pipe_out, pipe_in) = rustix::pipe::pipe()?;
    if way == "vmsplice" {
        rustix::pipe::fcntl_setpipe_size(&pipe_in, BLOCK)?;
    }
    if way == "zerocopy" {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket and option value of the option's size.
        let set = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ZEROCOPY,
                (&raw const on).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if set < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let mut request = [0u8; 8];
    loop {
        stream.read_exact(&mut request)?;
        let block = u64::from_le_bytes(request) as usize % BLOCKS;
        let bytes = &blocks.memory[block];
        match way {
            "writev" => {
                let mut parts = [IoSlice::new(HEADER), IoSlice::new(bytes)];
                let mut parts = &mut parts[..];
                while !parts.is_empty() {
                    let n = stream.write_vectored(parts)?;
                    IoSlice::advance_slices(&mut parts, n);
                }
            }
            "vmsplice" => {
                send_more(&stream, HEADER)?;
                let mut at = 0;
                while at < bytes.len() {
                    // SAFETY: the block is neither written nor freed while the
                    // pipe and the socket hold its pages.
                    let lent = unsafe {
                        rustix::pipe::vmsplice(
                            &pipe_in,
                            &[IoSliceRaw::from_slice(&bytes[at..])],
                            SpliceFlags::empty(),
                        )
                    }?;
                    at += lent;
                    let mut left = lent;
                    while left > 0 {
                        // MORE only while the block goes on: on its last
                        // bytes it would hold the final segment back.
                        let more = if at < bytes.len() {
                            SpliceFlags::MORE
                        } else {
                            SpliceFlags::empty()
                        };
                        left -= rustix::pipe::splice(
                            &pipe_out,
                            None,
                            stream.as_fd(),
                            None,
                            left,
                            SpliceFlags::MOVE | more,
                        )?;
                    }
                }
            }
            "sendfile" => {
                send_more(&stream, HEADER)?;
                let mut offset = (block * BLOCK) as u64;
                let end = offset + BLOCK as u64;
                while offset < end {
                    let want = (end - offset) as usize;
                    rustix::fs::sendfile(stream.as_fd(), &blocks.memfd, Some(&mut offset), want)?;
                }
            }
            _ => {
                send_more(&stream, HEADER)?;
                let mut at = 0;
                while at < bytes.len() {
                    // SAFETY: a valid buffer; the kernel keeps its pages until
                    // it reports the send complete, and the block is never
                    // written or freed meanwhile.
                    let sent = unsafe {
                        libc::send(
                            stream.as_raw_fd(),
                            bytes[at..].as_ptr().cast(),
                            bytes.len() - at,
                            libc::MSG_ZEROCOPY,
                        )
                    };
                    if sent < 0 {
                        let e = io::Error::last_os_error();
                        if e.raw_os_error() != Some(libc::ENOBUFS) {
                            return Err(e);
                        }
                        // Too many sends awaiting completion: wait for some.
                        drain_completions(&stream, true);
                        continue;
                    }
                    at += sent as usize;
                    drain_completions(&stream, false);
                }
            }
        }
    }
}

/// Sends `bytes` whole, telling the kernel more follows.
fn send_more(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = rustix::net::send(stream, bytes, rustix::net::SendFlags::MORE)?;
        bytes = &bytes[n..];
    }
    Ok(())
}

/// Reads `MSG_ZEROCOPY` completions off the error queue (each may cover a
/// range of sends); waits for one when `wait`.
fn drain_completions(stream: &TcpStream, mut wait: bool) {
    loop {
        let mut control = [0u8; 256];
        // SAFETY: a zeroed msghdr is valid; its control buffer outlives the call.
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = control.len();
        let flags = libc::MSG_ERRQUEUE | if wait { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: as above.
        if unsafe { libc::recvmsg(stream.as_raw_fd(), &raw mut message, flags) } < 0 {
            if !wait {
                return;
            }
            // The error queue may be empty until a completion arrives: poll.
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        wait = false;
    }
}
