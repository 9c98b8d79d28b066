//! Cairn's NBD front end: any [`cairn_store::Device`] served as a network
//! block device that unmodified clients (the Linux kernel's `nbd-client`,
//! qemu, libnbd's `nbdinfo`/`nbdcopy`/`nbdfuse`, fio's `nbd` engine) use.
//!
//! Two layers:
//!
//! - [`codec`]: the protocol as pure functions over bytes — the fixed-newstyle
//!   handshake as a state machine, request parsing and validation, reply
//!   encoding. No I/O; fuzzed (`fuzz/fuzz_targets/nbd_*.rs`).
//! - [`server`]: std threads over sockets. Per connection, one reader thread
//!   parses requests and queues them to a few workers, which execute against
//!   the device and write replies under a per-connection writer lock, so
//!   replies complete out of order and the reader keeps reading while a reply
//!   is being sent.
//!
//! What it is not (yet): TLS, the experimental extended headers, resizing, or
//! a sparse-aware `BLOCK_STATUS` (every extent is reported as allocated data).
//! Limits are in [`limits`]; protocol numbers in [`proto`]. See `docs/nbd.md`.

pub mod codec;
pub mod limits;
pub mod proto;
pub mod server;

pub use server::{Export, ListenAddress, Listener, Server, ServerError, Shutdown};
