//! What every reader is ([`Reader`]) and the byte-level helper the binary
//! readers share: beneath the format readers and the dispatch in `read`, so
//! a reader never reaches up to its parent.

use std::io::Read;

use crate::{Request, Result};

/// A streaming source of requests.
pub type Reader = Box<dyn Iterator<Item = Result<Request>> + Send>;

/// Reads into `buffer` until it is full or the source ends; returns the bytes read.
pub(crate) fn fill(source: &mut impl Read, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buffer.len() {
        match source.read(&mut buffer[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
