//! The `ObjectStore` contract, checked on the in-memory store and on a real
//! Ceph (which `test.sh` starts: `bench/ceph-cluster.sh`) through S3 (RGW)
//! and through librados.
//!
//! The S3 tests read the store from `CAIRN_TEST_S3_ENDPOINT`,
//! `CAIRN_TEST_S3_BUCKET`, `CAIRN_TEST_S3_REGION`, `CAIRN_TEST_S3_ACCESS_KEY`
//! and `CAIRN_TEST_S3_SECRET_KEY`; the RADOS tests from
//! `CAIRN_TEST_CEPH_CONF` and `CAIRN_TEST_CEPH_POOL`. Each says it skipped
//! without them.

use std::time::Duration;

mod common;

use cairn_objects::{
    MemStore, ObjectError, ObjectStore, RadosConfig, RadosStore, S3Config, S3Store,
};
use common::{rados_config, remove_all, s3_config, unique_prefix};

/// Every promise of the trait, under `p`.
fn contract(store: &dyn ObjectStore, p: &str) {
    let key = |k: &str| format!("{p}{k}");

    // put, get, head; a put replaces.
    store.put(&key("a"), b"hello object").expect("put");
    assert_eq!(store.get(&key("a")).expect("get"), b"hello object");
    assert_eq!(store.head(&key("a")).expect("head"), Some(12));
    store.put(&key("a"), b"replaced").expect("put again");
    assert_eq!(store.get(&key("a")).expect("get"), b"replaced");

    // Missing objects.
    assert!(matches!(
        store.get(&key("missing")),
        Err(ObjectError::NotFound { .. })
    ));
    assert_eq!(store.head(&key("missing")).expect("head missing"), None);
    let mut buf = [0u8; 4];
    assert!(matches!(
        store.read_at(&key("missing"), 0, &mut buf),
        Err(ObjectError::NotFound { .. })
    ));

    // Ranged reads: inside, across the end, at and past the end, empty.
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 17)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    store.put(&key("big"), &big).expect("put big");
    let mut buf = vec![0u8; 4096];
    assert_eq!(
        store
            .read_at(&key("big"), 1_000_000, &mut buf)
            .expect("read"),
        4096
    );
    assert_eq!(buf[..], big[1_000_000..1_004_096]);
    let tail = big.len() as u64 - 100;
    assert_eq!(
        store
            .read_at(&key("big"), tail, &mut buf)
            .expect("read tail"),
        100
    );
    assert_eq!(buf[..100], big[big.len() - 100..]);
    assert_eq!(
        store
            .read_at(&key("big"), big.len() as u64, &mut buf)
            .expect("at end"),
        0
    );
    assert_eq!(
        store
            .read_at(&key("big"), big.len() as u64 + 5, &mut buf)
            .expect("past end"),
        0
    );
    assert_eq!(store.read_at(&key("big"), 3, &mut []).expect("empty"), 0);
    assert_eq!(store.get(&key("big")).expect("get big"), big);

    // Empty objects.
    store.put(&key("empty"), b"").expect("put empty");
    assert_eq!(store.get(&key("empty")).expect("get empty"), b"");
    assert_eq!(store.head(&key("empty")).expect("head empty"), Some(0));

    // Keys that need escaping in a URL and in the signature.
    let odd = key("odd key+with%chars~and=more&(1)");
    store.put(&odd, b"odd").expect("put odd key");
    assert_eq!(store.get(&odd).expect("get odd key"), b"odd");

    // create: exactly once.
    store.create(&key("lease"), b"first").expect("create");
    assert!(matches!(
        store.create(&key("lease"), b"second"),
        Err(ObjectError::Exists { .. })
    ));
    assert_eq!(store.get(&key("lease")).expect("get lease"), b"first");

    // delete: gone; deleting again is fine.
    store.delete(&key("a")).expect("delete");
    assert_eq!(store.head(&key("a")).expect("head deleted"), None);
    store.delete(&key("a")).expect("delete again");
    store
        .create(&key("a"), b"again")
        .expect("create after delete");

    // list: only the prefix, in key order, with sizes.
    store.put(&format!("{p}dir/2"), b"22").expect("put");
    store.put(&format!("{p}dir/1"), b"1").expect("put");
    store.put(&format!("{p}dir0"), b"x").expect("put");
    let listed = store.list(&format!("{p}dir/")).expect("list");
    let names: Vec<(&str, u64)> = listed.iter().map(|o| (&o.key[p.len()..], o.size)).collect();
    assert_eq!(names, [("dir/1", 1), ("dir/2", 2)]);
    let all = store.list(p).expect("list all");
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(all, sorted, "a listing is in key order");
    assert_eq!(all.len(), 8, "{all:?}");
    assert!(
        store
            .list(&key("nothing-here/"))
            .expect("list nothing")
            .is_empty()
    );
}

#[test]
fn memory_store_keeps_the_contract() {
    contract(&MemStore::new(), "p/");
}

#[test]
fn s3_store_keeps_the_contract() {
    let Some(config) = s3_config("s3_store_keeps_the_contract") else {
        return;
    };
    let store = S3Store::new(&config).expect("client");
    let p = unique_prefix("contract");
    contract(&store, &p);
    remove_all(&store, &p);
    assert!(store.list(&p).expect("list").is_empty());
}

/// A listing of 1,050 keys (S3 pages at 1,000; RADOS lists the pool in
/// pages and asks each object's size), put and deleted from 8 threads.
fn many_keys(store: &dyn ObjectStore, p: &str) {
    let keys: Vec<String> = (0..1_050).map(|i| format!("{p}{i:05}")).collect();
    std::thread::scope(|s| {
        for chunk in keys.chunks(132) {
            s.spawn(move || {
                for k in chunk {
                    store.put(k, k.as_bytes()).expect("put");
                }
            });
        }
    });
    let listed = store.list(p).expect("list");
    assert_eq!(listed.len(), 1_050);
    assert!(
        listed
            .iter()
            .zip(&keys)
            .all(|(o, k)| o.key == *k && o.size == k.len() as u64)
    );
    std::thread::scope(|s| {
        for chunk in keys.chunks(132) {
            s.spawn(move || chunk.iter().for_each(|k| store.delete(k).expect("delete")));
        }
    });
    assert!(store.list(p).expect("list").is_empty());
}

#[test]
fn s3_listing_pages_past_a_thousand_keys() {
    let Some(config) = s3_config("s3_listing_pages_past_a_thousand_keys") else {
        return;
    };
    let store = S3Store::new(&config).expect("client");
    many_keys(&store, &unique_prefix("paging"));
}

/// Of 8 racing creates of one key, exactly one wins, in each of 5 rounds.
/// `retryable_losers`: a loser may also be told to retry (S3's 409), not
/// only that the key is taken.
fn create_race(store: &dyn ObjectStore, p: &str, retryable_losers: bool) {
    for round in 0..5 {
        let key = format!("{p}lease-{round}");
        let results: Vec<Result<(), ObjectError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let key = &key;
                    s.spawn(move || store.create(key, format!("writer {i}").as_bytes()))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        let won: Vec<usize> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_ok())
            .map(|(i, _)| i)
            .collect();
        for r in &results {
            assert!(
                r.is_ok()
                    || matches!(r, Err(ObjectError::Exists { .. }))
                    || (retryable_losers && r.as_ref().is_err_and(ObjectError::is_retryable)),
                "{r:?}"
            );
        }
        assert_eq!(won.len(), 1, "round {round}: winners {won:?}: {results:?}");
        assert_eq!(
            store.get(&key).expect("get"),
            format!("writer {}", won[0]).as_bytes()
        );
    }
}

#[test]
fn s3_create_races_have_one_winner() {
    let Some(config) = s3_config("s3_create_races_have_one_winner") else {
        return;
    };
    let store = S3Store::new(&config).expect("client");
    let p = unique_prefix("race");
    // RGW may answer a racing conditional create with 409.
    create_race(&store, &p, true);
    remove_all(&store, &p);
}

#[test]
fn rados_store_keeps_the_contract() {
    let Some(config) = rados_config("rados_store_keeps_the_contract") else {
        return;
    };
    let store = RadosStore::new(&config).expect("client");
    let p = unique_prefix("contract");
    contract(&store, &p);
    remove_all(&store, &p);
    assert!(store.list(&p).expect("list").is_empty());
}

/// The same keys in two namespaces of one pool are two objects, and each
/// namespace lists only its own.
#[test]
fn rados_namespaces_keep_apart() {
    let Some(config) = rados_config("rados_namespaces_keep_apart") else {
        return;
    };
    let p = unique_prefix("namespaces");
    let ns = format!("cairn-test-{}", std::process::id());
    let plain = RadosStore::new(&config).expect("client");
    let spaced = RadosStore::new(&RadosConfig {
        namespace: Some(ns.clone()),
        ..config
    })
    .expect("client in a namespace");
    assert!(spaced.describe().contains(&ns), "{}", spaced.describe());
    plain.put(&format!("{p}k"), b"plain").expect("put");
    assert_eq!(spaced.head(&format!("{p}k")).expect("head"), None);
    spaced.create(&format!("{p}k"), b"spaced").expect("create");
    assert_eq!(plain.get(&format!("{p}k")).expect("get"), b"plain");
    assert_eq!(spaced.get(&format!("{p}k")).expect("get"), b"spaced");
    assert_eq!(spaced.list(&p).expect("list").len(), 1);
    remove_all(&plain, &p);
    remove_all(&spaced, &p);
    assert!(spaced.list(&p).expect("list").is_empty());
}

#[test]
fn rados_listing_of_many_keys() {
    let Some(config) = rados_config("rados_listing_of_many_keys") else {
        return;
    };
    let store = RadosStore::new(&config).expect("client");
    many_keys(&store, &unique_prefix("many"));
}

/// An exclusive create is one atomic OSD op: no loser is told to retry.
#[test]
fn rados_create_races_have_one_winner() {
    let Some(config) = rados_config("rados_create_races_have_one_winner") else {
        return;
    };
    let store = RadosStore::new(&config).expect("client");
    let p = unique_prefix("race");
    create_race(&store, &p, false);
    remove_all(&store, &p);
}

/// A pool that does not exist: refused at once, by name, not retried.
#[test]
fn rados_missing_pool_is_a_clear_permanent_error() {
    let Some(mut config) = rados_config("rados_missing_pool_is_a_clear_permanent_error") else {
        return;
    };
    config.pool = "cairn-no-such-pool".into();
    let err = RadosStore::new(&config).expect_err("no such pool");
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("no pool cairn-no-such-pool"),
        "{err}"
    );
}

/// No monitor answers: retryable, after the op timeout (not forever).
#[test]
fn a_cluster_that_is_not_there_is_retryable() {
    if cairn_objects::rados::available().is_err() {
        eprintln!("a_cluster_that_is_not_there_is_retryable: skipped: librados is not installed");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let dir = std::env::temp_dir().join(format!("cairn-no-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let conf = dir.join("ceph.conf");
    std::fs::write(
        &conf,
        format!(
            "[global]\nmon host = 127.0.0.1:{port}\nauth client required = none\n\
             log file = /dev/null\nadmin socket =\n"
        ),
    )
    .expect("conf");
    let start = std::time::Instant::now();
    let err = RadosStore::new(&RadosConfig {
        op_timeout: Duration::from_secs(2),
        ..RadosConfig::new(&conf, "p")
    })
    .expect_err("nothing listens");
    let took = start.elapsed();
    std::fs::remove_dir_all(&dir).expect("cleanup");
    eprintln!("a_cluster_that_is_not_there_is_retryable: {err} (after {took:?})");
    assert!(err.is_retryable(), "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}: {err}");
}

/// A configuration file that is not there is named.
#[test]
fn a_missing_ceph_conf_is_named() {
    if cairn_objects::rados::available().is_err() {
        eprintln!("a_missing_ceph_conf_is_named: skipped: librados is not installed");
        return;
    }
    let err = RadosStore::new(&RadosConfig::new("/nonexistent/ceph.conf", "p"))
        .expect_err("no such file");
    eprintln!("a_missing_ceph_conf_is_named: {err}");
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("/nonexistent/ceph.conf"), "{err}");
}

/// Wrong credentials: a clear error naming the store's code, not retried.
#[test]
fn s3_wrong_secret_is_a_clear_permanent_error() {
    let Some(mut config) = s3_config("s3_wrong_secret_is_a_clear_permanent_error") else {
        return;
    };
    config.secret_key.push('x');
    let store = S3Store::new(&config).expect("client");
    let err = store
        .put("contract/never", b"x")
        .expect_err("a wrong secret must be refused");
    assert!(!err.is_retryable(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("HTTP 403") && text.contains("SignatureDoesNotMatch"),
        "{text}"
    );
}

/// Nothing listening: retryable (the store may come back).
#[test]
fn a_store_that_is_not_there_is_retryable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    // The listener is dropped: nothing listens on the port now.
    let store = S3Store::new(&S3Config {
        endpoint: format!("http://127.0.0.1:{port}"),
        bucket: "b".into(),
        region: "us-east-1".into(),
        access_key: "k".into(),
        secret_key: "s".into(),
        timeout: Duration::from_secs(5),
    })
    .expect("client");
    let err = store.get("x").expect_err("nothing listens");
    assert!(err.is_retryable(), "{err}");
}

#[test]
fn a_bad_endpoint_is_refused_at_once() {
    let err = S3Store::new(&S3Config {
        endpoint: "ftp://host".into(),
        bucket: "b".into(),
        region: "r".into(),
        access_key: String::new(),
        secret_key: String::new(),
        timeout: Duration::from_secs(1),
    })
    .expect_err("ftp is no S3 endpoint");
    assert!(err.to_string().contains("ftp://host"), "{err}");
}
