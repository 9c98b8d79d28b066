//! Cache replacement and admission policies for Cairn.
//!
//! Every policy implements [`Policy`]: pure, I/O-free, keys and sizes only. The
//! simulator (`cairn-sim`) and the engine's block cache (`cairn-store`) run
//! the same objects, so what the simulator predicts is what the engine does.
//!
//! Each policy lives in its own module with a serde `Config` whose fields
//! document their defaults and where the policy comes from; [`PolicyConfig`]
//! names them all and builds any of them. Admission filters ([`admission`]:
//! `always`, `nhit`, `frequency`) decide which misses enter at all;
//! [`AdmissionConfig`] names them and [`Filtered`] puts any policy behind one.
//! Prefetchers ([`prefetch`]: `obl`, `pg`, `mithril`) name units to load ahead of their
//! first access; [`PrefetchConfig`] names them.
//!
//! What this crate is not: a cache of values (see `cairn-store`), or
//! thread-safe (the engine shards policies and locks each shard).
//!
//! Limits: at most `u32::MAX - 1` resident keys per policy instance.

mod access;
pub mod bytes;
mod capacity;
mod config;
mod error;
pub mod hint;
pub mod index;
pub mod list;
mod policy;
#[cfg(test)]
pub(crate) mod testing;

pub mod admission;
pub mod arc;
pub mod beladysize;
pub mod cacheus;
pub mod clock;
pub mod clock2qplus;
pub mod clockpro;
pub mod cost;
pub mod crlfu;
pub mod dual;
pub mod fbr;
pub mod fifo;
pub mod fifobelady;
pub mod fifomerge;
pub mod flashprob;
pub mod freq;
pub mod gbdt;
pub mod gdsf;
pub mod glcache;
pub mod heap;
pub mod hyperbolic;
pub mod lecar;
pub mod lfu;
pub mod lfuda;
pub mod lhd;
pub mod libcachesim;
pub mod lirs;
pub mod lparc;
pub mod lpsfifo;
pub mod lptwoq;
pub mod lrb;
pub mod lru;
pub mod lrubelady;
pub mod lruk;
pub mod lruprob;
pub mod mq;
pub mod mru;
pub mod ons;
pub mod opt;
pub mod prefetch;
pub mod qdlp;
mod queues;
pub mod random;
pub mod randomlru;
pub mod randomtwo;
pub mod residents;
pub mod rng;
pub mod s3fifo;
pub mod s3fifod;
pub mod s3lru;
pub mod sfifo;
pub mod sieve;
pub mod sievebelady;
pub mod size;
pub mod slru;
pub mod srlru;
pub mod threelcache;
pub mod tinylfu;
pub mod twoq;

pub use access::{Access, NEVER, Op};
pub use admission::{Admission, AdmissionConfig, Filtered, Occupancy};
pub use bytes::{Bytes, ParseBytesError, format_bytes, parse_bytes};
pub use capacity::Capacity;
pub use config::PolicyConfig;
pub use error::ConfigError;
pub use policy::{Ahead, FileState, Policy};
pub use prefetch::{PrefetchConfig, Prefetcher};

/// The hash map every policy uses for its key index: hashbrown with foldhash.
pub type KeyMap<V> = hashbrown::HashMap<u64, V>;

/// A fixed 64-bit mixer (the splitmix64 finaliser): a hash of a key that is
/// the same on every machine and in every run (the `bloom` filter's hashes,
/// the simulator's SHARDS sampling and device maps).
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
