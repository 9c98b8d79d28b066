//! Every bound the server enforces, named in one place.

/// Largest READ or WRITE payload we accept and advertise (`NBD_INFO_BLOCK_SIZE`
/// maximum). The spec asks servers to take at least 32 MiB; we take 64 MiB.
pub const PAYLOAD_MAX_BYTES: u32 = 64 << 20;
/// Largest option data we read during the handshake; longer is a hard
/// disconnect (no option we understand comes near it).
pub const OPTION_DATA_MAX_BYTES: usize = 64 << 10;
/// Options one connection may send before we call it a denial of service.
pub const OPTIONS_PER_CONNECTION_MAX: usize = 1024;
/// The protocol's limit on a string (export names, queries, messages).
pub const STRING_MAX_BYTES: usize = 4096;
/// Payload bytes (READ and WRITE buffers) one connection may hold in flight;
/// when reached, the reader waits for replies to drain before reading on.
/// At least one maximal request always fits.
pub const INFLIGHT_MAX_BYTES: u64 = 256 << 20;
/// Requests one connection may have in flight (read, not yet replied to:
/// executing, or replies queued for the sending thread); when reached, the
/// reader waits for replies to drain before reading on.
pub const INFLIGHT_MAX_REQUESTS: usize = 256;
/// Threads per connection taking turns to read a request and execute it
/// (replies complete out of order across them).
pub const THREADS_PER_CONNECTION: usize = 4;
/// Buffers a connection keeps for reuse after a request completes (enough
/// for a client 64 requests deep, e.g. fio at iodepth 32 with replies queued).
pub const POOLED_BUFFERS_MAX: usize = 64;
/// Bytes of buffers a connection keeps for reuse.
pub const POOL_MAX_BYTES: usize = 64 << 20;
/// Largest buffer returned to the pool (bigger ones are freed).
pub const POOLED_BUFFER_MAX_BYTES: usize = 4 << 20;
/// Chunk size for writing zeroes and for discarding an oversized payload.
pub const ZERO_CHUNK_BYTES: usize = 1 << 20;
/// Concurrent connections a listener serves; more are refused at accept.
pub const CONNECTIONS_MAX: usize = 256;
/// How often the accept loop looks at the shutdown flag, in milliseconds.
pub const ACCEPT_POLL_MS: u64 = 100;
/// Ciphertext a TLS connection reads from its socket per `read`.
pub const TLS_READ_BUFFER_BYTES: usize = 64 << 10;
/// Plaintext a TLS connection seals per lock and per socket write (rustls's
/// buffer limit): a 64 MiB READ reply goes out in 256 such batches, and the
/// reader thread never waits longer than one batch's encryption for the lock.
pub const TLS_WRITE_BATCH_BYTES: usize = 256 << 10;
/// Send buffer asked for on each Unix-socket connection (the kernel caps it
/// at `net.core.wmem_max`; TCP keeps the kernel's autotuning).
pub const SOCKET_SEND_BUFFER_BYTES: usize = 4 << 20;
