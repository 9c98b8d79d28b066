//! A gateway over a real S3 bucket (the Ceph RGW `test.sh` starts), every
//! request signed with SigV4 ([`HttpBackend::s3`]): stat, ranged reads and
//! listing agree byte for byte with what was uploaded, keys with spaces and
//! non-ASCII letters included; a missing key is `NotFound`, a wrong secret
//! `Forbidden`; and HTTP clients of the gateway read the same bytes, the
//! second time from the cache. Skips without `CAIRN_TEST_S3_ENDPOINT`.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use cairn_files::{Backend, BackendErrorKind, HttpBackend, HttpBackendConfig};
use cairn_objects::{ObjectStore, S3Config, S3Store, testing::s3_config};
use common::{BUCKET, exchange, pattern, start, status};

/// The test bucket's store (to upload with) and its configuration, or
/// `None` when no store is configured.
fn store(test: &str) -> Option<(S3Store, S3Config)> {
    let config = s3_config(test)?;
    Some((S3Store::new(&config).expect("store"), config))
}

/// A key prefix no other test or run uses.
fn unique_prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("{test}-{}-{nanos}/", std::process::id())
}

/// Deletes every object under `prefix` when dropped.
struct Cleanup<'a>(&'a S3Store, String);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Ok(objects) = self.0.list(&self.1) {
            for object in objects {
                let _ = self.0.delete(&object.key);
            }
        }
    }
}

#[test]
fn a_signed_s3_origin_serves_the_bytes_it_holds() {
    let Some((store, origin)) = store("a_signed_s3_origin_serves_the_bytes_it_holds") else {
        return;
    };
    let prefix = unique_prefix("files-s3");
    let _cleanup = Cleanup(&store, prefix.clone());
    let big = pattern((3 << 20) + 123, 7);
    let spaced = pattern(300_001, 2);
    let objects: [(&str, &[u8]); 3] = [
        ("big.bin", &big),
        ("dir/a b.bin", &spaced),
        ("dir/é+x.txt", b"accented\n"),
    ];
    for (name, body) in objects {
        store.put(&format!("{prefix}{name}"), body).expect("upload");
    }

    let backend = HttpBackend::s3(&origin, HttpBackendConfig::default()).expect("origin");
    for (name, body) in objects {
        let key = format!("{prefix}{name}");
        assert_eq!(backend.stat(&key).expect("stat").size, body.len() as u64);
        let mut whole = vec![0u8; body.len()];
        backend.read_at(&key, 0, &mut whole).expect("read");
        assert!(whole == body, "{key}: other bytes");
    }
    let key = format!("{prefix}big.bin");
    let mut middle = vec![0u8; 700_000];
    backend.read_at(&key, 200_000, &mut middle).expect("read");
    assert!(middle == big[200_000..900_000]);
    let mut past = vec![0u8; 124];
    assert_eq!(
        backend
            .read_at(&key, 3 << 20, &mut past)
            .expect_err("past the end")
            .kind,
        BackendErrorKind::Other
    );
    assert_eq!(
        backend
            .stat(&format!("{prefix}nope"))
            .expect_err("absent")
            .kind,
        BackendErrorKind::NotFound
    );

    // ListObjectsV2, signed, in pages of 2, keys as they are (not URL-encoded).
    let mut listed = Vec::new();
    assert!(!backend.list(&prefix, None, 100, &mut listed).expect("list"));
    let keys: Vec<_> = listed.iter().map(|e| e.key.as_str()).collect();
    let expected: Vec<String> = ["big.bin", "dir/a b.bin", "dir/é+x.txt"]
        .iter()
        .map(|name| format!("{prefix}{name}"))
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(listed[1].info, backend.stat(&expected[1]).expect("stat"));
    listed.clear();
    assert!(backend.list(&prefix, None, 2, &mut listed).expect("list"));
    assert_eq!(listed.len(), 2);
    listed.clear();
    assert!(
        !backend
            .list(&prefix, Some(&expected[1]), 100, &mut listed)
            .expect("list")
    );
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, expected[2]);

    // A wrong secret is refused by the store, not read anonymously.
    let wrong = HttpBackend::s3(
        &S3Config {
            secret_key: "not-the-secret".into(),
            ..origin.clone()
        },
        HttpBackendConfig::default(),
    )
    .expect("origin");
    assert_eq!(
        wrong.stat(&key).expect_err("wrong secret").kind,
        BackendErrorKind::Forbidden
    );

    // HTTP clients of a gateway over the bucket: the same bytes, the second
    // read of a range from the cache.
    let gateway = start(backend, |_| {});
    let request = format!(
        "GET /{BUCKET}/{prefix}big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=1000-299999\r\nConnection: close\r\n\r\n"
    );
    for round in 0..2 {
        let answer = exchange(gateway.addr, request.as_bytes());
        assert_eq!(status(&answer), 206, "round {round}");
        let body_at = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("head")
            + 4;
        assert!(answer[body_at..] == big[1000..300_000], "round {round}");
    }
    let stats = gateway.cache.stats();
    assert_eq!((stats.misses, stats.hits), (2, 2), "{stats:?}");
}
