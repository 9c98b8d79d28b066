//! Reader pins and the writer's deferred deletes: how a read-only open of a
//! volume in use keeps the segment objects its view needs.
//!
//! A reader (`readonly.rs`) puts a *pin* under `P readers/` before it lists
//! the volume, and refreshes it every heartbeat while it runs; a clean close
//! deletes it. A writer deletes segment objects (dead at a checkpoint, void
//! or dead at its open) only through [`Deferred::delete`]: it lists the
//! pins first, and while any is fresh (refreshed within [`EXPIRY_BEATS`] of
//! the reader's own refresh interval, by the writer's clock) the deletes
//! wait in a list, tried again at every later checkpoint, every heartbeat
//! and the close. A stale pin (a reader that crashed or hung) is ignored
//! and deleted.
//!
//! Why this is enough: a reader's view is the newest checkpoint and the
//! segments after it that it found *after* its pin was in the store; a
//! writer deletes a segment only after the checkpoint that left it dead is
//! in the store. If the writer's listing of the pins missed the pin, the
//! pin came after that listing, so after the checkpoint, and the reader's
//! view starts at that checkpoint or a later one: it needs none of the
//! segments being deleted. If the listing saw it, nothing is deleted. A
//! writer that crashes with deletes deferred leaves dead objects, which the
//! next open's recovery finds and deletes (`recover::garbage`).
//!
//! The pin is text (`docs/formats.md`): the holder, the checkpoint and the
//! last segment of the reader's view, the time of the refresh and the
//! reader's refresh interval. Freshness compares the reader's wall clock
//! with the writer's: their clocks must agree to well within a refresh
//! interval (30 s by default).

use std::collections::BTreeSet;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use cairn_objects::{ObjectError, ObjectStore};

use super::format::Keys;

/// A pin counts as fresh for this many of its reader's refresh intervals
/// after its last refresh.
pub(crate) const EXPIRY_BEATS: u64 = 3;

/// The first line of a pin.
const MAGIC: &str = "CAIRN object volume reader pin 1";

/// Pins larger than this are not ours.
const MAX_PIN: usize = 4096;

/// Milliseconds since the Unix epoch, by this machine's clock.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a reader's pin says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pin {
    /// Who reads ("host pid N").
    pub holder: String,
    /// The checkpoint its view starts from (0: none).
    pub checkpoint: u64,
    /// The last segment of its view (0: still opening).
    pub through: u64,
    /// When it was last refreshed (Unix ms, the reader's clock).
    pub time_ms: u64,
    /// How often the reader refreshes it (ms).
    pub refresh_ms: u64,
}

impl Pin {
    pub(crate) fn encode(&self) -> Vec<u8> {
        format!(
            "{MAGIC}\nholder {}\ncheckpoint {}\nthrough {}\ntime_ms {}\nrefresh_ms {}\n",
            self.holder.replace('\n', " "),
            self.checkpoint,
            self.through,
            self.time_ms,
            self.refresh_ms
        )
        .into_bytes()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() > MAX_PIN {
            return Err(format!("{} bytes: not a reader pin", bytes.len()));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(format!("does not begin with {MAGIC:?}"));
        }
        let mut fields = std::collections::HashMap::new();
        for line in lines {
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            fields.insert(k, v);
        }
        let text = |k: &str| fields.get(k).copied().ok_or_else(|| format!("no {k} line"));
        let number = |k: &str| {
            text(k)?
                .parse::<u64>()
                .map_err(|_| format!("{k}: not a number"))
        };
        Ok(Self {
            holder: text("holder")?.to_owned(),
            checkpoint: number("checkpoint")?,
            through: number("through")?,
            time_ms: number("time_ms")?,
            refresh_ms: number("refresh_ms")?,
        })
    }

    /// Whether the pin still holds at `now_ms` (the writer's clock): its
    /// last refresh less than [`EXPIRY_BEATS`] refresh intervals ago (a
    /// time ahead of ours counts as now).
    pub(crate) fn fresh(&self, now_ms: u64) -> bool {
        let expiry = self.refresh_ms.max(1).saturating_mul(EXPIRY_BEATS);
        now_ms < self.time_ms.saturating_add(expiry)
    }
}

/// The pins under a volume's prefix.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    /// Fresh ones: key and pin.
    pub fresh: Vec<(String, Pin)>,
    /// Stale or unreadable ones: key, and why.
    pub stale: Vec<(String, String)>,
}

/// Lists and reads the pins under `keys`' prefix, judged at `now_ms`. A
/// pin deleted between the listing and its read is gone (its reader
/// closed).
pub(crate) fn scan(store: &dyn ObjectStore, keys: &Keys, now_ms: u64) -> Result<Pins, ObjectError> {
    let mut pins = Pins::default();
    for o in store.list(&keys.readers())? {
        let bytes = match store.get(&o.key) {
            Ok(b) => b,
            Err(ObjectError::NotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        match Pin::decode(&bytes) {
            Ok(pin) if pin.fresh(now_ms) => pins.fresh.push((o.key, pin)),
            Ok(pin) => {
                let ago = now_ms.saturating_sub(pin.time_ms) / 1000;
                pins.stale
                    .push((o.key, format!("{}, last refreshed {ago} s ago", pin.holder)));
            }
            Err(why) => pins.stale.push((o.key, format!("unreadable: {why}"))),
        }
    }
    Ok(pins)
}

/// What one [`Deferred::delete`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Segment objects deleted.
    pub deleted: usize,
    /// Segment objects left waiting for readers.
    pub waiting: usize,
}

/// A writer's segment deletes waiting for readers.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    keys: BTreeSet<String>,
    /// The wait was logged (once until it ends).
    reported: bool,
}

impl Deferred {
    /// Segment objects waiting.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().keys.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Deletes the segment objects `more` and those waiting from before,
    /// unless a reader's pin is fresh: then they all wait. Stale pins are
    /// deleted. Only a writer that holds the volume calls this. On an
    /// error the objects not deleted wait for the next call. Calls are
    /// serialised (the listing and the deletes under one lock).
    pub(crate) fn delete(
        &self,
        store: &dyn ObjectStore,
        keys: &Keys,
        more: impl IntoIterator<Item = String>,
    ) -> Result<Swept, ObjectError> {
        let mut inner = self.lock();
        inner.keys.extend(more);
        if inner.keys.is_empty() {
            return Ok(Swept::default());
        }
        let pins = scan(store, keys, now_ms())?;
        for (key, why) in &pins.stale {
            tracing::warn!(volume = %keys.prefix, "removing the stale reader pin {key} ({why})");
            store.delete(key)?;
        }
        if let Some((key, pin)) = pins.fresh.first() {
            if !inner.reported {
                tracing::info!(
                    volume = %keys.prefix,
                    "{} dead segment objects wait: {} read-only opens pin the volume ({key}: {}, \
                     as of segment {})",
                    inner.keys.len(),
                    pins.fresh.len(),
                    pin.holder,
                    pin.through
                );
                inner.reported = true;
            }
            return Ok(Swept {
                deleted: 0,
                waiting: inner.keys.len(),
            });
        }
        let deleted = delete_all(store, &mut inner.keys)?;
        if std::mem::take(&mut inner.reported) {
            tracing::info!(
                volume = %keys.prefix,
                "no read-only open pins the volume any more: {deleted} dead segment objects deleted"
            );
        }
        Ok(Swept {
            deleted,
            waiting: 0,
        })
    }
}

/// Deletes in flight at once. One at a time, a store that takes a few
/// milliseconds a DELETE deletes a few hundred objects a second, fewer
/// than a sequential writer of 2 MiB objects makes dead (the backlog, all
/// of it still stored, grew to thousands of objects and filled the test
/// cluster's OSD).
const DELETE_WIDTH: usize = 8;

/// Deletes every key of `keys`, [`DELETE_WIDTH`] at a time; each one
/// deleted leaves the set. On errors the rest stay and the first error is
/// returned.
fn delete_all(store: &dyn ObjectStore, keys: &mut BTreeSet<String>) -> Result<usize, ObjectError> {
    let all: Vec<String> = keys.iter().cloned().collect();
    let next = AtomicUsize::new(0);
    let results: Vec<(Vec<usize>, Option<ObjectError>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..DELETE_WIDTH.min(all.len()))
            .map(|_| {
                scope.spawn(|| {
                    let (mut done, mut failed) = (Vec::new(), None);
                    loop {
                        let i = next.fetch_add(1, Relaxed);
                        let Some(key) = all.get(i) else { break };
                        match store.delete(key) {
                            Ok(()) => done.push(i),
                            Err(e) => {
                                // No more from this worker; the others
                                // stop at their next key.
                                next.store(all.len(), Relaxed);
                                failed = Some(e);
                                break;
                            }
                        }
                    }
                    (done, failed)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut deleted = 0;
    let mut first = None;
    for (done, failed) in results {
        for i in done {
            keys.remove(&all[i]);
            deleted += 1;
        }
        first = first.or(failed);
    }
    first.map_or(Ok(deleted), Err)
}

/// A read-only open's pin: its key, and what it says.
#[derive(Debug)]
pub(crate) struct Reader {
    pub key: String,
    pin: Mutex<Pin>,
    /// When the pin was last refreshed (this machine's monotonic clock).
    refreshed: Mutex<std::time::Instant>,
}

impl Reader {
    /// Puts `pin` (its time set to now) under `key`.
    pub(crate) fn pin(
        store: &dyn ObjectStore,
        key: String,
        mut pin: Pin,
    ) -> Result<Self, ObjectError> {
        pin.time_ms = now_ms();
        store.put(&key, &pin.encode())?;
        Ok(Self {
            key,
            pin: Mutex::new(pin),
            refreshed: Mutex::new(std::time::Instant::now()),
        })
    }

    /// What the pin says now.
    pub(crate) fn get(&self) -> Pin {
        self.pin
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Refreshes the pin (its time now), after `change` (the view it
    /// names). Says so when the last refresh was long enough ago that a
    /// writer may have taken the pin for stale.
    pub(crate) fn refresh(
        &self,
        store: &dyn ObjectStore,
        change: impl FnOnce(&mut Pin),
    ) -> Result<(), ObjectError> {
        let mut pin = self.get();
        change(&mut pin);
        pin.time_ms = now_ms();
        store.put(&self.key, &pin.encode())?;
        let mut refreshed = self
            .refreshed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let gap = refreshed.elapsed();
        if gap.as_millis() >= u128::from(pin.refresh_ms.max(1).saturating_mul(EXPIRY_BEATS)) {
            tracing::warn!(
                pin = %self.key,
                "the reader pin was last refreshed {gap:?} ago: a writer may have taken it for \
                 stale and deleted segments this read-only view needs (their reads fail)"
            );
        }
        *refreshed = std::time::Instant::now();
        *self.pin.lock().unwrap_or_else(PoisonError::into_inner) = pin;
        Ok(())
    }

    /// Deletes the pin (a clean close).
    pub(crate) fn unpin(&self, store: &dyn ObjectStore) -> Result<(), ObjectError> {
        store.delete(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_round_trips_and_bad_ones_are_refused() {
        let pin = Pin {
            holder: "host pid 7".into(),
            checkpoint: 12,
            through: 15,
            time_ms: 1_000_000,
            refresh_ms: 30_000,
        };
        assert_eq!(Pin::decode(&pin.encode()), Ok(pin.clone()));
        assert!(Pin::decode(b"").is_err());
        assert!(Pin::decode(b"CAIRN object volume reader pin 2\n").is_err());
        let text = String::from_utf8(pin.encode()).unwrap();
        assert!(Pin::decode(text.replace("through 15", "through x").as_bytes()).is_err());
        assert!(Pin::decode(text.replace("time_ms", "time").as_bytes()).is_err());
        assert!(Pin::decode(&vec![b'a'; MAX_PIN + 1]).is_err());
        assert!(Pin::decode(&[0xff, 0xfe]).is_err());
        // Fresh for three refresh intervals, by the writer's clock.
        assert!(pin.fresh(1_000_000 + 89_999));
        assert!(!pin.fresh(1_000_000 + 90_000));
        assert!(pin.fresh(0), "a clock behind the reader's");
    }

    /// A store whose deletes take 20 ms and count how many overlap; one
    /// key fails.
    struct Slow {
        inner: cairn_objects::MemStore,
        now: AtomicUsize,
        most: AtomicUsize,
        bad: String,
    }

    impl ObjectStore for Slow {
        fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
            self.inner.put(key, body)
        }
        fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
            self.inner.create(key, body)
        }
        fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
            self.inner.read_at(key, offset, buf)
        }
        fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
            self.inner.get(key)
        }
        fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
            self.inner.head(key)
        }
        fn delete(&self, key: &str) -> Result<(), ObjectError> {
            let now = self.now.fetch_add(1, Relaxed) + 1;
            self.most.fetch_max(now, Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.now.fetch_sub(1, Relaxed);
            if key == self.bad {
                return Err(ObjectError::failed(
                    cairn_objects::Op::Delete,
                    key,
                    "refused",
                    true,
                ));
            }
            self.inner.delete(key)
        }
        fn list(&self, prefix: &str) -> Result<Vec<cairn_objects::ObjectInfo>, ObjectError> {
            self.inner.list(prefix)
        }
        fn describe(&self) -> String {
            "slow".into()
        }
    }

    #[test]
    fn dead_segments_are_deleted_several_at_a_time_and_a_failed_one_waits() {
        let keys = Keys {
            prefix: "v/".into(),
        };
        let store = Slow {
            inner: cairn_objects::MemStore::new(),
            now: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            bad: keys.segment(9, 1),
        };
        let all: Vec<String> = (0..64).map(|s| keys.segment(s, 1)).collect();
        for k in &all {
            store.put(k, b"x").unwrap();
        }
        let deferred = Deferred::default();
        let e = deferred.delete(&store, &keys, all.clone()).unwrap_err();
        assert!(e.to_string().contains("refused"), "{e}");
        let most = store.most.load(Relaxed);
        assert!(most >= 4, "{most} deletes in flight at once");
        // The failed one waits; whatever its worker had not reached too.
        let left = store.inner.list(&keys.segments()).unwrap();
        assert!(left.iter().any(|o| o.key == store.bad));
        assert_eq!(deferred.waiting(), left.len());
        assert!(left.len() < 64, "the others went: {} left", left.len());
        // The next call takes what waits (the store takes it now).
        let store = Slow {
            bad: String::new(),
            ..store
        };
        let swept = deferred.delete(&store, &keys, std::iter::empty()).unwrap();
        assert_eq!(swept.deleted, left.len());
        assert_eq!(deferred.waiting(), 0);
        assert!(store.inner.list(&keys.segments()).unwrap().is_empty());
    }
}
