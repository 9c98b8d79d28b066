//! The fixed-newstyle handshake, server side, as a pure state machine.
//!
//! The I/O layer reads a fixed-size piece (client flags, an option header),
//! then the option's data, and hands the bytes to [`Negotiation::handle`],
//! which appends every reply to an output buffer and says what happens next.
//! Nothing here reads or writes a socket, so the whole handshake is fuzzed and
//! unit-tested on byte slices.
//!
//! ```text
//! S: NBDMAGIC (u64) IHAVEOPT (u64) handshake flags (u16)   = greeting, 18 bytes
//! C: client flags (u32)
//! repeat:
//!   C: IHAVEOPT (u64) option (u32) length (u32) data[length]
//!   S: 0x3e889045565a9 (u64) option (u32) reply type (u32) length (u32) data   (×n)
//! until GO/EXPORT_NAME enter transmission, or ABORT / disconnect.
//! ```
//!
//! TLS (`NBD_OPT_STARTTLS`): the state machine decides, per [`TlsMode`], which
//! options need TLS first and when to upgrade ([`Outcome::StartTls`]); the
//! I/O layer runs the TLS handshake itself and then reports it with
//! [`Negotiation::tls_established`]. After that every byte, options and
//! transmission alike, goes through TLS.

use crate::limits::{OPTION_DATA_MAX_BYTES, OPTIONS_PER_CONNECTION_MAX, STRING_MAX_BYTES};
use crate::proto::{
    FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, FLAG_CAN_MULTI_CONN, FLAG_FIXED_NEWSTYLE,
    FLAG_HAS_FLAGS, FLAG_NO_ZEROES, FLAG_READ_ONLY, FLAG_SEND_CACHE, FLAG_SEND_DF,
    FLAG_SEND_FAST_ZERO, FLAG_SEND_FLUSH, FLAG_SEND_FUA, FLAG_SEND_TRIM, FLAG_SEND_WRITE_ZEROES,
    IHAVEOPT, INFO_BLOCK_SIZE, INFO_DESCRIPTION, INFO_EXPORT, INFO_NAME, META_BASE_ALLOCATION,
    NBDMAGIC, OPT_ABORT, OPT_EXPORT_NAME, OPT_GO, OPT_INFO, OPT_LIST, OPT_LIST_META_CONTEXT,
    OPT_SET_META_CONTEXT, OPT_STARTTLS, OPT_STRUCTURED_REPLY, OPTION_REPLY_MAGIC, REP_ACK,
    REP_ERR_INVALID, REP_ERR_TLS_REQD, REP_ERR_UNKNOWN, REP_ERR_UNSUP, REP_INFO, REP_META_CONTEXT,
    REP_SERVER,
};

/// Length of the server's greeting.
pub const GREETING_LEN: usize = 18;
/// Length of an option header (magic, option, length).
pub const OPTION_HEADER_LEN: usize = 16;
/// Length of the reply to `NBD_OPT_EXPORT_NAME` without the 124 zero bytes.
pub const EXPORT_NAME_REPLY_LEN: usize = 10;
/// The zero padding after an `NBD_OPT_EXPORT_NAME` reply unless `NO_ZEROES`.
pub const EXPORT_NAME_PADDING: usize = 124;
/// The context id we give `base:allocation` in `NBD_OPT_SET_META_CONTEXT`.
pub const BASE_ALLOCATION_ID: u32 = 1;

/// How a server treats TLS, the same on every connection (the protocol's
/// NOTLS and FORCEDTLS modes, plus an optional upgrade; nbdkit's
/// `--tls=off|on|require`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS (NOTLS): `NBD_OPT_STARTTLS` is answered `NBD_REP_ERR_UNSUP`.
    #[default]
    Off,
    /// A client may upgrade with `NBD_OPT_STARTTLS`; plaintext clients are
    /// served too.
    On,
    /// Every option other than `NBD_OPT_STARTTLS` and `NBD_OPT_ABORT` is
    /// answered `NBD_REP_ERR_TLS_REQD` until TLS is up (FORCEDTLS), and
    /// `NBD_OPT_EXPORT_NAME`, which cannot carry an error, disconnects.
    Require,
}

impl TlsMode {
    /// The name used on the command line and in volume specs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Require => "require",
        }
    }
}

impl std::fmt::Display for TlsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TlsMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "require" => Ok(Self::Require),
            _ => Err(format!("{text:?}: expected off, on or require")),
        }
    }
}

/// Size constraints advertised with `NBD_INFO_BLOCK_SIZE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSize {
    /// Minimum block size in bytes (a power of two, at most 64 KiB).
    pub minimum_bytes: u32,
    /// Preferred block size in bytes (a power of two, at least 512).
    pub preferred_bytes: u32,
    /// Largest payload the server accepts, in bytes.
    pub maximum_bytes: u32,
}

/// What the handshake needs to know about one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// The name clients ask for. The first export is also the default (`""`).
    pub name: String,
    /// Shown by `nbdinfo --list`; may be empty.
    pub description: String,
    /// Size in bytes.
    pub size: u64,
    /// Refuse writes (`NBD_FLAG_READ_ONLY`, writes fail with `EPERM`).
    pub read_only: bool,
    /// Size constraints.
    pub block_size: BlockSize,
}

impl ExportInfo {
    /// Transmission flags for this export; `structured` adds `SEND_DF`.
    pub fn transmission_flags(&self, structured: bool) -> u16 {
        let mut flags = FLAG_HAS_FLAGS
            | FLAG_SEND_FLUSH
            | FLAG_SEND_FUA
            | FLAG_SEND_TRIM
            | FLAG_SEND_WRITE_ZEROES
            | FLAG_SEND_FAST_ZERO
            | FLAG_CAN_MULTI_CONN
            | FLAG_SEND_CACHE;
        if structured {
            flags |= FLAG_SEND_DF;
        }
        if self.read_only {
            flags |= FLAG_READ_ONLY;
        }
        flags
    }
}

/// Why the handshake ends without transmission (a hard disconnect).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The client set flags we do not know; the spec says drop the connection.
    #[error("client flags {0:#x} include unknown bits")]
    UnknownClientFlags(u32),
    /// The client did not set `NBD_FLAG_C_FIXED_NEWSTYLE`; we serve only fixed newstyle.
    #[error("client does not speak fixed newstyle (flags {0:#x})")]
    NotFixedNewstyle(u32),
    /// An option header did not start with `IHAVEOPT`.
    #[error("option header has bad magic {0:#018x}")]
    BadOptionMagic(u64),
    /// An option's data is longer than we accept.
    #[error("option {option} carries {length} bytes (limit {OPTION_DATA_MAX_BYTES})")]
    OptionTooLong {
        /// The option code.
        option: u32,
        /// Its data length.
        length: u32,
    },
    /// The client sent more options than one connection may.
    #[error("more than {OPTIONS_PER_CONNECTION_MAX} options on one connection")]
    TooManyOptions,
    /// `NBD_OPT_EXPORT_NAME` named an export we do not have (it cannot carry an error).
    #[error("NBD_OPT_EXPORT_NAME asked for unknown export {0:?}")]
    UnknownExport(String),
    /// `NBD_OPT_EXPORT_NAME` carried a name that is not a valid string.
    #[error("NBD_OPT_EXPORT_NAME carried an invalid name: {0}")]
    InvalidExportName(&'static str),
    /// `NBD_OPT_EXPORT_NAME` before `NBD_OPT_STARTTLS` on a server that
    /// requires TLS (it cannot carry an error, so the spec says disconnect).
    #[error("NBD_OPT_EXPORT_NAME without TLS, but this server requires TLS")]
    TlsRequired,
}

/// The server's first 18 bytes.
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut out = [0u8; GREETING_LEN];
    out[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    out[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    out
}

/// The client's flags, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    /// `NBD_FLAG_C_NO_ZEROES`: omit the 124 zero bytes after `EXPORT_NAME`.
    pub no_zeroes: bool,
}

/// Parse the client's 4 flag bytes.
pub fn parse_client_flags(bytes: [u8; 4]) -> Result<ClientFlags, HandshakeError> {
    let flags = u32::from_be_bytes(bytes);
    if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(HandshakeError::UnknownClientFlags(flags));
    }
    if flags & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(HandshakeError::NotFixedNewstyle(flags));
    }
    Ok(ClientFlags {
        no_zeroes: flags & FLAG_C_NO_ZEROES != 0,
    })
}

/// An option header: which option, and how many data bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// The option code (`NBD_OPT_*`, possibly unknown).
    pub option: u32,
    /// Bytes of data that follow.
    pub length: u32,
}

impl OptionHeader {
    /// Parse 16 bytes; a bad magic or an oversized length ends the handshake.
    pub fn parse(bytes: &[u8; OPTION_HEADER_LEN]) -> Result<Self, HandshakeError> {
        let magic = be_u64(&bytes[0..8]);
        if magic != IHAVEOPT {
            return Err(HandshakeError::BadOptionMagic(magic));
        }
        let option = be_u32(&bytes[8..12]);
        let length = be_u32(&bytes[12..16]);
        if length as usize > OPTION_DATA_MAX_BYTES {
            return Err(HandshakeError::OptionTooLong { option, length });
        }
        Ok(Self { option, length })
    }

    /// The 16 bytes a client sends (for clients and tests).
    pub fn encode(&self) -> [u8; OPTION_HEADER_LEN] {
        let mut out = [0u8; OPTION_HEADER_LEN];
        out[0..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        out[8..12].copy_from_slice(&self.option.to_be_bytes());
        out[12..16].copy_from_slice(&self.length.to_be_bytes());
        out
    }
}

/// `NBD_OPT_INFO` / `NBD_OPT_GO` data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name (empty = default export).
    pub name: String,
    /// Requested `NBD_INFO_*` items.
    pub items: Vec<u16>,
}

impl InfoRequest {
    /// Encode as option data (for clients and tests).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + self.name.len() + 2 * self.items.len());
        out.extend_from_slice(&(self.name.len() as u32).to_be_bytes());
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(&(self.items.len() as u16).to_be_bytes());
        for item in &self.items {
            out.extend_from_slice(&item.to_be_bytes());
        }
        out
    }
}

/// `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT` data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRequest {
    /// Export name.
    pub name: String,
    /// Queries such as `base:allocation` or `base:`.
    pub queries: Vec<String>,
}

impl MetaRequest {
    /// Encode as option data (for clients and tests).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.name.len() as u32).to_be_bytes());
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(&(self.queries.len() as u32).to_be_bytes());
        for query in &self.queries {
            out.extend_from_slice(&(query.len() as u32).to_be_bytes());
            out.extend_from_slice(query.as_bytes());
        }
        out
    }
}

/// A parsed client option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOption {
    /// `NBD_OPT_EXPORT_NAME` with the raw name bytes (validated when answered).
    ExportName(Vec<u8>),
    /// `NBD_OPT_ABORT`.
    Abort,
    /// `NBD_OPT_LIST`.
    List,
    /// `NBD_OPT_INFO`.
    Info(InfoRequest),
    /// `NBD_OPT_GO`.
    Go(InfoRequest),
    /// `NBD_OPT_STRUCTURED_REPLY`.
    StructuredReply,
    /// `NBD_OPT_LIST_META_CONTEXT`.
    ListMetaContext(MetaRequest),
    /// `NBD_OPT_SET_META_CONTEXT`.
    SetMetaContext(MetaRequest),
    /// `NBD_OPT_STARTTLS`.
    StartTls,
    /// Anything else: answered `ERR_UNSUP`.
    Unsupported(u32),
}

/// Why an option's data is invalid (answered `NBD_REP_ERR_INVALID`, handshake goes on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidOption(pub &'static str);

/// Parse one option's data. Never panics; bad data is an [`InvalidOption`].
pub fn parse_option(option: u32, data: &[u8]) -> Result<ClientOption, InvalidOption> {
    match option {
        OPT_EXPORT_NAME => Ok(ClientOption::ExportName(data.to_vec())),
        // The spec: a server SHOULD ignore data sent with ABORT.
        OPT_ABORT => Ok(ClientOption::Abort),
        OPT_LIST => no_data(data).map(|()| ClientOption::List),
        OPT_STRUCTURED_REPLY => no_data(data).map(|()| ClientOption::StructuredReply),
        OPT_INFO => parse_info(data).map(ClientOption::Info),
        OPT_GO => parse_info(data).map(ClientOption::Go),
        OPT_LIST_META_CONTEXT => parse_meta(data).map(ClientOption::ListMetaContext),
        OPT_SET_META_CONTEXT => parse_meta(data).map(ClientOption::SetMetaContext),
        OPT_STARTTLS => no_data(data).map(|()| ClientOption::StartTls),
        other => Ok(ClientOption::Unsupported(other)),
    }
}

fn no_data(data: &[u8]) -> Result<(), InvalidOption> {
    if data.is_empty() {
        Ok(())
    } else {
        Err(InvalidOption("this option takes no data"))
    }
}

/// A cursor over option data that fails instead of panicking.
struct Cursor<'a> {
    data: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], InvalidOption> {
        if self.data.len() < n {
            return Err(InvalidOption("option data is truncated"));
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Ok(head)
    }
    fn u16(&mut self) -> Result<u16, InvalidOption> {
        self.take(2).map(be_u16)
    }
    fn u32(&mut self) -> Result<u32, InvalidOption> {
        self.take(4).map(be_u32)
    }
    fn string(&mut self, len: u32) -> Result<String, InvalidOption> {
        if len as usize > STRING_MAX_BYTES {
            return Err(InvalidOption("string longer than 4096 bytes"));
        }
        let bytes = self.take(len as usize)?;
        validate_string(bytes).map(str::to_owned)
    }
    fn finish(&self) -> Result<(), InvalidOption> {
        if self.data.is_empty() {
            Ok(())
        } else {
            Err(InvalidOption("option data has trailing bytes"))
        }
    }
}

/// A protocol string: UTF-8, no NUL, at most 4096 bytes.
fn validate_string(bytes: &[u8]) -> Result<&str, InvalidOption> {
    if bytes.len() > STRING_MAX_BYTES {
        return Err(InvalidOption("string longer than 4096 bytes"));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| InvalidOption("string is not UTF-8"))?;
    if text.contains('\0') {
        return Err(InvalidOption("string contains NUL"));
    }
    Ok(text)
}

fn parse_info(data: &[u8]) -> Result<InfoRequest, InvalidOption> {
    let mut cursor = Cursor { data };
    let name_len = cursor.u32()?;
    let name = cursor.string(name_len)?;
    let count = cursor.u16()?;
    let mut items = Vec::with_capacity(usize::from(count).min(cursor.data.len() / 2));
    for _ in 0..count {
        items.push(cursor.u16()?);
    }
    cursor.finish()?;
    Ok(InfoRequest { name, items })
}

fn parse_meta(data: &[u8]) -> Result<MetaRequest, InvalidOption> {
    let mut cursor = Cursor { data };
    let name_len = cursor.u32()?;
    let name = cursor.string(name_len)?;
    let count = cursor.u32()?;
    // Each query takes at least 4 bytes, which bounds the loop by the data.
    if count as usize > cursor.data.len() / 4 {
        return Err(InvalidOption("more queries than the option data can hold"));
    }
    let mut queries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = cursor.u32()?;
        queries.push(cursor.string(len)?);
    }
    cursor.finish()?;
    Ok(MetaRequest { name, queries })
}

/// Append one option reply to `out`.
pub fn encode_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// One option reply as a client sees it (for clients, tests and the fuzzer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionReply {
    /// The option answered.
    pub option: u32,
    /// `NBD_REP_*`.
    pub reply_type: u32,
    /// Its data.
    pub data: Vec<u8>,
}

/// Split a buffer of option replies; `None` if it is not a whole number of them.
pub fn decode_option_replies(mut bytes: &[u8]) -> Option<Vec<OptionReply>> {
    let mut replies = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < 20 || be_u64(&bytes[0..8]) != OPTION_REPLY_MAGIC {
            return None;
        }
        let len = be_u32(&bytes[16..20]) as usize;
        let data = bytes.get(20..20 + len)?;
        replies.push(OptionReply {
            option: be_u32(&bytes[8..12]),
            reply_type: be_u32(&bytes[12..16]),
            data: data.to_vec(),
        });
        bytes = &bytes[20 + len..];
    }
    Some(replies)
}

/// What the negotiated connection looks like when transmission starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// Index into the exports slice.
    pub export: usize,
    /// Transmission flags sent to the client.
    pub flags: u16,
    /// Structured replies negotiated.
    pub structured: bool,
    /// `base:allocation` selected for this export (context id [`BASE_ALLOCATION_ID`]).
    pub base_allocation: bool,
}

/// What the server does after an option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Send the output and read the next option.
    Continue,
    /// Send the output (the ACK to `NBD_OPT_ABORT`) and close.
    Abort,
    /// Send the output and enter transmission.
    Transmission(Session),
    /// Close at once (send nothing more).
    Disconnect(HandshakeError),
    /// Send the output (the ACK to `NBD_OPT_STARTTLS`), run the TLS handshake
    /// as the server, then call [`Negotiation::tls_established`] and read the
    /// next option through TLS. A failed TLS handshake ends the connection
    /// (too late to go on in plaintext).
    StartTls,
}

/// The server's side of option haggling for one connection.
#[derive(Debug, Clone)]
pub struct Negotiation {
    client: ClientFlags,
    tls: TlsMode,
    /// TLS is up: set by [`Negotiation::tls_established`].
    tls_active: bool,
    structured: bool,
    /// The export (index) of the last successful `SET_META_CONTEXT` that
    /// selected `base:allocation`.
    meta_export: Option<usize>,
    options_seen: usize,
}

impl Negotiation {
    /// Start after the client's flags, on a server without TLS.
    pub fn new(client: ClientFlags) -> Self {
        Self::with_tls(client, TlsMode::Off)
    }

    /// Start after the client's flags, on a server in TLS mode `tls`.
    pub fn with_tls(client: ClientFlags, tls: TlsMode) -> Self {
        Self {
            client,
            tls,
            tls_active: false,
            structured: false,
            meta_export: None,
            options_seen: 0,
        }
    }

    /// Whether TLS is up on this connection.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// The TLS handshake that [`Outcome::StartTls`] asked for succeeded.
    /// Whatever was negotiated in plaintext (structured replies, meta
    /// contexts) is forgotten: a client must not rely on options a
    /// man-in-the-middle could have changed, so it negotiates them again.
    pub fn tls_established(&mut self) {
        debug_assert!(self.tls != TlsMode::Off && !self.tls_active);
        self.tls_active = true;
        self.structured = false;
        self.meta_export = None;
    }

    /// In `require` mode before TLS, answer everything but STARTTLS and
    /// ABORT with `NBD_REP_ERR_TLS_REQD`; `None` lets the option through.
    fn refuse_without_tls(&self, option: u32, out: &mut Vec<u8>) -> Option<Outcome> {
        if self.tls != TlsMode::Require
            || self.tls_active
            || option == OPT_STARTTLS
            || option == OPT_ABORT
        {
            return None;
        }
        if option == OPT_EXPORT_NAME {
            return Some(Outcome::Disconnect(HandshakeError::TlsRequired));
        }
        encode_option_reply(
            out,
            option,
            REP_ERR_TLS_REQD,
            b"this server requires TLS: upgrade with NBD_OPT_STARTTLS (an nbds:// URI)",
        );
        Some(Outcome::Continue)
    }

    /// Answer one option (header already parsed, `data` its `length` bytes):
    /// replies are appended to `out`.
    pub fn handle(
        &mut self,
        header: OptionHeader,
        data: &[u8],
        exports: &[ExportInfo],
        out: &mut Vec<u8>,
    ) -> Outcome {
        self.options_seen += 1;
        if self.options_seen > OPTIONS_PER_CONNECTION_MAX {
            return Outcome::Disconnect(HandshakeError::TooManyOptions);
        }
        let option = header.option;
        if option == OPT_STARTTLS && self.tls == TlsMode::Off {
            encode_option_reply(
                out,
                option,
                REP_ERR_UNSUP,
                b"TLS is not enabled on this server (cairn serve --tls on|require)",
            );
            return Outcome::Continue;
        }
        if let Some(outcome) = self.refuse_without_tls(option, out) {
            return outcome;
        }
        let parsed = match parse_option(option, data) {
            Ok(parsed) => parsed,
            Err(InvalidOption(why)) => {
                encode_option_reply(out, option, REP_ERR_INVALID, why.as_bytes());
                return Outcome::Continue;
            }
        };
        match parsed {
            ClientOption::ExportName(raw) => self.export_name(&raw, exports, out),
            ClientOption::Abort => {
                encode_option_reply(out, option, REP_ACK, &[]);
                Outcome::Abort
            }
            ClientOption::List => {
                for export in exports {
                    let mut data = Vec::with_capacity(4 + export.name.len());
                    data.extend_from_slice(&(export.name.len() as u32).to_be_bytes());
                    data.extend_from_slice(export.name.as_bytes());
                    data.extend_from_slice(export.description.as_bytes());
                    encode_option_reply(out, option, REP_SERVER, &data);
                }
                encode_option_reply(out, option, REP_ACK, &[]);
                Outcome::Continue
            }
            ClientOption::StructuredReply => {
                self.structured = true;
                encode_option_reply(out, option, REP_ACK, &[]);
                Outcome::Continue
            }
            ClientOption::Info(request) => {
                self.info(option, &request, exports, out);
                Outcome::Continue
            }
            ClientOption::Go(request) => match self.info(option, &request, exports, out) {
                Some(export) => Outcome::Transmission(self.session(export, &exports[export])),
                None => Outcome::Continue,
            },
            ClientOption::ListMetaContext(request) => {
                self.meta_context(option, &request, false, exports, out);
                Outcome::Continue
            }
            ClientOption::SetMetaContext(request) => {
                self.meta_context(option, &request, true, exports, out);
                Outcome::Continue
            }
            ClientOption::StartTls if self.tls_active => {
                encode_option_reply(out, option, REP_ERR_INVALID, b"TLS is already active");
                Outcome::Continue
            }
            ClientOption::StartTls => {
                encode_option_reply(out, option, REP_ACK, &[]);
                Outcome::StartTls
            }
            ClientOption::Unsupported(_) => {
                encode_option_reply(out, option, REP_ERR_UNSUP, b"option not supported");
                Outcome::Continue
            }
        }
    }

    fn session(&self, export: usize, info: &ExportInfo) -> Session {
        Session {
            export,
            flags: info.transmission_flags(self.structured),
            structured: self.structured,
            base_allocation: self.structured && self.meta_export == Some(export),
        }
    }

    fn export_name(&self, raw: &[u8], exports: &[ExportInfo], out: &mut Vec<u8>) -> Outcome {
        let name = match validate_string(raw) {
            Ok(name) => name,
            Err(InvalidOption(why)) => {
                return Outcome::Disconnect(HandshakeError::InvalidExportName(why));
            }
        };
        let Some(index) = find_export(name, exports) else {
            return Outcome::Disconnect(HandshakeError::UnknownExport(name.to_owned()));
        };
        let info = &exports[index];
        let session = self.session(index, info);
        out.extend_from_slice(&info.size.to_be_bytes());
        out.extend_from_slice(&session.flags.to_be_bytes());
        if !self.client.no_zeroes {
            out.extend_from_slice(&[0u8; EXPORT_NAME_PADDING]);
        }
        Outcome::Transmission(session)
    }

    /// Answer INFO or GO; returns the export index on success (replies ended
    /// with `NBD_REP_ACK`).
    fn info(
        &self,
        option: u32,
        request: &InfoRequest,
        exports: &[ExportInfo],
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        let Some(index) = find_export(&request.name, exports) else {
            encode_option_reply(out, option, REP_ERR_UNKNOWN, b"no such export");
            return None;
        };
        let info = &exports[index];
        let mut data = Vec::with_capacity(16);
        data.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        data.extend_from_slice(&info.size.to_be_bytes());
        data.extend_from_slice(&info.transmission_flags(self.structured).to_be_bytes());
        encode_option_reply(out, option, REP_INFO, &data);
        for &item in &request.items {
            data.clear();
            data.extend_from_slice(&item.to_be_bytes());
            match item {
                INFO_NAME => data.extend_from_slice(info.name.as_bytes()),
                INFO_DESCRIPTION if !info.description.is_empty() => {
                    data.extend_from_slice(info.description.as_bytes());
                }
                INFO_BLOCK_SIZE => {
                    let sizes = info.block_size;
                    data.extend_from_slice(&sizes.minimum_bytes.to_be_bytes());
                    data.extend_from_slice(&sizes.preferred_bytes.to_be_bytes());
                    data.extend_from_slice(&sizes.maximum_bytes.to_be_bytes());
                }
                // INFO_EXPORT was sent already; unknown items are ignored (spec).
                _ => continue,
            }
            encode_option_reply(out, option, REP_INFO, &data);
        }
        encode_option_reply(out, option, REP_ACK, &[]);
        Some(index)
    }

    fn meta_context(
        &mut self,
        option: u32,
        request: &MetaRequest,
        set: bool,
        exports: &[ExportInfo],
        out: &mut Vec<u8>,
    ) {
        if set {
            // "Issuing this command replaces all previously-set metadata
            // contexts (including when this command fails)."
            self.meta_export = None;
        }
        if !self.structured {
            encode_option_reply(
                out,
                option,
                REP_ERR_INVALID,
                b"negotiate NBD_OPT_STRUCTURED_REPLY first",
            );
            return;
        }
        let Some(export) = find_export(&request.name, exports) else {
            encode_option_reply(out, option, REP_ERR_UNKNOWN, b"no such export");
            return;
        };
        if request.queries.iter().any(|query| !query.contains(':')) {
            encode_option_reply(
                out,
                option,
                REP_ERR_INVALID,
                b"a query must start with a namespace and a colon",
            );
            return;
        }
        let selected = if set {
            request.queries.iter().any(|q| q == META_BASE_ALLOCATION)
        } else {
            request.queries.is_empty()
                || request
                    .queries
                    .iter()
                    .any(|q| q == "base:" || q == META_BASE_ALLOCATION)
        };
        if selected {
            let id = if set { BASE_ALLOCATION_ID } else { 0 };
            let mut data = Vec::with_capacity(4 + META_BASE_ALLOCATION.len());
            data.extend_from_slice(&id.to_be_bytes());
            data.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
            encode_option_reply(out, option, REP_META_CONTEXT, &data);
            if set {
                self.meta_export = Some(export);
            }
        }
        encode_option_reply(out, option, REP_ACK, &[]);
    }
}

/// Which export a name selects: the empty name is the first export.
pub fn find_export(name: &str, exports: &[ExportInfo]) -> Option<usize> {
    if name.is_empty() && !exports.is_empty() {
        return Some(0);
    }
    exports.iter().position(|export| export.name == name)
}

fn be_u16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn be_u64(bytes: &[u8]) -> u64 {
    let mut array = [0u8; 8];
    array.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(array)
}
