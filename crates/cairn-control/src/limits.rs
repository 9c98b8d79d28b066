//! The control socket's bounds, named once.

/// Largest request frame the server reads (its JSON body). A request is a
/// command and two names; anything larger is refused unread and the
/// connection closed.
pub const REQUEST_MAX_BYTES: u32 = 64 << 10;

/// Largest reply frame a client accepts: a snapshot of many exports and
/// layers, with their histograms' buckets, is tens of KiB.
pub const REPLY_MAX_BYTES: u32 = 64 << 20;

/// Control clients served at once; one more is told to retry and closed.
pub const CLIENTS_MAX: usize = 16;

/// A client that sends nothing for this long is disconnected.
pub const IDLE_SECONDS: u64 = 30;

/// How often the accept loop looks whether the server is stopping.
pub const POLL_MILLISECONDS: i32 = 200;

const _: () = assert!(REQUEST_MAX_BYTES < REPLY_MAX_BYTES);
