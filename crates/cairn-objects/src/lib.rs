//! Object stores behind one blocking trait, [`ObjectStore`], so the object
//! tier (segments and checkpoints as immutable objects in an existing
//! distributed store, `docs/architecture.md` "Object store") is written once
//! against it.
//!
//! - [`S3Store`]: any S3-compatible store (Ceph RGW, MinIO, SeaweedFS, AWS):
//!   path-style URLs, SigV4, a custom endpoint, connections kept alive.
//! - [`RadosStore`]: a Ceph pool through librados's C API, loaded at run
//!   time (no build or run dependency on Ceph until one is made).
//! - [`MemStore`]: in memory, for tests and simulations.
//! - [`FaultyStore`]: wraps any store and fails the N-th mutation, loses its
//!   reply after it took effect, or crashes there (every later mutation is
//!   refused), or completes mutations out of order and crashes among them
//!   ([`Reorder`]), for crash-point enumeration.
//! - [`Retrying`]: wraps any store and retries what the store said is
//!   retryable, with capped exponential backoff and full jitter, up to a
//!   deadline, logging the outage and its end.
//! - [`Lease`]: one writer per volume, by conditional create, with a
//!   generation that fences a writer that lost it.
//! - [`Metered`]: wraps any store and counts requests and bytes (the object
//!   tier's write amplification and requests per GiB).
//!
//! Everything is blocking: each call is one request (a listing may be
//! several), made on the calling thread. Concurrency is the caller's (several
//! threads on one store, which is `Sync`).

mod error;
mod faulty;
pub mod lease;
mod mem;
mod metered;
pub mod rados;
mod retry;
mod s3;
pub mod testing;

pub use error::{ObjectError, Op};
pub use faulty::{Fault, FaultyStore, Reorder};
pub use lease::{Lease, LeaseError, LeaseRecord, LeaseState};
pub use mem::MemStore;
pub use metered::{Metered, StoreCounts};
pub use rados::{RadosConfig, RadosStore};
pub use retry::{RetryPolicy, Retrying};
pub use s3::{S3Config, S3Store};

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its key (the whole key, prefix included).
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A store of immutable objects named by keys: what the object tier needs of
/// S3 or RADOS, and nothing more.
///
/// Keys are UTF-8 without a leading `/`; objects are written whole and never
/// changed in place (an object is replaced only by a `put` of the same key,
/// which the object tier does only for objects it alone names).
pub trait ObjectStore: Send + Sync {
    /// Stores `body` under `key`, replacing any object of that key.
    fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError>;

    /// Stores `body` under `key` only if no object has that key (S3's
    /// `If-None-Match: *`, RADOS's exclusive create); otherwise
    /// [`ObjectError::Exists`] and nothing changes. The primitive of leases
    /// and fencing: of two creates of one key, exactly one succeeds.
    fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError>;

    /// Reads bytes `offset .. offset + buf.len()` of `key` into the front of
    /// `buf`; returns how many it read: fewer than `buf.len()` only at the
    /// object's end, 0 at or past it. [`ObjectError::NotFound`] if there is
    /// no such object.
    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError>;

    /// The whole object.
    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError>;

    /// The object's size, or `None` if there is no such object.
    fn head(&self, key: &str) -> Result<Option<u64>, ObjectError>;

    /// Deletes `key`. Deleting a key that does not exist succeeds (S3's
    /// semantics), so a retried delete is harmless.
    fn delete(&self, key: &str) -> Result<(), ObjectError>;

    /// Every object whose key starts with `prefix`, in key order (byte order
    /// of the UTF-8 keys).
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError>;

    /// What the store is, for messages: `s3 http://127.0.0.1:7480/bucket`.
    fn describe(&self) -> String;
}

/// A reference, an `Arc` or a `Box` of a store is a store.
macro_rules! forward {
    ($($ty:ty),*) => {$(
        impl<S: ObjectStore + ?Sized> ObjectStore for $ty {
            fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
                (**self).put(key, body)
            }
            fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
                (**self).create(key, body)
            }
            fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
                (**self).read_at(key, offset, buf)
            }
            fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
                (**self).get(key)
            }
            fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
                (**self).head(key)
            }
            fn delete(&self, key: &str) -> Result<(), ObjectError> {
                (**self).delete(key)
            }
            fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
                (**self).list(prefix)
            }
            fn describe(&self) -> String {
                (**self).describe()
            }
        }
    )*};
}

forward!(&S, std::sync::Arc<S>, Box<S>);
