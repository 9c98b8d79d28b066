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

/// Largest HTTP request head (request line and headers) the metrics
/// listener reads; a longer one is answered 400 and closed. Prometheus
/// sends about 300 bytes, a browser under 2 KiB.
pub const HTTP_HEAD_MAX_BYTES: usize = 8 << 10;

/// HTTP clients served at once by the metrics listener; one more is
/// answered 503 and closed.
pub const HTTP_CLIENTS_MAX: usize = 8;

/// An HTTP client has this long to send its request head, and again to
/// take the answer, or it is disconnected (a slow client holds a thread
/// no longer).
pub const HTTP_IO_SECONDS: u64 = 10;

const _: () = assert!(REQUEST_MAX_BYTES < REPLY_MAX_BYTES);
const _: () = assert!(HTTP_HEAD_MAX_BYTES >= 1024 && HTTP_CLIENTS_MAX >= 2);
