//! The log-structured logical disk of papers/003 (issue 3).
//!
//! Built so far: [`format`], the on-disk structures (superblock, checkpoint
//! slots with the block address and segment usage tables, segment summaries)
//! as pure, checksummed encode/decode functions. The write path (NV cache,
//! segment building, partial segments), roll-forward, the cleaner and the
//! crash-point tests over [`crate::device::FaultyDevice`] come next, on these
//! structures.

pub mod format;
