//! No reader panics on input: random bytes and mutated valid lines or records
//! must come back as requests or errors. The stable-Rust companion of the
//! cargo-fuzz targets in `fuzz/` (which run only on nightly).

use std::io::Cursor;
use std::path::Path;

use cairn_trace::read::{self, CsvConfig, Format, OffsetUnit, TimeUnit};
use proptest::prelude::*;

fn formats() -> Vec<Format> {
    vec![
        Format::Msr,
        Format::OracleGeneral,
        Format::OracleSysTwrNs,
        Format::Vscsi,
        Format::CloudPhysics,
        Format::Text,
        Format::Csv(CsvConfig::default()),
        Format::Csv(CsvConfig {
            has_header: true,
            time_column: Some(2),
            offset_column: Some(5),
            size_column: Some(4),
            op_column: Some(3),
            ttl_column: Some(6),
            time_unit: TimeUnit::S,
            offset_unit: OffsetUnit::Sectors,
            ..CsvConfig::default()
        }),
    ]
}

/// Reads `bytes` in every format to the end; an error ends a reader.
fn read_everything(bytes: &[u8]) {
    for format in formats() {
        let source = Box::new(Cursor::new(bytes.to_vec()));
        let Ok(reader) = read::from_source(source, Path::new("fuzz"), &format) else {
            continue;
        };
        // zstd frames may expand a lot; the bound only keeps the test short.
        for item in reader.take(1 << 20) {
            if item.is_err() {
                break;
            }
        }
    }
}

const VALID: &[&str] = &[
    "128166385295514663,hm,0,Write,9056014336,2048,2833\n",
    "version,time,op,size,lbn\n1,5633898,2a,512,42932745\n",
    "42 8192\n# c\n0x10\n",
    "1,2,3,4,5\n",
];

fn vscsi_record() -> Vec<u8> {
    let request = cairn_trace::Request {
        size: 512,
        offset: 4096,
        ..cairn_trace::Request::default()
    };
    read::vscsi::encode(&request, 1).to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        read_everything(&bytes);
    }

    #[test]
    fn mutated_valid_input(
        which in 0..VALID.len() + 1,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let mut bytes = if which == VALID.len() {
            vscsi_record()
        } else {
            VALID[which].as_bytes().to_vec()
        };
        for (at, byte) in edits {
            let at = at % bytes.len();
            bytes[at] = byte;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        read_everything(&bytes);
    }

    #[test]
    fn zstd_framed_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut framed = read::ZSTD_MAGIC.to_vec();
        framed.extend_from_slice(&bytes);
        read_everything(&framed);
    }
}
