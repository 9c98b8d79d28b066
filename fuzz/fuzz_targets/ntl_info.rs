//! Arbitrary bytes through the NTL info-block decoder: an `Info` or an error,
//! never a panic; what decodes re-encodes to a block that decodes to the same
//! `Info`. Input: 64 bytes of block (zero-padded), then an optional 8-byte
//! little-endian region length (else the largest).
#![no_main]

use cairn_store::ntl::info;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut block = [0u8; 64];
    let n = data.len().min(64);
    block[..n].copy_from_slice(&data[..n]);
    let region_len = data
        .get(64..72)
        .map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    if let Ok(decoded) = info::decode(&block, region_len) {
        let again = info::encode(&decoded.geometry, decoded.flags, decoded.version);
        assert_eq!(info::decode(&again, region_len), Ok(decoded), "round trip");
        assert_eq!(again[..40], block[..40], "fields re-encode as read");
    }
});
