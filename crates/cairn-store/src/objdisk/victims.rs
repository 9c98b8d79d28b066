//! Which segments the cleaner (`clean.rs`) takes: the policies, pure
//! functions of the segments' live shares and ages (module docs of
//! `clean.rs`), apart from the disk so that the disk's API can name them.

/// A segment worth cleaning: sequence, generation.
pub(crate) type Victim = (u64, u64);

/// Which segments the cleaner takes (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cleaner {
    /// At most `clean_below` live, the emptiest first (LSVD's).
    #[default]
    Greedy,
    /// The highest `(1 − u)·age / (1 + u)` first, at least that of a
    /// segment `clean_below` live and one volume-write old (LFS's).
    CostBenefit,
    /// No cleaner: only wholly dead segments are deleted.
    Off,
}

impl Cleaner {
    /// Every choice, for tables.
    pub const ALL: [Self; 3] = [Self::Greedy, Self::CostBenefit, Self::Off];

    /// Its name in a spec: `greedy`, `cost-benefit`, `none`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Greedy => "greedy",
            Self::CostBenefit => "cost-benefit",
            Self::Off => "none",
        }
    }

    /// Parses a [`Cleaner::name`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// A segment the cleaner may take: sequence, generation, live blocks,
/// blocks.
pub(crate) type Candidate = (u64, u64, u32, u32);

/// LFS's cost-benefit of cleaning a segment `u` live, `age` segments old:
/// the free space it yields, times how long it stayed put, over the cost
/// of reading it whole and writing back its live share.
fn cost_benefit(u: f64, age: f64) -> f64 {
    (1.0 - u) * age / (1.0 + u)
}

/// Up to `max` of `candidates` (durable segments with live blocks, none in
/// flight) for `policy` to clean, best first; `now` is the open segment's
/// sequence and `reference` the segments the live data fills (module
/// docs).
pub(crate) fn victims(
    policy: Cleaner,
    below: f64,
    now: u64,
    reference: u64,
    candidates: impl Iterator<Item = Candidate>,
    max: usize,
) -> Vec<Victim> {
    match policy {
        Cleaner::Off => Vec::new(),
        Cleaner::Greedy => {
            let mut v: Vec<(u32, u64, u64)> = candidates
                .filter(|&(_, _, live, blocks)| f64::from(live) <= below * f64::from(blocks))
                .map(|(seq, generation, live, _)| (live, seq, generation))
                .collect();
            v.sort_unstable();
            v.into_iter().take(max).map(|(_, s, g)| (s, g)).collect()
        }
        Cleaner::CostBenefit => {
            let bar = cost_benefit(below, reference.max(1) as f64);
            let mut v: Vec<(f64, u64, u64)> = candidates
                .filter(|&(_, _, _, blocks)| blocks > 0)
                .map(|(seq, generation, live, blocks)| {
                    let u = f64::from(live) / f64::from(blocks);
                    let age = now.saturating_sub(seq).max(1) as f64;
                    (cost_benefit(u, age), seq, generation)
                })
                .filter(|&(score, _, _)| score >= bar)
                .collect();
            v.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            v.into_iter().take(max).map(|(_, s, g)| (s, g)).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cleaner, victims};

    /// (sequence, live) of 100-block segments, generation 1.
    fn segs(s: &[(u64, u32)]) -> impl Iterator<Item = super::Candidate> + '_ {
        s.iter().map(|&(seq, live)| (seq, 1, live, 100))
    }

    fn picked(policy: Cleaner, s: &[(u64, u32)], reference: u64) -> Vec<u64> {
        victims(policy, 0.6, 100, reference, segs(s), 10)
            .into_iter()
            .map(|(seq, _)| seq)
            .collect()
    }

    /// An old segment 70 % live, a young one 50 %, a middling one 40 %.
    const MIX: [(u64, u32); 3] = [(10, 70), (99, 50), (90, 40)];

    #[test]
    fn greedy_takes_the_emptiest_at_most_clean_below() {
        assert_eq!(picked(Cleaner::Greedy, &MIX, 10), vec![90, 99]);
        assert_eq!(picked(Cleaner::Greedy, &[(5, 61), (6, 60)], 10), vec![6]);
    }

    #[test]
    fn cost_benefit_takes_old_full_segments_and_lets_young_ones_die() {
        // Bar: (1 − 0.6)·10 / 1.6 = 2.5. The old one: 0.3·90/1.7 = 15.9;
        // the middling: 0.6·10/1.4 = 4.3; the young: 0.5·1/1.5 = 0.33.
        assert_eq!(picked(Cleaner::CostBenefit, &MIX, 10), vec![10, 90]);
        // One volume-write old and clean_below live: just at the bar.
        assert_eq!(picked(Cleaner::CostBenefit, &[(90, 60)], 10), vec![90]);
        assert_eq!(
            picked(Cleaner::CostBenefit, &[(91, 60)], 10),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn cost_benefit_weighs_the_live_share_by_one_plus_u() {
        // 0.5·20/1.5 = 6.7 against 0.9·10/1.1 = 8.2: the emptier first,
        // though (1 − u)·age alone (10 against 9) would rank it second.
        assert_eq!(
            picked(Cleaner::CostBenefit, &[(80, 50), (90, 10)], 1),
            vec![90, 80]
        );
    }

    #[test]
    fn off_takes_nothing_and_names_parse() {
        assert!(picked(Cleaner::Off, &MIX, 10).is_empty());
        for c in Cleaner::ALL {
            assert_eq!(Cleaner::parse(c.name()), Some(c));
        }
        assert_eq!(Cleaner::parse("age-sort"), None);
    }
}
