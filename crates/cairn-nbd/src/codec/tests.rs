//! Codec unit tests and property round trips.

use proptest::prelude::*;

use super::handshake::{
    self, BASE_ALLOCATION_ID, BlockSize, ClientFlags, ExportInfo, HandshakeError, InfoRequest,
    MetaRequest, Negotiation, OptionHeader, OptionReply, Outcome, TlsMode, decode_option_replies,
};
use super::transmission::{self, Command, Limits, REQUEST_HEADER_LEN, ReplyHeader, RequestHeader};
use crate::proto::*;

fn exports() -> Vec<ExportInfo> {
    let block_size = BlockSize {
        minimum_bytes: 1,
        preferred_bytes: 4096,
        maximum_bytes: 64 << 20,
    };
    vec![
        ExportInfo {
            name: "disk".into(),
            description: "a disk".into(),
            size: 1 << 20,
            read_only: false,
            block_size,
        },
        ExportInfo {
            name: "ro".into(),
            description: String::new(),
            size: 4096,
            read_only: true,
            block_size,
        },
    ]
}

/// Run one option through a negotiation; return the outcome and the replies.
fn option(negotiation: &mut Negotiation, code: u32, data: &[u8]) -> (Outcome, Vec<OptionReply>) {
    let mut out = Vec::new();
    let header = OptionHeader {
        option: code,
        length: data.len() as u32,
    };
    let outcome = negotiation.handle(header, data, &exports(), &mut out);
    let replies = match outcome {
        Outcome::Transmission(_) if code == OPT_EXPORT_NAME => Vec::new(),
        _ => decode_option_replies(&out).expect("whole replies"),
    };
    (outcome, replies)
}

fn fresh() -> Negotiation {
    Negotiation::new(ClientFlags { no_zeroes: true })
}

#[test]
fn greeting_is_magic_magic_fixed_newstyle_no_zeroes() {
    let greeting = handshake::greeting();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    assert_eq!(&greeting[8..16], b"IHAVEOPT");
    assert_eq!(greeting[16..18], [0, 3]);
}

#[test]
fn client_flags_unknown_bits_or_missing_fixed_newstyle_disconnect() {
    assert_eq!(
        handshake::parse_client_flags([0, 0, 0, 3]),
        Ok(ClientFlags { no_zeroes: true })
    );
    assert_eq!(
        handshake::parse_client_flags([0, 0, 0, 1]),
        Ok(ClientFlags { no_zeroes: false })
    );
    assert!(matches!(
        handshake::parse_client_flags([0, 0, 0, 4 | 1]),
        Err(HandshakeError::UnknownClientFlags(5))
    ));
    assert!(matches!(
        handshake::parse_client_flags([0, 0, 0, 0]),
        Err(HandshakeError::NotFixedNewstyle(0))
    ));
}

#[test]
fn option_header_checks_magic_and_length() {
    let header = OptionHeader {
        option: OPT_GO,
        length: 10,
    };
    assert_eq!(OptionHeader::parse(&header.encode()), Ok(header));
    let mut bad = header.encode();
    bad[0] ^= 1;
    assert!(matches!(
        OptionHeader::parse(&bad),
        Err(HandshakeError::BadOptionMagic(_))
    ));
    let huge = OptionHeader {
        option: 99,
        length: u32::MAX,
    };
    assert!(matches!(
        OptionHeader::parse(&huge.encode()),
        Err(HandshakeError::OptionTooLong { .. })
    ));
}

#[test]
fn go_with_block_size_replies_export_info_then_ack_and_enters_transmission() {
    let mut negotiation = fresh();
    let request = InfoRequest {
        name: "disk".into(),
        items: vec![INFO_BLOCK_SIZE, INFO_NAME, INFO_DESCRIPTION, 999],
    };
    let (outcome, replies) = option(&mut negotiation, OPT_GO, &request.encode());
    let Outcome::Transmission(session) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(session.export, 0);
    assert!(!session.structured && !session.base_allocation);
    assert!(replies.iter().all(|r| r.option == OPT_GO));
    let types: Vec<_> = replies.iter().map(|r| r.reply_type).collect();
    assert_eq!(types, [REP_INFO, REP_INFO, REP_INFO, REP_INFO, REP_ACK]);
    let export = &replies[0].data;
    assert_eq!(export.len(), 12);
    assert_eq!(export[..2], INFO_EXPORT.to_be_bytes());
    assert_eq!(export[2..10], (1u64 << 20).to_be_bytes());
    let flags = u16::from_be_bytes([export[10], export[11]]);
    assert_eq!(flags, session.flags);
    assert!(flags & FLAG_HAS_FLAGS != 0 && flags & FLAG_CAN_MULTI_CONN != 0);
    assert_eq!(flags & (FLAG_SEND_DF | FLAG_READ_ONLY), 0);
    let block = &replies[1].data;
    assert_eq!(block.len(), 14);
    assert_eq!(block[..2], INFO_BLOCK_SIZE.to_be_bytes());
    assert_eq!(block[2..6], 1u32.to_be_bytes());
    assert_eq!(block[6..10], 4096u32.to_be_bytes());
    assert_eq!(block[10..14], (64u32 << 20).to_be_bytes());
    assert_eq!(&replies[2].data[2..], b"disk");
    assert_eq!(&replies[3].data[2..], b"a disk");
}

#[test]
fn info_on_unknown_export_is_err_unknown_and_haggling_goes_on() {
    let mut negotiation = fresh();
    let request = InfoRequest {
        name: "nope".into(),
        items: vec![],
    };
    let (outcome, replies) = option(&mut negotiation, OPT_INFO, &request.encode());
    assert_eq!(outcome, Outcome::Continue);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ERR_UNKNOWN);
    // The empty name is the default (first) export.
    let request = InfoRequest {
        name: String::new(),
        items: vec![],
    };
    let (outcome, replies) = option(&mut negotiation, OPT_INFO, &request.encode());
    assert_eq!(outcome, Outcome::Continue);
    assert_eq!(replies.last().map(|r| r.reply_type), Some(REP_ACK));
}

#[test]
fn malformed_go_data_is_err_invalid() {
    let mut negotiation = fresh();
    for data in [
        &[][..],
        &[0, 0, 0, 9, b'a'],             // name longer than the data
        &[0, 0, 0, 0, 0, 1],             // one item announced, none present
        &[0, 0, 0, 0, 0, 0, 7],          // trailing byte
        &[0, 0, 0, 2, 0xff, 0xfe, 0, 0], // not UTF-8
        &[0, 0, 0, 2, b'a', 0, 0, 0],    // NUL in the name
    ] {
        let (outcome, replies) = option(&mut negotiation, OPT_GO, data);
        assert_eq!(outcome, Outcome::Continue, "{data:?}");
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].reply_type, REP_ERR_INVALID, "{data:?}");
    }
}

#[test]
fn unknown_options_and_starttls_are_err_unsup_and_parsing_continues() {
    let mut negotiation = fresh();
    for code in [
        OPT_STARTTLS,
        OPT_EXTENDED_HEADERS,
        OPT_PEEK_EXPORT,
        0,
        12,
        0xdead_beef,
    ] {
        let (outcome, replies) = option(&mut negotiation, code, b"whatever data");
        assert_eq!(outcome, Outcome::Continue);
        assert_eq!(replies[0].option, code);
        assert_eq!(replies[0].reply_type, REP_ERR_UNSUP);
    }
    let (_, replies) = option(&mut negotiation, OPT_LIST, &[]);
    assert_eq!(replies.len(), 3);
}

#[test]
fn tls_on_acks_starttls_then_forgets_what_was_negotiated_in_plaintext() {
    let mut negotiation = Negotiation::with_tls(ClientFlags { no_zeroes: true }, TlsMode::On);
    // Plaintext clients are served in `on` mode.
    let (_, replies) = option(&mut negotiation, OPT_LIST, &[]);
    assert_eq!(replies.last().map(|r| r.reply_type), Some(REP_ACK));
    let (_, replies) = option(&mut negotiation, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(replies[0].reply_type, REP_ACK);
    // STARTTLS with data is invalid and changes nothing.
    let (outcome, replies) = option(&mut negotiation, OPT_STARTTLS, b"x");
    assert_eq!(outcome, Outcome::Continue);
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
    let (outcome, replies) = option(&mut negotiation, OPT_STARTTLS, &[]);
    assert_eq!(outcome, Outcome::StartTls);
    assert_eq!(replies.len(), 1);
    assert_eq!(
        (replies[0].option, replies[0].reply_type),
        (OPT_STARTTLS, REP_ACK)
    );
    assert!(!negotiation.tls_active());
    negotiation.tls_established();
    assert!(negotiation.tls_active());
    // A second STARTTLS is invalid (spec: FORCEDTLS/SELECTIVETLS).
    let (outcome, replies) = option(&mut negotiation, OPT_STARTTLS, &[]);
    assert_eq!(outcome, Outcome::Continue);
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
    // Structured replies negotiated before TLS do not carry over.
    let request = InfoRequest {
        name: "disk".into(),
        items: vec![],
    };
    let (outcome, _) = option(&mut negotiation, OPT_GO, &request.encode());
    let Outcome::Transmission(session) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(!session.structured);
}

#[test]
fn tls_require_refuses_every_option_but_starttls_and_abort_until_tls() {
    let flags = ClientFlags { no_zeroes: true };
    let request = InfoRequest {
        name: String::new(),
        items: vec![],
    }
    .encode();
    for code in [
        OPT_LIST,
        OPT_INFO,
        OPT_GO,
        OPT_STRUCTURED_REPLY,
        OPT_LIST_META_CONTEXT,
        OPT_SET_META_CONTEXT,
        OPT_EXTENDED_HEADERS,
        0xdead_beef,
    ] {
        let mut negotiation = Negotiation::with_tls(flags, TlsMode::Require);
        let (outcome, replies) = option(&mut negotiation, code, &request);
        assert_eq!(outcome, Outcome::Continue, "option {code}");
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].reply_type, REP_ERR_TLS_REQD, "option {code}");
    }
    // EXPORT_NAME cannot carry an error: disconnect.
    let mut negotiation = Negotiation::with_tls(flags, TlsMode::Require);
    let (outcome, _) = option(&mut negotiation, OPT_EXPORT_NAME, b"disk");
    assert_eq!(outcome, Outcome::Disconnect(HandshakeError::TlsRequired));
    // ABORT still works in plaintext.
    let mut negotiation = Negotiation::with_tls(flags, TlsMode::Require);
    let (outcome, replies) = option(&mut negotiation, OPT_ABORT, &[]);
    assert_eq!((outcome, replies[0].reply_type), (Outcome::Abort, REP_ACK));
    // After STARTTLS and the TLS handshake, everything works.
    let mut negotiation = Negotiation::with_tls(flags, TlsMode::Require);
    let (outcome, _) = option(&mut negotiation, OPT_STARTTLS, &[]);
    assert_eq!(outcome, Outcome::StartTls);
    negotiation.tls_established();
    let (outcome, replies) = option(&mut negotiation, OPT_GO, &request);
    assert!(matches!(outcome, Outcome::Transmission(_)), "{outcome:?}");
    assert_eq!(replies.last().map(|r| r.reply_type), Some(REP_ACK));
}

#[test]
fn tls_modes_parse_and_print_back() {
    for mode in [TlsMode::Off, TlsMode::On, TlsMode::Require] {
        assert_eq!(mode.to_string().parse::<TlsMode>(), Ok(mode));
    }
    assert!("yes".parse::<TlsMode>().is_err());
}

#[test]
fn list_names_every_export_then_acks() {
    let mut negotiation = fresh();
    let (outcome, replies) = option(&mut negotiation, OPT_LIST, &[]);
    assert_eq!(outcome, Outcome::Continue);
    assert_eq!(replies[0].reply_type, REP_SERVER);
    assert_eq!(replies[0].data, b"\0\0\0\x04diska disk");
    assert_eq!(replies[1].data, b"\0\0\0\x02ro");
    assert_eq!(replies[2].reply_type, REP_ACK);
    let (_, replies) = option(&mut negotiation, OPT_LIST, b"x");
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
}

#[test]
fn abort_acks_and_ends() {
    let mut negotiation = fresh();
    let (outcome, replies) = option(&mut negotiation, OPT_ABORT, b"ignored");
    assert_eq!(outcome, Outcome::Abort);
    assert_eq!(replies[0].reply_type, REP_ACK);
}

#[test]
fn export_name_sends_size_flags_and_padding_unless_no_zeroes() {
    for no_zeroes in [false, true] {
        let mut negotiation = Negotiation::new(ClientFlags { no_zeroes });
        let mut out = Vec::new();
        let header = OptionHeader {
            option: OPT_EXPORT_NAME,
            length: 2,
        };
        let outcome = negotiation.handle(header, b"ro", &exports(), &mut out);
        let Outcome::Transmission(session) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(session.export, 1);
        assert_eq!(out.len(), if no_zeroes { 10 } else { 134 });
        assert_eq!(out[..8], 4096u64.to_be_bytes());
        let flags = u16::from_be_bytes([out[8], out[9]]);
        assert!(flags & FLAG_READ_ONLY != 0);
    }
    let mut negotiation = fresh();
    let header = OptionHeader {
        option: OPT_EXPORT_NAME,
        length: 4,
    };
    let outcome = negotiation.handle(header, b"nope", &exports(), &mut Vec::new());
    assert!(matches!(
        outcome,
        Outcome::Disconnect(HandshakeError::UnknownExport(_))
    ));
}

#[test]
fn meta_context_needs_structured_replies_and_selects_base_allocation() {
    let mut negotiation = fresh();
    let set = MetaRequest {
        name: "disk".into(),
        queries: vec!["base:allocation".into(), "qemu:dirty-bitmap:x".into()],
    };
    let (_, replies) = option(&mut negotiation, OPT_SET_META_CONTEXT, &set.encode());
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);

    let (_, replies) = option(&mut negotiation, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(replies[0].reply_type, REP_ACK);

    let list = MetaRequest {
        name: "disk".into(),
        queries: vec![],
    };
    let (_, replies) = option(&mut negotiation, OPT_LIST_META_CONTEXT, &list.encode());
    assert_eq!(replies[0].reply_type, REP_META_CONTEXT);
    assert_eq!(&replies[0].data[4..], b"base:allocation");
    assert_eq!(replies[1].reply_type, REP_ACK);
    let list = MetaRequest {
        name: "disk".into(),
        queries: vec!["x-other:".into()],
    };
    let (_, replies) = option(&mut negotiation, OPT_LIST_META_CONTEXT, &list.encode());
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ACK);

    let (_, replies) = option(&mut negotiation, OPT_SET_META_CONTEXT, &set.encode());
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0].reply_type, REP_META_CONTEXT);
    assert_eq!(replies[0].data[..4], BASE_ALLOCATION_ID.to_be_bytes());

    // GO on the same export (by its default alias) has base:allocation.
    let go = InfoRequest {
        name: String::new(),
        items: vec![],
    };
    let (outcome, _) = option(&mut negotiation.clone(), OPT_GO, &go.encode());
    let Outcome::Transmission(session) = outcome else {
        panic!()
    };
    assert!(session.structured && session.base_allocation);
    assert!(session.flags & FLAG_SEND_DF != 0);
    // GO on another export does not.
    let go = InfoRequest {
        name: "ro".into(),
        items: vec![],
    };
    let (outcome, _) = option(&mut negotiation, OPT_GO, &go.encode());
    let Outcome::Transmission(session) = outcome else {
        panic!()
    };
    assert!(session.structured && !session.base_allocation);
}

#[test]
fn too_many_options_disconnect() {
    let mut negotiation = fresh();
    for _ in 0..crate::limits::OPTIONS_PER_CONNECTION_MAX {
        assert_eq!(option(&mut negotiation, 77, &[]).0, Outcome::Continue);
    }
    let mut out = Vec::new();
    let header = OptionHeader {
        option: 77,
        length: 0,
    };
    assert_eq!(
        negotiation.handle(header, &[], &exports(), &mut out),
        Outcome::Disconnect(HandshakeError::TooManyOptions)
    );
}

fn limits() -> Limits {
    Limits {
        export_size: 1 << 20,
        read_only: false,
        structured: true,
        base_allocation: true,
        max_payload_bytes: 64 << 20,
    }
}

fn header(command: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
    RequestHeader {
        flags,
        command,
        cookie: 7,
        offset,
        length,
    }
}

#[test]
fn request_header_layout_matches_the_spec() {
    let bytes = header(CMD_WRITE, CMD_FLAG_FUA, 0x0102_0304_0506_0708, 0x0a0b_0c0d).encode();
    assert_eq!(
        bytes,
        [
            0x25, 0x60, 0x95, 0x13, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8,
            0x0a, 0x0b, 0x0c, 0x0d
        ]
    );
    let mut bad = bytes;
    bad[3] = 0;
    assert!(RequestHeader::parse(&bad).is_err());
}

#[test]
fn buffered_requests_counts_whole_frames_only() {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&header(CMD_READ, 0, 0, 4096).encode());
    bytes.extend_from_slice(&header(CMD_WRITE, 0, 0, 512).encode());
    bytes.extend_from_slice(&[0xab; 512]);
    bytes.extend_from_slice(&header(CMD_FLUSH, 0, 0, 0).encode());
    assert_eq!(transmission::buffered_requests(&bytes, 16), (3, 4096 + 512));
    assert_eq!(transmission::buffered_requests(&bytes, 2), (2, 4096 + 512));
    assert_eq!(transmission::buffered_requests(&bytes, 0), (0, 0));
    // A WRITE whose payload has not all arrived is not counted, nor what follows.
    let cut = REQUEST_HEADER_LEN * 2 + 511;
    assert_eq!(
        transmission::buffered_requests(&bytes[..cut], 16),
        (1, 4096)
    );
    // Nor a partial header.
    assert_eq!(
        transmission::buffered_requests(&bytes[..REQUEST_HEADER_LEN - 1], 16),
        (0, 0)
    );
    // A bad magic stops the count (the normal read path reports it).
    let mut bad = bytes.clone();
    bad[REQUEST_HEADER_LEN] ^= 0xff;
    assert_eq!(transmission::buffered_requests(&bad, 16), (1, 4096));
}

#[test]
fn validation_follows_the_spec_error_choices() {
    let limits = limits();
    let check = |h: RequestHeader| transmission::validate(&h, &limits).map_err(|r| r.errno);
    assert!(matches!(
        check(header(CMD_READ, CMD_FLAG_DF, 0, 512)),
        Ok(Command::Read { .. })
    ));
    assert_eq!(check(header(99, 0, 0, 0)), Err(Errno::Inval));
    assert_eq!(check(header(CMD_READ, 1 << 9, 0, 512)), Err(Errno::Inval));
    assert_eq!(
        check(header(CMD_WRITE, CMD_FLAG_NO_HOLE, 0, 1)),
        Err(Errno::Inval)
    );
    assert_eq!(check(header(CMD_READ, 0, 1 << 20, 1)), Err(Errno::Inval));
    assert_eq!(check(header(CMD_WRITE, 0, 1 << 20, 1)), Err(Errno::NoSpc));
    assert_eq!(
        check(header(CMD_WRITE_ZEROES, 0, u64::MAX, 1)),
        Err(Errno::NoSpc)
    );
    assert_eq!(check(header(CMD_TRIM, 0, 1 << 20, 1)), Err(Errno::Inval));
    assert_eq!(
        check(header(CMD_READ, 0, 0, (64 << 20) + 1)),
        Err(Errno::Inval)
    );
    assert_eq!(
        check(header(CMD_CACHE, CMD_FLAG_FAST_ZERO, 0, 1)),
        Err(Errno::Inval)
    );
    assert!(matches!(
        check(header(
            CMD_WRITE_ZEROES,
            CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO | CMD_FLAG_FUA,
            0,
            4096
        )),
        Ok(Command::WriteZeroes {
            fua: true,
            no_hole: true,
            fast_zero: true,
            ..
        })
    ));
    assert_eq!(check(header(CMD_FLUSH, 0, 0, 0)), Ok(Command::Flush));
    assert_eq!(check(header(CMD_DISC, 0, 0, 0)), Ok(Command::Disconnect));
    // FUA is valid on every command.
    assert!(
        check(header(
            CMD_BLOCK_STATUS,
            CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
            0,
            10
        ))
        .is_ok()
    );

    let plain = Limits {
        structured: false,
        base_allocation: false,
        read_only: true,
        ..limits
    };
    let check = |h: RequestHeader| transmission::validate(&h, &plain).map_err(|r| r.errno);
    assert_eq!(
        check(header(CMD_READ, CMD_FLAG_DF, 0, 512)),
        Err(Errno::Inval)
    );
    assert_eq!(
        check(header(CMD_BLOCK_STATUS, 0, 0, 512)),
        Err(Errno::Inval)
    );
    assert_eq!(check(header(CMD_WRITE, 0, 0, 512)), Err(Errno::Perm));
    assert_eq!(check(header(CMD_TRIM, 0, 0, 512)), Err(Errno::Perm));
}

#[test]
fn reply_layouts_match_the_spec() {
    let simple = transmission::simple_reply(0x1122, 22);
    assert_eq!(
        simple,
        [
            0x67, 0x44, 0x66, 0x98, 0, 0, 0, 22, 0, 0, 0, 0, 0, 0, 0x11, 0x22
        ]
    );
    let data = transmission::offset_data_header(5, 4096, 100, true);
    assert_eq!(data[..4], [0x66, 0x8e, 0x33, 0xef]);
    assert_eq!(data[4..6], [0, 1]); // DONE
    assert_eq!(data[6..8], [0, 1]); // OFFSET_DATA
    assert_eq!(data[16..20], 108u32.to_be_bytes());
    assert_eq!(data[20..28], 4096u64.to_be_bytes());
    let hole = transmission::offset_hole(5, 0, 512, false);
    assert_eq!(hole[4..8], [0, 0, 0, 2]);
    assert_eq!(hole[16..20], 12u32.to_be_bytes());

    let mut error = Vec::new();
    transmission::error_chunk(&mut error, 5, Errno::Io, "boom");
    assert_eq!(error[6..8], [0x80, 0x01]);
    assert_eq!(error[16..20], 10u32.to_be_bytes());
    assert_eq!(error[20..24], 5u32.to_be_bytes());
    assert_eq!(error[24..26], 4u16.to_be_bytes());
    assert_eq!(&error[26..], b"boom");

    let mut long = Vec::new();
    transmission::error_chunk(&mut long, 5, Errno::Io, &"é".repeat(3000));
    let len = u16::from_be_bytes([long[24], long[25]]) as usize;
    assert!(len <= 4096 && len.is_multiple_of(2));

    let mut status = Vec::new();
    transmission::block_status_chunk(&mut status, 5, 1, &[(4096, 0), (512, STATE_HOLE)]);
    assert_eq!(status[6..8], [0, 5]);
    assert_eq!(status[16..20], 20u32.to_be_bytes());
    assert_eq!(status.len(), 20 + 20);
    assert_eq!(transmission::none_chunk(5)[4..8], [0, 1, 0, 0]);
}

proptest! {
    #[test]
    fn request_headers_round_trip(flags: u16, command: u16, cookie: u64, offset: u64, length: u32) {
        let header = RequestHeader { flags, command, cookie, offset, length };
        prop_assert_eq!(RequestHeader::parse(&header.encode()), Ok(header));
    }

    #[test]
    fn any_28_bytes_parse_or_fail_cleanly(bytes in proptest::array::uniform28(any::<u8>())) {
        let bytes: [u8; REQUEST_HEADER_LEN] = bytes;
        if let Ok(header) = RequestHeader::parse(&bytes) {
            prop_assert_eq!(header.encode(), bytes);
            let _ = transmission::validate(&header, &limits());
        }
    }

    #[test]
    fn info_requests_round_trip(name in "[a-z0-9/_-]{0,40}", items in proptest::collection::vec(any::<u16>(), 0..8)) {
        let request = InfoRequest { name, items };
        let parsed = handshake::parse_option(OPT_GO, &request.encode());
        prop_assert_eq!(parsed, Ok(handshake::ClientOption::Go(request)));
    }

    #[test]
    fn meta_requests_round_trip(name in "[a-z]{0,10}", queries in proptest::collection::vec("[a-z]{1,8}:[a-z]{0,12}", 0..6)) {
        let request = MetaRequest { name, queries };
        let parsed = handshake::parse_option(OPT_SET_META_CONTEXT, &request.encode());
        prop_assert_eq!(parsed, Ok(handshake::ClientOption::SetMetaContext(request)));
    }

    #[test]
    fn structured_chunk_headers_round_trip(flags: u16, reply_type: u16, cookie: u64, length: u32) {
        let bytes = transmission::chunk_header(flags, reply_type, cookie, length);
        prop_assert_eq!(
            ReplyHeader::parse(&bytes),
            Some(ReplyHeader::Chunk { flags, reply_type, cookie, length })
        );
        let simple = transmission::simple_reply(cookie, length);
        prop_assert_eq!(ReplyHeader::parse(&simple), Some(ReplyHeader::Simple { error: length, cookie }));
    }

    #[test]
    fn arbitrary_options_never_panic_and_always_answer(
        code in prop_oneof![0u32..16, any::<u32>()],
        data in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut negotiation = fresh();
        let mut out = Vec::new();
        let header = OptionHeader { option: code, length: data.len() as u32 };
        let outcome = negotiation.handle(header, &data, &exports(), &mut out);
        match outcome {
            Outcome::Disconnect(_) => prop_assert!(out.is_empty()),
            Outcome::Transmission(_) if code == OPT_EXPORT_NAME => {}
            _ => {
                let replies = decode_option_replies(&out);
                prop_assert!(replies.is_some_and(|r| !r.is_empty() && r.iter().all(|r| r.option == code)));
            }
        }
    }
}
