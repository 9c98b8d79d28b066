//! Dual cache: a front-part cache (FPC) for the first blocks of every active
//! file and a residual-part cache (RPC) for the rest (papers/001, Jang, Kim &
//! Seo, "Dual-Cache Scheme in Parallel File System", §4).
//!
//! Files are mostly read from the start, sequentially, so the first blocks of
//! a file (its *preface*) are worth more than the rest. The FPC, a fixed share
//! of the cache, holds the blocks with [`Access::block`] below the current
//! preface size; every other block goes to the RPC, which is any policy of
//! this crate (LRU by default). The FPC evicts at file granularity: when it
//! needs room it drops the whole preface of the least recently used file
//! (§4.2), which adapts faster and costs less than block-by-block eviction.
//!
//! # Preface size
//! With total cache `S_tc`, FPC size `S_fp`, `N_f` active files of total
//! size `S_lf`, the paper sets `P_s = S_tc / S_lf` (chance a file is cached
//! by a single cache), `P_pof = α·P_s` (chance its preface is in the FPC) and
//! so `S_pof = S_fp / (α·P_s·N_f)`, clamped to `[min, max]`. We evaluate it
//! in blocks: `preface = ⌊S_fp · B / (α · S_tc · N_f)⌋` where `B` is the
//! active files' size in blocks (`S_lf` in capacity units divided by the mean
//! block charge cancels out). Note that this equals
//! `(S_fp / S_tc) · (mean file size in blocks) / α`: the paper's formula
//! shrinks the preface when files get smaller, not when more of them are
//! active. With no active file the preface is `max`.
//!
//! # Active files (our reading; the paper counts open files)
//! A policy sees no open/close, so a file is *active* from its first admitted
//! block until it is forgotten. Its size is estimated as the largest block
//! index seen plus one. Files are kept in LRU order of their last access (any
//! block, FPC or RPC: a file being streamed keeps its preface for the next
//! reader). A file is forgotten, and its preface evicted, when the FPC needs
//! room and it is the least recently used file, or when more than
//! `max_files` files are active. A hit on a block of a forgotten file leaves
//! it forgotten; the next admission of one of its blocks re-activates it.
//!
//! # Edges
//! - A block admitted while the preface was larger stays in the FPC after
//!   the preface shrinks, until its file's preface is evicted.
//! - If the FPC can only make room by evicting the preface of the file being
//!   admitted to (its preface outgrew the FPC), the block goes to the RPC.
//! - A block too large for the FPC goes to the RPC.
//! - Prefetch (the paper's multiples of servers × block size) is the
//!   simulator's and engine's business; [`Dual::preface_blocks`] tells them
//!   the current preface.
//!
//! # Cost
//! O(1) per access plus the inner policy's cost; evicting a preface is
//! O(its blocks). Slabs and maps only grow with resident keys and files.

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, Slab};
use crate::{Access, Capacity, ConfigError, FileState, KeyMap, Policy, PolicyConfig};

/// Configuration of [`Dual`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DualConfig {
    /// The RPC's policy, by name (any of [`PolicyConfig::NAMES`] but
    /// `dual`), built with its default configuration. Default `"lru"`.
    pub inner: String,
    /// Share of the capacity given to the FPC, in `(0, 1)`. Default 0.1:
    /// papers/001 §5.3 uses a 1 MiB FPC in a 10 MiB cache.
    pub fpc_fraction: f64,
    /// α: how much likelier a preface is to be cached than the rest of its
    /// file, > 0. Default 20, best in papers/001 §5.3 (Fig. 5).
    pub alpha: f64,
    /// Smallest preface, in blocks. Default 1 (ours: the paper bounds the
    /// preface from below without a number).
    pub preface_min_blocks: u64,
    /// Largest preface, in blocks, >= the minimum. Default 10 (papers/001
    /// §5.3).
    pub preface_max_blocks: u64,
    /// Most files tracked as active at once, >= 1. Default 1024 (ours; the
    /// paper's workloads have 20–40 active files).
    pub max_files: usize,
}

impl Default for DualConfig {
    fn default() -> Self {
        Self {
            inner: "lru".to_owned(),
            fpc_fraction: 0.1,
            alpha: 20.0,
            preface_min_blocks: 1,
            preface_max_blocks: 10,
            max_files: 1024,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct File {
    object: u64,
    /// Largest block index seen + 1.
    blocks: u64,
    /// This file's blocks in the FPC.
    preface: List,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    key: u64,
    charge: u64,
    file: Index,
}

/// The dual cache: per-file prefaces in the FPC, the rest in any policy.
pub struct Dual {
    capacity: Capacity,
    fpc_limit: u64,
    alpha: f64,
    preface_min: u64,
    preface_max: u64,
    max_files: usize,
    rpc: Box<dyn Policy>,
    fpc_used: u64,
    fpc_map: KeyMap<Index>,
    blocks: Slab<Block>,
    file_map: KeyMap<Index>,
    files: Slab<File>,
    /// Active files, most recently accessed first.
    file_lru: List,
    /// Sum of the active files' sizes, in blocks. `u128`: without file
    /// information a block index is the key itself, up to `u64::MAX`.
    file_blocks: u128,
}

impl std::fmt::Debug for Dual {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dual")
            .field("capacity", &self.capacity)
            .field("fpc_limit", &self.fpc_limit)
            .field("fpc_used", &self.fpc_used)
            .field("rpc", &self.rpc.name())
            .field("files", &self.file_map.len())
            .finish_non_exhaustive()
    }
}

impl Dual {
    /// An empty dual cache.
    pub fn new(capacity: Capacity, config: &DualConfig) -> Result<Self, ConfigError> {
        let out_of_range = |parameter, value: String, expected| ConfigError::OutOfRange {
            policy: "dual",
            parameter,
            value,
            expected,
        };
        if !(config.fpc_fraction > 0.0 && config.fpc_fraction < 1.0) {
            let value = config.fpc_fraction.to_string();
            return Err(out_of_range("fpc_fraction", value, "0 < fpc_fraction < 1"));
        }
        if !(config.alpha > 0.0 && config.alpha.is_finite()) {
            return Err(out_of_range(
                "alpha",
                config.alpha.to_string(),
                "finite, > 0",
            ));
        }
        if config.preface_max_blocks < config.preface_min_blocks {
            let value = config.preface_max_blocks.to_string();
            return Err(out_of_range(
                "preface_max_blocks",
                value,
                ">= preface_min_blocks",
            ));
        }
        if config.max_files == 0 {
            return Err(out_of_range("max_files", "0".to_owned(), "at least 1"));
        }
        let inner = match PolicyConfig::default_for(&config.inner) {
            Some(PolicyConfig::Dual(_)) | None => {
                let expected = "a policy name from PolicyConfig::NAMES other than dual";
                return Err(out_of_range("inner", config.inner.clone(), expected));
            }
            Some(inner) => inner,
        };
        let fpc_limit = capacity.fraction(config.fpc_fraction).limit();
        let rpc = inner.build(capacity.with_limit(capacity.limit() - fpc_limit))?;
        Ok(Self {
            capacity,
            fpc_limit,
            alpha: config.alpha,
            preface_min: config.preface_min_blocks,
            preface_max: config.preface_max_blocks,
            max_files: config.max_files,
            rpc,
            fpc_used: 0,
            fpc_map: KeyMap::default(),
            blocks: Slab::new(),
            file_map: KeyMap::default(),
            files: Slab::new(),
            file_lru: List::new(),
            file_blocks: 0,
        })
    }

    /// The current preface size, in blocks: blocks with a smaller index are
    /// admitted to the FPC.
    pub fn preface_blocks(&self) -> u64 {
        let files = self.file_map.len() as f64;
        let denominator = self.alpha * self.capacity.limit() as f64 * files;
        if denominator <= 0.0 {
            return self.preface_max;
        }
        let preface = (self.fpc_limit as f64 * self.file_blocks as f64 / denominator) as u64;
        preface.clamp(self.preface_min, self.preface_max)
    }

    /// Number of files tracked as active.
    pub fn active_files(&self) -> usize {
        self.file_map.len()
    }

    /// Whether `key` is resident in the FPC (rather than the RPC).
    pub fn in_fpc(&self, key: u64) -> bool {
        self.fpc_map.contains_key(&key)
    }

    /// Occupancy of the FPC, in the capacity's unit.
    pub fn fpc_used(&self) -> u64 {
        self.fpc_used
    }

    /// Marks the file of an access as most recently used and grows its size
    /// estimate. Returns the file, if it is active.
    fn touch_file(&mut self, access: &Access) -> Option<Index> {
        let &file = self.file_map.get(&access.object)?;
        self.files.move_to_front(&mut self.file_lru, file);
        let record = self.files.get_mut(file);
        let blocks = access.block.saturating_add(1);
        if blocks > record.blocks {
            self.file_blocks += u128::from(blocks - record.blocks);
            record.blocks = blocks;
        }
        Some(file)
    }

    /// Forgets a file, evicting its preface.
    fn forget_file(&mut self, file: Index, victims: &mut Vec<u64>) {
        let mut preface = self.files.get(file).preface;
        while let Some(block) = self.blocks.pop_back(&mut preface) {
            let Block { key, charge, .. } = *self.blocks.remove(block);
            self.fpc_map.remove(&key);
            self.fpc_used -= charge;
            victims.push(key);
        }
        self.files.unlink(&mut self.file_lru, file);
        let record = *self.files.remove(file);
        self.file_map.remove(&record.object);
        self.file_blocks -= u128::from(record.blocks);
    }

    /// Activates the file of an access (it must not be active), forgetting
    /// the least recently used file if there are too many.
    fn activate_file(&mut self, access: &Access, victims: &mut Vec<u64>) -> Index {
        if self.file_map.len() >= self.max_files
            && let Some(oldest) = self.file_lru.back()
        {
            self.forget_file(oldest, victims);
        }
        let blocks = access.block.saturating_add(1);
        let file = self.files.insert(File {
            object: access.object,
            blocks,
            preface: List::new(),
        });
        self.files.push_front(&mut self.file_lru, file);
        self.file_map.insert(access.object, file);
        self.file_blocks += u128::from(blocks);
        file
    }

    /// Makes room for `charge` in the FPC by forgetting least recently used
    /// files other than `keep`. Returns whether it fits.
    fn make_fpc_room(&mut self, charge: u64, keep: Index, victims: &mut Vec<u64>) -> bool {
        while self.fpc_used + charge > self.fpc_limit {
            let Some(oldest) = self.file_lru.back() else {
                return false;
            };
            if oldest == keep {
                return false;
            }
            self.forget_file(oldest, victims);
        }
        true
    }
}

impl Policy for Dual {
    fn name(&self) -> &'static str {
        "dual"
    }

    fn file_state(&self) -> Option<FileState> {
        Some(FileState {
            preface_blocks: self.preface_blocks(),
            active_files: self.active_files() as u64,
        })
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let hit = self.fpc_map.contains_key(&access.key) || self.rpc.lookup(access);
        if hit {
            self.touch_file(access);
        }
        hit
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        let file = match self.touch_file(access) {
            Some(file) => file,
            None => self.activate_file(access, victims),
        };
        if access.block < self.preface_blocks()
            && charge <= self.fpc_limit
            && self.make_fpc_room(charge, file, victims)
        {
            let block = self.blocks.insert(Block {
                key: access.key,
                charge,
                file,
            });
            self.blocks
                .push_front(&mut self.files.get_mut(file).preface, block);
            self.fpc_map.insert(access.key, block);
            self.fpc_used += charge;
            return true;
        }
        self.rpc.admit(access, victims)
    }

    fn take_held_victims(&mut self, victims: &mut Vec<u64>) {
        self.rpc.take_held_victims(victims);
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(block) = self.fpc_map.remove(&key) else {
            return self.rpc.remove(key);
        };
        let Block { charge, file, .. } = *self.blocks.get(block);
        self.blocks
            .unlink(&mut self.files.get_mut(file).preface, block);
        self.blocks.remove(block);
        self.fpc_used -= charge;
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.fpc_map.contains_key(&key) || self.rpc.contains(key)
    }

    fn len(&self) -> usize {
        self.fpc_map.len() + self.rpc.len()
    }

    fn used(&self) -> u64 {
        self.fpc_used + self.rpc.used()
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lru::{Lru, LruConfig};
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Accesses of `(object, block)` with unit size; key = object × 1000 + block.
    fn file_trace(items: &[(u64, u64)]) -> Vec<Access> {
        let keys: Vec<u64> = items.iter().map(|&(o, b)| o * 1000 + b).collect();
        let mut trace = testing::keys(&keys);
        for (access, &(object, block)) in trace.iter_mut().zip(items) {
            access.object = object;
            access.block = block;
        }
        trace
    }

    fn run(policy: &mut Dual, trace: &[Access]) -> Vec<u64> {
        let mut victims = vec![];
        for access in trace {
            policy.access(access, &mut victims);
        }
        victims
    }

    fn pinned(capacity: Capacity, preface: u64) -> Dual {
        let config = DualConfig {
            preface_min_blocks: preface,
            preface_max_blocks: preface,
            ..DualConfig::default()
        };
        Dual::new(capacity, &config).unwrap()
    }

    #[test]
    fn fpc_evicts_whole_prefaces_of_the_least_recent_file() {
        // FPC = 10 of 100; preface pinned at 4 blocks.
        let mut dual = pinned(Capacity::Objects(100), 4);
        let trace = file_trace(&[(1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (2, 0), (2, 1)]);
        assert!(run(&mut dual, &trace).is_empty());
        assert!(dual.in_fpc(1000) && dual.in_fpc(1003) && !dual.in_fpc(1004));
        assert!(dual.contains(1004), "block 4 of file 1 is in the RPC");
        assert_eq!(dual.fpc_used(), 6);
        // File 1's RPC block is touched: file 2 becomes the LRU file.
        let trace = file_trace(&[(2, 2), (2, 3), (1, 4), (3, 0), (3, 1)]);
        let victims = run(&mut dual, &trace);
        assert_eq!(dual.fpc_used(), 10);
        assert!(victims.is_empty());
        let victims = run(&mut dual, &file_trace(&[(3, 2)]));
        let mut sorted = victims.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [2000, 2001, 2002, 2003], "all of file 2's preface");
        assert_eq!(dual.active_files(), 2, "file 2 is forgotten");
        assert!(dual.in_fpc(3002) && dual.in_fpc(1000));
    }

    #[test]
    fn preface_follows_the_formula_and_is_clamped() {
        let config = |alpha, min, max| DualConfig {
            alpha,
            preface_min_blocks: min,
            preface_max_blocks: max,
            ..DualConfig::default()
        };
        // S_tc = 1000, S_fp = 100. One file of 40 blocks, α = 1:
        // 100 · 40 / (1 · 1000 · 1) = 4.
        let mut dual = Dual::new(Capacity::Objects(1000), &config(1.0, 1, 10)).unwrap();
        assert_eq!(dual.preface_blocks(), 10, "no active file: the maximum");
        run(&mut dual, &file_trace(&[(1, 39)]));
        assert_eq!(dual.preface_blocks(), 4);
        // Another file of 40 blocks: the mean file size, hence the preface,
        // stays the same.
        run(&mut dual, &file_trace(&[(2, 39)]));
        assert_eq!(dual.preface_blocks(), 4);
        // What a server's metrics read, through the trait.
        let state = (&dual as &dyn Policy).file_state();
        assert_eq!(
            state,
            Some(FileState {
                preface_blocks: 4,
                active_files: 2
            })
        );
        // α = 20 (the paper's): 0.2 → clamped up to the minimum.
        let mut dual = Dual::new(Capacity::Objects(1000), &config(20.0, 1, 10)).unwrap();
        run(&mut dual, &file_trace(&[(1, 39)]));
        assert_eq!(dual.preface_blocks(), 1);
        // A 2000-block file with α = 1: 200 → clamped down to the maximum.
        let mut dual = Dual::new(Capacity::Objects(1000), &config(1.0, 1, 10)).unwrap();
        run(&mut dual, &file_trace(&[(1, 1999)]));
        assert_eq!(dual.preface_blocks(), 10);
    }

    #[test]
    fn own_preface_is_never_evicted_for_itself() {
        // FPC = 2 of 20, preface 4: the third preface block goes to the RPC.
        let mut dual = pinned(Capacity::Objects(20), 4);
        let victims = run(&mut dual, &file_trace(&[(1, 0), (1, 1), (1, 2)]));
        assert!(victims.is_empty());
        assert!(dual.in_fpc(1000) && dual.in_fpc(1001) && !dual.in_fpc(1002));
        assert!(dual.contains(1002));
    }

    #[test]
    fn max_files_bounds_the_active_files() {
        let config = DualConfig {
            max_files: 2,
            ..DualConfig::default()
        };
        let mut dual = Dual::new(Capacity::Objects(100), &config).unwrap();
        let victims = run(&mut dual, &file_trace(&[(1, 0), (2, 0), (3, 0)]));
        assert_eq!(victims, [1000], "file 1 is forgotten with its preface");
        assert_eq!(dual.active_files(), 2);
    }

    #[test]
    fn plain_accesses_without_file_information_are_safe() {
        // `Access::read` puts every key in object 0 with block = key.
        let mut dual = Dual::new(Capacity::Objects(100), &DualConfig::default()).unwrap();
        let mut victims = vec![];
        for (time, key) in [u64::MAX, 0, u64::MAX - 1, 5, 0].into_iter().enumerate() {
            dual.access(&Access::read(key, 1, time as u64), &mut victims);
        }
        assert_eq!(dual.active_files(), 1);
        assert_eq!(dual.preface_blocks(), 10, "huge estimate: clamped to max");
        assert!(dual.in_fpc(0) && dual.in_fpc(5));
    }

    #[test]
    fn rejects_bad_config() {
        let bad = [
            DualConfig {
                inner: "nope".into(),
                ..DualConfig::default()
            },
            DualConfig {
                inner: "dual".into(),
                ..DualConfig::default()
            },
            DualConfig {
                fpc_fraction: 1.0,
                ..DualConfig::default()
            },
            DualConfig {
                alpha: 0.0,
                ..DualConfig::default()
            },
            DualConfig {
                preface_min_blocks: 3,
                preface_max_blocks: 2,
                ..DualConfig::default()
            },
            DualConfig {
                max_files: 0,
                ..DualConfig::default()
            },
        ];
        for config in bad {
            assert!(
                Dual::new(Capacity::Objects(100), &config).is_err(),
                "{config:?}"
            );
        }
    }

    /// (object, size in blocks, FPC (key, charge) pairs).
    type NaiveFile = (u64, u64, Vec<(u64, u64)>);

    /// Naive dual cache: files in a vector (most recent first) holding their
    /// FPC keys; the RPC is this crate's LRU, tested on its own.
    struct NaiveDual {
        capacity: Capacity,
        fpc_limit: u64,
        config: DualConfig,
        /// Most recent first.
        files: Vec<NaiveFile>,
        rpc: Lru,
    }

    impl NaiveDual {
        fn new(capacity: Capacity, config: &DualConfig) -> Self {
            let fpc_limit = capacity.fraction(config.fpc_fraction).limit();
            let rpc_capacity = capacity.with_limit(capacity.limit() - fpc_limit);
            Self {
                capacity,
                fpc_limit,
                config: config.clone(),
                files: vec![],
                rpc: Lru::new(rpc_capacity, &LruConfig::default()).unwrap(),
            }
        }

        fn preface(&self) -> u64 {
            let blocks: u64 = self.files.iter().map(|f| f.1).sum();
            let d = self.config.alpha * self.capacity.limit() as f64 * self.files.len() as f64;
            if d <= 0.0 {
                return self.config.preface_max_blocks;
            }
            ((self.fpc_limit as f64 * blocks as f64 / d) as u64).clamp(
                self.config.preface_min_blocks,
                self.config.preface_max_blocks,
            )
        }

        fn fpc_used(&self) -> u64 {
            self.files.iter().flat_map(|f| &f.2).map(|b| b.1).sum()
        }

        fn touch(&mut self, access: &Access) -> bool {
            let Some(at) = self.files.iter().position(|f| f.0 == access.object) else {
                return false;
            };
            let mut file = self.files.remove(at);
            file.1 = file.1.max(access.block + 1);
            self.files.insert(0, file);
            true
        }
    }

    impl Reference for NaiveDual {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let in_fpc = self
                .files
                .iter()
                .any(|f| f.2.iter().any(|b| b.0 == access.key));
            if in_fpc || self.rpc.lookup(access) {
                self.touch(access);
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            if !self.touch(access) {
                if self.files.len() >= self.config.max_files {
                    let file = self.files.pop().unwrap();
                    victims.extend(file.2.iter().map(|b| b.0));
                }
                self.files
                    .insert(0, (access.object, access.block + 1, vec![]));
            }
            let mut to_fpc = access.block < self.preface() && charge <= self.fpc_limit;
            while to_fpc && self.fpc_used() + charge > self.fpc_limit {
                if self.files.len() == 1 {
                    to_fpc = false;
                } else {
                    let file = self.files.pop().unwrap();
                    victims.extend(file.2.iter().map(|b| b.0));
                }
            }
            if to_fpc {
                self.files[0].2.push((access.key, charge));
            } else {
                self.rpc.admit(access, &mut victims);
            }
            (false, victims)
        }
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(60, 400, 5),
            cap in 1u64..40,
            bytes: bool,
            alpha in prop::sample::select(vec![0.5, 1.0, 20.0]),
            max_files in 1usize..5,
        ) {
            // Keys map to files of 8 blocks.
            let trace: Vec<Access> = trace
                .into_iter()
                .map(|mut a| {
                    a.object = a.key / 8;
                    a.block = a.key % 8;
                    a
                })
                .collect();
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = DualConfig { alpha, max_files, preface_max_blocks: 4, fpc_fraction: 0.3, ..DualConfig::default() };
            let mut policy = Dual::new(capacity, &config).unwrap();
            let mut naive = NaiveDual::new(capacity, &config);
            testing::assert_matches_reference(&mut policy, &mut naive, &trace);
            testing::replay_checked(&mut Dual::new(capacity, &config).unwrap(), &trace);
        }

        #[test]
        fn any_inner_policy_keeps_the_invariants(
            trace in testing::trace_strategy(60, 300, 5),
            cap in 1u64..40,
            bytes: bool,
            inner in prop::sample::select(PolicyConfig::NAMES.iter().copied().filter(|&n| n != "dual").collect::<Vec<_>>()),
        ) {
            let trace: Vec<Access> = trace
                .into_iter()
                .map(|mut a| {
                    a.object = a.key / 8;
                    a.block = a.key % 8;
                    a
                })
                .collect();
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = DualConfig { inner: inner.to_owned(), fpc_fraction: 0.3, ..DualConfig::default() };
            // Inner policies may reject tiny capacities; those are not ours to test.
            if let Ok(mut policy) = Dual::new(capacity, &config) {
                testing::replay_checked(&mut policy, &trace);
            }
        }
    }
}
