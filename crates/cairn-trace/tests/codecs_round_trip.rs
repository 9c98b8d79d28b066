//! What a writer writes, the matching reader reads back unchanged (within
//! what the format can hold), for any request.

use std::io::Cursor;
use std::path::Path;

use cairn_trace::read::{self, CsvConfig, Format};
use cairn_trace::write::{
    CsvWriter, ObjectKey, OracleGeneralWriter, OracleSysTwrNsWriter, TextWriter, convert,
};
use cairn_trace::{NEVER, Op, Request};
use proptest::prelude::*;

fn request() -> impl Strategy<Value = Request> {
    (
        any::<u64>(),
        0u64..1000,
        any::<u64>(),
        any::<u32>(),
        any::<bool>(),
    )
        .prop_map(|(time_us, object, offset, size, write)| Request {
            time_us,
            object,
            offset,
            size,
            op: if write { Op::Write } else { Op::Read },
            ttl: 0,
            next: NEVER,
        })
}

/// A request with a TTL (none, some seconds, or the largest oracleSysTwrNS
/// holds).
fn request_with_ttl() -> impl Strategy<Value = Request> {
    (
        request(),
        prop_oneof![Just(0u32), 1u32..100_000, Just(i32::MAX as u32)],
    )
        .prop_map(|(request, ttl)| Request { ttl, ..request })
}

/// `next` of each request: the index of the next one to the same object.
fn next_indices(requests: &[Request]) -> Vec<u64> {
    (0..requests.len())
        .map(|index| {
            requests[index + 1..]
                .iter()
                .position(|later| later.object == requests[index].object)
                .map_or(NEVER, |p| (index + 1 + p) as u64)
        })
        .collect()
}

fn read_back(bytes: Vec<u8>, format: &Format) -> Vec<Request> {
    read::from_source(Box::new(Cursor::new(bytes)), Path::new("mem"), format)
        .expect("opens")
        .collect::<cairn_trace::Result<_>>()
        .expect("reads")
}

fn source(requests: Vec<Request>) -> read::Reader {
    cairn_trace::read::boxed(requests.into_iter().map(Ok))
}

proptest! {
    #[test]
    fn canonical_csv(requests in proptest::collection::vec(request(), 0..50)) {
        let mut bytes = vec![];
        convert(source(requests.clone()), &mut CsvWriter::new(&mut bytes, Path::new("mem")))
            .expect("writes");
        prop_assert_eq!(read_back(bytes, &Format::Csv(CsvConfig::canonical())), requests);
    }

    #[test]
    fn canonical_csv_with_ttls(requests in proptest::collection::vec(request_with_ttl(), 0..50)) {
        let mut bytes = vec![];
        convert(
            source(requests.clone()),
            &mut CsvWriter::new(&mut bytes, Path::new("mem")).with_ttl(),
        )
        .expect("writes");
        prop_assert_eq!(
            read_back(bytes, &Format::Csv(CsvConfig::canonical_with_ttl())),
            requests
        );
    }

    #[test]
    fn oracle_sys_twr_ns(requests in proptest::collection::vec(request_with_ttl(), 0..50)) {
        let requests: Vec<Request> = requests
            .into_iter()
            .map(|r| Request { time_us: r.time_us % (u64::from(u32::MAX) * 1_000_000), ..r })
            .collect();
        let mut bytes = vec![];
        convert(
            source(requests.clone()),
            &mut OracleSysTwrNsWriter::new(&mut bytes, Path::new("mem")),
        )
        .expect("writes");
        let back = read_back(bytes, &Format::OracleSysTwrNs);
        let want: Vec<Request> = requests
            .iter()
            .zip(next_indices(&requests))
            .map(|(r, next)| Request {
                time_us: r.time_us / 1_000_000 * 1_000_000,
                offset: 0,
                next,
                ..*r
            })
            .collect();
        prop_assert_eq!(back, want);
    }

    #[test]
    fn text_ids(requests in proptest::collection::vec(request(), 0..50)) {
        let mut bytes = vec![];
        convert(source(requests.clone()), &mut TextWriter::new(&mut bytes, Path::new("mem")))
            .expect("writes");
        let back = read_back(bytes, &Format::Text);
        let pairs = |r: &[Request]| r.iter().map(|r| (r.object, r.size)).collect::<Vec<_>>();
        prop_assert_eq!(pairs(&back), pairs(&requests));
    }

    #[test]
    fn oracle_general(requests in proptest::collection::vec(request(), 0..50)) {
        let requests: Vec<Request> = requests
            .into_iter()
            .map(|r| Request { time_us: r.time_us % (u64::from(u32::MAX) * 1_000_000), ..r })
            .collect();
        let mut bytes = vec![];
        convert(
            source(requests.clone()),
            &mut OracleGeneralWriter::new(&mut bytes, Path::new("mem"), ObjectKey::Object),
        )
        .expect("writes");
        let back = read_back(bytes, &Format::OracleGeneral);
        prop_assert_eq!(back.len(), requests.len());
        for ((b, r), next) in back.iter().zip(&requests).zip(next_indices(&requests)) {
            prop_assert_eq!((b.object, b.size), (r.object, r.size));
            prop_assert_eq!(b.time_us, r.time_us / 1_000_000 * 1_000_000);
            prop_assert_eq!(b.next, next);
        }
    }

    #[test]
    fn vscsi(request in request()) {
        let request = Request { object: 0, offset: request.offset / 512 * 512, ..request };
        let bytes = read::vscsi::encode(&request, 0).to_vec();
        prop_assert_eq!(read_back(bytes, &Format::Vscsi), vec![request]);
    }
}
