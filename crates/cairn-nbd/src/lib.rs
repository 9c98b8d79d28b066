//! Cairn's NBD front end: any [`cairn_store::Device`] served as a network
//! block device that unmodified clients (the Linux kernel's `nbd-client`,
//! qemu, libnbd's `nbdinfo`/`nbdcopy`/`nbdfuse`, fio's `nbd` engine) use.
//!
//! Two layers:
//!
//! - [`codec`]: the protocol as pure functions over bytes — the fixed-newstyle
//!   handshake as a state machine, request parsing and validation, reply
//!   encoding. No I/O; fuzzed (`fuzz/fuzz_targets/nbd_*.rs`).
//! - [`server`]: std threads over sockets. Per connection, a few threads take
//!   turns reading a request (and a share of those already buffered behind
//!   it); the one that read it executes it against the device and writes the
//!   reply, or queues it when another thread is sending (that sender writes
//!   it too), so replies complete out of order and a thread is always free to
//!   read while a reply is being sent.
//!
//! TLS (`NBD_OPT_STARTTLS`, rustls, X.509 server certificates; modes off, on,
//! require) is in [`server::tls`]; the TLS stream wraps the connection's two
//! directions so that replies and requests still flow at once.
//!
//! What it is not (yet): client-certificate checks, the experimental
//! extended headers, or resizing. `BLOCK_STATUS` reports holes where the
//! device knows them (`Device::allocation`: the log disk, a sparse file).
//! Limits are in [`limits`]; protocol numbers in [`proto`]. See `docs/nbd.md`.

// Functions stay under 100 lines (clippy.toml), or say in their doc why
// they are one piece (issue 22; the workspace allows long functions elsewhere).
#![warn(clippy::too_many_lines)]

pub mod codec;
pub mod limits;
pub mod proto;
pub mod server;

pub use server::{
    Export, ListenAddress, Listener, Server, ServerError, Shutdown, TlsConfig, TlsError, TlsMode,
};
