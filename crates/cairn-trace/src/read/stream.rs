//! What every reader is ([`Reader`]) and the byte-level helper the binary
//! readers share: beneath the format readers and the dispatch in `read`, so
//! a reader never reaches up to its parent.

use std::io::Read;

use crate::error::TraceError;
use crate::{Request, Result};

/// A streaming source of requests: an iterator, and a batch
/// [`fill`](RequestSource::fill) that the binary readers implement by
/// decoding straight from their buffer, so a replay pays no dynamic call per
/// request.
pub trait RequestSource: Iterator<Item = Result<Request>> + Send {
    /// Appends up to `max` (at least one) requests to `out`. Returns the
    /// error met, if any, after the requests read before it; nothing appended
    /// and no error means the trace has ended.
    fn fill(&mut self, out: &mut Vec<Request>, max: usize) -> Option<TraceError> {
        for _ in 0..max.max(1) {
            match self.next()? {
                Ok(request) => out.push(request),
                Err(e) => return Some(e),
            }
        }
        None
    }
}

/// A streaming source of requests, whichever format it reads.
pub type Reader = Box<dyn RequestSource>;

/// Any iterator of requests as a [`RequestSource`] (read one at a time).
#[derive(Debug)]
pub struct Requests<I>(pub I);

impl<I: Iterator<Item = Result<Request>>> Iterator for Requests<I> {
    type Item = Result<Request>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<I: Iterator<Item = Result<Request>> + Send> RequestSource for Requests<I> {}

/// `requests` as a [`Reader`].
pub fn boxed(requests: impl Iterator<Item = Result<Request>> + Send + 'static) -> Reader {
    Box::new(Requests(requests))
}

/// The first `left` requests of a reader, still read in batches.
pub struct Capped {
    inner: Reader,
    left: u64,
}

impl Capped {
    /// At most `left` requests of `inner`.
    pub fn new(inner: Reader, left: u64) -> Self {
        Self { inner, left }
    }
}

impl Iterator for Capped {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.inner.next()
    }
}

impl RequestSource for Capped {
    fn fill(&mut self, out: &mut Vec<Request>, max: usize) -> Option<TraceError> {
        if self.left == 0 {
            return None;
        }
        let max = usize::try_from(self.left).map_or(max, |left| max.max(1).min(left));
        let before = out.len();
        let error = self.inner.fill(out, max);
        self.left -= (out.len() - before) as u64;
        error
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_stops_at_its_count_in_batches_and_one_by_one() {
        let requests = |n: u64| {
            (0..n).map(|object| {
                Ok(Request {
                    object,
                    ..Request::default()
                })
            })
        };
        let mut capped = Capped::new(boxed(requests(10)), 4);
        let mut out = Vec::new();
        assert!(capped.fill(&mut out, 3).is_none());
        assert_eq!(out.len(), 3);
        assert!(capped.fill(&mut out, 100).is_none());
        assert_eq!(out.len(), 4);
        assert!(capped.fill(&mut out, 100).is_none());
        assert!(capped.next().is_none());
        assert_eq!(out.last().map(|r| r.object), Some(3));
        let one_by_one: Vec<u64> = Capped::new(boxed(requests(10)), 2)
            .map(|r| r.unwrap().object)
            .collect();
        assert_eq!(one_by_one, [0, 1]);
    }
}
