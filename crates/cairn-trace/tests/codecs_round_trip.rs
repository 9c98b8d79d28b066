//! What a writer writes, the matching reader reads back unchanged (within
//! what the format can hold), for any request.

use std::io::Cursor;
use std::path::Path;

use cairn_trace::read::{self, CsvConfig, Format};
use cairn_trace::write::{CsvWriter, ObjectKey, OracleGeneralWriter, TextWriter, convert};
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
        for (index, (b, r)) in back.iter().zip(&requests).enumerate() {
            prop_assert_eq!((b.object, b.size), (r.object, r.size));
            prop_assert_eq!(b.time_us, r.time_us / 1_000_000 * 1_000_000);
            let next = requests[index + 1..]
                .iter()
                .position(|later| later.object == r.object)
                .map_or(NEVER, |p| (index + 1 + p) as u64);
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
