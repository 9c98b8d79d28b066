//! Any request head `httparse` accepts gets one well-formed answer — a
//! status line, headers, and exactly `Content-Length` body bytes (none for
//! HEAD and 304) — and never a panic; a `200`/`206` carries the object's
//! bytes at the range it names.

use std::fmt::Write as _;
use std::time::SystemTime;

use proptest::prelude::*;

use super::respond::{Context, serve};
use crate::backend::MemoryBackend;
use crate::cache::{FileCache, FileCacheConfig};

fn object() -> Vec<u8> {
    (0..700_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

fn cache() -> FileCache<MemoryBackend> {
    let backend = MemoryBackend::new();
    backend.put("v/a.bin", object(), SystemTime::UNIX_EPOCH);
    backend.put("empty", Vec::new(), SystemTime::UNIX_EPOCH);
    let config = FileCacheConfig {
        block_size_bytes: 256 << 10,
        capacity_bytes: 4 << 20,
        ..FileCacheConfig::default()
    };
    FileCache::new(backend, &config).expect("cache")
}

fn header_value(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("GET".to_owned()),
        1 => Just("HEAD".to_owned()),
        1 => Just("PUT".to_owned()),
        1 => "[A-Z]{1,8}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("/b/v/a.bin".to_owned()),
        1 => Just("/b/empty".to_owned()),
        1 => Just("/b?list-type=2&prefix=v%2F".to_owned()),
        1 => Just("/b".to_owned()),
        1 => "/b/[a-z./%0-9]{0,12}",
        1 => "[!-~]{1,20}",
    ]
}

fn header() -> impl Strategy<Value = (String, String)> {
    let name = prop_oneof![
        4 => Just("Range"),
        1 => Just("If-Match"),
        1 => Just("If-None-Match"),
        1 => Just("If-Modified-Since"),
        1 => Just("If-Unmodified-Since"),
        1 => Just("If-Range"),
        1 => Just("Connection"),
        1 => Just("Content-Length"),
        1 => Just("X-Other"),
    ];
    let value = prop_oneof![
        3 => "bytes=[0-9]{0,6}-[0-9]{0,7}",
        2 => "bytes=-[0-9]{1,6}",
        1 => Just("\"aaeb0-0\"".to_owned()),
        1 => Just("*".to_owned()),
        1 => Just("Thu, 01 Jan 1970 00:00:00 GMT".to_owned()),
        1 => Just("close".to_owned()),
        1 => "[ -~]{0,24}",
    ];
    (name.prop_map(str::to_owned), value)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn every_parsed_request_gets_one_well_formed_answer(
        method in method(),
        path in path(),
        headers in proptest::collection::vec(header(), 0..5),
        http10 in any::<bool>(),
    ) {
        let cache = cache();
        let version = if http10 { "1.0" } else { "1.1" };
        let mut head = format!("{method} {path} HTTP/{version}\r\nHost: x\r\n");
        for (name, value) in &headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        head.push_str("\r\n");
        let mut fields = [httparse::EMPTY_HEADER; 16];
        let mut request = httparse::Request::new(&mut fields);
        let Ok(httparse::Status::Complete(_)) = request.parse(head.as_bytes()) else {
            return Ok(()); // the connection answers 400 before serve
        };
        let context = Context { cache: &cache, bucket: "b" };
        let (mut out, mut buffer, mut key, mut slices) = (Vec::new(), Vec::new(), String::new(), Vec::new());
        serve(&context, &request, &mut out, &mut buffer, &mut key, &mut slices).expect("a Vec takes every write");
        let at = out.windows(4).position(|w| w == b"\r\n\r\n").expect("a head");
        let answer = String::from_utf8_lossy(&out[..at]).into_owned();
        let body = &out[at + 4..];
        prop_assert!(answer.starts_with("HTTP/1.1 "), "{}", answer);
        let status: u16 = answer[9..12].parse().expect("a status");
        let length: usize = header_value(&answer, "content-length").map_or(0, |v| v.parse().expect("a length"));
        if method == "HEAD" || status == 304 {
            prop_assert!(body.is_empty(), "{}", answer);
        } else {
            prop_assert_eq!(body.len(), length, "{}", answer);
        }
        if method == "GET" && path == "/b/v/a.bin" && (status == 200 || status == 206) {
            let object = object();
            let start = match header_value(&answer, "content-range") {
                Some(range) => range[6..].split('-').next().expect("a start").parse().expect("a number"),
                None => 0,
            };
            prop_assert!(body == &object[start..start + body.len()], "bytes differ: {}", answer);
            if status == 200 {
                prop_assert_eq!(body.len(), object.len());
            } else {
                prop_assert!(header_value(&answer, "content-range").is_some(), "{}", answer);
            }
        }
    }
}
