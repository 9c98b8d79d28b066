//! Arbitrary bytes through the text reader: requests or errors, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    common::read_all(data, &cairn_trace::read::Format::Text);
});
