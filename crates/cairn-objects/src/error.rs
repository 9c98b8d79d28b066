//! [`ObjectError`]: what a store's answer means to the caller, retryable or not.

use std::fmt;
use std::time::Duration;

/// The request an error belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// [`ObjectStore::put`](crate::ObjectStore::put).
    Put,
    /// [`ObjectStore::create`](crate::ObjectStore::create).
    Create,
    /// [`ObjectStore::read_at`](crate::ObjectStore::read_at) and
    /// [`ObjectStore::get`](crate::ObjectStore::get).
    Get,
    /// [`ObjectStore::head`](crate::ObjectStore::head).
    Head,
    /// [`ObjectStore::delete`](crate::ObjectStore::delete).
    Delete,
    /// [`ObjectStore::list`](crate::ObjectStore::list).
    List,
    /// Reaching the store before any request (a RADOS client's connection
    /// to its cluster and pool).
    Connect,
}

impl Op {
    /// Whether the request changes the store.
    pub fn mutates(self) -> bool {
        matches!(self, Self::Put | Self::Create | Self::Delete)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Put => "PUT",
            Self::Create => "PUT (create)",
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Delete => "DELETE",
            Self::List => "LIST",
            Self::Connect => "CONNECT",
        })
    }
}

/// An object store's refusal or failure.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// No object has the key.
    #[error("{key}: no such object")]
    NotFound {
        /// The key asked for.
        key: String,
    },
    /// A [`create`](crate::ObjectStore::create) found the key taken.
    #[error("{key}: an object of that key already exists")]
    Exists {
        /// The key asked for.
        key: String,
    },
    /// The request failed. `retryable`: the same request may succeed later
    /// (a timeout, a refused connection, HTTP 500/503 SlowDown); otherwise
    /// it will not (bad credentials, no such bucket, a malformed answer).
    #[error("{op} {key}: {detail}{}", if *retryable { " (retryable)" } else { "" })]
    Failed {
        /// The request.
        op: Op,
        /// The key (or prefix) it named.
        key: String,
        /// What the store or the transport said.
        detail: String,
        /// Whether repeating the request may succeed.
        retryable: bool,
    },
    /// [`Retrying`](crate::Retrying) stopped at its deadline.
    #[error("{op} {key}: gave up after {attempts} attempts in {:.1} s; last: {last}", elapsed.as_secs_f64())]
    GaveUp {
        /// The request.
        op: Op,
        /// The key (or prefix) it named.
        key: String,
        /// How many times it was sent.
        attempts: u32,
        /// From the first attempt to giving up.
        elapsed: Duration,
        /// The last attempt's error.
        last: Box<ObjectError>,
    },
}

impl ObjectError {
    /// Whether repeating the request may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Failed {
                retryable: true,
                ..
            }
        )
    }

    /// A failure of `op` on `key`.
    pub fn failed(op: Op, key: &str, detail: impl Into<String>, retryable: bool) -> Self {
        Self::Failed {
            op,
            key: key.to_owned(),
            detail: detail.into(),
            retryable,
        }
    }
}
