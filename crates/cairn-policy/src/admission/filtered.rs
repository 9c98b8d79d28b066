//! [`Filtered`]: any [`Policy`] behind an admission filter, itself a `Policy`.

use super::{Admission, Occupancy};
use crate::{Access, Ahead, Capacity, Policy};

/// A policy whose misses enter only if a filter lets them.
///
/// `lookup` asks the inner policy and then shows the access to the filter
/// ([`Admission::record`]); `admit` asks the filter first and, when it
/// refuses, returns `false` having admitted and evicted nothing (it still
/// reports the victims the inner policy's hits held back, see
/// [`Policy::take_held_victims`], so they leave as soon as they would have).
/// Everything else is the inner policy's, so every guarantee of [`Policy`]
/// holds as it holds for the inner policy: occupancy and capacity are the
/// inner policy's, a refused key was not resident and stays so, and nothing
/// allocates per access that the inner policy and the filter do not.
pub struct Filtered {
    inner: Box<dyn Policy>,
    filter: Box<dyn Admission>,
    refused: u64,
}

impl Filtered {
    /// `inner` behind `filter`.
    pub fn new(inner: Box<dyn Policy>, filter: Box<dyn Admission>) -> Self {
        Self {
            inner,
            filter,
            refused: 0,
        }
    }

    /// The misses the filter refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The filtered policy.
    pub fn inner(&self) -> &dyn Policy {
        &*self.inner
    }

    /// The filter.
    pub fn filter(&self) -> &dyn Admission {
        &*self.filter
    }
}

impl std::fmt::Debug for Filtered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filtered")
            .field("inner", &self.inner.name())
            .field("filter", &self.filter.name())
            .field("refused", &self.refused)
            .finish()
    }
}

impl Policy for Filtered {
    /// The inner policy's name (tables label runs by their spec).
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let hit = self.inner.lookup(access);
        self.filter.record(access, hit);
        hit
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let occupancy = Occupancy {
            used: self.inner.used(),
            limit: self.inner.capacity().limit(),
        };
        if self.filter.admit(access, occupancy) {
            self.inner.admit(access, victims)
        } else {
            self.refused += 1;
            self.inner.take_held_victims(victims);
            false
        }
    }

    fn take_held_victims(&mut self, victims: &mut Vec<u64>) {
        self.inner.take_held_victims(victims);
    }

    fn remove(&mut self, key: u64) -> bool {
        self.inner.remove(key)
    }

    fn contains(&self, key: u64) -> bool {
        self.inner.contains(key)
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn used(&self) -> u64 {
        self.inner.used()
    }

    fn capacity(&self) -> Capacity {
        self.inner.capacity()
    }

    #[inline]
    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.inner.prefetch(key, ahead);
    }

    /// `lookup` and `admit` as above; a hit reports at once what it evicted
    /// (as the inner policy's own `access` does).
    fn access(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        if self.lookup(access) {
            self.inner.take_held_victims(victims);
            true
        } else {
            self.admit(access, victims);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::always::Always;
    use crate::admission::frequency::FrequencyConfig;
    use crate::admission::nhit::NhitConfig;
    use crate::{AdmissionConfig, PolicyConfig, testing};
    use proptest::prelude::*;

    /// The named policy with its defaults, or `None` where they do not fit
    /// `capacity` (S3-FIFO, 2Q and others need room for their segments).
    fn policy(name: &str, capacity: Capacity) -> Option<Box<dyn Policy>> {
        PolicyConfig::default_for(name)
            .unwrap()
            .build(capacity)
            .ok()
    }

    /// Filters that refuse often: `nhit` counting from the first access,
    /// `frequency` at thresholds 2 and 3.
    fn filters() -> Vec<AdmissionConfig> {
        let mut filters = vec![AdmissionConfig::default()];
        for threshold in [2, 3] {
            filters.push(AdmissionConfig::Nhit(NhitConfig {
                threshold,
                trigger: 0.0,
                ..NhitConfig::default()
            }));
            filters.push(AdmissionConfig::Frequency(FrequencyConfig {
                threshold: u64::from(threshold),
                ..FrequencyConfig::default()
            }));
        }
        filters.push(AdmissionConfig::default_for("nhit").unwrap());
        filters
    }

    fn filtered(name: &str, filter: &AdmissionConfig, capacity: Capacity) -> Option<Filtered> {
        Some(Filtered::new(
            policy(name, capacity)?,
            filter.build(capacity).unwrap(),
        ))
    }

    fn resident(policy: &dyn Policy, keys: u64) -> Vec<u64> {
        (0..keys).filter(|&k| policy.contains(k)).collect()
    }

    /// Replays `trace` with `lookup` and `admit` (the block cache's protocol)
    /// and checks, besides `testing::replay_checked`'s invariants, that a
    /// refused miss changes nothing resident and that after every `admit` the
    /// keys the caller was told are resident (admitted, not yet named a
    /// victim) are exactly the resident keys.
    fn replay_protocol(policy: &mut Filtered, trace: &[Access], keys: u64) {
        let mut held: Vec<u64> = Vec::new();
        let mut victims = Vec::new();
        for access in trace {
            let was_resident = policy.contains(access.key);
            if policy.lookup(access) {
                assert!(was_resident, "{}: hit on a key not resident", policy.name());
                continue;
            }
            assert!(!was_resident, "{}: miss on a resident key", policy.name());
            let before = resident(policy, keys);
            let (used, refused) = (policy.used(), policy.refused());
            victims.clear();
            let admitted = policy.admit(access, &mut victims);
            assert_eq!(admitted, policy.contains(access.key), "{access:?}");
            if policy.refused() > refused {
                assert!(!admitted);
                assert_eq!(
                    resident(policy, keys),
                    before,
                    "a refusal changed the cache"
                );
                assert_eq!(policy.used(), used);
                assert!(
                    victims.iter().all(|v| !before.contains(v)),
                    "a refusal evicted"
                );
            }
            held.retain(|k| !victims.contains(k));
            if admitted {
                held.push(access.key);
            }
            held.sort_unstable();
            held.dedup();
            assert_eq!(
                held,
                resident(policy, keys),
                "{}: after {access:?}",
                policy.name()
            );
            testing::check_invariants(policy);
        }
    }

    #[test]
    fn always_changes_nothing() {
        let trace = testing::keys(
            &(0..3000u64)
                .map(|i| (i * 7919) % 97 % (1 + i % 41))
                .collect::<Vec<_>>(),
        );
        for name in PolicyConfig::NAMES {
            for capacity in [Capacity::Objects(40), Capacity::Bytes(40)] {
                let mut bare = policy(name, capacity).unwrap();
                let mut wrapped = Filtered::new(policy(name, capacity).unwrap(), Box::new(Always));
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for access in &trace {
                    a.clear();
                    b.clear();
                    let hit = bare.access(access, &mut a);
                    assert_eq!(wrapped.access(access, &mut b), hit, "{name}: {access:?}");
                    a.sort_unstable();
                    b.sort_unstable();
                    assert_eq!(a, b, "{name}: victims of {access:?}");
                }
                assert_eq!(wrapped.refused(), 0);
            }
        }
    }

    #[test]
    fn a_refusal_reports_the_victims_a_hit_held() {
        // SLRU with 4 segments over 10 units: segment 0 holds the remainder,
        // so a hit's demotion cascade can evict, and a bare lookup holds it.
        let capacity = Capacity::Objects(10);
        let refuse_all = AdmissionConfig::Frequency(FrequencyConfig {
            threshold: 15,
            ..FrequencyConfig::default()
        });
        let trace = testing::keys(
            &(0..400u64)
                .map(|i| (i * 31) % 23 % (1 + i % 13))
                .collect::<Vec<_>>(),
        );
        let mut held_seen = false;
        for name in ["s4lru", "lirs"] {
            let mut open = filtered(name, &AdmissionConfig::default(), capacity).unwrap();
            let mut closed = filtered(name, &refuse_all, capacity).unwrap();
            let mut victims = Vec::new();
            for access in &trace {
                // Fill `closed` as `open` fills, then refuse everything.
                if !open.lookup(access) {
                    victims.clear();
                    open.admit(access, &mut victims);
                }
                if closed.lookup(access) {
                    continue;
                }
                victims.clear();
                let admitted = if closed.len() < 10 && closed.refused() == 0 {
                    closed.inner.admit(access, &mut victims)
                } else {
                    closed.admit(access, &mut victims)
                };
                held_seen |= !admitted && !victims.is_empty();
            }
            replay_protocol(
                &mut filtered(name, &refuse_all, capacity).unwrap(),
                &trace,
                23,
            );
        }
        assert!(held_seen, "some refusal reported a victim held by a hit");
    }

    #[test]
    fn a_filter_keeps_a_scan_from_flushing_the_hot_set() {
        // LRU of 100 units; 50 hot keys in turn, each followed by 4 scan keys
        // never seen again: a hot key's reuse distance (250 distinct keys) is
        // past LRU's reach, so alone it misses every hot access.
        let mut keys = Vec::new();
        let mut scan = 1_000_000;
        for _round in 0..40 {
            for hot in 0..50 {
                keys.push(hot);
                keys.extend(scan..scan + 4);
                scan += 4;
            }
        }
        let trace = testing::keys(&keys);
        let capacity = Capacity::Objects(100);
        let hot_hits = |filter: &AdmissionConfig| {
            let mut policy = filter.wrap(policy("lru", capacity).unwrap()).unwrap();
            let mut victims = Vec::new();
            trace
                .iter()
                .filter(|access| {
                    victims.clear();
                    policy.access(access, &mut victims) && access.key < 50
                })
                .count()
        };
        assert_eq!(hot_hits(&AdmissionConfig::default()), 0);
        // nhit's default window (2 tracked keys per unit, 200) is shorter
        // than the hot keys' 250 distinct misses between their misses: it
        // forgets them, and lets few in. A window of 8 per unit catches them,
        // and every hot access but the first two of each key hits.
        let nhit = |tracked_per_unit| {
            AdmissionConfig::Nhit(NhitConfig {
                trigger: 0.0,
                tracked_per_unit,
                ..NhitConfig::default()
            })
        };
        assert!(hot_hits(&nhit(2.0)) < 50 * 38);
        assert_eq!(hot_hits(&nhit(8.0)), 50 * 38);
        let frequency = AdmissionConfig::default_for("frequency").unwrap();
        assert!(hot_hits(&frequency) >= 50 * 38, "{}", hot_hits(&frequency));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_policy_behind_any_filter_keeps_the_policy_guarantees(
            trace in testing::trace_strategy(60, 400, 5),
            cap in 1u64..30,
            bytes: bool,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            for name in PolicyConfig::NAMES {
                for filter in filters() {
                    if let Some(mut policy) = filtered(name, &filter, capacity) {
                        replay_protocol(&mut policy, &trace, 60);
                    }
                }
            }
        }
    }
}
