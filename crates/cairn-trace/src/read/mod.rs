//! Streaming trace readers: each yields [`Request`]s in constant memory.

pub mod oracle_general;

use crate::{Request, Result};

/// A streaming source of requests.
pub type Reader = Box<dyn Iterator<Item = Result<Request>> + Send>;
