//! One writer per volume: the lease refuses a second opener (naming the
//! holder), passes on after a release, fences on a forced takeover, and of
//! racing openers exactly one wins — on memory, on a real S3 store and on a
//! real RADOS pool.

mod common;

use std::time::Duration;

use cairn_objects::lease::{self, LeaseRecord};
use cairn_objects::{
    Fault, FaultyStore, Lease, LeaseError, MemStore, ObjectStore, RadosStore, RetryPolicy,
    Retrying, S3Store,
};
use common::{rados_config, remove_all, s3_config, unique_prefix};

/// The whole life of a volume's leases, under `p`.
fn lifecycle(store: &dyn ObjectStore, p: &str) {
    assert_eq!(lease::current(store, p).expect("current"), None);

    let a = Lease::acquire(store, p, "host-a pid 1", false).expect("first open");
    assert_eq!(a.generation(), 1);
    assert_eq!(a.previous(), None);
    a.heartbeat(store).expect("heartbeat");

    // A second server is refused, told who holds the volume.
    let err = Lease::acquire(store, p, "host-b pid 2", false).expect_err("held");
    let text = err.to_string();
    assert!(
        matches!(err, LeaseError::Held { generation: 1, .. }),
        "{text}"
    );
    assert!(
        text.contains("held by host-a pid 1") && text.contains("last heartbeat"),
        "{text}"
    );
    assert!(a.still_held(store).expect("check"));

    // A clean stop passes the volume on without force.
    a.release(store).expect("release");
    let b = Lease::acquire(store, p, "host-b pid 2", false).expect("open after release");
    assert_eq!(b.generation(), 2);
    assert_eq!(b.previous(), Some((1, true)));
    assert!(!b.record().forced);

    // A forced takeover: the old holder finds itself fenced.
    let c = Lease::acquire(store, p, "host-c pid 3", true).expect("takeover");
    assert_eq!(c.generation(), 3);
    assert_eq!(c.previous(), Some((2, false)));
    assert!(c.record().forced);
    assert!(!b.still_held(store).expect("check"), "b was fenced");
    assert!(c.still_held(store).expect("check"));

    // A reader sees the newest lease.
    let state = lease::current(store, p).expect("current").expect("a lease");
    assert_eq!(state.record.holder, "host-c pid 3");
    assert!(!state.released);
}

#[test]
fn leases_on_memory() {
    lifecycle(&MemStore::new(), "vol/");
}

#[test]
fn leases_on_s3() {
    let Some(config) = s3_config("leases_on_s3") else {
        return;
    };
    let store = S3Store::new(&config).expect("client");
    let p = unique_prefix("lease");
    lifecycle(&store, &p);
    remove_all(&store, &p);
}

#[test]
fn leases_on_rados() {
    let Some(config) = rados_config("leases_on_rados") else {
        return;
    };
    let store = RadosStore::new(&config).expect("client");
    let p = unique_prefix("lease");
    lifecycle(&store, &p);
    remove_all(&store, &p);
}

/// Eight servers open one volume at once: one wins, seven are refused
/// naming it.
fn race(store: &dyn ObjectStore, p: &str) {
    let results: Vec<Result<Lease, LeaseError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| s.spawn(move || Lease::acquire(store, p, &format!("server {i}"), false)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let winners: Vec<&Lease> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let holder = format!("held by {}", winners[0].record().holder);
    for r in &results {
        if let Err(e) = r {
            assert!(e.to_string().contains(&holder), "{e}");
        }
    }
}

#[test]
fn racing_openers_on_memory() {
    race(&MemStore::new(), "vol/");
}

#[test]
fn racing_openers_on_s3() {
    let Some(config) = s3_config("racing_openers_on_s3") else {
        return;
    };
    // RGW may answer a racing conditional create with 409: retried.
    let store = Retrying::new(
        S3Store::new(&config).expect("client"),
        RetryPolicy::default(),
    );
    let p = unique_prefix("lease-race");
    race(&store, &p);
    remove_all(&store, &p);
}

#[test]
fn racing_openers_on_rados() {
    let Some(config) = rados_config("racing_openers_on_rados") else {
        return;
    };
    let store = RadosStore::new(&config).expect("client");
    let p = unique_prefix("lease-race");
    race(&store, &p);
    remove_all(&store, &p);
}

/// The create's reply is lost: the retry recognises its own record and the
/// open succeeds (and holds exactly one generation).
#[test]
fn a_lost_create_reply_still_opens() {
    let faulty = FaultyStore::new(MemStore::new());
    let store = Retrying::new(
        &faulty,
        RetryPolicy {
            first_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            deadline: Some(Duration::from_secs(5)),
            seed: 1,
        },
    );
    faulty.arm(Fault::LostReply(0));
    let l = Lease::acquire(&store, "v/", "me", false).expect("open");
    assert_eq!(l.generation(), 1);
    assert_eq!(faulty.inner().len(), 1);
}

#[test]
fn a_corrupt_lease_is_reported_not_trusted() {
    let store = MemStore::new();
    let l = Lease::acquire(&store, "v/", "me", false).expect("open");
    let mut bytes = store.get("v/lease/0000000000000001").expect("record");
    bytes[20] ^= 1;
    store.put("v/lease/0000000000000001", &bytes).expect("put");
    let err = Lease::acquire(&store, "v/", "other", false).expect_err("corrupt");
    assert!(err.to_string().contains("CRC32C"), "{err}");
    drop(l);
}

#[test]
fn records_round_trip_and_reject_damage() {
    let r = LeaseRecord {
        generation: 7,
        holder: "host ✓ pid 9".into(),
        nonce: 0xdead_beef,
        time_ms: 1_700_000_000_000,
        forced: true,
    };
    let bytes = r.encode();
    assert_eq!(LeaseRecord::decode(&bytes), Ok(r));
    for cut in [0, 10, bytes.len() - 1] {
        assert!(LeaseRecord::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x40;
        assert!(
            LeaseRecord::decode(&b).is_err(),
            "a flip at byte {i} went unnoticed"
        );
    }
}
