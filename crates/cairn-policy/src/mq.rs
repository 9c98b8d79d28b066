//! MQ: the Multi-Queue replacement algorithm.
//!
//! Source: Yuanyuan Zhou, James F. Philbin, Kai Li, "The Multi-Queue
//! replacement algorithm for second level buffer caches", USENIX Annual
//! Technical Conference 2001. `m` LRU queues `Q0..Qm-1`; a unit accessed
//! `f` times lives in `Q[min(floor(log2 f), m - 1)]`, so frequent units sit
//! higher and are evicted later. Each unit has an expiry time (`lifetime`
//! accesses after it entered its queue); a unit at the LRU end of its queue
//! past its expiry is demoted one queue down, so units that stop being used
//! sink and leave. Evicted units' frequencies are remembered in a ghost FIFO,
//! `Qout`; a unit re-admitted while its ghost is there resumes counting.
//!
//! Maps to libCacheSim's `MQ` (`cache/eviction/MQ.c` in the `libcachesim`
//! 0.3.5 release; commit `aa0fc40` has only a private draft), and follows it
//! exactly:
//! - time ticks once per hit and once per admission (not per miss that is
//!   not admitted). A hit increments the unit's frequency, moves it to the
//!   MRU end of its frequency's queue and sets its expiry to now +
//!   `lifetime`; then *Adjust* runs: time advances by one, and for each
//!   queue from `Q1` up, a unit at its LRU end whose expiry is earlier than
//!   now moves to the MRU end of the queue below with a fresh expiry (one
//!   unit per queue per tick);
//! - an admitted unit enters with frequency 1, or its ghost's frequency + 1
//!   when the miss found its ghost (the ghost is dropped at the miss), in
//!   that frequency's queue, then Adjust runs;
//! - eviction takes the LRU end of the lowest non-empty queue and makes it
//!   a ghost at the head of `Qout`, a FIFO of `floor(capacity ×
//!   ghost_size_ratio)` in the capacity's unit (a ghost's charge is its
//!   unit's), dropping its oldest ghosts to make room;
//! - `remove` drops a ghost of the key too and reports whether the key was
//!   resident, as libCacheSim's `MQ_remove`.
//!
//! The paper's Qout holds a fixed number of ghosts and its demotion check
//! runs on every access; libCacheSim's is a FIFO cache in the cache's unit
//! and ticks as above, and so do we.
//!
//! Knobs (libCacheSim's defaults): `queues` (8, 1 to 64), `lifetime`
//! (10,000 accesses, at least 1), `ghost_size_ratio` (4.0, in (0, 64]).
//!
//! Checked on `cloudPhysicsIO` by `crates/cairn-sim/tests/libcachesim_agreement.rs`:
//! the same miss counts as libCacheSim 0.3.5 at 1, 5, 10 and 20 % of the
//! distinct objects and of the bytes.
//!
//! Residents and ghosts share one [`Slab`] and one map, threaded into the
//! queues and the ghost list; nothing allocates per access once they have
//! grown to the cache's size.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// The most queues libCacheSim accepts.
const MAX_QUEUES: u32 = 64;

/// MQ parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqConfig {
    /// Number of LRU queues, 1 to 64. Default 8 (libCacheSim `n-queue`).
    pub queues: u32,
    /// Accesses a unit may sit unused in its queue before it is demoted, at
    /// least 1. Default 10,000 (libCacheSim `lifetime`).
    pub lifetime: u64,
    /// The ghost FIFO's size as a multiple of the capacity, in (0, 64].
    /// Default 4.0 (libCacheSim `Qout-size-ratio`).
    pub ghost_size_ratio: f64,
}

impl Default for MqConfig {
    fn default() -> Self {
        Self {
            queues: 8,
            lifetime: 10_000,
            ghost_size_ratio: 4.0,
        }
    }
}

impl MqConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let out_of_range = |parameter, value: String, expected| ConfigError::OutOfRange {
            policy: "mq",
            parameter,
            value,
            expected,
        };
        if !(1..=MAX_QUEUES).contains(&self.queues) {
            return Err(out_of_range("queues", self.queues.to_string(), "1 to 64"));
        }
        if self.lifetime == 0 {
            return Err(out_of_range("lifetime", "0".into(), "at least 1"));
        }
        if !(self.ghost_size_ratio > 0.0 && self.ghost_size_ratio <= 64.0) {
            return Err(out_of_range(
                "ghost_size_ratio",
                self.ghost_size_ratio.to_string(),
                "in (0, 64]",
            ));
        }
        Ok(())
    }
}

/// `Entry::queue` of a ghost.
const GHOST: u8 = u8::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    /// Accesses counted (kept by the ghost), at most `i32::MAX` as in
    /// libCacheSim.
    freq: u32,
    /// The time after which the unit may be demoted.
    expire: u64,
    /// Its queue, or [`GHOST`].
    queue: u8,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// Multi-Queue replacement, as libCacheSim's `MQ`.
#[derive(Debug)]
pub struct Mq {
    capacity: Capacity,
    lifetime: u64,
    used: u64,
    /// Ticks once per hit and per admission.
    time: u64,
    /// Residents and ghosts.
    map: KeyIndex,
    slab: Slab<Entry>,
    /// `Q0..Qm-1`, front = MRU end.
    queues: Vec<List>,
    /// `Qout`, front = newest.
    ghost: List,
    ghost_used: u64,
    ghost_limit: u64,
    /// The key and frequency of the ghost the last missing `lookup` found.
    ghost_hit: Option<(u64, u32)>,
}

impl Mq {
    /// An empty MQ cache.
    pub fn new(capacity: Capacity, config: &MqConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            capacity,
            lifetime: config.lifetime,
            used: 0,
            time: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            queues: vec![List::new(); config.queues as usize],
            ghost: List::new(),
            ghost_used: 0,
            ghost_limit: (capacity.limit() as f64 * config.ghost_size_ratio) as u64,
            ghost_hit: None,
        })
    }

    /// `QueueNum(f) = min(floor(log2 f), m - 1)`.
    fn queue_of(&self, freq: u32) -> u8 {
        let log = freq.max(1).ilog2();
        log.min(self.queues.len() as u32 - 1) as u8
    }

    /// Puts entry `index` at the MRU end of `queue`, expiring `lifetime`
    /// from now.
    fn enqueue(&mut self, index: Index, queue: u8) {
        self.slab
            .push_front(&mut self.queues[usize::from(queue)], index);
        let entry = self.slab.get_mut(index);
        entry.queue = queue;
        entry.expire = self.time + self.lifetime;
    }

    /// The paper's Adjust: time advances; in each queue above `Q0` an
    /// expired LRU unit moves down one queue.
    fn adjust(&mut self) {
        self.time += 1;
        for queue in 1..self.queues.len() {
            let Some(index) = self.queues[queue].back() else {
                continue;
            };
            if self.slab.get(index).expire < self.time {
                self.slab.unlink(&mut self.queues[queue], index);
                self.enqueue(index, queue as u8 - 1);
            }
        }
    }

    /// Drops ghost `index` from `Qout` and from the map.
    fn drop_ghost(&mut self, index: Index) {
        self.slab.unlink(&mut self.ghost, index);
        let ghost = *self.slab.get(index);
        self.map.remove(ghost.key, &self.slab);
        self.slab.remove(index);
        self.ghost_used -= ghost.charge;
    }

    /// Evicts the LRU unit of the lowest non-empty queue into `Qout`.
    fn evict_one(&mut self) -> Option<u64> {
        let queue = self.queues.iter().position(|q| !q.is_empty())?;
        let index = self.queues[queue].back()?;
        self.slab.unlink(&mut self.queues[queue], index);
        let entry = *self.slab.get(index);
        self.used -= entry.charge;
        if entry.charge > self.ghost_limit {
            self.map.remove(entry.key, &self.slab);
            self.slab.remove(index);
            return Some(entry.key);
        }
        while self.ghost_used + entry.charge > self.ghost_limit {
            let Some(oldest) = self.ghost.back() else {
                break;
            };
            self.drop_ghost(oldest);
        }
        self.ghost_used += entry.charge;
        self.slab.push_front(&mut self.ghost, index);
        self.slab.get_mut(index).queue = GHOST;
        Some(entry.key)
    }
}

impl Policy for Mq {
    fn name(&self) -> &'static str {
        "mq"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.ghost_hit = None;
        let Some(index) = self.map.get(access.key, &self.slab) else {
            return false;
        };
        let entry = *self.slab.get(index);
        if entry.queue == GHOST {
            self.ghost_hit = Some((entry.key, entry.freq));
            self.drop_ghost(index);
            return false;
        }
        self.slab
            .unlink(&mut self.queues[usize::from(entry.queue)], index);
        let freq = (entry.freq + 1).min(i32::MAX as u32);
        self.slab.get_mut(index).freq = freq;
        self.enqueue(index, self.queue_of(freq));
        self.adjust();
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let ghost_hit = self.ghost_hit.take();
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        debug_assert!(
            self.map.get(access.key, &self.slab).is_none(),
            "admit of a resident or ghost key"
        );
        while self.used + charge > self.capacity.limit() {
            let Some(victim) = self.evict_one() else {
                break;
            };
            victims.push(victim);
        }
        let freq = match ghost_hit {
            Some((key, freq)) if key == access.key => (freq + 1).min(i32::MAX as u32),
            _ => 1,
        };
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
            freq,
            expire: 0,
            queue: 0,
        });
        self.map.insert(access.key, index, &self.slab);
        self.used += charge;
        self.enqueue(index, self.queue_of(freq));
        self.adjust();
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.get(key, &self.slab) else {
            return false;
        };
        let entry = *self.slab.get(index);
        if entry.queue == GHOST {
            self.drop_ghost(index);
            return false;
        }
        self.slab
            .unlink(&mut self.queues[usize::from(entry.queue)], index);
        self.map.remove(key, &self.slab);
        self.slab.remove(index);
        self.used -= entry.charge;
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(key, &self.slab)
            .is_some_and(|index| self.slab.get(index).queue != GHOST)
    }

    fn len(&self) -> usize {
        self.slab.len() - self.ghost.len()
    }

    fn used(&self) -> u64 {
        self.used
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// libCacheSim's MQ.c with plain vectors: queues of keys (front = MRU),
    /// per-key (charge, freq, expire), `Qout` as a deque of (key, charge,
    /// freq), front = newest.
    struct NaiveMq {
        capacity: Capacity,
        lifetime: u64,
        vtime: u64,
        queues: Vec<VecDeque<u64>>,
        items: Vec<(u64, u64, u32, u64)>,
        qout: VecDeque<(u64, u64, u32)>,
        qout_size: u64,
    }

    impl NaiveMq {
        fn new(capacity: Capacity, config: &MqConfig) -> Self {
            Self {
                capacity,
                lifetime: config.lifetime,
                vtime: 0,
                queues: vec![VecDeque::new(); config.queues as usize],
                items: vec![],
                qout: VecDeque::new(),
                qout_size: (capacity.limit() as f64 * config.ghost_size_ratio) as u64,
            }
        }

        fn queue_num(&self, mut freq: u32) -> usize {
            let mut queue = 0;
            while freq > 1 && queue < self.queues.len() - 1 {
                freq >>= 1;
                queue += 1;
            }
            queue
        }

        fn item(&mut self, key: u64) -> &mut (u64, u64, u32, u64) {
            self.items.iter_mut().find(|i| i.0 == key).unwrap()
        }

        fn adjust(&mut self) {
            self.vtime += 1;
            for k in 1..self.queues.len() {
                if let Some(&key) = self.queues[k].back()
                    && self.item(key).3 < self.vtime
                {
                    self.queues[k].pop_back();
                    self.queues[k - 1].push_front(key);
                    let expire = self.vtime + self.lifetime;
                    self.item(key).3 = expire;
                }
            }
        }

        fn unlink(&mut self, key: u64) {
            for q in &mut self.queues {
                q.retain(|&k| k != key);
            }
        }
    }

    impl Reference for NaiveMq {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if self.items.iter().any(|i| i.0 == access.key) {
                self.unlink(access.key);
                let (vtime, lifetime) = (self.vtime, self.lifetime);
                let item = self.item(access.key);
                item.2 = (item.2 + 1).min(i32::MAX as u32);
                item.3 = vtime + lifetime;
                let freq = item.2;
                let queue = self.queue_num(freq);
                self.queues[queue].push_front(access.key);
                self.adjust();
                return (true, vec![]);
            }
            let ghost = self.qout.iter().position(|g| g.0 == access.key);
            let ghost_freq = ghost.map(|at| self.qout.remove(at).unwrap().2);
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            while self.items.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                let key = *self.queues.iter().find_map(|q| q.back()).unwrap();
                self.unlink(key);
                let at = self.items.iter().position(|i| i.0 == key).unwrap();
                let (_, c, freq, _) = self.items.remove(at);
                if c <= self.qout_size {
                    while self.qout.iter().map(|g| g.1).sum::<u64>() + c > self.qout_size {
                        self.qout.pop_back();
                    }
                    self.qout.push_front((key, c, freq));
                }
                victims.push(key);
            }
            let freq = ghost_freq.map_or(1, |f| f + 1);
            self.items
                .push((access.key, charge, freq, self.vtime + self.lifetime));
            let queue = self.queue_num(freq);
            self.queues[queue].push_front(access.key);
            self.adjust();
            (false, victims)
        }
    }

    fn mq(capacity: Capacity, queues: u32, lifetime: u64) -> Mq {
        let config = MqConfig {
            queues,
            lifetime,
            ..MqConfig::default()
        };
        Mq::new(capacity, &config).unwrap()
    }

    fn run(cache: &mut Mq, keys: &[u64]) -> Vec<u64> {
        let mut victims = vec![];
        for access in testing::keys(keys) {
            cache.access(&access, &mut victims);
        }
        victims
    }

    #[test]
    fn frequent_units_sit_in_higher_queues() {
        let mut cache = mq(Capacity::Objects(3), 8, 1000);
        // 1: 4 accesses → Q2; 2: 2 → Q1; 3: 1 → Q0. Q0 is evicted first:
        // 3, then each newcomer in turn, while 1 and 2 stay.
        let victims = run(&mut cache, &[1, 1, 1, 1, 2, 2, 3, 4, 5, 6]);
        assert_eq!(victims, [3, 4, 5]);
        assert_eq!(
            cache.slab.get(cache.map.get(1, &cache.slab).unwrap()).queue,
            2
        );
        assert_eq!(
            cache.slab.get(cache.map.get(2, &cache.slab).unwrap()).queue,
            1
        );
    }

    #[test]
    fn expired_units_are_demoted() {
        // Lifetime 2: 1's hit puts it in Q1 at time 1, expiring at 3. The
        // admissions of 2 and 3 tick to 3 and 4; at 4 it has expired and
        // drops to Q0's MRU end, ahead of 2 and 3.
        let mut cache = mq(Capacity::Objects(3), 8, 2);
        let victims = run(&mut cache, &[1, 1, 2, 3]);
        assert!(victims.is_empty());
        assert_eq!(
            cache.slab.get(cache.map.get(1, &cache.slab).unwrap()).queue,
            0
        );
        let victims = run(&mut cache, &[9, 8]);
        assert_eq!(victims, [2, 3], "1 was demoted to Q0's MRU end");
    }

    #[test]
    fn a_ghost_restores_the_frequency() {
        let mut cache = mq(Capacity::Objects(2), 8, 1000);
        // 1, seen 3 times, is in Q1: 3 evicts 2 from Q0 instead.
        let victims = run(&mut cache, &[1, 1, 1, 2, 3]);
        assert_eq!(victims, [2]);
        // With one queue (LRU) 1 goes, leaving a ghost with frequency 3; its
        // return evicts 2 and resumes at 4.
        let mut flat = mq(Capacity::Objects(2), 1, 1000);
        let victims = run(&mut flat, &[1, 1, 1, 2, 3, 1]);
        assert_eq!(victims, [1, 2]);
        assert_eq!(
            flat.slab.get(flat.map.get(1, &flat.slab).unwrap()).freq,
            4,
            "ghost's 3 + 1"
        );
        assert!(!flat.contains(2) && flat.remove(3) && !flat.remove(2));
        assert!(
            flat.map.get(2, &flat.slab).is_none(),
            "remove dropped 2's ghost"
        );
    }

    #[test]
    fn config_is_checked() {
        for bad in [
            MqConfig {
                queues: 0,
                ..MqConfig::default()
            },
            MqConfig {
                queues: 65,
                ..MqConfig::default()
            },
            MqConfig {
                lifetime: 0,
                ..MqConfig::default()
            },
            MqConfig {
                ghost_size_ratio: 0.0,
                ..MqConfig::default()
            },
            MqConfig {
                ghost_size_ratio: f64::NAN,
                ..MqConfig::default()
            },
        ] {
            assert!(Mq::new(Capacity::Objects(4), &bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool, queues in 1u32..5, lifetime in 1u64..30, ratio in 0.1f64..3.0) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = MqConfig { queues, lifetime, ghost_size_ratio: ratio };
            let mut naive = NaiveMq::new(capacity, &config);
            testing::assert_matches_reference(&mut Mq::new(capacity, &config).unwrap(), &mut naive, &trace);
            testing::replay_checked(&mut Mq::new(capacity, &config).unwrap(), &trace);
        }
    }
}
