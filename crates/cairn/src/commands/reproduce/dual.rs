//! papers/001: the dual (file-preface + rest-of-file) cache against a single
//! cache on the workloads of its Table I, simulated.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, bail};
use cairn_policy::prefetch::Readahead;
use cairn_policy::{Capacity, PolicyConfig};
use cairn_sim::ServiceCost;
use cairn_trace::generate::{FileWorkloadConfig, TableOneWorkload};
use cairn_trace::{Request, Splitter, Unit};
use clap::Args;
use serde::Deserialize;

use super::{Claim, Common, prepare_out, print_claims, read_spec, save, write_claims_csv};
use crate::output::{csv_field, table};
use crate::plot::{self, Series, YAxis};
use crate::policy_spec;
use crate::progress::Bar;

/// The embedded default spec (`reproduce/dual.toml`).
const DEFAULT_SPEC: &str = include_str!("../../../../../reproduce/dual.toml");

pub const LONG_ABOUT: &str = "\
Reproduces papers/001 (a dual cache for a cluster's parallel file system) by
simulation: the file workloads A-D of its Table I run through a 10 MiB cache,
either one LRU cache or the dual cache (a 1 MiB file-preface cache, FPC, whose
preface size adapts with alpha, beside an LRU rest-of-file cache, RPC), and
alpha is swept.

Prints, shaped like the paper: Fig. 4 (hit ratio, single vs dual, per
workload) and Fig. 5 (mean response time against alpha), then each of the
paper's claims with its number and ours, confirmed or not. Writes dual.csv,
dual-claims.csv and dual-alpha.svg under --out.

Response time is modelled: blocks are striped over 4 block servers, a
request's missing blocks are fetched from their servers in parallel, hits are
memory copies (the spec's [hit]/[miss] costs), and sequential reads trigger an
asynchronous readahead of prefetch_stripes x servers blocks. The spec is
reproduce/dual.toml, embedded in the binary; --spec runs an edited copy.";

pub const EXAMPLES: &str = "\
Examples:
  cairn reproduce dual                      Table I workloads A-D, alpha 1-100
  cairn reproduce dual --scale 0.2          a fifth of the requests
  cairn reproduce dual --spec my-dual.toml --out /tmp/dual";

/// `cairn reproduce dual`
#[derive(Args, Debug)]
pub struct DualArgs {
    /// The experiment spec (TOML). Default: the embedded reproduce/dual.toml.
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,

    #[command(flatten)]
    common: Common,
}

impl DualArgs {
    /// The default spec with these shared flags (for `reproduce all`).
    pub fn with(common: Common) -> Self {
        Self { spec: None, common }
    }
}

/// The experiment's spec (`reproduce/dual.toml`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Spec {
    pub workloads: Vec<TableOneWorkload>,
    requests: u64,
    pub seed: u64,
    pub request_size_bytes: u32,
    pub block_size_bytes: u32,
    pub cache_bytes: u64,
    fpc_fraction: f64,
    preface_max_blocks: u64,
    alphas: Vec<f64>,
    alpha: f64,
    pub single: String,
    inner: String,
    pub servers: u32,
    pub prefetch_stripes: u32,
    hit: ServiceCost,
    miss: ServiceCost,
}

/// The embedded spec (what `cairn bench files --workload table1` runs).
pub(crate) fn default_spec() -> Result<Spec> {
    load_spec(None)
}

#[derive(Clone, Debug)]
struct Row {
    workload: TableOneWorkload,
    /// `None` for the single cache.
    alpha: Option<f64>,
    hit_ratio: f64,
    mean_response_ms: f64,
}

fn load_spec(path: Option<&PathBuf>) -> Result<Spec> {
    let (spec, name): (Spec, String) = read_spec(path, DEFAULT_SPEC, "dual.toml")?;
    if spec.workloads.is_empty() || spec.requests == 0 || spec.servers == 0 {
        bail!("spec {name}: workloads, requests and servers must be non-empty / at least 1");
    }
    if spec.block_size_bytes == 0 || spec.request_size_bytes == 0 || spec.cache_bytes == 0 {
        bail!("spec {name}: sizes must be at least 1 byte");
    }
    for cost in [spec.hit, spec.miss] {
        if !(cost.bandwidth_mb_s > 0.0 && cost.latency_us >= 0.0) {
            bail!("spec {name}: costs need a positive bandwidth and a latency ≥ 0");
        }
    }
    Ok(spec)
}

impl Spec {
    /// The dual cache's policy at `alpha`, as the experiment runs it.
    pub(crate) fn dual_policy(&self, alpha: f64) -> Result<PolicyConfig> {
        let label = format!(
            "dual:inner={},alpha={alpha:?},fpc_fraction={:?},preface_max_blocks={}",
            toml::Value::String(self.inner.clone()),
            self.fpc_fraction,
            self.preface_max_blocks
        );
        policy_spec::parse(&label)
    }

    /// Workload `workload`'s first `requests` requests and its files' sizes.
    pub(crate) fn trace(
        &self,
        workload: TableOneWorkload,
        requests: u64,
    ) -> Result<(Vec<Request>, Vec<u64>)> {
        let config = FileWorkloadConfig {
            requests,
            seed: self.seed,
            request_size_bytes: self.request_size_bytes,
            ..FileWorkloadConfig::table_one(workload)
        };
        let generator = config.generator()?;
        let sizes = generator.file_sizes().to_vec();
        Ok((generator.collect(), sizes))
    }

    pub(crate) fn model(&self) -> Model {
        Model {
            cache_bytes: self.cache_bytes,
            block_size_bytes: self.block_size_bytes,
            servers: self.servers,
            prefetch_stripes: self.prefetch_stripes,
            hit: self.hit,
            miss: self.miss,
        }
    }
}

pub(crate) fn workload_name(w: TableOneWorkload) -> &'static str {
    match w {
        TableOneWorkload::A => "A",
        TableOneWorkload::B => "B",
        TableOneWorkload::C => "C",
        TableOneWorkload::D => "D",
    }
}

/// What [`simulate`] models: the cache, the striping and the costs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Model {
    /// Cache capacity, bytes.
    pub cache_bytes: u64,
    /// Cache block (and stripe unit), bytes.
    pub block_size_bytes: u32,
    /// Block servers the blocks are striped over.
    pub servers: u32,
    /// Readahead window in stripes (× `servers` blocks); 0 for none.
    pub prefetch_stripes: u32,
    /// A hit's cost.
    pub hit: ServiceCost,
    /// A miss's cost on its server.
    pub miss: ServiceCost,
}

/// What [`simulate`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Simulated {
    /// Demand block accesses that hit.
    pub hits: u64,
    /// Demand block accesses.
    pub accesses: u64,
    /// Mean modelled response time per request, ms.
    pub mean_response_ms: f64,
}

impl Simulated {
    /// Hits over accesses.
    pub fn hit_ratio(&self) -> f64 {
        self.hits as f64 / self.accesses.max(1) as f64
    }
}

/// Replays `requests` through one policy.
///
/// Readahead, as a file system client does it ([`Readahead`]): an access
/// that continues its file's sequence (or starts it at block 0) makes sure
/// the next `prefetch_stripes × servers` blocks are cached, fetching the
/// missing ones asynchronously (they take cache space but add nothing to the
/// response time, and they are not counted as accesses). With
/// `object_bytes` (each object's length, by object id) the window stops at
/// the object's last block, as the file gateway's does; without, it runs
/// past it (the Table I reproduction, whose numbers predate the lengths).
pub(crate) fn simulate(
    model: &Model,
    policy: &PolicyConfig,
    requests: &[Request],
    object_bytes: Option<&[u64]>,
) -> Result<Simulated> {
    let mut cache = policy.build(Capacity::Bytes(model.cache_bytes))?;
    let unit = Unit::Block {
        block_size: model.block_size_bytes,
    };
    let mut splitter = Splitter::new(unit);
    let mut ahead_splitter = Splitter::new(unit);
    let block_size = u64::from(model.block_size_bytes);
    let mut readahead =
        Readahead::new(u64::from(model.prefetch_stripes) * u64::from(model.servers));
    let mut blocks = Vec::new();
    let mut named = Vec::new();
    let mut ahead = Vec::new();
    let mut victims = Vec::new();
    let mut busy = vec![0.0f64; model.servers as usize];
    let (mut hits, mut accesses, mut total) = (0u64, 0u64, 0.0f64);
    for request in requests {
        blocks.clear();
        splitter.split(request, &mut blocks);
        busy.fill(0.0);
        let mut copy = 0.0;
        for access in &blocks {
            victims.clear();
            accesses += 1;
            if cache.access(access, &mut victims) {
                hits += 1;
                copy += model.hit.seconds(1, u64::from(access.size));
            } else {
                let server = (access.block % u64::from(model.servers)) as usize;
                busy[server] += model.miss.seconds(1, u64::from(access.size));
            }
            let length = object_bytes.map(|sizes| {
                usize::try_from(access.object)
                    .ok()
                    .and_then(|i| sizes.get(i))
                    .map_or(0, |&bytes| bytes.div_ceil(block_size))
            });
            named.clear();
            readahead.access(access.object, access.block, length, &mut named);
            for &index in &named {
                ahead.clear();
                let next = Request {
                    offset: index * block_size,
                    size: model.block_size_bytes,
                    ..*request
                };
                ahead_splitter.split(&next, &mut ahead);
                for block in &ahead {
                    if !cache.contains(block.key) {
                        victims.clear();
                        cache.admit(block, &mut victims);
                    }
                }
            }
        }
        total += copy + busy.iter().copied().fold(0.0, f64::max);
    }
    Ok(Simulated {
        hits,
        accesses,
        mean_response_ms: total / requests.len().max(1) as f64 * 1e3,
    })
}

/// Runs the experiment and returns its judged claims.
pub fn run(args: &DualArgs, quiet: bool) -> Result<Vec<Claim>> {
    prepare_out(&args.common)?;
    let spec = load_spec(args.spec.as_ref())?;
    let requests = ((spec.requests as f64 * args.common.scale) as u64).max(1000);
    let mut alphas = spec.alphas.clone();
    if !alphas.iter().any(|a| (a - spec.alpha).abs() < 1e-9) {
        alphas.push(spec.alpha);
        alphas.sort_by(f64::total_cmp);
    }
    let single = policy_spec::parse(&spec.single)?;
    let mut configs: Vec<(Option<f64>, PolicyConfig)> = vec![(None, single)];
    for &alpha in &alphas {
        configs.push((Some(alpha), spec.dual_policy(alpha)?));
    }

    let bar = Bar::new(Some(spec.workloads.len() as u64), "reproduce dual", quiet);
    let mut rows = Vec::new();
    for &workload in &spec.workloads {
        let (trace, _) = spec.trace(workload, requests)?;
        let model = spec.model();
        let results: Vec<Result<Simulated>> = std::thread::scope(|scope| {
            let handles: Vec<_> = configs
                .iter()
                .map(|(_, policy)| scope.spawn(|| simulate(&model, policy, &trace, None)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a simulation thread panicked")))
                })
                .collect()
        });
        for ((alpha, _), result) in configs.iter().zip(results) {
            let simulated = result?;
            rows.push(Row {
                workload,
                alpha: *alpha,
                hit_ratio: simulated.hit_ratio(),
                mean_response_ms: simulated.mean_response_ms,
            });
        }
        bar.inc(1);
    }
    bar.finish();

    let claims = judge(&spec, &rows);
    let mut out = crate::output::stdout();
    writeln!(
        out,
        "papers/001 (dual cache), simulated: Table I workloads {}, {requests} requests each, \
         a {} KiB cache ({} % FPC), {} KiB blocks striped over {} servers",
        spec.workloads
            .iter()
            .map(|&w| workload_name(w))
            .collect::<Vec<_>>()
            .join(", "),
        spec.cache_bytes >> 10,
        spec.fpc_fraction * 100.0,
        spec.block_size_bytes >> 10,
        spec.servers
    )?;
    print_tables(&mut out, &spec, &alphas, &rows)?;
    writeln!(out)?;
    print_claims(&mut out, &claims)?;
    write_outputs(&args.common.out, &spec, &rows, &claims)?;
    writeln!(
        out,
        "Wrote {0}/dual.csv, {0}/dual-claims.csv, {0}/dual-alpha.svg",
        args.common.out.display()
    )?;
    Ok(claims)
}

fn find(rows: &[Row], workload: TableOneWorkload, alpha: Option<f64>) -> Option<&Row> {
    rows.iter().find(|r| {
        r.workload == workload
            && match (r.alpha, alpha) {
                (None, None) => true,
                (Some(a), Some(b)) => (a - b).abs() < 1e-9,
                _ => false,
            }
    })
}

fn judge(spec: &Spec, rows: &[Row]) -> Vec<Claim> {
    let mut claims = Vec::new();
    let pairs: Vec<(TableOneWorkload, &Row, &Row)> = spec
        .workloads
        .iter()
        .filter_map(|&w| Some((w, find(rows, w, None)?, find(rows, w, Some(spec.alpha))?)))
        .collect();
    if let Some(&(_, single, dual)) = pairs.iter().find(|p| p.0 == TableOneWorkload::A) {
        claims.push(Claim {
            source: "papers/001 Fig. 4".into(),
            text: format!(
                "workload A: the dual cache (α = {}) hits at least as often as a single cache",
                spec.alpha
            ),
            paper: "slightly higher".into(),
            ours: format!(
                "{:.2} % vs {:.2} %",
                dual.hit_ratio * 100.0,
                single.hit_ratio * 100.0
            ),
            confirmed: dual.hit_ratio >= single.hit_ratio,
        });
        claims.push(Claim {
            source: "papers/001 §6".into(),
            text: "workload A: the dual cache lowers mean response time".into(),
            paper: "response time falls though the hit ratio barely rises".into(),
            ours: format!(
                "{:.2} ms vs {:.2} ms ({:+.1} %)",
                dual.mean_response_ms,
                single.mean_response_ms,
                (dual.mean_response_ms / single.mean_response_ms - 1.0) * 100.0
            ),
            confirmed: dual.mean_response_ms < single.mean_response_ms,
        });
    }
    let others: Vec<String> = pairs
        .iter()
        .filter(|p| p.0 != TableOneWorkload::A)
        .map(|(w, s, d)| {
            format!(
                "{}: {:.2} vs {:.2} %",
                workload_name(*w),
                d.hit_ratio * 100.0,
                s.hit_ratio * 100.0
            )
        })
        .collect();
    if !others.is_empty() {
        claims.push(Claim {
            source: "papers/001 Fig. 4".into(),
            text: "workloads B-D: the dual cache hits at least as often as a single cache".into(),
            paper: "dual ≥ single on every workload".into(),
            ours: others.join("; "),
            confirmed: pairs
                .iter()
                .filter(|p| p.0 != TableOneWorkload::A)
                .all(|(_, s, d)| d.hit_ratio >= s.hit_ratio),
        });
    }
    let sweep: Vec<&Row> = rows
        .iter()
        .filter(|r| r.workload == TableOneWorkload::A && r.alpha.is_some())
        .collect();
    if let Some(best) = sweep
        .iter()
        .min_by(|a, b| a.mean_response_ms.total_cmp(&b.mean_response_ms))
        && let Some(best_alpha) = best.alpha
    {
        let at = find(rows, TableOneWorkload::A, Some(spec.alpha));
        claims.push(Claim {
            source: "papers/001 Fig. 5".into(),
            text: "workload A: mean response time is lowest near α = 20".into(),
            paper: "best near α = 20".into(),
            ours: format!(
                "best α = {best_alpha} ({:.3} ms); α = {} gives {:.3} ms",
                best.mean_response_ms,
                spec.alpha,
                at.map_or(f64::NAN, |r| r.mean_response_ms)
            ),
            confirmed: (10.0..=30.0).contains(&best_alpha),
        });
    }
    claims
}

fn print_tables(
    out: &mut dyn Write,
    spec: &Spec,
    alphas: &[f64],
    rows: &[Row],
) -> std::io::Result<()> {
    let mut header = vec!["cache".to_owned()];
    header.extend(spec.workloads.iter().map(|&w| workload_name(w).to_owned()));
    writeln!(out, "\nhit ratio, % (Fig. 4)")?;
    let line = |label: String, alpha: Option<f64>, f: &dyn Fn(&Row) -> f64| {
        let mut cells = vec![label];
        for &w in &spec.workloads {
            cells.push(find(rows, w, alpha).map_or("-".into(), |r| format!("{:.2}", f(r))));
        }
        cells
    };
    let hit = |r: &Row| r.hit_ratio * 100.0;
    table(
        out,
        &header,
        &[
            line(format!("single ({})", spec.single), None, &hit),
            line(format!("dual (α = {})", spec.alpha), Some(spec.alpha), &hit),
        ],
    )?;
    writeln!(out, "\nmean response time, ms (Fig. 5)")?;
    header[0] = "α".into();
    let response = |r: &Row| r.mean_response_ms;
    let mut table_rows = vec![line("single".into(), None, &response)];
    for &alpha in alphas {
        table_rows.push(line(format!("{alpha}"), Some(alpha), &response));
    }
    table(out, &header, &table_rows)
}

fn write_outputs(dir: &std::path::Path, spec: &Spec, rows: &[Row], claims: &[Claim]) -> Result<()> {
    let mut csv = String::from("workload,cache,alpha,hit_ratio,mean_response_ms\n");
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{},{:.6},{:.4}",
            workload_name(r.workload),
            csv_field(if r.alpha.is_some() { "dual" } else { "single" }),
            r.alpha.map(|a| a.to_string()).unwrap_or_default(),
            r.hit_ratio,
            r.mean_response_ms
        );
    }
    save(&dir.join("dual.csv"), &csv)?;
    write_claims_csv(&dir.join("dual-claims.csv"), claims)?;
    let series: Vec<Series> = spec
        .workloads
        .iter()
        .map(|&w| Series {
            name: format!("workload {}", workload_name(w)),
            points: rows
                .iter()
                .filter(|r| r.workload == w)
                .filter_map(|r| r.alpha.map(|a| (a, r.mean_response_ms)))
                .collect(),
        })
        .collect();
    plot::lines(
        &dir.join("dual-alpha.svg"),
        "papers/001 Fig. 5: mean response time against α",
        "α",
        YAxis {
            label: "mean response time, ms",
            ratio: false,
        },
        &series,
    )
}
