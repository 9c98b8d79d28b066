//! The transmission phase: request headers in, reply headers out. Pure.
//!
//! ```text
//! request  (28 bytes): magic 0x25609513 (u32) flags (u16) type (u16)
//!                      cookie (u64) offset (u64) length (u32) [data if WRITE]
//! simple   (16 bytes): magic 0x67446698 (u32) error (u32) cookie (u64) [data]
//! chunk    (20 bytes): magic 0x668e33ef (u32) flags (u16) type (u16)
//!                      cookie (u64) length (u32) payload[length]
//! ```

use crate::proto::{
    CMD_BLOCK_STATUS, CMD_CACHE, CMD_DISC, CMD_FLAG_DF, CMD_FLAG_FAST_ZERO, CMD_FLAG_FUA,
    CMD_FLAG_NO_HOLE, CMD_FLAG_REQ_ONE, CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE, CMD_WRITE_ZEROES,
    EXTENDED_REQUEST_MAGIC, Errno, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, REPLY_TYPE_ERROR,
    REPLY_TYPE_NONE, REPLY_TYPE_OFFSET_DATA, REPLY_TYPE_OFFSET_HOLE, REQUEST_MAGIC,
    SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC,
};

/// Bytes in a request header.
pub const REQUEST_HEADER_LEN: usize = 28;
/// Bytes in a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Bytes in a structured reply chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;
/// Bytes in an `OFFSET_DATA` chunk before its data (chunk header + offset).
pub const OFFSET_DATA_HEADER_LEN: usize = CHUNK_HEADER_LEN + 8;
/// Longest error message we put in an error chunk (the spec's string limit).
pub const ERROR_MESSAGE_MAX_BYTES: usize = 4096;

/// A request header as sent; not yet validated against the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags (`NBD_CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`NBD_CMD_*`, possibly unknown).
    pub command: u16,
    /// The client's opaque cookie (called handle in older texts).
    pub cookie: u64,
    /// Byte offset into the export.
    pub offset: u64,
    /// Length in bytes.
    pub length: u32,
}

/// A request header that cannot be parsed: the stream cannot be resynchronised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The magic is not `NBD_REQUEST_MAGIC`.
    #[error("request has bad magic {0:#010x}")]
    BadMagic(u32),
    /// The client used extended headers, which it never negotiated.
    #[error("request uses extended-header magic, which was not negotiated")]
    ExtendedHeader,
}

impl RequestHeader {
    /// Parse 28 bytes.
    pub fn parse(bytes: &[u8; REQUEST_HEADER_LEN]) -> Result<Self, FrameError> {
        let magic = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if magic != REQUEST_MAGIC {
            return Err(if magic == EXTENDED_REQUEST_MAGIC {
                FrameError::ExtendedHeader
            } else {
                FrameError::BadMagic(magic)
            });
        }
        let u64_at = |at: usize| {
            let mut array = [0u8; 8];
            array.copy_from_slice(&bytes[at..at + 8]);
            u64::from_be_bytes(array)
        };
        let cookie = u64_at(8);
        let offset = u64_at(16);
        Ok(Self {
            flags: u16::from_be_bytes([bytes[4], bytes[5]]),
            command: u16::from_be_bytes([bytes[6], bytes[7]]),
            cookie,
            offset,
            length: u32::from_be_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]),
        })
    }

    /// The 28 bytes a client sends.
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN] {
        let mut out = [0u8; REQUEST_HEADER_LEN];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.command.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    /// Bytes of data that follow this header on the wire, whatever its
    /// validity: only `NBD_CMD_WRITE` carries a payload.
    pub fn payload_len(&self) -> u32 {
        if self.command == CMD_WRITE {
            self.length
        } else {
            0
        }
    }

    /// The bytes this request will hold while in flight, whatever its
    /// validity: the payload of a WRITE, the data of a READ.
    pub fn budget_len(&self) -> u64 {
        if self.command == CMD_WRITE || self.command == CMD_READ {
            u64::from(self.length)
        } else {
            0
        }
    }
}

/// The requests wholly present at the start of `bytes` (header, and payload
/// for a WRITE), at most `max`: how many could be read without waiting for
/// the socket, and the payload-or-reply bytes they ask for (READ and WRITE
/// lengths, for the in-flight budget). Stops at the first incomplete or
/// unparsable header (the normal read path reports that one).
pub fn buffered_requests(bytes: &[u8], max: usize) -> (usize, u64) {
    let mut at = 0;
    let mut count = 0;
    let mut data = 0u64;
    while count < max {
        let Some(head) = bytes
            .get(at..at + REQUEST_HEADER_LEN)
            .and_then(|head| <&[u8; REQUEST_HEADER_LEN]>::try_from(head).ok())
        else {
            break;
        };
        let Ok(header) = RequestHeader::parse(head) else {
            break;
        };
        let frame = REQUEST_HEADER_LEN + header.payload_len() as usize;
        if bytes.len() - at < frame {
            break;
        }
        at += frame;
        count += 1;
        data += header.budget_len();
    }
    (count, data)
}

/// What the session allows, for validating requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Export size in bytes.
    pub export_size: u64,
    /// Writes refused with `EPERM`.
    pub read_only: bool,
    /// Structured replies negotiated (`DF` allowed).
    pub structured: bool,
    /// `base:allocation` selected (`BLOCK_STATUS` allowed).
    pub base_allocation: bool,
    /// Largest READ/WRITE payload.
    pub max_payload_bytes: u32,
}

/// A validated command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `NBD_CMD_READ`.
    Read {
        /// First byte.
        offset: u64,
        /// Bytes to read.
        length: u32,
    },
    /// `NBD_CMD_WRITE` (its payload follows the header).
    Write {
        /// First byte.
        offset: u64,
        /// Bytes to write.
        length: u32,
        /// Persist before replying.
        fua: bool,
    },
    /// `NBD_CMD_DISC`: no reply; finish in-flight requests and close.
    Disconnect,
    /// `NBD_CMD_FLUSH`.
    Flush,
    /// `NBD_CMD_TRIM`.
    Trim {
        /// First byte.
        offset: u64,
        /// Bytes to discard.
        length: u32,
        /// Persist before replying.
        fua: bool,
    },
    /// `NBD_CMD_CACHE`.
    Cache {
        /// First byte.
        offset: u64,
        /// Bytes to prefetch.
        length: u32,
    },
    /// `NBD_CMD_WRITE_ZEROES`.
    WriteZeroes {
        /// First byte.
        offset: u64,
        /// Bytes to zero.
        length: u32,
        /// Persist before replying.
        fua: bool,
        /// The client asked that no hole be punched.
        no_hole: bool,
        /// Fail with `ENOTSUP` unless zeroing is faster than writing.
        fast_zero: bool,
    },
    /// `NBD_CMD_BLOCK_STATUS` for `base:allocation`.
    BlockStatus {
        /// First byte.
        offset: u64,
        /// Bytes of interest.
        length: u32,
        /// At most one extent, not longer than `length`.
        req_one: bool,
    },
}

/// A request refused before execution: reply with `errno` (and `message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    /// The reply's error.
    pub errno: Errno,
    /// A human-readable reason (sent in structured error chunks).
    pub message: &'static str,
}

const fn reject(errno: Errno, message: &'static str) -> Rejection {
    Rejection { errno, message }
}

/// Validate a header against the session. Order of checks follows the spec's
/// error preferences: unknown command or flag → `EINVAL`; write to a
/// read-only export → `EPERM`; oversized payload → `EINVAL` (the client
/// MUST NOT exceed the advertised maximum); range past the end → `ENOSPC` for
/// writes and write-zeroes, `EINVAL` otherwise.
pub fn validate(header: &RequestHeader, limits: &Limits) -> Result<Command, Rejection> {
    let RequestHeader {
        flags,
        command,
        offset,
        length,
        ..
    } = *header;
    let allowed = match command {
        CMD_READ if limits.structured => CMD_FLAG_FUA | CMD_FLAG_DF,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
        CMD_READ | CMD_WRITE | CMD_DISC | CMD_FLUSH | CMD_TRIM | CMD_CACHE => CMD_FLAG_FUA,
        _ => return Err(reject(Errno::Inval, "unknown command")),
    };
    if flags & !allowed != 0 {
        return Err(reject(
            Errno::Inval,
            "command flag not valid for this command",
        ));
    }
    let fua = flags & CMD_FLAG_FUA != 0;
    let writes = matches!(command, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && limits.read_only {
        return Err(reject(Errno::Perm, "the export is read-only"));
    }
    if matches!(command, CMD_READ | CMD_WRITE) && length > limits.max_payload_bytes {
        return Err(reject(Errno::Inval, "length exceeds the maximum payload"));
    }
    let in_range = offset
        .checked_add(u64::from(length))
        .is_some_and(|end| end <= limits.export_size);
    let needs_range = !matches!(command, CMD_DISC | CMD_FLUSH);
    if needs_range && !in_range {
        let errno = if matches!(command, CMD_WRITE | CMD_WRITE_ZEROES) {
            Errno::NoSpc
        } else {
            Errno::Inval
        };
        return Err(reject(errno, "range extends past the end of the export"));
    }
    Ok(match command {
        CMD_READ => Command::Read { offset, length },
        CMD_WRITE => Command::Write {
            offset,
            length,
            fua,
        },
        CMD_DISC => Command::Disconnect,
        CMD_FLUSH => Command::Flush,
        CMD_TRIM => Command::Trim {
            offset,
            length,
            fua,
        },
        CMD_CACHE => Command::Cache { offset, length },
        CMD_WRITE_ZEROES => Command::WriteZeroes {
            offset,
            length,
            fua,
            no_hole: flags & CMD_FLAG_NO_HOLE != 0,
            fast_zero: flags & CMD_FLAG_FAST_ZERO != 0,
        },
        _ => {
            if !limits.base_allocation {
                return Err(reject(
                    Errno::Inval,
                    "BLOCK_STATUS needs base:allocation selected with SET_META_CONTEXT",
                ));
            }
            Command::BlockStatus {
                offset,
                length,
                req_one: flags & CMD_FLAG_REQ_ONE != 0,
            }
        }
    })
}

/// A simple reply header (followed by the data of a successful simple READ).
pub fn simple_reply(cookie: u64, error: u32) -> [u8; SIMPLE_REPLY_LEN] {
    let mut out = [0u8; SIMPLE_REPLY_LEN];
    out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&error.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out
}

/// A structured reply chunk header.
pub fn chunk_header(
    flags: u16,
    reply_type: u16,
    cookie: u64,
    length: u32,
) -> [u8; CHUNK_HEADER_LEN] {
    let mut out = [0u8; CHUNK_HEADER_LEN];
    out[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&flags.to_be_bytes());
    out[6..8].copy_from_slice(&reply_type.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out[16..20].copy_from_slice(&length.to_be_bytes());
    out
}

fn done_flag(done: bool) -> u16 {
    if done { REPLY_FLAG_DONE } else { 0 }
}

/// The header of an `OFFSET_DATA` chunk carrying `data_len` bytes at `offset`
/// (the data follows). `data_len` must be at least 1 and at most `u32::MAX - 8`.
pub fn offset_data_header(
    cookie: u64,
    offset: u64,
    data_len: u32,
    done: bool,
) -> [u8; OFFSET_DATA_HEADER_LEN] {
    let mut out = [0u8; OFFSET_DATA_HEADER_LEN];
    let header = chunk_header(
        done_flag(done),
        REPLY_TYPE_OFFSET_DATA,
        cookie,
        data_len + 8,
    );
    out[..CHUNK_HEADER_LEN].copy_from_slice(&header);
    out[CHUNK_HEADER_LEN..].copy_from_slice(&offset.to_be_bytes());
    out
}

/// An `OFFSET_HOLE` chunk: `size` zero bytes at `offset`.
pub fn offset_hole(cookie: u64, offset: u64, size: u32, done: bool) -> [u8; CHUNK_HEADER_LEN + 12] {
    let mut out = [0u8; CHUNK_HEADER_LEN + 12];
    let header = chunk_header(done_flag(done), REPLY_TYPE_OFFSET_HOLE, cookie, 12);
    out[..CHUNK_HEADER_LEN].copy_from_slice(&header);
    out[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + 8].copy_from_slice(&offset.to_be_bytes());
    out[CHUNK_HEADER_LEN + 8..].copy_from_slice(&size.to_be_bytes());
    out
}

/// The final `NONE` chunk.
pub fn none_chunk(cookie: u64) -> [u8; CHUNK_HEADER_LEN] {
    chunk_header(REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0)
}

/// Append a final `ERROR` chunk with `message` (cut to the spec's 4096-byte
/// string limit at a character boundary).
pub fn error_chunk(out: &mut Vec<u8>, cookie: u64, errno: Errno, message: &str) {
    let mut end = message.len().min(ERROR_MESSAGE_MAX_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let message = &message.as_bytes()[..end];
    let length = 6 + message.len() as u32;
    out.extend_from_slice(&chunk_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        length,
    ));
    out.extend_from_slice(&errno.code().to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message);
}

/// Append a final `BLOCK_STATUS` chunk: `extents` are (length, flags) pairs.
pub fn block_status_chunk(out: &mut Vec<u8>, cookie: u64, context_id: u32, extents: &[(u32, u32)]) {
    let length = 4 + 8 * extents.len() as u32;
    out.extend_from_slice(&chunk_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        length,
    ));
    out.extend_from_slice(&context_id.to_be_bytes());
    for &(len, flags) in extents {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
}

/// A reply header as a client reads it (for clients, tests and the fuzzer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyHeader {
    /// A simple reply (16 bytes read).
    Simple {
        /// The error (0 = success).
        error: u32,
        /// The request's cookie.
        cookie: u64,
    },
    /// A structured chunk (20 bytes read; `length` payload bytes follow).
    Chunk {
        /// `NBD_REPLY_FLAG_*`.
        flags: u16,
        /// `NBD_REPLY_TYPE_*`.
        reply_type: u16,
        /// The request's cookie.
        cookie: u64,
        /// Payload bytes that follow.
        length: u32,
    },
}

impl ReplyHeader {
    /// How many header bytes a reply starting with this magic has.
    pub fn header_len(magic: u32) -> Option<usize> {
        match magic {
            SIMPLE_REPLY_MAGIC => Some(SIMPLE_REPLY_LEN),
            STRUCTURED_REPLY_MAGIC => Some(CHUNK_HEADER_LEN),
            _ => None,
        }
    }

    /// Parse a whole header (16 or 20 bytes, per [`ReplyHeader::header_len`]).
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let magic = u32::from_be_bytes(bytes.get(0..4)?.try_into().ok()?);
        let cookie = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
        match magic {
            SIMPLE_REPLY_MAGIC => Some(Self::Simple {
                error: u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?),
                cookie,
            }),
            STRUCTURED_REPLY_MAGIC => Some(Self::Chunk {
                flags: u16::from_be_bytes(bytes.get(4..6)?.try_into().ok()?),
                reply_type: u16::from_be_bytes(bytes.get(6..8)?.try_into().ok()?),
                cookie,
                length: u32::from_be_bytes(bytes.get(16..20)?.try_into().ok()?),
            }),
            _ => None,
        }
    }
}
