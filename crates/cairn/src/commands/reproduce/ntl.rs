//! papers/002: the NVM translation layer against the block-layer and page-cache
//! paths, and against memcpy — measured on this machine by `cairn bench ntl`.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde::Deserialize;

use super::ntl_ext4 as ext4;
use super::{Claim, Common, prepare_out, print_claims, read_spec, save, write_claims_csv};
use crate::commands::bench::ntl::{self as bench, Measured, Op, Target, WORKLOADS};
use crate::plot::{self, BarSeries};

/// The embedded default spec (`reproduce/ntl.toml`).
const DEFAULT_SPEC: &str = include_str!("../../../../../reproduce/ntl.toml");

pub const LONG_ABOUT: &str = "\
Reproduces papers/002 (an I/O translation layer for new memory, NTL) on this
machine: runs `cairn bench ntl` at the spec's scale (4 KiB random and 1 MiB
sequential reads and writes, 1 and 2 threads, through the NTL over a mapped
file in /dev/shm, pread/pwrite and O_DIRECT on the same kind of file, and
memcpy between DRAM buffers), prints its table, ratios and bars, then judges
the paper's claims on the one-thread rows:

  Fig. 3   bypassing the block software layer is faster in every pattern
           (NTL against pread/pwrite, the kernel file path);
  Fig. 4   on DRAM-backed storage, direct I/O beats buffered I/O
           (O_DIRECT against pread/pwrite on tmpfs);
  §5       the NTL gives the medium's own speed (NTL against memcpy);
  §5       reliability, the paper's future work: our atomic block writes
           cost at most 25 % against in-place writes.

The paper ran on DRAM with no flush instructions, so its claims are judged on
the ntl/none column (atomic writes, no persistence work); the cache-line flush
column, what real persistent memory costs, is shown beside. The paper's
numbers exist only in its figures, so each claim is judged on its direction.
Timings are measurements, not simulations: they vary from run to run and with
the machine's load (each cell keeps the best of its rounds). Writes ntl.csv,
ntl-claims.csv and ntl.svg (each target as a fraction of memcpy) under --out. --scale multiplies the size and the seconds
per cell.

Then, where the machine can mount ext4 (root, /dev/fuse, loop devices,
nbdfuse, mkfs.ext4, fio), the macro comparison of Figs. 5 and 6: ext4 on
Cairn's NTL volume and on a Cairn file volume (both served over NBD in this
process and mounted through nbdfuse and a loop device), and ext4 on a kernel
loop device over a /dev/shm file (the paper's Ramdisk), each running the fio
mixes of reproduce/ntl/ (file server, mail server, web server after
Filebench). --scale multiplies their file counts and seconds; --skip-ext4
leaves this part out, and a machine that cannot mount says why. Writes
ntl-ext4.csv and ntl-ext4.svg.";

pub const EXAMPLES: &str = "\
Examples:
  cairn reproduce ntl                  the spec's scale (about 2 min with ext4)
  cairn reproduce ntl --skip-ext4      the micro-benchmarks only (about 40 s)
  cairn reproduce ntl --scale 0.1      a quick look (about 30 s, noisy)
  cairn reproduce ntl --spec my.toml --out /tmp/ntl";

/// `cairn reproduce ntl`
#[derive(Args, Debug)]
pub struct NtlArgs {
    /// The experiment spec (TOML). Default: the embedded reproduce/ntl.toml.
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,

    /// Leave out the ext4 macro comparison (Figs. 5 and 6).
    #[arg(long)]
    skip_ext4: bool,

    #[command(flatten)]
    common: Common,
}

impl NtlArgs {
    /// The default experiment with `common`.
    pub fn with(common: Common, skip_ext4: bool) -> Self {
        Self {
            spec: None,
            skip_ext4,
            common,
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Spec {
    size: String,
    seconds: f64,
    rounds: usize,
    /// Seconds each ext4 job runs (after its ramp).
    ext4_seconds: f64,
    /// Bytes of each ext4 volume.
    ext4_size: String,
}

/// Runs `cairn reproduce ntl`; returns the claims.
pub fn run(args: &NtlArgs, quiet: bool) -> Result<Vec<Claim>> {
    let (spec, name): (Spec, String) = read_spec(args.spec.as_ref(), DEFAULT_SPEC, "ntl.toml")?;
    prepare_out(&args.common)?;
    let size = cairn_sim::parse_bytes(&spec.size).with_context(|| format!("{name}: size"))?;
    let scale = args.common.scale;
    let config = bench::Config {
        size: ((size as f64 * scale) as u64).max(16 << 20),
        seconds: spec.seconds * scale,
        rounds: spec.rounds,
        targets: Vec::new(),
        direct_dir: None,
        quiet,
    };
    let measured = bench::measure(&config).with_context(|| format!("{name}: the benchmark"))?;

    let mut out = crate::output::stdout();
    writeln!(
        out,
        "papers/002 — NTL, measured with `cairn bench ntl --size {}MiB --seconds {} --rounds {}`",
        measured.size >> 20,
        measured.seconds,
        measured.rounds
    )?;
    bench::print_report(&mut out, &measured)?;
    save(&args.common.out.join("ntl.csv"), &csv(&measured))?;
    plot_measured(&args.common.out.join("ntl.svg"), &measured)?;
    let claims = claims(&measured);
    writeln!(out)?;
    print_claims(&mut out, &claims)?;
    let mut claims = claims;
    let skipped = if args.skip_ext4 {
        Some("--skip-ext4".to_owned())
    } else {
        ext4::missing_facility()
    };
    if let Some(why) = skipped {
        writeln!(
            out,
            "Not run: Figs. 5 and 6 (the fio mixes of reproduce/ntl/ on ext4 over the NTL): {why}."
        )?;
    } else {
        drop(out);
        let ext4_size = cairn_sim::parse_bytes(&spec.ext4_size)
            .with_context(|| format!("{name}: ext4_size"))?;
        let config = ext4::Ext4Config {
            seconds: (spec.ext4_seconds * scale).max(1.0),
            files: scale.min(1.0),
            size: ((ext4_size as f64 * scale.min(1.0)) as u64).max(256 << 20) >> 20 << 20,
        };
        let mut progress = |step: &str| {
            if !quiet {
                eprintln!("reproduce ntl: ext4 {step}");
            }
        };
        let rows = ext4::run(&config, &mut progress).context("the ext4 macro comparison")?;
        let mut out = crate::output::stdout();
        writeln!(out)?;
        print_ext4(&mut out, &config, &rows)?;
        save(&args.common.out.join("ntl-ext4.csv"), &ext4_csv(&rows))?;
        plot_ext4(&args.common.out.join("ntl-ext4.svg"), &rows)?;
        let more = ext4_claims(&rows);
        writeln!(out)?;
        print_claims(&mut out, &more)?;
        claims.extend(more);
    }
    write_claims_csv(&args.common.out.join("ntl-claims.csv"), &claims)?;
    Ok(claims)
}

/// `ntl.svg`: each target's MiB/s as a fraction of memcpy's, per workload (the
/// paper's Figs. 3-4 are bars of the same patterns).
fn plot_measured(path: &std::path::Path, measured: &Measured) -> Result<()> {
    let memcpy = measured.targets.iter().position(|t| *t == Target::Memcpy);
    let categories: Vec<String> = WORKLOADS
        .iter()
        .map(|w| w.name.replace(" thread", " thr"))
        .collect();
    let series: Vec<BarSeries> = measured
        .targets
        .iter()
        .enumerate()
        .map(|(t, target)| BarSeries {
            name: target.label().to_owned(),
            values: measured
                .values
                .iter()
                .map(|row| {
                    let base = memcpy.and_then(|m| row[m].as_ref().ok().copied());
                    match (row[t].as_ref().ok(), base) {
                        (Some(v), Some(b)) if b > 0.0 => v / b,
                        _ => 0.0,
                    }
                })
                .collect(),
        })
        .collect();
    plot::bars(
        path,
        "papers/002 Figs. 3-4: MiB/s as a fraction of memcpy",
        &categories,
        "÷ memcpy",
        &series,
    )
}

/// `ntl-ext4.svg`: MiB/s of each fio mix on each target (the paper's Fig. 6).
fn plot_ext4(path: &std::path::Path, rows: &[ext4::Ext4Row]) -> Result<()> {
    let categories: Vec<String> = ext4::JOBS.iter().map(|(j, _)| (*j).to_owned()).collect();
    let series: Vec<BarSeries> = ext4::TARGETS
        .iter()
        .map(|target| BarSeries {
            name: (*target).to_owned(),
            values: ext4::JOBS
                .iter()
                .map(|(job, _)| ext4_value(rows, job, target).unwrap_or(0.0))
                .collect(),
        })
        .collect();
    plot::bars(
        path,
        "papers/002 Fig. 6: ext4 fio mixes, MiB/s",
        &categories,
        "MiB/s (reads + writes)",
        &series,
    )
}

fn ext4_value(rows: &[ext4::Ext4Row], job: &str, target: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.job == job && r.target == target)
        .map(|r| r.mib_s)
}

fn print_ext4(
    out: &mut dyn Write,
    config: &ext4::Ext4Config,
    rows: &[ext4::Ext4Row],
) -> std::io::Result<()> {
    writeln!(
        out,
        "papers/002 Figs. 5-6 — ext4, fio mixes of reproduce/ntl/ ({} s each, file counts x{}, {} MiB volumes), MiB/s (reads + writes)",
        config.seconds,
        config.files,
        config.size >> 20
    )?;
    write!(out, "{:<12}", "job")?;
    for target in ext4::TARGETS {
        write!(out, "{target:>10}")?;
    }
    writeln!(out, "{:>10}{:>10}", "ntl/file", "ntl/loop")?;
    for (job, _) in ext4::JOBS {
        write!(out, "{job:<12}")?;
        for target in ext4::TARGETS {
            match ext4_value(rows, job, target) {
                Some(v) => write!(out, "{v:>10.1}")?,
                None => write!(out, "{:>10}", "-")?,
            }
        }
        for other in ["file", "loop"] {
            match (ext4_value(rows, job, "ntl"), ext4_value(rows, job, other)) {
                (Some(a), Some(b)) if b > 0.0 => write!(out, "{:>9.2}x", a / b)?,
                _ => write!(out, "{:>10}", "-")?,
            }
        }
        writeln!(out)?;
    }
    for (target, note) in ext4::TARGETS.iter().zip(ext4::TARGET_NOTES) {
        writeln!(out, "  {target}: {note}")?;
    }
    Ok(())
}

fn ext4_csv(rows: &[ext4::Ext4Row]) -> String {
    let mut text = String::from("job,target,mib_s,iops\n");
    for r in rows {
        let _ = writeln!(text, "{},{},{:.3},{:.1}", r.job, r.target, r.mib_s, r.iops);
    }
    text
}

fn ext4_claims(rows: &[ext4::Ext4Row]) -> Vec<Claim> {
    let compare = |other: &str| {
        let mut all = true;
        let text = ext4::JOBS
            .iter()
            .map(
                |(job, _)| match (ext4_value(rows, job, "ntl"), ext4_value(rows, job, other)) {
                    (Some(a), Some(b)) if b > 0.0 => {
                        all &= a >= b;
                        format!("{job} {a:.1}/{b:.1} MiB/s = {:.2}x", a / b)
                    }
                    _ => {
                        all = false;
                        format!("{job} -")
                    }
                },
            )
            .collect::<Vec<_>>()
            .join(", ");
        (text, all)
    };
    let (vs_loop, loop_ok) = compare("loop");
    let (vs_file, file_ok) = compare("file");
    vec![
        Claim {
            source: "papers/002 Fig. 6".into(),
            text: "ext4 on NTL storage has a higher throughput than ext4 on a Ramdisk (here: Cairn's NTL over NBD + nbdfuse + loop against a kernel loop device over /dev/shm), in every mix".into(),
            paper: "NTL above Ramdisk, flash SSD and BPFS (bars only)".into(),
            ours: format!("ntl/loop {vs_loop}"),
            confirmed: loop_ok,
        },
        Claim {
            source: "papers/002 Fig. 5-6, Cairn".into(),
            text: "under the same server stack, ext4 on the NTL is at least as fast as on a file volume (pread/pwrite through the kernel's file path), in every mix".into(),
            paper: "NTL bypasses the block layer and the page cache (no number for this pair)".into(),
            ours: format!("ntl/file {vs_file}"),
            confirmed: file_ok,
        },
    ]
}

fn csv(m: &Measured) -> String {
    let mut text = String::from("row,op,block_bytes,random,threads,target,mib_s,kiops,note\n");
    for (w, values) in WORKLOADS.iter().zip(&m.values) {
        for (target, v) in m.targets.iter().zip(values) {
            let (mib_s, kiops, note) = match v {
                Ok(x) => (
                    format!("{x:.3}"),
                    format!("{:.3}", x * f64::from(1 << 20) / w.block as f64 / 1000.0),
                    String::new(),
                ),
                Err(why) => (String::new(), String::new(), why.clone()),
            };
            let _ = writeln!(
                text,
                "{},{:?},{},{},{},{},{mib_s},{kiops},{}",
                crate::output::csv_field(w.name),
                w.op,
                w.block,
                w.random,
                w.threads,
                target.label(),
                crate::output::csv_field(&note)
            );
        }
    }
    text
}

/// The one-thread row of each pattern: (label, row index).
fn single_thread_rows() -> Vec<(&'static str, usize)> {
    [
        ("seq read", Op::Read, false),
        ("seq write", Op::Write, false),
        ("rand read", Op::Read, true),
        ("rand write", Op::Write, true),
    ]
    .into_iter()
    .filter_map(|(label, op, random)| {
        Measured::rows(op, random)
            .find(|&r| WORKLOADS[r].threads == 1)
            .map(|r| (label, r))
    })
    .collect()
}

/// `label a/b` for each pattern, and whether every ratio exists and passes `ok`.
fn ratios(m: &Measured, a: Target, b: Target, ok: impl Fn(f64) -> bool) -> (String, bool) {
    let mut all = true;
    let text = single_thread_rows()
        .into_iter()
        .map(|(label, row)| {
            let r = m.ratio(row, a, b);
            all &= r.is_some_and(&ok);
            r.map_or_else(|| format!("{label} -"), |r| format!("{label} {r:.2}x"))
        })
        .collect::<Vec<_>>()
        .join(", ");
    (text, all)
}

fn claims(m: &Measured) -> Vec<Claim> {
    let mut claims = Vec::new();
    let (none, none_ok) = ratios(m, Target::NtlNone, Target::Pread, |r| r > 1.0);
    let (flushed, _) = ratios(m, Target::Ntl, Target::Pread, |r| r > 1.0);
    claims.push(Claim {
        source: "papers/002 Fig. 3".into(),
        text: "I/O that bypasses the block software layer is faster than I/O through it, in every pattern (NTL vs pread/pwrite, 1 thread)".into(),
        paper: "Ramfs above Ramdisk in all four fio patterns (bars only)".into(),
        ours: format!("NTL/pread {none}; with cache-line flush {flushed}"),
        confirmed: none_ok,
    });
    let (direct, direct_ok) = ratios(m, Target::DirectShm, Target::Pread, |r| r >= 1.0);
    let why = m
        .targets
        .iter()
        .position(|&t| t == Target::DirectShm)
        .and_then(|c| m.values.first()?.get(c)?.as_ref().err().cloned());
    claims.push(Claim {
        source: "papers/002 Fig. 4".into(),
        text: "on DRAM-backed storage, direct I/O (no page cache) is at least as fast as buffered I/O (O_DIRECT vs pread/pwrite on tmpfs, whose O_DIRECT still copies from its own pages)".into(),
        paper: "Ramdisk: direct I/O above buffered in the single-stream runs (bars only)".into(),
        ours: why.map_or_else(|| format!("O_DIRECT/pread {direct}"), |w| format!("unsupported: {w}")),
        confirmed: direct_ok,
    });
    let (limit, limit_ok) = ratios(m, Target::NtlNone, Target::Memcpy, |r| r >= 0.7);
    let (limit_flushed, _) = ratios(m, Target::Ntl, Target::Memcpy, |r| r >= 0.7);
    claims.push(Claim {
        source: "papers/002 §5".into(),
        text: "with no block layer, page cache or buffering in the way, the NTL gives the medium's own speed (at least 70 % of memcpy, 1 thread)".into(),
        paper: "\"guarantees new memory's native access speed\" (no number)".into(),
        ours: format!("NTL/memcpy {limit}; with cache-line flush {limit_flushed}"),
        confirmed: limit_ok,
    });
    let cost = |a, b| {
        Measured::rows(Op::Write, true)
            .map(|r| (WORKLOADS[r].threads, m.ratio(r, a, b)))
            .collect::<Vec<_>>()
    };
    let mut ok = true;
    let mut parts = Vec::new();
    for (label, a, b, judged) in [
        ("no flush", Target::NtlNone, Target::InPlaceNone, true),
        ("cache-line flush", Target::Ntl, Target::InPlace, false),
    ] {
        let shown = cost(a, b)
            .into_iter()
            .map(|(threads, r)| {
                if judged {
                    ok &= r.is_some_and(|r| r >= 0.75);
                }
                r.map_or(format!("{threads} thr -"), |r| {
                    format!("{threads} thr {:.0} %", (1.0 - r) * 100.0)
                })
            })
            .collect::<Vec<_>>()
            .join(", ");
        parts.push(format!("{label}: {shown}"));
    }
    claims.push(Claim {
        source: "papers/002 §5 (future work), Cairn".into(),
        text: "reliability need not cost the speed: atomic 4 KiB random writes cost at most 25 % against in-place writes (judged with no flush, as the paper ran)".into(),
        paper: "left as future work (no atomicity, no number)".into(),
        ours: parts.join("; "),
        confirmed: ok,
    });
    claims
}
