//! Graceful shutdown: stop accepting, stop reading new requests, let in-flight
//! requests finish and reply, then flush.
//!
//! Every live connection registers a duplicate of its socket's descriptor.
//! [`Shutdown::trigger`] sets a flag the accept loop polls and shuts down the
//! *read* side of every registered socket: the thread reading sees
//! end-of-file after the requests already received, the connection's threads
//! finish those and send their replies (the write side stays open), and the
//! connection ends.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// A cloneable handle that asks a server to shut down gracefully.
#[derive(Clone, Default)]
pub struct Shutdown {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    requested: AtomicBool,
    connections: Mutex<Registry>,
    idle: Condvar,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    sockets: HashMap<u64, OwnedFd>,
}

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown")
            .field("requested", &self.is_requested())
            .field("connections", &self.connections())
            .finish()
    }
}

impl Shutdown {
    /// A handle with no shutdown requested.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the server to stop: idempotent, callable from any thread.
    pub fn trigger(&self) {
        self.inner.requested.store(true, Ordering::SeqCst);
        let registry = self.lock();
        for socket in registry.sockets.values() {
            // ENOTCONN/ENOTSOCK (a pipe in stdio mode) are fine: nothing to stop.
            let _ = rustix::net::shutdown(socket, rustix::net::Shutdown::Read);
        }
    }

    /// Whether [`Shutdown::trigger`] was called.
    pub fn is_requested(&self) -> bool {
        self.inner.requested.load(Ordering::SeqCst)
    }

    /// Live connections.
    pub fn connections(&self) -> usize {
        self.lock().sockets.len()
    }

    /// Register a connection's socket; `None` if shutdown is already under way
    /// (the caller closes the connection) or the descriptor cannot be duplicated.
    pub(crate) fn register(&self, socket: impl AsFd) -> Option<Registration> {
        let duplicate = rustix::io::fcntl_dupfd_cloexec(socket, 0).ok()?;
        let mut registry = self.lock();
        if self.is_requested() {
            return None;
        }
        let id = registry.next_id;
        registry.next_id += 1;
        registry.sockets.insert(id, duplicate);
        Some(Registration {
            shutdown: self.clone(),
            id,
        })
    }

    /// Block until no connection is registered.
    pub(crate) fn wait_idle(&self) {
        let mut registry = self.lock();
        while !registry.sockets.is_empty() {
            registry = self
                .inner
                .idle
                .wait(registry)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.inner
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A live connection; dropping it unregisters the connection.
pub(crate) struct Registration {
    shutdown: Shutdown,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = self.shutdown.lock();
        registry.sockets.remove(&self.id);
        if registry.sockets.is_empty() {
            self.shutdown.inner.idle.notify_all();
        }
    }
}
