//! [`Analyzer`]: what a trace looks like to a cache, in one streaming pass:
//! reuse and stack distances, popularity and its Zipf fit, one-hit wonders,
//! sizes, and request rate, bytes, sizes and read/write mix per time window.
//!
//! Keys are the accesses a [`Splitter`] makes of the requests (objects, start
//! sectors or blocks), so the numbers describe what `cairn sim` replays with
//! the same unit. Distances count accesses (one per request, except in block
//! mode, where a request is one access per block it touches):
//!
//! - **reuse distance** (reuse time): accesses since the key's previous
//!   access, itself included: a loop over `N` keys gives `N` (libCacheSim's
//!   `vtime_since_last_access`);
//! - **stack distance**: distinct *other* keys accessed since the key's
//!   previous access: a loop over `N` keys gives `N − 1`, and an LRU cache of
//!   `C` objects hits exactly the accesses whose stack distance is below `C`.
//!   Exact, from the miss-ratio curve's Fenwick tree ([`StackDistances`]).
//!
//! Both are kept as [`Log2Histogram`]s; a first access has neither. Popularity
//! is the rank-frequency table of the keys' access counts, with the Zipf
//! exponent fitted by least squares on `ln count = −α ln rank + c` over every
//! rank `1..=keys`, as libCacheSim 0.3.5's analyzer fits it (the tail of keys
//! seen once weighs in; a trace whose head alone is Zipf fits a smaller α).
//!
//! Windows are `window_us` long from the first request's time. A request
//! earlier than one before it counts in the latest window reached, so windows
//! stay in order. Per window: requests, reads, writes, bytes, distinct keys,
//! keys never seen before, and one-hit keys (accessed exactly once in the
//! window).
//!
//! Memory: per distinct key, one map entry of 32 bytes (key, position, last
//! access, counts) and the Fenwick tree's 16 to 32 bytes, with table slack
//! and compaction about 150 bytes at the peak (114 MiB for 763,661 keys);
//! per window, 104 bytes; at most [`WINDOWS_MAX`] windows. Time: `O(log
//! keys)` per access.

use cairn_policy::Access;
use cairn_trace::stats::{SIZE_BUCKETS, size_bucket};
use cairn_trace::{Request, Splitter, Unit};
use serde::{Deserialize, Serialize};

use crate::mrc::StackDistances;
use crate::size::CapacityUnit;
use crate::{Result, SimError};

/// Buckets of a [`Log2Histogram`]: 0, then `[2^(b−1), 2^b)` for `b` in 1..=64.
pub const DISTANCE_BUCKETS: usize = 65;

/// The most windows an analysis keeps (a longer trace needs a longer window).
pub const WINDOWS_MAX: usize = 1 << 20;

/// About how many windows [`default_window_us`] cuts a trace's span into.
pub const DEFAULT_WINDOWS: u64 = 100;

/// Counts of non-negative integers in powers of two.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Log2Histogram {
    /// `counts[0]` counts zeros; `counts[b]` counts values in `[2^(b−1), 2^b)`
    /// (see [`Log2Histogram::bounds`]). Empty buckets after the last non-empty
    /// one are left out.
    pub counts: Vec<u64>,
    /// Values counted.
    pub total: u64,
    /// Their mean (0 when none).
    pub mean: f64,
    /// The largest (0 when none).
    pub max: u64,
    /// Sum of the values (for the mean).
    #[serde(skip)]
    sum: u128,
}

impl Log2Histogram {
    fn empty() -> Self {
        Self {
            counts: vec![0; DISTANCE_BUCKETS],
            ..Self::default()
        }
    }

    /// The bucket of `value`.
    #[inline]
    pub fn bucket(value: u64) -> usize {
        (u64::BITS - value.leading_zeros()) as usize
    }

    /// The smallest and largest value of bucket `b`.
    pub fn bounds(b: usize) -> (u64, u64) {
        match b {
            0 => (0, 0),
            64.. => (1 << 63, u64::MAX),
            b => (1 << (b - 1), (1 << b) - 1),
        }
    }

    #[inline]
    fn add(&mut self, value: u64) {
        self.counts[Self::bucket(value)] += 1;
        self.total += 1;
        self.sum += u128::from(value);
        self.max = self.max.max(value);
    }

    fn finish(&mut self) {
        let used = self
            .counts
            .iter()
            .rposition(|&c| c > 0)
            .map_or(0, |b| b + 1);
        self.counts.truncate(used);
        self.mean = if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        };
    }

    /// How many values are below `2^k` (a bucket boundary).
    pub fn below_power_of_two(&self, k: u32) -> u64 {
        self.counts.iter().take(k as usize + 1).sum()
    }
}

/// `keys` keys were accessed `accesses` times each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frequency {
    /// Accesses per key.
    pub accesses: u64,
    /// Keys with that many.
    pub keys: u64,
}

/// A least-squares line through `(ln rank, ln accesses)`: `accesses ∝ rank^−alpha`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZipfFit {
    /// The Zipf exponent: minus the slope.
    pub alpha: f64,
    /// The intercept `c` of `ln accesses = −alpha ln rank + c`.
    pub intercept: f64,
    /// The coefficient of determination of the fit (0 when every key has the
    /// same count: there is nothing to explain).
    pub r2: f64,
    /// The fit covers ranks `1..=ranks`: every key.
    pub ranks: u64,
}

/// One time window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Start, in µs after the first request.
    pub start_us: u64,
    /// Requests.
    pub requests: u64,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Distinct keys accessed.
    pub keys: u64,
    /// Keys accessed for the first time in the trace.
    pub new_keys: u64,
    /// Keys accessed exactly once in this window.
    pub one_hit_keys: u64,
    /// Requests per second (over the whole window, the last one included).
    pub requests_per_s: f64,
    /// Mean request size in bytes (0 when empty).
    pub mean_size_bytes: f64,
    /// Share of the requests that read (0 when empty).
    pub read_fraction: f64,
    /// `one_hit_keys / keys` (0 when empty).
    pub one_hit_fraction: f64,
}

/// What [`Analyzer`] found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// The window length, µs.
    pub window_us: u64,
    /// Requests.
    pub requests: u64,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Accesses (requests split into keys; equal to `requests` but in block mode).
    pub accesses: u64,
    /// Distinct keys (also the accesses with no reuse or stack distance).
    pub keys: u64,
    /// Time of the first request, µs.
    pub time_first_us: u64,
    /// The latest request time, µs.
    pub time_last_us: u64,
    /// Accesses since each reused key's previous access.
    pub reuse_distance: Log2Histogram,
    /// Distinct other keys since each reused key's previous access.
    pub stack_distance: Log2Histogram,
    /// The rank-frequency table, most accessed first: ranks `1..=keys` of
    /// the first entry are its keys, and so on.
    pub frequencies: Vec<Frequency>,
    /// The Zipf fit over every rank (none with fewer than two keys).
    pub zipf: Option<ZipfFit>,
    /// Keys accessed exactly once in the whole trace.
    pub one_hit_keys: u64,
    /// `one_hit_keys / keys`.
    pub one_hit_fraction: f64,
    /// Requests by size: `request_sizes[i]` counts sizes in `(2^(i−1), 2^i]`
    /// (as `trace stats`), empty buckets at the end left out.
    pub request_sizes: Vec<u64>,
    /// Keys by size at their first access, bucketed as `request_sizes`.
    pub object_sizes: Vec<u64>,
    /// Sum over keys of the size at their first access.
    pub object_bytes: u64,
    /// The time windows, in order.
    pub windows: Vec<Window>,
}

impl Analysis {
    /// Last minus first request time, µs.
    pub fn span_us(&self) -> u64 {
        self.time_last_us - self.time_first_us
    }

    /// Mean request size, bytes.
    pub fn mean_request_bytes(&self) -> f64 {
        (self.bytes_read + self.bytes_written) as f64 / self.requests.max(1) as f64
    }

    /// Mean key size at first access, bytes.
    pub fn mean_object_bytes(&self) -> f64 {
        self.object_bytes as f64 / self.keys.max(1) as f64
    }
}

/// Per-key counters, beside the key's stack position.
#[derive(Clone, Copy, Debug, Default)]
struct KeyState {
    /// Index of the key's latest access.
    last: u64,
    /// Accesses so far (saturating).
    count: u32,
    /// `window << 1 | 1` if accessed more than once in the window it was
    /// last accessed in, `window << 1` if once.
    window: u32,
}

/// Builds an [`Analysis`] one request at a time.
#[derive(Debug)]
pub struct Analyzer {
    splitter: Splitter,
    window_us: u64,
    buffer: Vec<Access>,
    distances: StackDistances<KeyState>,
    accesses: u64,
    requests: u64,
    reads: u64,
    writes: u64,
    bytes_read: u64,
    bytes_written: u64,
    time_first_us: u64,
    time_last_us: u64,
    reuse: Log2Histogram,
    stack: Log2Histogram,
    request_sizes: Vec<u64>,
    object_sizes: Vec<u64>,
    object_bytes: u64,
    windows: Vec<Window>,
}

impl Analyzer {
    /// An analyzer keying requests by `unit`, in windows of `window_us` µs
    /// (at least 1).
    pub fn new(unit: Unit, window_us: u64) -> Result<Self> {
        if window_us == 0 {
            return Err(SimError::Analysis {
                reason: "the window must be at least 1 µs long".into(),
            });
        }
        Ok(Self {
            splitter: Splitter::new(unit),
            window_us,
            buffer: Vec::new(),
            distances: StackDistances::new(CapacityUnit::Objects),
            accesses: 0,
            requests: 0,
            reads: 0,
            writes: 0,
            bytes_read: 0,
            bytes_written: 0,
            time_first_us: 0,
            time_last_us: 0,
            reuse: Log2Histogram::empty(),
            stack: Log2Histogram::empty(),
            request_sizes: vec![0; SIZE_BUCKETS],
            object_sizes: vec![0; SIZE_BUCKETS],
            object_bytes: 0,
            windows: Vec::new(),
        })
    }

    /// Requests added so far.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Counts one request; an error when it falls [`WINDOWS_MAX`] windows or
    /// more after the first.
    pub fn add(&mut self, request: &Request) -> Result<()> {
        if self.requests == 0 {
            self.time_first_us = request.time_us;
            self.time_last_us = request.time_us;
        }
        self.time_last_us = self.time_last_us.max(request.time_us);
        let index = (request.time_us.saturating_sub(self.time_first_us) / self.window_us)
            .max(self.windows.len().saturating_sub(1) as u64);
        if index >= WINDOWS_MAX as u64 {
            return Err(SimError::Analysis {
                reason: format!(
                    "the trace spans more than {WINDOWS_MAX} windows of {} s; give a longer window",
                    self.window_us as f64 / 1e6
                ),
            });
        }
        let w = index as usize;
        while self.windows.len() <= w {
            let start_us = self.windows.len() as u64 * self.window_us;
            self.windows.push(Window {
                start_us,
                ..Window::default()
            });
        }
        self.requests += 1;
        let bytes = u64::from(request.size);
        let window = &mut self.windows[w];
        window.requests += 1;
        match request.op {
            cairn_policy::Op::Read => {
                self.reads += 1;
                self.bytes_read += bytes;
                window.reads += 1;
                window.bytes_read += bytes;
            }
            cairn_policy::Op::Write => {
                self.writes += 1;
                self.bytes_written += bytes;
                window.writes += 1;
                window.bytes_written += bytes;
            }
        }
        self.request_sizes[size_bucket(request.size)] += 1;
        self.buffer.clear();
        self.splitter.split(request, &mut self.buffer);
        let mark = (w as u32) << 1;
        for access in &self.buffer {
            let at = self.accesses;
            self.accesses += 1;
            let (distance, state) = self.distances.access_with(access.key, access.size);
            match distance {
                None => {
                    *state = KeyState {
                        last: at,
                        count: 1,
                        window: mark,
                    };
                    window.keys += 1;
                    window.new_keys += 1;
                    window.one_hit_keys += 1;
                    self.object_sizes[size_bucket(access.size)] += 1;
                    self.object_bytes += u64::from(access.size);
                }
                Some(distance) => {
                    self.reuse.add(at - state.last);
                    // The tree's distance counts the key itself.
                    self.stack.add(distance - 1);
                    state.last = at;
                    state.count = state.count.saturating_add(1);
                    if state.window >> 1 != mark >> 1 {
                        state.window = mark;
                        window.keys += 1;
                        window.one_hit_keys += 1;
                    } else if state.window & 1 == 0 {
                        state.window |= 1;
                        window.one_hit_keys -= 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// The analysis of the requests added; an error when there were none.
    pub fn finish(self) -> Result<Analysis> {
        if self.requests == 0 {
            return Err(SimError::Analysis {
                reason: "the trace holds no requests: nothing to analyze".into(),
            });
        }
        let mut counts: Vec<u32> = self.distances.values().map(|s| s.count).collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let mut frequencies: Vec<Frequency> = Vec::new();
        for &count in &counts {
            match frequencies.last_mut() {
                Some(last) if last.accesses == u64::from(count) => last.keys += 1,
                _ => frequencies.push(Frequency {
                    accesses: u64::from(count),
                    keys: 1,
                }),
            }
        }
        let zipf = zipf_fit(&frequencies);
        let keys = counts.len() as u64;
        let one_hit_keys = frequencies
            .last()
            .filter(|f| f.accesses == 1)
            .map_or(0, |f| f.keys);
        let window_s = self.window_us as f64 / 1e6;
        let mut windows = self.windows;
        for window in &mut windows {
            let requests = window.requests.max(1) as f64;
            window.requests_per_s = window.requests as f64 / window_s;
            window.mean_size_bytes = (window.bytes_read + window.bytes_written) as f64 / requests;
            window.read_fraction = window.reads as f64 / requests;
            window.one_hit_fraction = window.one_hit_keys as f64 / window.keys.max(1) as f64;
        }
        let mut reuse = self.reuse;
        let mut stack = self.stack;
        reuse.finish();
        stack.finish();
        let trim = |mut v: Vec<u64>| {
            v.truncate(v.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1));
            v
        };
        Ok(Analysis {
            window_us: self.window_us,
            requests: self.requests,
            reads: self.reads,
            writes: self.writes,
            bytes_read: self.bytes_read,
            bytes_written: self.bytes_written,
            accesses: self.accesses,
            keys,
            time_first_us: self.time_first_us,
            time_last_us: self.time_last_us,
            reuse_distance: reuse,
            stack_distance: stack,
            frequencies,
            zipf,
            one_hit_keys,
            one_hit_fraction: one_hit_keys as f64 / keys.max(1) as f64,
            request_sizes: trim(self.request_sizes),
            object_sizes: trim(self.object_sizes),
            object_bytes: self.object_bytes,
            windows,
        })
    }
}

/// Least squares through `(ln rank, ln accesses)` over every rank.
fn zipf_fit(frequencies: &[Frequency]) -> Option<ZipfFit> {
    let (mut n, mut sx, mut sy, mut sxx, mut sxy, mut syy) = (0u64, 0.0, 0.0, 0.0, 0.0, 0.0);
    for f in frequencies {
        let y = (f.accesses as f64).ln();
        for _ in 0..f.keys {
            n += 1;
            let x = (n as f64).ln();
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
            syy += y * y;
        }
    }
    if n < 2 {
        return None;
    }
    let m = n as f64;
    let denominator = m * sxx - sx * sx;
    let slope = (m * sxy - sx * sy) / denominator;
    let intercept = (sy * sxx - sx * sxy) / denominator;
    let r = (sxy - sx * sy / m) / ((sxx - sx * sx / m) * (syy - sy * sy / m)).sqrt();
    Some(ZipfFit {
        alpha: -slope,
        intercept,
        r2: if r.is_finite() { r * r } else { 0.0 },
        ranks: n,
    })
}

/// Analyzes `requests` keyed by `unit` in windows of `window_us` µs.
pub fn analyze(
    requests: impl IntoIterator<Item = cairn_trace::Result<Request>>,
    unit: Unit,
    window_us: u64,
) -> Result<Analysis> {
    let mut analyzer = Analyzer::new(unit, window_us)?;
    for request in requests {
        analyzer.add(&request?)?;
    }
    analyzer.finish()
}

/// When a trace's requests happen: what [`default_window_us`] needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeSpan {
    /// Latest minus first request time, µs.
    pub span_us: u64,
    /// The greatest common divisor of the times after the first, µs: the
    /// trace's clock tick (1 s for oracleGeneral, whose times are whole
    /// seconds); 0 when every request has the first's time.
    pub tick_us: u64,
}

/// The [`TimeSpan`] of `requests`: a pass that only reads times.
pub fn time_span(
    requests: impl IntoIterator<Item = cairn_trace::Result<Request>>,
) -> Result<TimeSpan> {
    let mut first = None;
    let mut span = TimeSpan::default();
    for request in requests {
        let time = request?.time_us;
        let first = *first.get_or_insert(time);
        let offset = time.saturating_sub(first);
        span.span_us = span.span_us.max(offset);
        if span.tick_us != 1 {
            span.tick_us = gcd(span.tick_us, offset);
        }
    }
    Ok(span)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A round window length cutting `span` into at most about
/// [`DEFAULT_WINDOWS`] windows, and no shorter than its clock tick: 1, 2 or
/// 5 × 10^k µs under a second; 1, 2, 5, 10, 15 or 30 s, 1, 2, 5, 10, 15 or
/// 30 min, 1, 2, 3, 6 or 12 h, or whole days above. A tick that is not
/// round itself is taken as is.
pub fn default_window_us(span: TimeSpan) -> u64 {
    const SECOND: u64 = 1_000_000;
    const ROUND_S: [u64; 17] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200,
    ];
    let target = span.span_us.div_ceil(DEFAULT_WINDOWS).max(1);
    let round = if target < SECOND {
        let mut decade = 1;
        'found: loop {
            for step in [1, 2, 5] {
                if step * decade >= target {
                    break 'found step * decade;
                }
            }
            decade *= 10;
        }
    } else {
        ROUND_S
            .iter()
            .map(|s| s * SECOND)
            .find(|&w| w >= target)
            .unwrap_or_else(|| target.div_ceil(86_400 * SECOND) * 86_400 * SECOND)
    };
    if round.is_multiple_of(span.tick_us.max(1)) {
        round
    } else if span.tick_us > round {
        span.tick_us
    } else {
        round.div_ceil(span.tick_us) * span.tick_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_policy::Op;

    fn request(time_us: u64, object: u64, op: Op) -> Request {
        Request {
            time_us,
            object,
            size: 100,
            op,
            ..Request::default()
        }
    }

    #[test]
    fn one_hit_wonders_and_windows_by_hand() {
        // Window 0 (t < 10): 1 2 1 3 — keys {1, 2, 3}, once: {2, 3}.
        // Window 1: 1 4 4 5, then a late request (t = 5) for 6 that counts
        // in window 1 — keys {1, 4, 5, 6}, once: {1, 5, 6}, new: {4, 5, 6}.
        // Whole trace: 1 ×3, 2, 3, 4 ×2, 5, 6 — once: {2, 3, 5, 6}.
        let trace = [
            (0, 1, Op::Read),
            (1, 2, Op::Write),
            (2, 1, Op::Read),
            (3, 3, Op::Read),
            (10, 1, Op::Read),
            (11, 4, Op::Write),
            (12, 4, Op::Read),
            (15, 5, Op::Read),
            (5, 6, Op::Read),
        ];
        let analysis = analyze(
            trace.map(|(t, k, op)| Ok(request(t, k, op))),
            Unit::Object,
            10,
        )
        .unwrap();
        assert_eq!((analysis.keys, analysis.one_hit_keys), (6, 4));
        assert!((analysis.one_hit_fraction - 4.0 / 6.0).abs() < 1e-12);
        let w = &analysis.windows;
        assert_eq!(w.len(), 2);
        assert_eq!(
            (
                w[0].requests,
                w[0].reads,
                w[0].writes,
                w[0].keys,
                w[0].new_keys
            ),
            (4, 3, 1, 3, 3)
        );
        assert_eq!(w[0].one_hit_keys, 2);
        assert_eq!(
            (w[1].requests, w[1].keys, w[1].new_keys, w[1].one_hit_keys),
            (5, 4, 3, 3)
        );
        assert_eq!(w[1].start_us, 10);
        assert!((w[1].read_fraction - 0.8).abs() < 1e-12);
        assert!((w[1].requests_per_s - 5e5).abs() < 1e-6);
        // Reuses: 1 after 2 accesses (stack 1: key 2), 1 after 2 (stack 1:
        // key 3), 4 after 1 (stack 0).
        assert_eq!(analysis.reuse_distance.counts, [0, 1, 2]);
        assert_eq!(analysis.stack_distance.counts, [1, 2]);
        assert_eq!(
            analysis.frequencies,
            [(3, 1), (2, 1), (1, 4)].map(|(accesses, keys)| Frequency { accesses, keys })
        );
    }

    #[test]
    fn histogram_buckets_are_powers_of_two() {
        assert_eq!(Log2Histogram::bucket(0), 0);
        assert_eq!(Log2Histogram::bucket(1), 1);
        assert_eq!(Log2Histogram::bucket(3), 2);
        assert_eq!(Log2Histogram::bucket(4), 3);
        assert_eq!(Log2Histogram::bucket(u64::MAX), 64);
        for b in 0..DISTANCE_BUCKETS {
            let (low, high) = Log2Histogram::bounds(b);
            assert_eq!(Log2Histogram::bucket(low), b);
            assert_eq!(Log2Histogram::bucket(high), b);
        }
    }

    #[test]
    fn default_windows_are_round_and_about_a_hundredth_of_the_span() {
        let us = |span_us| TimeSpan {
            span_us,
            tick_us: 1,
        };
        assert_eq!(default_window_us(TimeSpan::default()), 1);
        assert_eq!(default_window_us(us(9_000_000)), 100_000);
        assert_eq!(default_window_us(us(7_200_000_000)), 120_000_000);
        let day = 86_400_000_000;
        assert_eq!(default_window_us(us(30 * day)), day / 2);
        assert_eq!(default_window_us(us(365 * day)), 4 * day);
        for span in [1, 999, 12_345_678, 1 << 40] {
            let window = default_window_us(us(span));
            assert!(span / window <= DEFAULT_WINDOWS, "{span}: {window}");
        }
        // Whole seconds (oracleGeneral) over 9 s: 1 s, not 100 ms.
        let seconds = TimeSpan {
            span_us: 9_000_000,
            tick_us: 1_000_000,
        };
        assert_eq!(default_window_us(seconds), 1_000_000);
        // A 3 µs tick rounds a 2 µs window up to 3, a 20 µs one to 21.
        let odd = |span_us| TimeSpan {
            span_us,
            tick_us: 3,
        };
        assert_eq!(default_window_us(odd(150)), 3);
        assert_eq!(default_window_us(odd(2000)), 21);
        let times = [5, 8, 11, 20].map(|t| Ok(request(t, 1, Op::Read)));
        assert_eq!(
            time_span(times).unwrap(),
            TimeSpan {
                span_us: 15,
                tick_us: 3
            }
        );
    }

    #[test]
    fn no_requests_and_a_zero_window_are_errors() {
        let empty = analyze(std::iter::empty(), Unit::Object, 1).unwrap_err();
        assert!(empty.to_string().contains("no requests"), "{empty}");
        assert!(Analyzer::new(Unit::Object, 0).is_err());
        let far = analyze(
            [0, WINDOWS_MAX as u64].map(|t| Ok(request(t, 1, Op::Read))),
            Unit::Object,
            1,
        )
        .unwrap_err();
        assert!(far.to_string().contains("longer window"), "{far}");
    }
}
