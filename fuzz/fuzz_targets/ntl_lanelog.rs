//! Arbitrary bytes through the NTL lane-log record decoder: a record or
//! `None` (empty or torn slot), never a panic; a record re-encodes to exactly
//! the bytes it was decoded from.
#![no_main]

use cairn_store::ntl::lanelog::Record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut slot = [0u8; 64];
    let n = data.len().min(64);
    slot[..n].copy_from_slice(&data[..n]);
    if let Some(record) = Record::decode(&slot) {
        let again = record.encode();
        assert_eq!(again, slot, "re-encoded bytes");
        assert_eq!(Record::decode(&again), Some(record), "round trip");
    }
});
