//! Whether a replay gives a policy its [`Policy::prefetch`] hints, decided
//! by timing the replay both ways.
//!
//! A hint starts loading the index slot and node of a key some accesses
//! ahead, so a policy whose structures do not fit in the CPU's caches finds
//! them there when the access comes. Where they do fit, a hint is pure cost:
//! it hashes the key and probes again. Where the crossover lies depends on
//! the machine, the policy and the trace: LRU on a 10M-request Zipf trace
//! broke even near 152K keys on a 2 MiB-L2 Xeon and near 300K on a 1 MiB-L2
//! EPYC whose 32 MiB L3 kept 76K keys' structures close (hints there made
//! runs 25–40 % slower; a rule of one key per 16 bytes of L2 had them on).
//! No static rule fits every machine, so the replay measures.
//!
//! [`HintTuner`]: below [`MIN_KEYS`] residents hints stay off and nothing is
//! timed. From there the batches are timed in periods of at least
//! [`PERIOD_ACCESSES`] (one single-threaded batch of 1,024 accesses, ~25 µs,
//! is too short to time against the noise of the machine and of the trace;
//! a threaded replay's chunk of 65,536 is a period alone). The first period
//! runs without hints, the second with; from then on each period runs the
//! way that costs less per access, but one in [`EXPLORE_EVERY`] runs the
//! other, so that a change (the cache filling, the trace's phase) is seen.
//! The noise of timing is one-sided, a period slowed by the machine being
//! busy elsewhere and never sped up, so the way being run costs the least of
//! its last [`RECENT`] periods (one slow period moves nothing; a real
//! slowdown shows once it fills them), and each exploration of the other
//! way replaces that way's figure with its own. Hints never change what a
//! policy decides, so the choice moves only the time.
//!
//! [`Policy::prefetch`]: cairn_policy::Policy::prefetch

/// Residents below which hints stay off untimed: a policy this small sits in
/// the core's own caches, where a hint can only cost.
pub(crate) const MIN_KEYS: usize = 1 << 14;

/// Accesses timed together, all run the same way (whole batches: a period
/// ends with the batch that reaches this).
pub(crate) const PERIOD_ACCESSES: u64 = 8192;

/// One period in this many runs the way that costs more.
pub(crate) const EXPLORE_EVERY: u64 = 32;

/// Periods of the way being run whose least cost is its cost.
pub(crate) const RECENT: usize = 4;

/// The latest costs of one way, nanoseconds per access; an empty place
/// holds infinity.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Recent {
    samples: [f64; RECENT],
    next: usize,
}

impl Default for Recent {
    fn default() -> Self {
        Self {
            samples: [f64::INFINITY; RECENT],
            next: 0,
        }
    }
}

impl Recent {
    fn push(&mut self, sample: f64) {
        self.samples[self.next] = sample;
        self.next = (self.next + 1) % RECENT;
    }

    fn replace(&mut self, sample: f64) {
        *self = Recent::default();
        self.push(sample);
    }

    /// The least of the costs held, if any.
    fn cost(&self) -> Option<f64> {
        let least = self.samples.iter().copied().fold(f64::INFINITY, f64::min);
        least.is_finite().then_some(least)
    }
}

/// The choice for one policy instance (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct HintTuner {
    /// Periods begun.
    periods: u64,
    /// The way of the period under way: with hints or not.
    hints: bool,
    /// Whether that is the way that costs more (its cost is replaced, not
    /// added to).
    exploring: bool,
    /// Nanoseconds and accesses of the period under way.
    period: (u64, u64),
    /// Without hints (`[0]`) and with (`[1]`).
    recent: [Recent; 2],
}

impl HintTuner {
    /// How the next batch runs for a policy holding `keys` units: `None`
    /// untimed without hints, `Some(hints)` timed (report it with
    /// [`HintTuner::record`]).
    pub(crate) fn choose(&mut self, keys: usize) -> Option<bool> {
        if keys < MIN_KEYS {
            return None;
        }
        if self.period.1 == 0 {
            let period = self.periods;
            self.periods += 1;
            (self.hints, self.exploring) = match self.recent.map(|way| way.cost()) {
                [None, _] => (false, false),
                [_, None] => (true, true),
                [Some(off), Some(on)] => {
                    let exploring = period % EXPLORE_EVERY == EXPLORE_EVERY - 1;
                    ((on < off) != exploring, exploring)
                }
            };
        }
        Some(self.hints)
    }

    /// The timed batch [`HintTuner::choose`] chose: `accesses` replayed in
    /// `nanos`.
    pub(crate) fn record(&mut self, nanos: u64, accesses: usize) {
        self.period.0 = self.period.0.saturating_add(nanos);
        self.period.1 += accesses as u64;
        if self.period.1 < PERIOD_ACCESSES {
            return;
        }
        let sample = self.period.0 as f64 / self.period.1 as f64;
        self.period = (0, 0);
        let way = &mut self.recent[usize::from(self.hints)];
        if self.exploring {
            way.replace(sample);
        } else {
            way.push(sample);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches of 1,024 accesses in a period.
    const PERIOD: u64 = PERIOD_ACCESSES / 1024;

    /// Runs `periods` periods at the given nanoseconds per access; returns
    /// how many ran with hints.
    fn run(tuner: &mut HintTuner, periods: u64, off: u64, on: u64) -> u64 {
        let mut with = 0;
        for _ in 0..periods * PERIOD {
            let hints = tuner.choose(MIN_KEYS).expect("timed at MIN_KEYS");
            with += u64::from(hints);
            tuner.record(1024 * if hints { on } else { off }, 1024);
        }
        assert_eq!(with % PERIOD, 0, "a period runs one way");
        with / PERIOD
    }

    #[test]
    fn a_small_policy_gets_no_hints_and_no_timing() {
        let mut tuner = HintTuner::default();
        assert_eq!(tuner.choose(MIN_KEYS - 1), None);
        assert_eq!(tuner.periods, 0);
    }

    #[test]
    fn the_faster_way_wins_and_the_other_is_still_tried() {
        let mut tuner = HintTuner::default();
        // A period without hints, then one with; hints cost 50 ns an access
        // against 80.
        assert_eq!(run(&mut tuner, 1, 80, 50), 0);
        assert_eq!(run(&mut tuner, 1, 80, 50), 1);
        assert_eq!(
            run(&mut tuner, 160, 80, 50),
            155,
            "one period in 32 runs without hints"
        );
        // The machine changes: hints now cost more than going without. The
        // next period without them sees it, and they stay off but for one
        // period in 32.
        assert_eq!(run(&mut tuner, 32, 40, 50), 29);
        assert_eq!(run(&mut tuner, 160, 40, 50), 5);
        // Going without gets dearer than hints were: seen once it fills
        // RECENT periods, not at the next exploration.
        assert_eq!(run(&mut tuner, RECENT as u64 + 1, 60, 50), 1);
    }

    #[test]
    fn one_slow_period_moves_nothing() {
        let mut tuner = HintTuner::default();
        run(&mut tuner, 2, 30, 45);
        assert_eq!(run(&mut tuner, 3, 30, 45), 0);
        // One period without hints is slowed to 200 ns an access.
        assert_eq!(run(&mut tuner, 1, 200, 45), 0);
        assert_eq!(run(&mut tuner, 20, 30, 45), 0, "still off");
    }

    #[test]
    fn one_slow_batch_does_not_decide_alone() {
        let mut tuner = HintTuner::default();
        run(&mut tuner, 2, 80, 50);
        // One batch with hints ten times slower: its period still costs
        // less than one without (57 < 80 on average).
        for batch in 0..PERIOD {
            assert_eq!(tuner.choose(MIN_KEYS), Some(true));
            let nanos = if batch == 0 { 1024 * 500 } else { 1024 * 50 };
            tuner.record(nanos, 1024);
        }
        assert_eq!(
            run(&mut tuner, 10, 80, 50),
            10,
            "periods 3 to 12 explore none"
        );
    }

    #[test]
    fn empty_batches_change_nothing() {
        let mut tuner = HintTuner::default();
        for _ in 0..PERIOD {
            tuner.choose(MIN_KEYS);
            tuner.record(5, 0);
        }
        assert_eq!(tuner.recent, [Recent::default(); 2]);
        assert_eq!(tuner.periods, PERIOD, "each empty batch begins anew");
    }

    #[test]
    fn a_chunk_larger_than_a_period_is_a_period() {
        let mut tuner = HintTuner::default();
        for (hints, nanos) in [(false, 80), (true, 50), (true, 50)] {
            assert_eq!(tuner.choose(MIN_KEYS), Some(hints));
            tuner.record(65_536 * nanos, 65_536);
        }
        assert_eq!(tuner.periods, 3);
    }
}
