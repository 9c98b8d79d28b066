//! The NBD protocol's numbers, exactly as `doc/proto.md` of the
//! `NetworkBlockDevice/nbd` project defines them. Every integer on the wire is
//! big-endian (network byte order).
//!
//! Names follow the specification with the `NBD_` prefix dropped, so
//! `NBD_OPT_GO` is [`OPT_GO`] and `NBD_CMD_FLAG_FUA` is [`CMD_FLAG_FUA`].

// ----- Magic numbers ---------------------------------------------------------

/// `NBDMAGIC`: the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle negotiation, and the prefix of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// The magic of every option reply (fixed newstyle).
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// `NBD_REQUEST_MAGIC`: the first 4 bytes of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// `NBD_SIMPLE_REPLY_MAGIC`.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// `NBD_STRUCTURED_REPLY_MAGIC`.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
/// `NBD_EXTENDED_REQUEST_MAGIC` (experimental extended headers; not supported,
/// named so that a client using it gets a clear log line).
pub const EXTENDED_REQUEST_MAGIC: u32 = 0x21e4_1c71;

// ----- Handshake flags (16 bits, server → client) ----------------------------

/// `NBD_FLAG_FIXED_NEWSTYLE`.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// `NBD_FLAG_NO_ZEROES`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;

// ----- Client flags (32 bits, client → server) -------------------------------

/// `NBD_FLAG_C_FIXED_NEWSTYLE`.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// `NBD_FLAG_C_NO_ZEROES`.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// ----- Transmission flags (16 bits) ------------------------------------------

/// `NBD_FLAG_HAS_FLAGS`: always set.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
/// `NBD_FLAG_READ_ONLY`.
pub const FLAG_READ_ONLY: u16 = 1 << 1;
/// `NBD_FLAG_SEND_FLUSH`.
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
/// `NBD_FLAG_SEND_FUA`.
pub const FLAG_SEND_FUA: u16 = 1 << 3;
/// `NBD_FLAG_ROTATIONAL`.
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
/// `NBD_FLAG_SEND_TRIM`.
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
/// `NBD_FLAG_SEND_WRITE_ZEROES`.
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// `NBD_FLAG_SEND_DF` (only with structured replies).
pub const FLAG_SEND_DF: u16 = 1 << 7;
/// `NBD_FLAG_CAN_MULTI_CONN`.
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// `NBD_FLAG_SEND_RESIZE` (experimental; never set).
pub const FLAG_SEND_RESIZE: u16 = 1 << 9;
/// `NBD_FLAG_SEND_CACHE`.
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
/// `NBD_FLAG_SEND_FAST_ZERO`.
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// ----- Option types ----------------------------------------------------------

/// `NBD_OPT_EXPORT_NAME`.
pub const OPT_EXPORT_NAME: u32 = 1;
/// `NBD_OPT_ABORT`.
pub const OPT_ABORT: u32 = 2;
/// `NBD_OPT_LIST`.
pub const OPT_LIST: u32 = 3;
/// `NBD_OPT_PEEK_EXPORT` (withdrawn).
pub const OPT_PEEK_EXPORT: u32 = 4;
/// `NBD_OPT_STARTTLS`.
pub const OPT_STARTTLS: u32 = 5;
/// `NBD_OPT_INFO`.
pub const OPT_INFO: u32 = 6;
/// `NBD_OPT_GO`.
pub const OPT_GO: u32 = 7;
/// `NBD_OPT_STRUCTURED_REPLY`.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// `NBD_OPT_LIST_META_CONTEXT`.
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// `NBD_OPT_SET_META_CONTEXT`.
pub const OPT_SET_META_CONTEXT: u32 = 10;
/// `NBD_OPT_EXTENDED_HEADERS` (experimental; answered `ERR_UNSUP`).
pub const OPT_EXTENDED_HEADERS: u32 = 11;

// ----- Option reply types ----------------------------------------------------

/// `NBD_REP_ACK`.
pub const REP_ACK: u32 = 1;
/// `NBD_REP_SERVER`.
pub const REP_SERVER: u32 = 2;
/// `NBD_REP_INFO`.
pub const REP_INFO: u32 = 3;
/// `NBD_REP_META_CONTEXT`.
pub const REP_META_CONTEXT: u32 = 4;
/// Bit 31 marks an error reply.
pub const REP_FLAG_ERROR: u32 = 1 << 31;
/// `NBD_REP_ERR_UNSUP`.
pub const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR | 1;
/// `NBD_REP_ERR_POLICY`.
pub const REP_ERR_POLICY: u32 = REP_FLAG_ERROR | 2;
/// `NBD_REP_ERR_INVALID`.
pub const REP_ERR_INVALID: u32 = REP_FLAG_ERROR | 3;
/// `NBD_REP_ERR_PLATFORM`.
pub const REP_ERR_PLATFORM: u32 = REP_FLAG_ERROR | 4;
/// `NBD_REP_ERR_TLS_REQD`.
pub const REP_ERR_TLS_REQD: u32 = REP_FLAG_ERROR | 5;
/// `NBD_REP_ERR_UNKNOWN`.
pub const REP_ERR_UNKNOWN: u32 = REP_FLAG_ERROR | 6;
/// `NBD_REP_ERR_SHUTDOWN`.
pub const REP_ERR_SHUTDOWN: u32 = REP_FLAG_ERROR | 7;
/// `NBD_REP_ERR_BLOCK_SIZE_REQD`.
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_FLAG_ERROR | 8;
/// `NBD_REP_ERR_TOO_BIG`.
pub const REP_ERR_TOO_BIG: u32 = REP_FLAG_ERROR | 9;

// ----- NBD_REP_INFO types ----------------------------------------------------

/// `NBD_INFO_EXPORT`: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// `NBD_INFO_NAME`: canonical export name.
pub const INFO_NAME: u16 = 1;
/// `NBD_INFO_DESCRIPTION`: human-readable description.
pub const INFO_DESCRIPTION: u16 = 2;
/// `NBD_INFO_BLOCK_SIZE`: minimum, preferred and maximum sizes.
pub const INFO_BLOCK_SIZE: u16 = 3;

// ----- Command flags (16 bits) -----------------------------------------------

/// `NBD_CMD_FLAG_FUA`.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// `NBD_CMD_FLAG_NO_HOLE`.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// `NBD_CMD_FLAG_DF`.
pub const CMD_FLAG_DF: u16 = 1 << 2;
/// `NBD_CMD_FLAG_REQ_ONE`.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// `NBD_CMD_FLAG_FAST_ZERO`.
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;
/// `NBD_CMD_FLAG_PAYLOAD_LEN` (experimental extended headers; rejected).
pub const CMD_FLAG_PAYLOAD_LEN: u16 = 1 << 5;

// ----- Structured reply flags and types --------------------------------------

/// `NBD_REPLY_FLAG_DONE`: the last chunk of a reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// `NBD_REPLY_TYPE_NONE`.
pub const REPLY_TYPE_NONE: u16 = 0;
/// `NBD_REPLY_TYPE_OFFSET_DATA`.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// `NBD_REPLY_TYPE_OFFSET_HOLE`.
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// `NBD_REPLY_TYPE_BLOCK_STATUS`.
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// `NBD_REPLY_TYPE_ERROR` (2^15 + 1).
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;
/// `NBD_REPLY_TYPE_ERROR_OFFSET` (2^15 + 2).
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) | 2;

// ----- Commands --------------------------------------------------------------

/// `NBD_CMD_READ`.
pub const CMD_READ: u16 = 0;
/// `NBD_CMD_WRITE`.
pub const CMD_WRITE: u16 = 1;
/// `NBD_CMD_DISC`.
pub const CMD_DISC: u16 = 2;
/// `NBD_CMD_FLUSH`.
pub const CMD_FLUSH: u16 = 3;
/// `NBD_CMD_TRIM`.
pub const CMD_TRIM: u16 = 4;
/// `NBD_CMD_CACHE`.
pub const CMD_CACHE: u16 = 5;
/// `NBD_CMD_WRITE_ZEROES`.
pub const CMD_WRITE_ZEROES: u16 = 6;
/// `NBD_CMD_BLOCK_STATUS`.
pub const CMD_BLOCK_STATUS: u16 = 7;

// ----- base:allocation state flags -------------------------------------------

/// `NBD_STATE_HOLE`.
pub const STATE_HOLE: u32 = 1 << 0;
/// `NBD_STATE_ZERO`.
pub const STATE_ZERO: u32 = 1 << 1;

/// The one metadata context we serve.
pub const META_BASE_ALLOCATION: &str = "base:allocation";

/// An error value in a reply (the protocol's restricted errno set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Errno {
    /// `NBD_EPERM`: operation not permitted (write to a read-only export).
    Perm = 1,
    /// `NBD_EIO`: input/output error.
    Io = 5,
    /// `NBD_ENOMEM`: cannot allocate memory.
    NoMem = 12,
    /// `NBD_EINVAL`: invalid argument (bad flags, range, unknown command).
    Inval = 22,
    /// `NBD_ENOSPC`: no space left (write past the end).
    NoSpc = 28,
    /// `NBD_EOVERFLOW`: value too large.
    Overflow = 75,
    /// `NBD_ENOTSUP`: operation not supported (a fast zero we cannot do fast).
    NotSup = 95,
    /// `NBD_ESHUTDOWN`: the server is shutting down.
    Shutdown = 108,
}

impl Errno {
    /// The value on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The errno for a wire value, if it is one of the defined ones.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            1 => Self::Perm,
            5 => Self::Io,
            12 => Self::NoMem,
            22 => Self::Inval,
            28 => Self::NoSpc,
            75 => Self::Overflow,
            95 => Self::NotSup,
            108 => Self::Shutdown,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Perm => "EPERM",
            Self::Io => "EIO",
            Self::NoMem => "ENOMEM",
            Self::Inval => "EINVAL",
            Self::NoSpc => "ENOSPC",
            Self::Overflow => "EOVERFLOW",
            Self::NotSup => "ENOTSUP",
            Self::Shutdown => "ESHUTDOWN",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics_spell_their_ascii_names() {
        assert_eq!(&NBDMAGIC.to_be_bytes(), b"NBDMAGIC");
        assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
    }

    #[test]
    fn constants_match_the_specification_values() {
        assert_eq!(REP_ERR_UNSUP, 0x8000_0001);
        assert_eq!(REP_ERR_TOO_BIG, 0x8000_0009);
        assert_eq!(REPLY_TYPE_ERROR, 32769);
        assert_eq!(REPLY_TYPE_ERROR_OFFSET, 32770);
        assert_eq!(FLAG_SEND_FAST_ZERO, 2048);
        // Spelled as the spec writes it.
        assert_eq!(
            Ok(OPTION_REPLY_MAGIC),
            u64::from_str_radix("3e889045565a9", 16)
        );
        for code in [1, 5, 12, 22, 28, 75, 95, 108] {
            assert_eq!(Errno::from_code(code).map(Errno::code), Some(code));
        }
        assert_eq!(Errno::from_code(2), None);
    }
}
