//! `cairn sim`'s outputs: the tables on standard output, CSV, JSON and
//! plots, one per trace.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use cairn_sim::{CapacityUnit, CostModel, Report, WorkingSet};
use serde::Serialize;

use crate::output::{Destination, csv_field, table};
use crate::plot;

/// Which number the stdout table shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Metric {
    /// Misses over requests.
    MissRatio,
    /// Missed bytes over requested bytes.
    ByteMissRatio,
    /// Modelled throughput in MB/s under the cost model.
    Throughput,
}

/// What one trace's replay gave.
pub(super) struct TraceRun {
    /// The trace's name (its path, or the embedded sample's name).
    pub(super) name: String,
    /// The unit it was keyed by (`object`, `start-sector`, `block:4096`).
    pub(super) unit: String,
    pub(super) accesses: Option<u64>,
    pub(super) working_set: Option<WorkingSet>,
    /// The sizes run, as typed (`--size auto` keeps those the trace can hold).
    pub(super) sizes: Vec<String>,
    /// One report per configuration: policies in order, each at every size.
    pub(super) reports: Vec<Report>,
}

/// What `cairn sim` writes and how, from its configuration.
pub(super) struct Outputs<'a> {
    /// The number the stdout table shows.
    pub(super) metric: Metric,
    pub(super) csv: Option<&'a Destination>,
    pub(super) json: Option<&'a Destination>,
    /// `--plot`: one file per trace.
    pub(super) plot: Option<&'a Path>,
    pub(super) unit: CapacityUnit,
    pub(super) cost: &'a CostModel,
    /// Whether the runs have second levels (`--l2`).
    pub(super) levels: bool,
}

/// What the JSON output holds for one trace.
#[derive(Serialize)]
struct JsonRun<'a> {
    trace: &'a str,
    unit: &'a str,
    accesses: Option<u64>,
    working_set: Option<WorkingSet>,
    capacity_unit: CapacityUnit,
    cost_model: &'a CostModel,
    reports: &'a [Report],
}

pub(super) fn write_outputs(config: &Outputs, runs: &[TraceRun]) -> Result<()> {
    let stdout_taken = [&config.csv, &config.json]
        .iter()
        .any(|d| matches!(d, Some(Destination::Stdout)));
    if !stdout_taken {
        Destination::Stdout.write("table", |out| print_tables(out, config, runs))?;
    }
    if let Some(destination) = &config.csv {
        destination.write("CSV", |out| write_csv(out, runs))?;
    }
    if let Some(destination) = &config.json {
        let json: Vec<JsonRun> = runs
            .iter()
            .map(|run| JsonRun {
                trace: &run.name,
                unit: &run.unit,
                accesses: run.accesses,
                working_set: run.working_set,
                capacity_unit: config.unit,
                cost_model: config.cost,
                reports: &run.reports,
            })
            .collect();
        destination.write("JSON", |out| {
            // One trace: its run; several: the list of runs, in --trace order.
            match json.as_slice() {
                [one] => serde_json::to_writer_pretty(&mut *out, one)?,
                all => serde_json::to_writer_pretty(&mut *out, all)?,
            }
            writeln!(out)
        })?;
    }
    if let Some(path) = &config.plot {
        for (run, path) in runs.iter().zip(plot_paths(path, runs)) {
            write_plot(config, run, &path)?;
        }
    }
    Ok(())
}

/// Where each trace's plot goes: `path` itself for one trace; for several,
/// `STEM-TRACE.EXT` beside it, TRACE the trace's file name (`-2`, `-3`, …
/// added when two traces share a file name).
pub(super) fn plot_paths(path: &Path, runs: &[TraceRun]) -> Vec<PathBuf> {
    if runs.len() <= 1 {
        return vec![path.to_path_buf()];
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let extension = path.extension().unwrap_or_default().to_string_lossy();
    let mut taken: Vec<String> = Vec::new();
    runs.iter()
        .map(|run| {
            let trace = Path::new(&run.name)
                .file_name()
                .map_or_else(|| run.name.clone(), |n| n.to_string_lossy().into_owned());
            let mut name = format!("{stem}-{trace}");
            let mut n = 1;
            while taken.contains(&name) {
                n += 1;
                name = format!("{stem}-{trace}-{n}");
            }
            taken.push(name.clone());
            path.with_file_name(format!("{name}.{extension}"))
        })
        .collect()
}

/// A report's row: its policy, and its second level if any
/// (`lru / s3fifo@10%`).
fn row_label(report: &Report) -> String {
    match &report.l2 {
        Some(l2) => format!("{} / {}@{}", report.label, l2.label, l2.size),
        None => report.label.clone(),
    }
}

fn write_plot(config: &Outputs, run: &TraceRun, path: &Path) -> Result<()> {
    let mut rows: Vec<String> = Vec::new();
    for report in &run.reports {
        let row = row_label(report);
        if !rows.contains(&row) {
            rows.push(row);
        }
    }
    let series: Vec<plot::Series> = rows
        .into_iter()
        .map(|row| {
            let mut points: Vec<(f64, f64)> = run
                .reports
                .iter()
                .filter(|r| row_label(r) == row)
                .map(|r| (r.capacity as f64, r.miss_ratio))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            plot::Series { name: row, points }
        })
        .collect();
    let unit = match config.unit {
        CapacityUnit::Objects => "cache size (objects)",
        CapacityUnit::Bytes => "cache size (bytes)",
    };
    let title = format!("Miss ratio — {}", run.name);
    plot::miss_ratio_curves(path, &title, unit, &series)?;
    tracing::info!(path = %path.display(), trace = %run.name, "plot written");
    Ok(())
}

/// The table of each trace: one for one trace; for several, each under a
/// `trace NAME` line, a blank line between.
fn print_tables(out: &mut dyn Write, config: &Outputs, runs: &[TraceRun]) -> std::io::Result<()> {
    for (at, run) in runs.iter().enumerate() {
        if runs.len() > 1 {
            if at > 0 {
                writeln!(out)?;
            }
            writeln!(out, "trace {}", run.name)?;
        }
        if config.levels {
            print_levels(out, config.metric, run)?;
        } else {
            print_table(out, config.metric, run)?;
        }
    }
    Ok(())
}

fn print_table(out: &mut dyn Write, metric: Metric, run: &TraceRun) -> std::io::Result<()> {
    let mut header = vec!["policy".to_owned()];
    header.extend(run.sizes.iter().cloned());
    let columns = run.sizes.len();
    let rows: Vec<Vec<String>> = run
        .reports
        .chunks(columns.max(1))
        .map(|row| {
            let mut cells = vec![row.first().map(|r| r.label.clone()).unwrap_or_default()];
            cells.extend(row.iter().map(|r| match metric {
                Metric::MissRatio => format!("{:.4}", r.miss_ratio),
                Metric::ByteMissRatio => format!("{:.4}", r.byte_miss_ratio),
                Metric::Throughput => format!("{:.2}", r.modelled_throughput_mb_s),
            }));
            cells
        })
        .collect();
    table(out, &header, &rows)
}

/// The table of a two-level run: one row per configuration, with where its
/// accesses were served and the --metric last.
fn print_levels(out: &mut dyn Write, metric: Metric, run: &TraceRun) -> std::io::Result<()> {
    let last = match metric {
        Metric::MissRatio => "miss-ratio",
        Metric::ByteMissRatio => "byte-miss-ratio",
        Metric::Throughput => "MB/s",
    };
    let header: Vec<String> = [
        "policy", "size", "l2", "l2-size", "mode", "l1-hits", "l2-hits", "misses", last,
    ]
    .map(str::to_owned)
    .to_vec();
    let rows: Vec<Vec<String>> = run
        .reports
        .iter()
        .map(|r| {
            let m = &r.metrics;
            let (l2, l2_size, mode) = r.l2.as_ref().map_or_else(Default::default, |l2| {
                (
                    l2.label.clone(),
                    l2.size.clone(),
                    l2.hierarchy.name().to_owned(),
                )
            });
            vec![
                r.label.clone(),
                r.size.clone(),
                l2,
                l2_size,
                mode,
                (m.hits - m.l2_hits).to_string(),
                m.l2_hits.to_string(),
                m.misses.to_string(),
                match metric {
                    Metric::MissRatio => format!("{:.4}", r.miss_ratio),
                    Metric::ByteMissRatio => format!("{:.4}", r.byte_miss_ratio),
                    Metric::Throughput => format!("{:.2}", r.modelled_throughput_mb_s),
                },
            ]
        })
        .collect();
    table(out, &header, &rows)
}

fn write_csv(out: &mut dyn Write, runs: &[TraceRun]) -> std::io::Result<()> {
    writeln!(
        out,
        "trace,label,policy,size,capacity,capacity_unit,requests,hits,misses,miss_ratio,bytes,miss_bytes,\
         byte_miss_ratio,reads,writes,read_hits,write_hits,evictions,modelled_seconds,modelled_throughput_mb_s,\
         prefetched,prefetch_hits,l2_policy,l2_size,l2_capacity,l2_mode,l1_hits,l2_hits,l2_evictions,expired"
    )?;
    for run in runs {
        let trace = csv_field(&run.name);
        for r in &run.reports {
            let m = &r.metrics;
            writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{:.6},{},{},{:.6},{},{},{},{},{},{:.6},{:.3},{},{},{},{},{},{},{},{},{},{}",
                trace,
                csv_field(&r.label),
                csv_field(&r.policy),
                csv_field(&r.size),
                r.capacity,
                r.capacity_unit,
                m.requests,
                m.hits,
                m.misses,
                r.miss_ratio,
                m.bytes,
                m.miss_bytes,
                r.byte_miss_ratio,
                m.reads,
                m.writes,
                m.read_hits,
                m.write_hits,
                m.evictions,
                r.modelled_seconds,
                r.modelled_throughput_mb_s,
                m.prefetched,
                m.prefetch_hits,
                r.l2.as_ref()
                    .map_or_else(String::new, |l| csv_field(&l.label)),
                r.l2.as_ref()
                    .map_or_else(String::new, |l| csv_field(&l.size)),
                r.l2.as_ref()
                    .map_or_else(String::new, |l| l.capacity.to_string()),
                r.l2.as_ref().map_or("", |l| l.hierarchy.name()),
                m.hits - m.l2_hits,
                m.l2_hits,
                m.l2_evictions,
                m.expired,
            )?;
        }
    }
    Ok(())
}
