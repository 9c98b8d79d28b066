//! `FaultyStore` does what a crash-point enumeration relies on, and
//! `Retrying` turns its retryable faults into successes without doing a
//! mutation twice in effect.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_objects::{
    Fault, FaultyStore, MemStore, Metered, ObjectError, ObjectStore, RetryPolicy, Retrying,
};

fn fast(deadline: Option<Duration>) -> RetryPolicy {
    RetryPolicy {
        first_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        deadline,
        seed: 7,
    }
}

#[test]
fn a_failed_mutation_changes_nothing_and_is_retried() {
    let faulty = FaultyStore::new(MemStore::new());
    faulty.arm(Fault::Fail(1));
    faulty.put("a", b"1").expect("mutation 0");
    let err = faulty.put("b", b"2").expect_err("mutation 1 fails");
    assert!(err.is_retryable(), "{err}");
    assert_eq!(faulty.inner().head("b").expect("head"), None);

    faulty.arm(Fault::Fail(0));
    let retrying = Retrying::new(&faulty, fast(Some(Duration::from_secs(5))));
    retrying.put("b", b"2").expect("retried");
    assert_eq!(faulty.inner().get("b").expect("get"), b"2");
    assert_eq!(retrying.retries(), 1);
}

#[test]
fn a_lost_reply_took_effect() {
    let faulty = FaultyStore::new(MemStore::new());
    faulty.arm(Fault::LostReply(0));
    let err = faulty.delete("nothing").expect_err("reply lost");
    assert!(err.is_retryable());
    faulty.arm(Fault::LostReply(0));
    assert!(faulty.put("k", b"v").is_err());
    assert_eq!(faulty.inner().get("k").expect("it took effect"), b"v");
}

/// A create whose reply was lost is retried, finds its own object and
/// succeeds; a create that finds another writer's object still loses.
#[test]
fn a_retried_create_recognises_its_own_object() {
    let faulty = FaultyStore::new(MemStore::new());
    let retrying = Retrying::new(&faulty, fast(Some(Duration::from_secs(5))));
    faulty.arm(Fault::LostReply(0));
    retrying
        .create("lease", b"holder A, nonce 1")
        .expect("own create, reply lost");
    assert!(matches!(
        retrying.create("lease", b"holder B, nonce 2"),
        Err(ObjectError::Exists { .. })
    ));
    // B's create fails once, then finds A's object: B lost.
    faulty.arm(Fault::Fail(0));
    assert!(matches!(
        retrying.create("lease", b"holder B, nonce 2"),
        Err(ObjectError::Exists { .. })
    ));
    assert_eq!(
        faulty.inner().get("lease").expect("get"),
        b"holder A, nonce 1"
    );
}

#[test]
fn a_crash_refuses_every_later_request() {
    let faulty = FaultyStore::new(MemStore::new());
    faulty.arm(Fault::Crash(2));
    faulty.put("0", b"").expect("before");
    faulty.put("1", b"").expect("before");
    let err = faulty.put("2", b"").expect_err("the crash point");
    assert!(!err.is_retryable());
    assert!(faulty.crashed());
    assert!(
        faulty.get("0").is_err(),
        "a crashed writer reads nothing either"
    );
    assert_eq!(faulty.inner().len(), 2);
    // Not retried: the writer is dead.
    let retrying = Retrying::new(&faulty, fast(None));
    assert!(retrying.put("3", b"").is_err());
    assert_eq!(retrying.retries(), 0);
}

/// An outage: requests wait through it and complete when the store is back.
#[test]
fn an_outage_is_waited_out() {
    let faulty = Arc::new(FaultyStore::new(MemStore::new()));
    faulty.set_down(true);
    let back = {
        let faulty = Arc::clone(&faulty);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            faulty.set_down(false);
        })
    };
    let retrying = Retrying::new(Arc::clone(&faulty), fast(Some(Duration::from_secs(10))));
    let start = Instant::now();
    retrying.put("k", b"v").expect("after the outage");
    assert!(start.elapsed() >= Duration::from_millis(150));
    assert!(retrying.retries() >= 10, "retries {}", retrying.retries());
    assert!(!retrying.in_outage());
    back.join().expect("thread");
    assert_eq!(faulty.inner().get("k").expect("get"), b"v");
}

#[test]
fn an_outage_past_the_deadline_gives_up_and_says_so() {
    let faulty = FaultyStore::new(MemStore::new());
    faulty.set_down(true);
    let retrying = Retrying::new(&faulty, fast(Some(Duration::from_millis(100))));
    let start = Instant::now();
    let err = retrying.get("k").expect_err("the store stays down");
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    match &err {
        ObjectError::GaveUp { attempts, last, .. } => {
            assert!(*attempts > 5, "{attempts}");
            assert!(last.to_string().contains("503"), "{last}");
        }
        other => panic!("expected GaveUp, got {other}"),
    }
    assert!(err.to_string().contains("gave up after"), "{err}");
}

#[test]
fn permanent_errors_are_not_retried() {
    let retrying = Retrying::new(MemStore::new(), fast(None));
    assert!(matches!(
        retrying.get("none"),
        Err(ObjectError::NotFound { .. })
    ));
    assert_eq!(retrying.retries(), 0);
}

/// The mutation counter a crash-point enumeration reads, and the request
/// counts the object tier reports.
#[test]
fn mutations_are_counted_for_enumeration() {
    let metered = Metered::new(FaultyStore::new(MemStore::new()));
    metered.put("a", &[0; 10]).expect("put");
    metered.create("b", &[0; 5]).expect("create");
    metered.delete("a").expect("delete");
    let mut buf = [0; 3];
    metered.read_at("b", 1, &mut buf).expect("read");
    metered.list("").expect("list");
    assert_eq!(metered.inner().mutations(), 3);
    let c = metered.counts();
    assert_eq!(
        (c.puts, c.put_bytes, c.gets, c.get_bytes, c.deletes, c.lists),
        (2, 15, 1, 3, 1, 1)
    );
}
