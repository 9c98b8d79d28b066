//! Shared by every target: read `data` as a trace in `format` to the end.

use std::io::Cursor;
use std::path::Path;

use cairn_trace::read::{self, Format};

/// Reads every request of `data`; a reader must end (at the latest after an
/// error) and never panic.
pub fn read_all(data: &[u8], format: &Format) {
    let source = Box::new(Cursor::new(data.to_vec()));
    let Ok(reader) = read::from_source(source, Path::new("fuzz"), format) else {
        return;
    };
    // zstd input may expand a lot; the bound keeps one run short.
    for item in reader.take(1 << 20) {
        if item.is_err() {
            break;
        }
    }
}
