//! Time to live, as libCacheSim defines it (`cache_find_base`,
//! `copy_request_to_cache_obj`, `cache_insert_base` under `SUPPORT_TTL`): a
//! unit's expiry is set when it is inserted (the request's own TTL if it
//! carries one, else the default TTL, else never); a hit leaves it as it was;
//! an access at a time above the expiry finds the unit expired, removes it,
//! and is a miss that inserts it again. Removal is lazy: an expired unit
//! holds its place until it is accessed or evicted.
//!
//! [`Ttl`] stamps each access with its clock ([`Stamp`]) in the stream;
//! [`Expiring`] keeps the expiry of each resident unit beside a policy.
//!
//! libCacheSim has no hierarchy and no prefetcher under TTL; Cairn extends
//! the rules to both:
//!
//! - **Two levels** ([`Expiring::access_levels`]): the expiry belongs to the
//!   unit, not to a level. It is set when a miss of both levels fetches the
//!   unit, travels with it between the levels (an L2 hit, a write-through, a
//!   demotion keep it), and is forgotten when neither level holds the unit.
//!   An access that finds its unit expired removes it from both levels and
//!   counts one `expired` (overall, not per level); the access is a miss of
//!   both levels and fetches the unit again.
//! - **A prefetcher**: a unit it loads expires after the default TTL from
//!   the access that triggered it (never, without a default: a prefetched
//!   unit has no request, so no TTL of its own).

use cairn_policy::{Access, KeyMap, NEVER, Policy};
use cairn_trace::Request;

use crate::levels::SecondLevel;
use crate::metrics::{Metrics, Served};

/// When a unit expires, as libCacheSim sets it (`copy_request_to_cache_obj`,
/// `cache_insert_base`): at insertion, the request's own TTL if it carries
/// one, else the default TTL, else never.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ttl {
    /// The TTL of requests that carry none, in µs; `None`: they never expire.
    pub default_us: Option<u64>,
    /// Whether a request's own TTL ([`Request::ttl`]) counts; when not, every
    /// request takes the default.
    pub from_trace: bool,
}

impl Ttl {
    /// The stamp of `request`'s accesses.
    #[inline]
    pub fn stamp(&self, request: &Request) -> Stamp {
        let ttl_us = if self.from_trace && request.ttl > 0 {
            Some(u64::from(request.ttl) * 1_000_000)
        } else {
            self.default_us
        };
        Stamp {
            now_us: request.time_us,
            expires_us: ttl_us.map_or(NEVER, |ttl| request.time_us.saturating_add(ttl)),
        }
    }
}

/// An access's clock, beside it when TTL is in play: the request's time, and
/// when the unit expires if this access inserts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The request's time, µs, as the trace records it.
    pub now_us: u64,
    /// Expiry if this access inserts the unit, µs; [`NEVER`] for none. A
    /// unit is expired at a later access whose `now_us` is above it.
    pub expires_us: u64,
}

impl Stamp {
    /// No clock, no expiry.
    pub const NONE: Stamp = Stamp {
        now_us: 0,
        expires_us: NEVER,
    };
}

/// The expiries of one policy's resident units, and the TTL step of a replay.
#[derive(Debug, Default)]
pub struct Expiring {
    /// When each resident unit that expires does (µs). Units that never
    /// expire are not in it.
    expiry: KeyMap<u64>,
}

impl Expiring {
    /// No unit yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `access` (at `stamp`) from `policy` and records it in
    /// `metrics`; returns whether it hit. An expired resident unit is
    /// removed first (counted in [`Metrics::expired`]), so the access misses
    /// and inserts it again. `victims` is scratch space; it is left holding
    /// the units the policy evicted.
    #[inline]
    pub fn access(
        &mut self,
        policy: &mut dyn Policy,
        access: &Access,
        stamp: Stamp,
        victims: &mut Vec<u64>,
        metrics: &mut Metrics,
    ) -> bool {
        victims.clear();
        let mut expired = false;
        if let Some(&expires_us) = self.expiry.get(&access.key)
            && expires_us < stamp.now_us
        {
            self.expiry.remove(&access.key);
            expired = policy.remove(access.key);
        }
        let hit = policy.lookup(access);
        let admitted = !hit && policy.admit(access, victims);
        // Victims first: a policy that holds victims (LIRS) may name the key
        // it has just admitted again.
        for victim in victims.iter() {
            self.expiry.remove(victim);
        }
        if admitted && stamp.expires_us != NEVER {
            self.expiry.insert(access.key, stamp.expires_us);
        }
        metrics.expired += u64::from(expired);
        metrics.record(access, hit, victims.len());
        hit
    }

    /// [`access`](Self::access) for a two-level hierarchy: `upper` (L1) over
    /// `lower`. A unit expired in either level is removed from both (one
    /// `expired`); a miss of both levels sets the expiry of the unit it
    /// fetches; the expiry is forgotten when neither level holds the unit.
    /// `victims` is left holding the units L1 evicted.
    #[inline]
    pub fn access_levels(
        &mut self,
        upper: &mut dyn Policy,
        lower: &mut SecondLevel,
        access: &Access,
        stamp: Stamp,
        victims: &mut Vec<u64>,
        metrics: &mut Metrics,
    ) -> Served {
        let mut expired = false;
        if let Some(&expires_us) = self.expiry.get(&access.key)
            && expires_us < stamp.now_us
        {
            self.expiry.remove(&access.key);
            expired = lower.remove(upper, access.key);
        }
        let served = lower.access(upper, access, victims, metrics);
        // A unit one level evicts may live on in the other (inclusive: L2's
        // victims may stay in L1; exclusive: L1's move down).
        for &victim in victims.iter().chain(lower.l2_victims()) {
            if !lower.holds(upper, victim) {
                self.expiry.remove(&victim);
            }
        }
        if served != Served::L1 {
            if !lower.holds(upper, access.key) {
                // Refused by both levels (an admission filter, a unit too
                // large for either).
                self.expiry.remove(&access.key);
            } else if served == Served::Miss && stamp.expires_us != NEVER {
                self.expiry.insert(access.key, stamp.expires_us);
            }
        }
        metrics.expired += u64::from(expired);
        served
    }

    /// Forgets the expiries of `victims`, units the policy evicted outside
    /// [`access`](Self::access) (for a prefetcher's loads).
    #[inline]
    pub(crate) fn forget(&mut self, victims: &[u64]) {
        for victim in victims {
            self.expiry.remove(victim);
        }
    }

    /// `key`, just admitted outside [`access`](Self::access) (a prefetcher's
    /// load), expires at `expires_us` ([`NEVER`]: never).
    #[inline]
    pub(crate) fn admitted(&mut self, key: u64, expires_us: u64) {
        if expires_us != NEVER {
            self.expiry.insert(key, expires_us);
        }
    }

    /// Resident units that will expire.
    pub fn len(&self) -> usize {
        self.expiry.len()
    }

    /// Whether no resident unit will expire.
    pub fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }
}
