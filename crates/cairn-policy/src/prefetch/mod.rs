//! Prefetchers: which units to load before anybody asks for them.
//!
//! A replacement policy decides what leaves and an admission filter what
//! enters on a miss; a prefetcher watches the stream of demand accesses and
//! names units to load *now*, ahead of their first access. The same objects
//! run in the simulator (`cairn sim --prefetch`) and in the engine's block
//! cache (a volume's `prefetch = "obl"`), so what one predicts the other does.
//!
//! Prefetchers, one file each:
//!
//! - [`obl`]: one-block lookahead after `k` sequential accesses (Smith 1978;
//!   libCacheSim's `OBL`).
//! - [`pg`]: the probability graph of Griffioen & Appleton (1994): units that
//!   followed a unit within a window, often enough, are loaded with it
//!   (libCacheSim's `PG`).
//! - [`mithril`]: mined associations between units that are missed close
//!   together, again and again (Yang et al., `SoCC` 2017; libCacheSim's
//!   `Mithril`).
//! - [`readahead`]: papers/001's sequential readahead of a window of
//!   (servers × stripes) blocks per file; not a [`Prefetcher`], since it
//!   needs each block's file and the file's length (the file gateway and
//!   `cairn reproduce dual` call it).
//!
//! # Who calls what
//! For each demand access the cache looks the unit up and serves it (a miss
//! loads and admits it as usual), then calls [`Prefetcher::access`] with the
//! unit and whether it hit. The prefetcher appends the units it wants loaded;
//! the cache skips those already resident and loads the others as units of
//! the triggering access's size, admitting each into its policy as a miss
//! would (so they can evict). This is libCacheSim's order (`find`, `insert`,
//! then `prefetch`), so miss counts agree with it. (libCacheSim also tells
//! its prefetchers of evictions: Mithril's default gives an evicted, unused
//! prefetched unit a second chance there; see [`mithril`].)
//!
//! Prefetchers are pure (no I/O, keys only), not thread-safe (the engine
//! locks the one it has), and allocate only as their history grows.

mod config;
pub mod mithril;
pub mod obl;
pub mod pg;
pub mod readahead;

pub use config::PrefetchConfig;
pub use readahead::Readahead;

/// A prefetcher: after each demand access, which units to load now?
pub trait Prefetcher: Send {
    /// Short name (`obl`, `pg`, `mithril`).
    fn name(&self) -> &'static str;

    /// Sees one demand access to `key` after the cache served it (`hit`:
    /// whether it was resident), and appends to `out` the units to load now,
    /// in the order they should enter the cache. Never clears `out`.
    fn access(&mut self, key: u64, hit: bool, out: &mut Vec<u64>);
}
