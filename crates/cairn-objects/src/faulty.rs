//! [`FaultyStore`]: a store that fails where a test tells it to.
//!
//! Mutations (PUT, create, DELETE) are numbered from 0 in the order they
//! reach the store. A crash-point enumeration runs a workload once on a
//! clean store to count its mutations, then once for every N with a fault at
//! the N-th, and checks what recovery finds each time.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// Wraps a store and injects a [`Fault`], or an outage while
/// [`set_down`](FaultyStore::set_down) says so.
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    fault: Mutex<Option<Fault>>,
    mutations: AtomicU64,
    crashed: AtomicBool,
    down: AtomicBool,
}

impl<S: ObjectStore> FaultyStore<S> {
    /// Wraps `inner`, with no fault.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            fault: Mutex::new(None),
            mutations: AtomicU64::new(0),
            crashed: AtomicBool::new(false),
            down: AtomicBool::new(false),
        }
    }

    /// Arms `fault` (replacing any other), counting mutations from now on.
    pub fn arm(&self, fault: Fault) {
        *self
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fault);
        self.mutations.store(0, Ordering::SeqCst);
        self.crashed.store(false, Ordering::SeqCst);
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
        let fault = *self
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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
