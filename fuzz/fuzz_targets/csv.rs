//! Arbitrary bytes through the mapped-CSV reader, with a map that uses every
//! column kind and unit conversion: requests or errors, never a panic.
#![no_main]

use cairn_trace::read::{CsvConfig, Format, OffsetUnit, TimeUnit};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let format = Format::Csv(CsvConfig {
        has_header: data.first().is_some_and(|b| b & 1 == 1),
        time_column: Some(1),
        object_column: Some(2),
        op_column: Some(3),
        offset_column: Some(4),
        size_column: Some(5),
        time_unit: TimeUnit::S,
        offset_unit: OffsetUnit::Sectors,
        ..CsvConfig::default()
    });
    common::read_all(data, &format);
});
