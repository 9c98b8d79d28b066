//! [`Retrying`]: repeats what the store said may succeed later.
//!
//! Backoff is capped exponential with full jitter (AWS's recommendation for
//! many clients against one store): attempt k sleeps a uniform random time
//! in `0 ..= min(max_delay, first_delay · 2^k)`. The randomness is a seeded
//! ChaCha, so a test replays exactly.
//!
//! An outage is logged once when it starts (the first retryable failure
//! while none was outstanding) and once when it ends (the first success
//! after), with its length, not once per request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{ObjectError, ObjectInfo, ObjectStore, Op};

/// How long and how often [`Retrying`] tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The cap of the first backoff (later ones double it).
    pub first_delay: Duration,
    /// The largest cap.
    pub max_delay: Duration,
    /// Give up once this much time passed since the first attempt (`None`:
    /// never; the caller bounds the wait itself).
    pub deadline: Option<Duration>,
    /// Seed of the jitter.
    pub seed: u64,
}

impl Default for RetryPolicy {
    /// 50 ms doubling to 5 s, for up to 2 minutes.
    fn default() -> Self {
        Self {
            first_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(5),
            deadline: Some(Duration::from_mins(2)),
            seed: 0x00ca_1e5c,
        }
    }
}

/// Wraps a store and retries its retryable failures per a [`RetryPolicy`].
#[derive(Debug)]
pub struct Retrying<S> {
    inner: S,
    policy: RetryPolicy,
    rng: Mutex<ChaCha8Rng>,
    /// Set from an outage's first failure to its first success.
    outage: AtomicBool,
    /// When the current outage began (µs since `epoch`).
    outage_since: AtomicU64,
    epoch: Instant,
    retries: AtomicU64,
}

impl<S: ObjectStore> Retrying<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, policy: RetryPolicy) -> Self {
        Self {
            inner,
            policy,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(policy.seed)),
            outage: AtomicBool::new(false),
            outage_since: AtomicU64::new(0),
            epoch: Instant::now(),
            retries: AtomicU64::new(0),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Requests repeated so far.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Whether the last answer of the store was a retryable failure.
    pub fn in_outage(&self) -> bool {
        self.outage.load(Ordering::Relaxed)
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let cap = self
            .policy
            .first_delay
            .saturating_mul(1 << attempt.min(20))
            .min(self.policy.max_delay);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        let pick = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .random_range(0..=nanos);
        Duration::from_nanos(pick)
    }

    fn began(&self, err: &ObjectError) {
        if !self.outage.swap(true, Ordering::Relaxed) {
            let now = self.epoch.elapsed().as_micros() as u64;
            self.outage_since.store(now, Ordering::Relaxed);
            tracing::warn!(store = %self.inner.describe(), "object store failing, retrying: {err}");
        }
    }

    fn ended(&self) {
        if self.outage.load(Ordering::Relaxed) && self.outage.swap(false, Ordering::Relaxed) {
            let since = self.outage_since.load(Ordering::Relaxed);
            let now = self.epoch.elapsed().as_micros() as u64;
            tracing::warn!(
                store = %self.inner.describe(),
                "object store answering again after {:.1} s",
                now.saturating_sub(since) as f64 / 1e6
            );
        }
    }

    /// Runs `attempt` until it succeeds, fails for good, or the deadline
    /// passes. `attempt` gets whether an earlier attempt failed retryably
    /// (so it may have taken effect).
    fn run<T>(
        &self,
        op: Op,
        key: &str,
        mut attempt: impl FnMut(bool) -> Result<T, ObjectError>,
    ) -> Result<T, ObjectError> {
        let start = Instant::now();
        let mut attempts = 0u32;
        loop {
            let result = attempt(attempts > 0);
            attempts += 1;
            match result {
                Err(err) if err.is_retryable() => {
                    self.began(&err);
                    let elapsed = start.elapsed();
                    let wait = self.backoff(attempts - 1);
                    if self.policy.deadline.is_some_and(|d| elapsed + wait > d) {
                        return Err(ObjectError::GaveUp {
                            op,
                            key: key.to_owned(),
                            attempts,
                            elapsed,
                            last: Box::new(err),
                        });
                    }
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(wait);
                }
                other => {
                    if other.is_ok() {
                        self.ended();
                    }
                    return other;
                }
            }
        }
    }
}

impl<S: ObjectStore> ObjectStore for Retrying<S> {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        self.run(Op::Put, key, |_| self.inner.put(key, body))
    }

    /// A create whose earlier attempt failed retryably may have taken
    /// effect: if a later attempt finds the key taken, the object is read
    /// back, and the create succeeded if it holds exactly `body`. Bodies of
    /// creates should therefore be unique to their writer (a lease carries
    /// its holder's nonce).
    fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        self.run(Op::Create, key, |retried| {
            match self.inner.create(key, body) {
                Err(ObjectError::Exists { .. }) if retried => match self.inner.get(key) {
                    Ok(found) if found == body => Ok(()),
                    Ok(_) | Err(ObjectError::NotFound { .. }) => Err(ObjectError::Exists {
                        key: key.to_owned(),
                    }),
                    Err(e) => Err(e),
                },
                other => other,
            }
        })
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
        self.run(Op::Get, key, |_| self.inner.read_at(key, offset, buf))
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        self.run(Op::Get, key, |_| self.inner.get(key))
    }

    fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
        self.run(Op::Head, key, |_| self.inner.head(key))
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        self.run(Op::Delete, key, |_| self.inner.delete(key))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
        self.run(Op::List, prefix, |_| self.inner.list(prefix))
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}
