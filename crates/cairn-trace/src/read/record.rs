//! The reader of fixed-size binary records ([`RecordReader`]), which
//! libCacheSim's binary formats share: only the decoding of a record differs.

use std::io::BufRead;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::error::{Position, TraceError};
use crate::{Request, Result};

/// Decodes one `N`-byte record of a format.
pub trait Decode<const N: usize> {
    /// The request `record` holds.
    fn decode(record: &[u8; N]) -> Request;
}

/// Records decoded per turn from the source's buffer.
const DECODE_BATCH: usize = 256;

/// Streams the fixed-size records of any byte source, each decoded by `D`.
///
/// Records are decoded in batches of up to 256 straight from the source's
/// buffer (one `fill_buf`/`consume` pair per batch rather than per record, which
/// matters when the source is a `Box<dyn BufRead>`); a record that straddles the
/// buffer's end is assembled byte by byte.
pub struct RecordReader<R, D, const N: usize> {
    source: R,
    path: PathBuf,
    /// Records taken from the source so far.
    index: u64,
    done: bool,
    decoded: Vec<Request>,
    at: usize,
    format: PhantomData<D>,
}

impl<R: BufRead, D: Decode<N>, const N: usize> RecordReader<R, D, N> {
    /// Reads records from `source`; `path` names it in errors.
    pub fn new(source: R, path: &Path) -> Self {
        Self {
            source,
            path: path.to_path_buf(),
            index: 0,
            done: false,
            decoded: Vec::with_capacity(DECODE_BATCH),
            at: 0,
            format: PhantomData,
        }
    }

    /// Decodes every whole record in the source's buffer (up to
    /// [`DECODE_BATCH`]); returns how many.
    fn decode_batch(&mut self) -> usize {
        self.decoded.clear();
        self.at = 0;
        let Ok(buffer) = self.source.fill_buf() else {
            return 0; // the slow path reports the error
        };
        let (records, _) = buffer.as_chunks::<N>();
        let records = &records[..records.len().min(DECODE_BATCH)];
        self.decoded.extend(records.iter().map(D::decode));
        let n = records.len();
        self.source.consume(n * N);
        self.index += n as u64;
        n
    }
}

impl<R: BufRead, D: Decode<N>, const N: usize> Iterator for RecordReader<R, D, N> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(&request) = self.decoded.get(self.at) {
            self.at += 1;
            return Some(Ok(request));
        }
        if self.done {
            return None;
        }
        // Fast path: decode a batch in place from the reader's buffer.
        if self.decode_batch() > 0 {
            self.at = 1;
            return Some(Ok(self.decoded[0]));
        }
        // A record straddles the buffer's end, the input ended, or an error:
        // assemble it byte-exactly and report what happened.
        let mut record = [0u8; N];
        let mut got = 0;
        while got < N {
            match self.source.read(&mut record[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    self.done = true;
                    return Some(Err(TraceError::Io {
                        path: self.path.clone(),
                        source,
                    }));
                }
            }
        }
        if got < N {
            self.done = true;
            if got == 0 {
                return None;
            }
            return Some(Err(TraceError::Truncated {
                path: self.path.clone(),
                position: Position::Record(self.index),
                got,
                want: N,
            }));
        }
        self.index += 1;
        Some(Ok(D::decode(&record)))
    }
}

impl<R: BufRead + Send, D: Decode<N> + Send, const N: usize> crate::read::RequestSource
    for RecordReader<R, D, N>
{
    fn fill(&mut self, out: &mut Vec<Request>, max: usize) -> Option<TraceError> {
        let want = out.len() + max.max(1);
        while out.len() < want {
            // Requests decoded by `next` and not yet taken go first.
            if self.at < self.decoded.len() {
                let take = (self.decoded.len() - self.at).min(want - out.len());
                out.extend_from_slice(&self.decoded[self.at..self.at + take]);
                self.at += take;
                continue;
            }
            if self.done {
                return None;
            }
            // Fast path: decode whole records straight from the buffer.
            if let Ok(buffer) = self.source.fill_buf() {
                let (records, _) = buffer.as_chunks::<N>();
                let take = records.len().min(want - out.len());
                if take > 0 {
                    out.extend(records[..take].iter().map(D::decode));
                    self.source.consume(take * N);
                    self.index += take as u64;
                    continue;
                }
            }
            // A record straddles the buffer's end, the input ended, or an
            // error: the one-record path assembles it or says what happened.
            match self.next()? {
                Ok(request) => out.push(request),
                Err(e) => return Some(e),
            }
        }
        None
    }
}
