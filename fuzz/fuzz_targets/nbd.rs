//! Arbitrary bytes as an NBD client's side of a connection, through the pure
//! codec: client flags, options (until GO/EXPORT_NAME), then request headers.
//! Every step answers or fails cleanly; nothing panics.
#![no_main]

use cairn_nbd::codec::handshake::{
    self, BlockSize, ExportInfo, Negotiation, OPTION_HEADER_LEN, OptionHeader, Outcome, TlsMode,
};
use cairn_nbd::codec::transmission::{self, Limits, REQUEST_HEADER_LEN, RequestHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let exports = [ExportInfo {
        name: "disk".into(),
        description: "fuzz".into(),
        size: 1 << 20,
        read_only: false,
        block_size: BlockSize {
            minimum_bytes: 1,
            preferred_bytes: 4096,
            maximum_bytes: 64 << 20,
        },
    }];
    let Some((flags, mut rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let Ok(client) = handshake::parse_client_flags(*flags) else {
        return;
    };
    // TLS `on`: STARTTLS is acknowledged, and the fuzzer pretends the TLS
    // handshake succeeded so the state machine's upgrade path runs too.
    let mut negotiation = Negotiation::with_tls(client, TlsMode::On);
    let mut out = Vec::new();
    let session = loop {
        let Some((header, tail)) = rest.split_first_chunk::<OPTION_HEADER_LEN>() else {
            return;
        };
        let Ok(header) = OptionHeader::parse(header) else {
            return;
        };
        let take = (header.length as usize).min(tail.len());
        let (option_data, tail) = tail.split_at(take);
        rest = tail;
        out.clear();
        match negotiation.handle(header, option_data, &exports, &mut out) {
            Outcome::Continue => {
                assert!(handshake::decode_option_replies(&out).is_some());
            }
            Outcome::StartTls => {
                assert!(handshake::decode_option_replies(&out).is_some());
                assert!(!negotiation.tls_active());
                negotiation.tls_established();
            }
            Outcome::Transmission(session) => break session,
            Outcome::Abort | Outcome::Disconnect(_) => return,
        }
    };
    let limits = Limits {
        export_size: exports[session.export].size,
        read_only: false,
        structured: session.structured,
        base_allocation: session.base_allocation,
        max_payload_bytes: 64 << 20,
    };
    while let Some((bytes, tail)) = rest.split_first_chunk::<REQUEST_HEADER_LEN>() {
        let Ok(header) = RequestHeader::parse(bytes) else {
            return;
        };
        let _ = transmission::validate(&header, &limits);
        let skip = (header.payload_len() as usize).min(tail.len());
        rest = &tail[skip..];
    }
});
