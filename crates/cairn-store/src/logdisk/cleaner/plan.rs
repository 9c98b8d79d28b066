//! The cleaner's decisions, as pure functions of the tables: which
//! segments to clean ([`pick_victim`], [`rank_victims`]) and which blocks of
//! a victim to read ([`plan_reads`]). No I/O here, so a simulator can make
//! the engine's exact choice, and tests can check it against the papers.

use super::reads::Batch;
use crate::limits::WRITE_DEPTH;
use crate::logdisk::format::Geometry;
use crate::logdisk::options::{CleanerPolicy, Options};
use crate::logdisk::table::{Seg, Table};

/// How much `policy` wants segment `s` cleaned, at write sequence `now`:
/// the highest goes first. Greedy: fewest live blocks; cost-benefit and age
/// sort: `(1 − u)·age / (1 + u)` (Rosenblum & Ousterhout 1992).
pub(in crate::logdisk) fn victim_score(
    policy: CleanerPolicy,
    table: &Table,
    geo: &Geometry,
    now: u64,
    s: u32,
) -> f64 {
    let live = table.live[s as usize];
    strict_assert!(live < geo.segment_blocks, "segment {s}: {live} live blocks");
    match policy {
        CleanerPolicy::Greedy => -f64::from(live),
        CleanerPolicy::CostBenefit | CleanerPolicy::AgeSort => {
            let u = f64::from(live) / f64::from(geo.segment_blocks - 1);
            let age = (now - table.last_seq[s as usize].min(now)) as f64 + 1.0;
            (1.0 - u) * age / (1.0 + u)
        }
    }
}

/// The best victim: the closed segment with the highest
/// [`victim_score`] (the lowest number among equals), never one of `busy`
/// (segments of queued writes, whose blocks are not all on the device).
pub(in crate::logdisk) fn pick_victim(
    policy: CleanerPolicy,
    table: &Table,
    geo: &Geometry,
    now: u64,
    busy: &[u32; WRITE_DEPTH],
) -> Option<u32> {
    (0..geo.segments)
        .filter(|&s| table.seg[s as usize] == Seg::Closed && !busy.contains(&s))
        .map(|s| (s, victim_score(policy, table, geo, now, s)))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(s, _)| s)
}

/// The best `max` candidate victims, best first, into `ranked` as (score,
/// segment): one scan of the segments and a partial sort, instead of a
/// scan per victim taken. The same order as taking [`pick_victim`] again
/// and again.
pub(in crate::logdisk) fn rank_victims(
    policy: CleanerPolicy,
    table: &Table,
    geo: &Geometry,
    now: u64,
    busy: &[u32; WRITE_DEPTH],
    max: usize,
    ranked: &mut Vec<(f64, u32)>,
) {
    ranked.clear();
    ranked.extend(
        (0..geo.segments)
            .filter(|&s| table.seg[s as usize] == Seg::Closed && !busy.contains(&s))
            .map(|s| (victim_score(policy, table, geo, now, s), s)),
    );
    let best_first = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    if ranked.len() > max && max > 0 {
        ranked.select_nth_unstable_by(max - 1, best_first);
        ranked.truncate(max);
    }
    ranked.sort_unstable_by(best_first);
}

/// Plans the reads of victim `v` into `batch`: a dense victim is read in one
/// I/O (its first live block to its last); a sparse one (live fraction below
/// [`Options::live_read_below`]) only its live blocks, runs of them that are
/// at most [`Options::live_read_gap`] dead blocks apart read as one.
pub(in crate::logdisk) fn plan_reads(
    options: &Options,
    table: &Table,
    geo: &Geometry,
    v: u32,
    batch: &mut Batch,
) {
    let n = geo.segment_blocks;
    let sparse = f64::from(table.live[v as usize]) < options.live_read_below * f64::from(n - 1);
    let gap = if sparse { options.live_read_gap } else { n };
    let first = batch.runs.len();
    let staged = batch.staged;
    let mut run: Option<(u32, u32)> = None;
    for slot in 0..n {
        if !table.is_live(v, slot) {
            continue;
        }
        run = match run {
            Some((start, end)) if slot - end <= gap => Some((start, slot + 1)),
            Some((start, end)) => {
                batch.push_run(v, start, end);
                Some((slot, slot + 1))
            }
            None => Some((slot, slot + 1)),
        };
    }
    if let Some((start, end)) = run {
        batch.push_run(v, start, end);
    }
    // Every live block is read: the runs cover at least the live count.
    strict_assert!(
        batch.staged - staged >= table.live[v as usize],
        "victim {v}: reads miss live blocks"
    );
    batch.victims.push((v, first, batch.runs.len()));
}
