//! Mithril: mine which units are missed together, and load them together.
//!
//! Reference: J. Yang, R. Karimi, T. Sæmundsson, A. Wildani and Y. Vigfusson,
//! "Mithril: Mining Sporadic Associations for Cache Prefetching", ACM `SoCC`
//! 2017; as libCacheSim has it (`cache/prefetch/Mithril.c`, Juncheng Yang
//! 2016, Zhelong 2023).
//!
//! Sequential prefetchers see runs; Mithril finds *sporadic* associations:
//! units that are requested close together in time, again and again, without
//! being neighbours. It keeps, for recently missed units, the logical times of
//! their last few requests (15-bit timestamps, four to a 64-bit word):
//!
//! - The **recording table** is a ring of `n` rows. A unit enters it at its
//!   first recorded request. When it has `min_support` timestamps, it moves to
//!   the mining table. When the ring wraps, the oldest rows are dropped.
//! - The **mining table** holds units with between `min_support` and
//!   `max_support` timestamps. A unit recorded a `max_support + 1`-th time is
//!   too frequent to say anything, and it is dropped.
//! - **Mining** runs when the mining table holds `mining_threshold /
//!   min_support` units. It sorts them by first timestamp. A pair (a, b),
//!   with b's first request at most `lookahead_range` after a's, is
//!   associated when:
//!   - their timestamp counts differ by at most `confidence`, and
//!   - at most `confidence` of their paired timestamps lie further apart than
//!     `lookahead_range`, and
//!   - one pair lies exactly 1 apart, or b is the first candidate after a.
//!
//!   Each association `a → b` enters the **prefetch table**: a row per unit a
//!   with up to `pf_list_size` units, the oldest replaced first. The mining
//!   table then empties.
//! - After each access to a, the units in a's row are loaded.
//!
//! Recording happens on misses (`record = "miss"`, the default) or on every
//! request (`"each_request"`). Memory is bounded as libCacheSim bounds it.
//! The budget is `max_metadata_fraction` × the cache's capacity in bytes; a
//! capacity in objects counts `unit_bytes` per object (libCacheSim's
//! `block-size`). The recording ring gets 2 % of that capacity, and the
//! prefetch table grows in shards of 2,000 rows while the budget lasts. Then
//! it reuses its rows, oldest first.
//!
//! Where this follows libCacheSim (aa0fc40) to the bit:
//! - The 15-bit timestamps wrap, and the mining sort sees them wrapped.
//! - libCacheSim reads a pair's 4th and 8th timestamps through a macro
//!   (`GET_NTH_TS`) that yields the word's timestamp count instead; this
//!   reads them the same way, so the same pairs associate.
//! - The recording ring moves its last row into a matured row's place, as
//!   libCacheSim's does.
//!
//! With `cycle-time=1`, libCacheSim's miss counts equal ours
//! (`libcachesim_agreement.rs`). Where it differs:
//! - **Second chance.** libCacheSim's default `cycle-time=2` re-inserts a
//!   prefetched unit that is evicted before its first use, once. It does so
//!   from inside the policy's eviction, a hook that `Policy` does not offer.
//!   Ours has no second chance.
//! - **Sequential prefetching** (`sequential-type`) and recording on eviction
//!   (`rec-trigger=evict`) are not offered; they need the cache's contents.
//! - **Keys.** libCacheSim stores prefetch targets as 32-bit integers, with 0
//!   for "empty". Ours keeps 64-bit keys, and unit 0 is a unit like any other.
//! - **Small caches.** libCacheSim aborts when the budget is below one
//!   prefetch shard's worth; ours keeps one shard and a ring of at least two
//!   rows.

use serde::{Deserialize, Serialize};

use super::Prefetcher;
use crate::{Capacity, ConfigError, KeyMap};

/// Rows in a shard of the prefetch table (libCacheSim's
/// `PREFETCH_TABLE_SHARD_SIZE`).
const SHARD_ROWS: usize = 2000;

/// The recording ring's share of the cache's capacity in bytes
/// (`RECORDING_TABLE_MAXIMAL`).
const RECORDING_FRACTION: f64 = 0.02;

/// The bits of a timestamp.
const TS_BITS: u64 = 15;
const TS_MASK: u64 = (1 << TS_BITS) - 1;

/// When Mithril records a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// Only requests that missed (libCacheSim's `rec-trigger=miss`).
    Miss,
    /// Every request (`rec-trigger=each_req`).
    EachRequest,
}

/// Mithril's parameters (libCacheSim's defaults, except `unit_bytes`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MithrilConfig {
    /// How far apart in requests two associated units may be. 1 ..= 100;
    /// default 20.
    pub lookahead_range: u32,
    /// Timestamps a unit needs before it is mined. 1 ..= `max_support`;
    /// default 2.
    pub min_support: u32,
    /// Timestamps beyond which a unit is too frequent to mine. 1 ..= 64;
    /// default 8.
    pub max_support: u32,
    /// How many timestamps two associated units may disagree on. 1 ..= 100;
    /// default 1.
    pub confidence: u32,
    /// Units loaded after a unit, at most. 1 ..= 100; default 2.
    pub pf_list_size: u32,
    /// Which requests are recorded. Default `"miss"`.
    pub record: Record,
    /// The tables' budget as a fraction of the cache's capacity in bytes.
    /// (0, 1); default 0.1.
    pub max_metadata_fraction: f64,
    /// Timestamps mined at once: mining runs when `mining_threshold /
    /// min_support` units are ready. `min_support` ..= 2^24; default 5120.
    pub mining_threshold: u32,
    /// Bytes an object counts for in the budget when the capacity is in
    /// objects (libCacheSim's `block-size`, whose default of 1 cannot build
    /// a table under a few hundred thousand objects). 1 ..= 2^30; default 4096.
    pub unit_bytes: u64,
}

impl Default for MithrilConfig {
    fn default() -> Self {
        Self {
            lookahead_range: 20,
            min_support: 2,
            max_support: 8,
            confidence: 1,
            pf_list_size: 2,
            record: Record::Miss,
            max_metadata_fraction: 0.1,
            mining_threshold: 5120,
            unit_bytes: 4096,
        }
    }
}

impl MithrilConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let out = |parameter, value: String, expected| {
            Err(ConfigError::OutOfRange {
                policy: "mithril",
                parameter,
                value,
                expected,
            })
        };
        let in_range = |value: u32, low: u32, high: u32| (low..=high).contains(&value);
        if !in_range(self.lookahead_range, 1, 100) {
            let value = self.lookahead_range.to_string();
            return out("lookahead_range", value, "in 1..=100");
        }
        if !in_range(self.max_support, 1, 64) {
            return out("max_support", self.max_support.to_string(), "in 1..=64");
        }
        if !in_range(self.min_support, 1, self.max_support) {
            let value = self.min_support.to_string();
            return out("min_support", value, "in 1..=max_support");
        }
        if !in_range(self.confidence, 1, 100) {
            return out("confidence", self.confidence.to_string(), "in 1..=100");
        }
        if !in_range(self.pf_list_size, 1, 100) {
            let value = self.pf_list_size.to_string();
            return out("pf_list_size", value, "in 1..=100");
        }
        if !in_range(self.mining_threshold, self.min_support, 1 << 24) {
            let value = self.mining_threshold.to_string();
            return out("mining_threshold", value, "in min_support..=2^24");
        }
        if !(1..=1 << 30).contains(&self.unit_bytes) {
            return out("unit_bytes", self.unit_bytes.to_string(), "in 1..=2^30");
        }
        if !(self.max_metadata_fraction > 0.0 && self.max_metadata_fraction < 1.0) {
            let value = self.max_metadata_fraction.to_string();
            return out("max_metadata_fraction", value, "in (0, 1)");
        }
        Ok(())
    }
}

/// How many timestamps a word holds (its top four bits).
fn count(word: u64) -> u64 {
    word >> 60
}

/// `word` with `ts` appended (its count must be below 4).
fn add_ts(word: u64, ts: u64) -> u64 {
    let n = count(word) + 1;
    let shift = TS_BITS * (4 - n);
    let cleared = word & !(TS_MASK << shift);
    ((cleared | ((ts & TS_MASK) << shift)) & ((1 << 60) - 1)) | (n << 60)
}

/// The `n`th timestamp (from 1) of a row of words, read as libCacheSim's
/// `GET_NTH_TS` reads it: word `1 + n / 5`, slot `n % 4`, where slot 0 is the
/// word's count (so the 4th and 8th "timestamps" are counts).
fn nth_ts(row: &[u64], n: usize) -> i64 {
    let word = row[1 + n / 5];
    let slot = (n % 4) as u64;
    ((word >> (TS_BITS * (4 - slot))) & TS_MASK) as i64
}

/// Timestamps in a row: the counts of its words up to the first empty one.
fn total_ts(row: &[u64]) -> i64 {
    let mut total = 0;
    for &word in &row[1..] {
        match count(word) {
            0 => break,
            n => total += n as i64,
        }
    }
    total
}

/// Appends `ts` to the first word of `row` with room; returns the timestamps
/// counted before it, up to and including that word (libCacheSim's
/// `timestamps_length`): all of them when every word is full.
fn append_ts(row: &mut [u64], ts: u64) -> u64 {
    let mut counted = 0;
    for word in &mut row[1..] {
        counted += count(*word);
        if count(*word) < 4 {
            *word = add_ts(*word, ts);
            break;
        }
    }
    counted
}

/// Where a recorded unit's row is.
#[derive(Clone, Copy, Debug)]
enum Row {
    Recording(usize),
    Mining(usize),
}

/// The Mithril prefetcher.
#[derive(Debug)]
pub struct Mithril {
    lookahead_range: i64,
    min_support: u64,
    max_support: u64,
    confidence: i64,
    pf_list_size: usize,
    record: Record,
    mining_threshold: u64,
    /// Units in the mining table that trigger mining.
    mining_rows: usize,
    /// Requests seen (the logical clock).
    ts: u64,
    /// Each recorded unit's row.
    rows: KeyMap<Row>,
    /// The recording ring: `recording_rows` rows of `recording_width` words
    /// (the unit, then its timestamps); row 0 is never used.
    recording: Vec<u64>,
    recording_width: usize,
    recording_rows: usize,
    /// The next row the ring fills.
    recording_at: usize,
    /// The mining table, `mining_width` words a row; `mining_len` rows used.
    mining: Vec<u64>,
    mining_width: usize,
    mining_len: usize,
    /// Units that matured since the last mining.
    ready: usize,
    /// The mining order (reused).
    order: Vec<u32>,
    /// The prefetch table: each source unit's row; a row is the source, then
    /// up to `pf_list_size` targets stored as key + 1 (0: empty). Row 0 and
    /// row 1 are never used, as in libCacheSim.
    targets: KeyMap<u32>,
    table: Vec<u64>,
    table_at: usize,
    table_full: bool,
    /// Metadata bytes counted so far, and the budget.
    metadata: i64,
    max_metadata: i64,
}

impl Mithril {
    /// A Mithril prefetcher for a cache of `capacity`.
    pub fn new(capacity: Capacity, config: &MithrilConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let capacity_bytes = match capacity {
            Capacity::Bytes(bytes) => bytes,
            Capacity::Objects(objects) => objects.saturating_mul(config.unit_bytes),
        } as f64;
        let min_support = u64::from(config.min_support);
        let max_support = u64::from(config.max_support);
        let pf_list_size = config.pf_list_size as usize;
        let mining_rows = (config.mining_threshold / config.min_support) as usize;
        let max_metadata = (capacity_bytes * config.max_metadata_fraction) as i64;
        let shards = (max_metadata / (SHARD_ROWS as i64 * pf_list_size as i64)).max(1);
        let mut metadata = (max_support as i64 * 2 + 12) * mining_rows as i64
            + shards * 8
            + SHARD_ROWS as i64 * (pf_list_size as i64 * 8 + 12);
        let recording_width = min_support.div_ceil(4) as usize + 1;
        let mining_width = max_support.div_ceil(4) as usize + 1;
        let mut recording_rows = 0;
        if max_support != 1 {
            let row_bytes = (min_support.div_ceil(2) * 2 + 12) as f64;
            recording_rows = (capacity_bytes * RECORDING_FRACTION / row_bytes) as usize;
            let words = (min_support as f64 / 4.0 + 1.0).ceil() as i64;
            metadata += (words * 8 + 4) * recording_rows as i64;
            recording_rows = recording_rows.max(2);
        }
        Ok(Self {
            lookahead_range: i64::from(config.lookahead_range),
            min_support,
            max_support,
            confidence: i64::from(config.confidence),
            pf_list_size,
            record: config.record,
            mining_threshold: u64::from(config.mining_threshold),
            mining_rows,
            ts: 0,
            rows: KeyMap::default(),
            recording: vec![0; recording_rows * recording_width],
            recording_width,
            recording_rows,
            recording_at: 1,
            mining: vec![0; (mining_rows + 1) * mining_width],
            mining_width,
            mining_len: 0,
            ready: 0,
            order: Vec::with_capacity(mining_rows + 1),
            targets: KeyMap::default(),
            table: vec![0; SHARD_ROWS * (pf_list_size + 1)],
            table_at: 1,
            table_full: false,
            metadata,
            max_metadata,
        })
    }

    fn recording_row(&mut self, row: usize) -> &mut [u64] {
        let width = self.recording_width;
        &mut self.recording[row * width..(row + 1) * width]
    }

    fn mining_row(&self, row: usize) -> &[u64] {
        &self.mining[row * self.mining_width..(row + 1) * self.mining_width]
    }

    fn mining_row_mut(&mut self, row: usize) -> &mut [u64] {
        let width = self.mining_width;
        &mut self.mining[row * width..(row + 1) * width]
    }

    /// Appends a row to the mining table: `words`, then zeros.
    fn push_mining(&mut self, words_from: MiningSource) {
        let at = self.mining_len;
        let width = self.mining_width;
        let mut row = [0u64; 17];
        match words_from {
            MiningSource::Recording(index) => {
                let source = self.recording_row(index);
                row[..source.len()].copy_from_slice(source);
            }
            MiningSource::Fresh(key, ts) => {
                row[0] = key;
                row[1] = add_ts(0, ts);
            }
        }
        self.mining_row_mut(at).copy_from_slice(&row[..width]);
        self.mining_len += 1;
        self.ready += 1;
    }

    /// Removes mining row `at`, moving the last row into its place
    /// (`g_array_remove_index_fast`).
    fn remove_mining(&mut self, at: usize) {
        let key = self.mining_row(at)[0];
        self.rows.remove(&key);
        let last = self.mining_len - 1;
        if at != last {
            let width = self.mining_width;
            self.mining
                .copy_within(last * width..(last + 1) * width, at * width);
            let moved = self.mining_row(at)[0];
            self.rows.insert(moved, Row::Mining(at));
        }
        self.mining_len = last;
        self.ready -= 1;
    }

    /// Adds a timestamp to mining row `at`, dropping the unit once it is too
    /// frequent.
    fn record_mining(&mut self, at: usize) {
        let ts = self.ts;
        let counted = append_ts(self.mining_row_mut(at), ts);
        if counted == self.max_support {
            self.remove_mining(at);
        }
    }

    /// Records a request for `key` (`_Mithril_record_entry`).
    fn record(&mut self, key: u64) {
        if self.min_support == 1 {
            self.record_min_support_one(key);
        } else {
            match self.rows.get(&key).copied() {
                None => self.record_new(key),
                Some(Row::Mining(at)) => self.record_mining(at),
                Some(Row::Recording(index)) => self.record_recording(key, index),
            }
        }
        let eager = self.min_support == 1 && self.ready as u64 > self.mining_threshold / 8;
        if self.ready >= self.mining_rows || eager {
            self.mine();
            self.ready = 0;
        }
    }

    fn record_min_support_one(&mut self, key: u64) {
        match self.rows.get(&key).copied() {
            None | Some(Row::Recording(_)) => {
                self.push_mining(MiningSource::Fresh(key, self.ts));
                self.rows.insert(key, Row::Mining(self.mining_len - 1));
            }
            Some(Row::Mining(at)) => self.record_mining(at),
        }
    }

    /// A unit's first recorded request: a row in the ring; the row after it
    /// is cleared for the next (dropping its unit when the ring has wrapped).
    fn record_new(&mut self, key: u64) {
        let at = self.recording_at;
        let ts = self.ts;
        let row = self.recording_row(at);
        row[0] = key;
        row[1] = add_ts(row[1], ts);
        self.rows.insert(key, Row::Recording(at));
        self.recording_at += 1;
        if self.recording_at >= self.recording_rows {
            self.recording_at = 1;
        }
        let next = self.recording_at;
        let row = self.recording_row(next);
        // An occupied row has at least one timestamp (its key may be 0).
        if count(row[1]) != 0 {
            let old = row[0];
            row.fill(0);
            self.rows.remove(&old);
        }
    }

    /// Another request for a unit in the ring: once it has `min_support`
    /// timestamps it moves to the mining table, and the ring's last row
    /// takes its place.
    fn record_recording(&mut self, key: u64, index: usize) {
        let ts = self.ts;
        let counted = append_ts(self.recording_row(index), ts);
        if counted != self.min_support - 1 {
            return;
        }
        self.push_mining(MiningSource::Recording(index));
        let last = self.recording_at - 1;
        let width = self.recording_width;
        let compact = index != last && self.recording_at >= 2;
        if compact {
            self.recording
                .copy_within(last * width..(last + 1) * width, index * width);
        }
        if self.recording_at >= 2 {
            self.recording_row(last).fill(0);
        } else {
            self.recording_row(index).fill(0);
        }
        self.rows.insert(key, Row::Mining(self.mining_len - 1));
        if compact {
            let moved = self.recording_row(index)[0];
            self.rows.insert(moved, Row::Recording(index));
        }
        if self.recording_at >= 2 {
            self.recording_at -= 1;
        }
    }

    /// Mines the mining table for associations, then empties it.
    fn mine(&mut self) {
        for at in 0..self.mining_len {
            let key = self.mining_row(at)[0];
            self.rows.remove(&key);
        }
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(0..self.mining_len as u32);
        // Stable, as GLib's `g_array_sort` (a merge sort) is.
        order.sort_by_key(|&at| nth_ts(self.mining_row(at as usize), 1));
        for i in 0..order.len().saturating_sub(1) {
            let first = self.mining_row(order[i] as usize);
            let (first_key, first_ts, first_total) = (first[0], nth_ts(first, 1), total_ts(first));
            let mut first_candidate = true;
            for &j in &order[i + 1..] {
                let second = self.mining_row(j as usize);
                if nth_ts(second, 1) - first_ts > self.lookahead_range {
                    break;
                }
                let second_total = total_ts(second);
                if (first_total - second_total).abs() > self.confidence {
                    continue;
                }
                let shorter = first_total.min(second_total) as usize;
                let mut associated = std::mem::take(&mut first_candidate);
                if shorter == 1 && (first_ts - nth_ts(second, 1)).abs() == 1 {
                    associated = true;
                }
                let first = self.mining_row(order[i] as usize);
                let mut errors = 0;
                for k in 1..shorter {
                    let apart = (nth_ts(first, k) - nth_ts(second, k)).abs();
                    if apart > self.lookahead_range {
                        errors += 1;
                        if errors > self.confidence {
                            associated = false;
                            break;
                        }
                    }
                    if apart == 1 {
                        associated = true;
                    }
                }
                if associated {
                    let second_key = second[0];
                    self.associate(first_key, second_key);
                }
            }
        }
        self.order = order;
        self.mining_len = 0;
    }

    /// Records `source → target` in the prefetch table
    /// (`_Mithril_add_to_prefetch_table`).
    fn associate(&mut self, source: u64, target: u64) {
        let width = self.pf_list_size + 1;
        let stored = target.wrapping_add(1);
        if let Some(&row) = self.targets.get(&source) {
            let slots = &mut self.table[row as usize * width + 1..(row as usize + 1) * width];
            let mut free = slots.len();
            for (at, &slot) in slots.iter().enumerate() {
                if slot == 0 {
                    free = at;
                    break;
                }
                if slot == stored {
                    return;
                }
            }
            if free == slots.len() {
                // Full: the oldest goes.
                slots.copy_within(1.., 0);
                free -= 1;
            }
            slots[free] = stored;
            return;
        }
        self.table_at += 1;
        let row = self.table_at;
        let words = &mut self.table[row * width..(row + 1) * width];
        if self.table_full {
            let old = words[0];
            words.fill(0);
            self.targets.remove(&old);
        }
        words[0] = source;
        words[1] = stored;
        self.targets.insert(source, row as u32);
        if (row + 1).is_multiple_of(SHARD_ROWS) {
            let shard_bytes = SHARD_ROWS as i64 * (self.pf_list_size as i64 * 8 + 12);
            if self.metadata + shard_bytes < self.max_metadata {
                self.table.resize(self.table.len() + SHARD_ROWS * width, 0);
                self.metadata += shard_bytes;
            } else {
                self.table_full = true;
                self.table_at = 1;
            }
        }
    }
}

/// Where a new mining row's words come from.
#[derive(Clone, Copy)]
enum MiningSource {
    /// A row of the recording ring.
    Recording(usize),
    /// A unit's first timestamp (`min_support = 1`).
    Fresh(u64, u64),
}

impl Prefetcher for Mithril {
    fn name(&self) -> &'static str {
        "mithril"
    }

    fn access(&mut self, key: u64, hit: bool, out: &mut Vec<u64>) {
        if self.record == Record::EachRequest || !hit {
            self.record(key);
        }
        if let Some(&row) = self.targets.get(&key) {
            let width = self.pf_list_size + 1;
            let slots = &self.table[row as usize * width + 1..(row as usize + 1) * width];
            out.extend(
                slots
                    .iter()
                    .take_while(|&&slot| slot != 0)
                    .map(|slot| slot - 1),
            );
        }
        self.ts += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mithril(config: &MithrilConfig) -> Mithril {
        Mithril::new(Capacity::Objects(10_000), config).unwrap()
    }

    /// Feeds `keys` as misses; returns what the last access named.
    fn feed(m: &mut Mithril, keys: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        for &key in keys {
            out.clear();
            m.access(key, false, &mut out);
        }
        out
    }

    fn named(m: &mut Mithril, key: u64) -> Vec<u64> {
        let mut out = Vec::new();
        m.access(key, true, &mut out);
        out
    }

    #[test]
    fn units_missed_together_are_loaded_together() {
        // Four units seen twice each mature; mining (4 rows ready) pairs
        // each with the unit requested just after it.
        let mut m = mithril(&MithrilConfig {
            mining_threshold: 8,
            ..MithrilConfig::default()
        });
        assert_eq!(feed(&mut m, &[1, 2, 3, 4, 1, 2, 3]), Vec::<u64>::new());
        assert_eq!(m.mining_len, 3);
        feed(&mut m, &[4]);
        assert_eq!(m.mining_len, 0, "mined and emptied");
        assert_eq!(named(&mut m, 1), vec![2]);
        assert_eq!(named(&mut m, 2), vec![3]);
        assert_eq!(named(&mut m, 3), vec![4]);
        assert_eq!(named(&mut m, 4), Vec::<u64>::new());
        // Hits are not recorded (record = miss): nothing matured.
        assert_eq!(m.ready, 0);
    }

    #[test]
    fn units_further_apart_than_the_lookahead_are_not() {
        let mut m = mithril(&MithrilConfig {
            mining_threshold: 4,
            ..MithrilConfig::default()
        });
        let mut keys = vec![1];
        keys.extend(100..124); // 24 others: 2 comes 25 requests after 1
        keys.push(2);
        keys.push(1);
        keys.extend(200..224);
        keys.push(2);
        feed(&mut m, &keys);
        assert_eq!(m.mining_len, 0, "mined");
        assert_eq!(named(&mut m, 1), Vec::<u64>::new());
        // Within the range they are.
        let mut m = mithril(&MithrilConfig {
            mining_threshold: 4,
            lookahead_range: 25,
            ..MithrilConfig::default()
        });
        feed(&mut m, &keys);
        assert_eq!(named(&mut m, 1), vec![2]);
    }

    #[test]
    fn too_frequent_units_are_dropped() {
        let mut m = mithril(&MithrilConfig {
            max_support: 3,
            ..MithrilConfig::default()
        });
        feed(&mut m, &[7, 7]);
        assert!(matches!(m.rows.get(&7), Some(Row::Mining(0))));
        feed(&mut m, &[7]);
        assert!(matches!(m.rows.get(&7), Some(Row::Mining(0))));
        feed(&mut m, &[7]);
        assert!(m.rows.get(&7).is_none(), "a 4th timestamp is one too many");
        assert_eq!((m.mining_len, m.ready), (0, 0));
    }

    #[test]
    fn a_matured_row_takes_the_rings_last_row() {
        let mut m = mithril(&MithrilConfig::default());
        feed(&mut m, &[5, 6, 7, 5]);
        // 5 matured from row 1; 7 (row 3, the last) moved into row 1.
        assert!(matches!(m.rows.get(&7), Some(Row::Recording(1))));
        assert!(matches!(m.rows.get(&6), Some(Row::Recording(2))));
        assert_eq!(m.recording_at, 3);
        assert_eq!(m.recording_row(3), &[0, 0]);
    }

    #[test]
    fn the_ring_drops_its_oldest_rows_when_it_wraps() {
        let mut m = Mithril::new(Capacity::Objects(10), &MithrilConfig::default()).unwrap();
        // 10 objects × 4096 B × 2 % / 14 B a row = 58 rows, row 0 unused.
        assert_eq!(m.recording_rows, 58);
        feed(&mut m, &(1000..1057).collect::<Vec<_>>());
        assert!(m.rows.get(&1000).is_none(), "overwritten");
        assert!(m.rows.get(&1001).is_some());
        assert_eq!(m.rows.len(), 56);
    }

    #[test]
    fn timestamps_wrap_and_the_4th_reads_as_a_count() {
        let mut row = [9, 0, 0];
        for ts in [10, 11, 12, 13, 14 + (1 << 15)] {
            append_ts(&mut row, ts);
        }
        assert_eq!(total_ts(&row), 5);
        let read: Vec<i64> = (1..=5).map(|n| nth_ts(&row, n)).collect();
        // libCacheSim's GET_NTH_TS: the 4th is the first word's count.
        assert_eq!(read, vec![10, 11, 12, 4, 14]);
    }

    #[test]
    fn prefetch_lists_replace_their_oldest_and_keep_unit_0() {
        let mut m = mithril(&MithrilConfig::default());
        m.associate(1, 0);
        m.associate(1, 11);
        m.associate(1, 11);
        assert_eq!(named(&mut m, 1), vec![0, 11]);
        m.associate(1, 12);
        assert_eq!(named(&mut m, 1), vec![11, 12]);
    }

    #[test]
    fn a_full_prefetch_table_reuses_its_oldest_rows() {
        let mut m = Mithril::new(Capacity::Objects(10), &MithrilConfig::default()).unwrap();
        // Rows 2 ..= 1999 of one shard; the budget allows no second.
        for source in 0..1998 {
            m.associate(source, source + 1);
        }
        assert!(m.table_full);
        assert_eq!(m.targets.len(), 1998);
        m.associate(5000, 1);
        assert_eq!(m.targets.len(), 1998);
        assert_eq!(named(&mut m, 0), Vec::<u64>::new(), "row 2 reused");
        assert_eq!(named(&mut m, 5000), vec![1]);
        assert_eq!(named(&mut m, 1), vec![2]);
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        for (config, parameter) in [
            (
                MithrilConfig {
                    min_support: 9,
                    ..MithrilConfig::default()
                },
                "min_support",
            ),
            (
                MithrilConfig {
                    lookahead_range: 0,
                    ..MithrilConfig::default()
                },
                "lookahead_range",
            ),
            (
                MithrilConfig {
                    max_metadata_fraction: 1.0,
                    ..MithrilConfig::default()
                },
                "max_metadata_fraction",
            ),
            (
                MithrilConfig {
                    mining_threshold: 1,
                    ..MithrilConfig::default()
                },
                "mining_threshold",
            ),
        ] {
            match Mithril::new(Capacity::Objects(100), &config) {
                Err(ConfigError::OutOfRange { parameter: p, .. }) => assert_eq!(p, parameter),
                other => panic!("{parameter}: {other:?}"),
            }
        }
        let parsed: crate::PrefetchConfig =
            toml::from_str("prefetcher = \"mithril\"\nrecord = \"each_request\"").unwrap();
        assert_eq!(
            parsed,
            crate::PrefetchConfig::Mithril(MithrilConfig {
                record: Record::EachRequest,
                ..MithrilConfig::default()
            })
        );
    }
}
