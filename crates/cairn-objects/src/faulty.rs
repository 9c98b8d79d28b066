//! [`FaultyStore`]: a store that fails where a test tells it to.
//!
//! Mutations (PUT, create, DELETE) are numbered from 0 in the order they
//! reach the store. A crash-point enumeration runs a workload once on a
//! clean store to count its mutations, then once for every N with a fault at
//! the N-th, and checks what recovery finds each time.
//!
//! With several writers' requests in flight at once (an object tier's
//! uploaders), the store may complete them in any order: [`Reorder`] holds
//! some mutations back while later ones take effect, and a crash there
//! keeps some of those in flight and drops the rest.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::{ObjectError, ObjectInfo, ObjectStore, Op};

/// What goes wrong, and at which mutation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The N-th mutation fails (retryable) and changes nothing.
    Fail(u64),
    /// The N-th mutation takes effect, then its reply is lost: the caller
    /// sees a retryable error (a timeout) for a request that succeeded.
    LostReply(u64),
    /// The writer dies just before the N-th mutation: it and every later
    /// request changes nothing and fails, not retryable.
    Crash(u64),
}

/// Completions out of order, and a crash among them
/// ([`FaultyStore::reorder`]).
///
/// Mutations are taken one at a time. One in three (chosen by `seed` and
/// its number) is *held*: it takes effect only once `1..=most` later
/// mutations (also chosen by the seed) arrived — each taking effect first —
/// or after `patience` (a caller waiting for the held one sends nothing
/// more). A request takes effect before its caller sees it succeed, as in
/// any store: what is held is in flight, never acknowledged.
///
/// With `crash = Some(n)` the writer dies when the n-th mutation arrives:
/// it and every later request change nothing and fail (not retryable);
/// each request in flight then — held, or on its way — is kept (takes
/// effect) or dropped, half and half by the seed, and fails too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reorder {
    /// Seeds which mutations are held, how long, and which a crash keeps.
    pub seed: u64,
    /// A held mutation waits for at most this many later ones.
    pub most: u64,
    /// And for at most this long.
    pub patience: Duration,
    /// The mutation the writer dies at, if any.
    pub crash: Option<u64>,
}

/// Who is in flight under [`Reorder`].
#[derive(Debug, Default)]
struct Flight {
    /// Mutations that arrived.
    arrived: u64,
    /// The numbers of the mutations held now.
    held: BTreeSet<u64>,
    /// Mutations that took effect while an earlier one was held.
    overtakes: u64,
    /// Requests in flight at the crash that took effect anyway.
    kept: u64,
    /// And those dropped.
    dropped: u64,
}

/// Wraps a store and injects a [`Fault`], reorders completions
/// ([`Reorder`]), or an outage while [`set_down`](FaultyStore::set_down)
/// says so.
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    fault: Mutex<Option<Fault>>,
    reorder: Mutex<Option<Reorder>>,
    flight: Mutex<Flight>,
    arrived: Condvar,
    mutations: AtomicU64,
    crashed: AtomicBool,
    down: AtomicBool,
}

/// The splitmix64 finaliser: the seeded choices of [`Reorder`], a function
/// of the mutation's number so a run's choices do not depend on timing.
fn mix(seed: u64, n: u64, salt: u64) -> u64 {
    let mut x = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt.rotate_left(32);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl<S: ObjectStore> FaultyStore<S> {
    /// Wraps `inner`, with no fault.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            fault: Mutex::new(None),
            reorder: Mutex::new(None),
            flight: Mutex::new(Flight::default()),
            arrived: Condvar::new(),
            mutations: AtomicU64::new(0),
            crashed: AtomicBool::new(false),
            down: AtomicBool::new(false),
        }
    }

    /// Arms `fault` (replacing any other, and any reordering), counting
    /// mutations from now on.
    pub fn arm(&self, fault: Fault) {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = Some(fault);
        *self.reorder.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.mutations.store(0, Ordering::SeqCst);
        self.crashed.store(false, Ordering::SeqCst);
    }

    /// Reorders completions from now on (replacing any fault), counting
    /// mutations from now on.
    pub fn reorder(&self, reorder: Reorder) {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = None;
        *self.reorder.lock().unwrap_or_else(PoisonError::into_inner) = Some(reorder);
        *self.flight() = Flight::default();
        self.mutations.store(0, Ordering::SeqCst);
        self.crashed.store(false, Ordering::SeqCst);
    }

    /// Under [`Reorder`]: mutations that took effect while an earlier one
    /// was held (each one completion out of order), and of the requests in
    /// flight at the crash, how many were kept and how many dropped.
    pub fn reordered(&self) -> (u64, u64, u64) {
        let f = self.flight();
        (f.overtakes, f.kept, f.dropped)
    }

    fn flight(&self) -> MutexGuard<'_, Flight> {
        self.flight.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Mutations that reached the store since it was made or last armed.
    pub fn mutations(&self) -> u64 {
        self.mutations.load(Ordering::SeqCst)
    }

    /// Whether an armed [`Fault::Crash`] has happened.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// While `down`, every request fails as a store answering 503 would
    /// (retryable) and changes nothing.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// The wrapped store (what survives a crash).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Checks the outage and the crash for any request; numbers a mutation
    /// and says what its fault is.
    fn gate(&self, op: Op, key: &str) -> Result<Option<Fault>, ObjectError> {
        if self.crashed() {
            return Err(ObjectError::failed(op, key, "the writer crashed", false));
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(ObjectError::failed(
                op,
                key,
                "HTTP 503 SlowDown (simulated outage)",
                true,
            ));
        }
        if !op.mutates() {
            return Ok(None);
        }
        let n = self.mutations.fetch_add(1, Ordering::SeqCst);
        let fault = *self.fault.lock().unwrap_or_else(PoisonError::into_inner);
        match fault {
            Some(Fault::Crash(at)) if n >= at => {
                self.crashed.store(true, Ordering::SeqCst);
                Err(ObjectError::failed(op, key, "the writer crashed", false))
            }
            Some(Fault::Fail(at)) if n == at => Err(ObjectError::failed(
                op,
                key,
                format!("injected failure of mutation {n}"),
                true,
            )),
            Some(f @ Fault::LostReply(at)) if n == at => Ok(Some(f)),
            _ => Ok(None),
        }
    }

    /// Runs a mutation, losing its reply if the gate said so.
    fn mutate(
        &self,
        op: Op,
        key: &str,
        run: impl FnOnce() -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        let fault = self.gate(op, key)?;
        let reorder = *self.reorder.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = reorder {
            // Numbered again here, in the order the requests are taken.
            return self.reordered_mutate(r, op, key, run);
        }
        run()?;
        match fault {
            Some(Fault::LostReply(n)) => Err(ObjectError::failed(
                op,
                key,
                format!("injected lost reply of mutation {n} (it took effect)"),
                true,
            )),
            _ => Ok(()),
        }
    }

    /// A mutation under [`Reorder`]: taken under the flight's lock (so a
    /// crash sees every request either done, held, or not yet arrived),
    /// held when the seed says so, kept or dropped at a crash.
    fn reordered_mutate(
        &self,
        r: Reorder,
        op: Op,
        key: &str,
        run: impl FnOnce() -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        let crashed = || ObjectError::failed(op, key, "the writer crashed", false);
        let mut f = self.flight();
        let n = f.arrived;
        f.arrived += 1;
        self.arrived.notify_all();
        if r.crash.is_some_and(|at| n >= at) && !self.crashed() {
            self.crashed.store(true, Ordering::SeqCst);
            return Err(crashed());
        }
        if !self.crashed() && mix(r.seed, n, 1).is_multiple_of(3) && r.most > 0 {
            let later = 1 + mix(r.seed, n, 2) % r.most;
            let deadline = Instant::now() + r.patience;
            f.held.insert(n);
            while f.arrived <= n + later && !self.crashed() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                f = self
                    .arrived
                    .wait_timeout(f, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            f.held.remove(&n);
        }
        if self.crashed() {
            // In flight at the crash: kept or dropped; its caller died.
            if mix(r.seed, n, 3).is_multiple_of(2) {
                f.kept += 1;
                let _ = run();
            } else {
                f.dropped += 1;
            }
            return Err(crashed());
        }
        if f.held.first().is_some_and(|&h| h < n) {
            f.overtakes += 1;
        }
        run()
    }
}

impl<S: ObjectStore> ObjectStore for FaultyStore<S> {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        self.mutate(Op::Put, key, || self.inner.put(key, body))
    }

    fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        self.mutate(Op::Create, key, || self.inner.create(key, body))
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
        self.gate(Op::Get, key)?;
        self.inner.read_at(key, offset, buf)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        self.gate(Op::Get, key)?;
        self.inner.get(key)
    }

    fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
        self.gate(Op::Head, key)?;
        self.inner.head(key)
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        self.mutate(Op::Delete, key, || self.inner.delete(key))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
        self.gate(Op::List, prefix)?;
        self.inner.list(prefix)
    }

    fn describe(&self) -> String {
        format!("faulty {}", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{FaultyStore, Reorder, mix};
    use crate::{MemStore, ObjectStore};

    /// A seed whose mutation 0 is held for exactly one later one, and
    /// which a crash keeps (`keep`) or drops.
    fn seed(keep: bool) -> u64 {
        (0..1 << 20)
            .find(|&s| {
                mix(s, 0, 1).is_multiple_of(3)
                    && !mix(s, 1, 1).is_multiple_of(3)
                    && mix(s, 0, 3).is_multiple_of(2) == keep
            })
            .expect("a seed")
    }

    fn held(store: &FaultyStore<MemStore>) {
        let start = std::time::Instant::now();
        while store.flight().held.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "never held");
            std::thread::yield_now();
        }
    }

    /// A held PUT takes effect after the next one, which its caller saw
    /// succeed first; alone, a held PUT takes effect after the patience.
    #[test]
    fn a_held_put_is_overtaken_by_a_later_one() {
        let store = Arc::new(FaultyStore::new(MemStore::new()));
        store.reorder(Reorder {
            seed: seed(true),
            most: 1,
            patience: Duration::from_secs(30),
            crash: None,
        });
        let first = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || store.put("a", b"1"))
        };
        held(&store);
        store.put("b", b"2").expect("the later put");
        assert_eq!(store.inner().head("b").expect("head"), Some(1));
        first.join().expect("join").expect("the held put");
        assert_eq!(store.inner().head("a").expect("head"), Some(1));
        assert_eq!(store.reordered(), (1, 0, 0));

        let alone = FaultyStore::new(MemStore::new());
        alone.reorder(Reorder {
            seed: seed(true),
            most: 1,
            patience: Duration::from_millis(5),
            crash: None,
        });
        alone.put("a", b"1").expect("held, then let through");
        assert_eq!(alone.inner().len(), 1);
    }

    /// A crash while a PUT is held keeps it or drops it as the seed says;
    /// its caller sees a failure either way, and every later request fails.
    #[test]
    fn a_crash_keeps_or_drops_what_is_in_flight() {
        for keep in [true, false] {
            let store = Arc::new(FaultyStore::new(MemStore::new()));
            store.reorder(Reorder {
                seed: seed(keep),
                most: 1,
                patience: Duration::from_secs(30),
                crash: Some(1),
            });
            let first = {
                let store = Arc::clone(&store);
                std::thread::spawn(move || store.put("a", b"1"))
            };
            held(&store);
            assert!(store.put("b", b"2").is_err(), "the crash point");
            assert!(first.join().expect("join").is_err(), "its caller died");
            assert!(store.put("c", b"3").is_err(), "after the crash");
            assert!(store.crashed());
            let names: Vec<String> = store
                .inner()
                .list("")
                .expect("list")
                .into_iter()
                .map(|o| o.key)
                .collect();
            let want: Vec<String> = if keep { vec!["a".into()] } else { vec![] };
            assert_eq!(names, want, "keep {keep}");
            assert_eq!(store.reordered(), (0, u64::from(keep), u64::from(!keep)));
        }
    }
}
