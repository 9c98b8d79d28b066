//! `cairn serve --files DIR|URL`: a directory, or the objects of an HTTP
//! origin or an S3 bucket, served over HTTP/1.1 and the S3 GET/HEAD object API through the
//! file gateway (`cairn-files`), instead of NBD volumes. See docs/files.md.
//! `--metrics` and `--control` answer from [`ServedFiles`], with the same
//! listeners as the volumes' (`cairn-control`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_control::{
    BackendErrors, FileExportSnapshot, Handler, HttpRequests, MetricsListener, Snapshot,
};
use cairn_files::http::{GatewayCounters, METHODS, STATUS_CLASSES};
use cairn_files::{
    Backend, DirBackend, FileCache, FileCacheConfig, Gateway, GatewayConfig, HttpBackend,
    HttpBackendConfig, SpillBackend, SpillConfig, StripedBackend, ThrottledBackend, UnionBackend,
};
use cairn_nbd::ListenAddress;
use cairn_objects::S3Config;
use cairn_store::stats::LayerCommand;
use cairn_store::volume::FilesSpec;

use crate::commands::bench::files::parse_throttle;
use crate::commands::control;
use crate::commands::sim::parse_duration_us;

/// How long an origin's answer for an object is trusted without --revalidate.
const ORIGIN_REVALIDATE: std::time::Duration = std::time::Duration::from_secs(1);

/// Where the gateway listens without --listen.
const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// One file export to serve: `cairn serve`'s --files flags (sizes and
/// policies parsed), or a spec's `[[files]]` table.
pub(super) struct FilesArgs {
    /// --files, each: a directory, several separated by commas (striped),
    /// or a URL; several --files are a union, first first.
    pub dirs: Vec<PathBuf>,
    /// Where to listen: --listen, `listen`; default [`DEFAULT_LISTEN`].
    pub listen: Option<ListenAddress>,
    /// --export: the bucket.
    pub export: String,
    /// --block-size, bytes.
    pub block_size: Option<u64>,
    /// --cache-size, bytes.
    pub cache_size: Option<u64>,
    /// --policy.
    pub policy: Option<cairn_policy::PolicyConfig>,
    /// --connections-max.
    pub connections_max: Option<usize>,
    /// --throttle, each: OP,BANDWIDTH or none; one for every --files, or
    /// one for all.
    pub throttles: Vec<String>,
    /// --revalidate.
    pub revalidate: Option<String>,
    /// --prefetch-stripes: readahead of this many stripes (0: none).
    pub prefetch_stripes: u64,
    /// --spill, --spill-map, --spill-policy, --spill-size.
    pub spill: Option<SpillArgs>,
    /// What errors call each setting: [`FLAGS`] or [`FIELDS`].
    pub names: &'static Names,
}

/// What an error calls each setting of a file export, so that it names what
/// the user wrote: the flags of `cairn serve --files`, or a spec's
/// `[[files]]` fields.
pub(super) struct Names {
    files: &'static str,
    listen: &'static str,
    export: &'static str,
    throttle: &'static str,
    revalidate: &'static str,
    cache: &'static str,
    spill: &'static str,
    spill_map: &'static str,
    spill_size: &'static str,
    spill_exclusive: &'static str,
    spill_no_promote: &'static str,
}

/// `cairn serve --files`' flags.
pub(super) const FLAGS: Names = Names {
    files: "--files",
    listen: "--listen",
    export: "--export",
    throttle: "--throttle",
    revalidate: "--revalidate",
    cache: "--block-size, --cache-size, --policy, --prefetch-stripes",
    spill: "--spill",
    spill_map: "--spill-map",
    spill_size: "--spill-size",
    spill_exclusive: "--spill-exclusive",
    spill_no_promote: "--spill-no-promote",
};

/// A spec's `[[files]]` fields (the error's context names the table).
pub(super) const FIELDS: Names = Names {
    files: "source",
    listen: "listen",
    export: "name",
    throttle: "throttle",
    revalidate: "revalidate",
    cache: "block_size, cache_size, policy, prefetch_stripes",
    spill: "spill.path",
    spill_map: "spill.map",
    spill_size: "spill.size",
    spill_exclusive: "spill.exclusive = true",
    spill_no_promote: "spill.promote = false",
};

/// The listeners beside a lone file export (`cairn serve --files`).
pub(super) struct Beside<'a> {
    /// --metrics: the metrics listener's address.
    pub metrics: Option<&'a str>,
    /// --metrics-public.
    pub metrics_public: bool,
    /// --control: the control socket (none by default: no data directory).
    pub control: Option<&'a Path>,
    /// -q: print nothing on stdout.
    pub quiet: bool,
}

/// --spill and the flags that go with it.
pub(super) struct SpillArgs {
    /// --spill: the SSD file or block device.
    pub path: PathBuf,
    /// --spill-size, bytes.
    pub size: Option<u64>,
    /// --spill-map.
    pub map: Option<PathBuf>,
    /// --spill-policy.
    pub policy: Option<cairn_policy::PolicyConfig>,
    /// --spill-direct.
    pub direct: bool,
    /// --spill-exclusive.
    pub exclusive: bool,
    /// Not --spill-no-promote.
    pub promote: bool,
}

/// The backend behind a spill on `spill`, if asked for: opened (warm),
/// recovered or formatted, and said so in the log.
fn spill(
    backend: Arc<dyn Backend>,
    spill: &SpillArgs,
    unit: u64,
    n: &Names,
) -> Result<Arc<SpillBackend>> {
    let mut config = SpillConfig::new(&spill.path, unit);
    config.size = spill.size;
    config.map.clone_from(&spill.map);
    config.direct = spill.direct;
    config.exclusive = spill.exclusive;
    config.promote = spill.promote;
    if !spill.promote && !spill.exclusive {
        bail!(
            "{} needs {}: an inclusive spill keeps what the DRAM cache takes anyway",
            n.spill_no_promote,
            n.spill_exclusive
        );
    }
    if config.map.is_none() && std::fs::metadata(&spill.path).is_ok_and(|m| !m.is_file()) {
        bail!(
            "{} {}: not a regular file; give {} FILE for its map (it cannot sit beside a \
             device)",
            n.spill,
            spill.path.display(),
            n.spill_map
        );
    }
    if let Some(policy) = &spill.policy {
        config.policy = policy.clone();
    }
    if spill.size.is_none() && !spill.path.exists() {
        bail!(
            "{} {}: no such file; give {} SIZE to create it",
            n.spill,
            spill.path.display(),
            n.spill_size
        );
    }
    let spilled = SpillBackend::open(backend, &config).context(n.spill)?;
    let opened = spilled.opened();
    let kind = match (config.exclusive, config.promote) {
        (true, true) => "exclusive: it holds what the DRAM cache drops",
        (true, false) => {
            "exclusive: it holds what the DRAM cache drops, and serves its hits in place"
        }
        (false, _) => "inclusive",
    };
    if let Some(why) = &opened.formatted {
        tracing::info!("spill: formatted {} ({why}); {kind}", spilled.describe());
    } else {
        tracing::info!(
            "spill: {} holds {} bytes of {} objects, {} ({}); {kind}",
            config.path.display(),
            opened.cached_blocks * u64::from(spilled.tier().geometry().block_size),
            opened.objects,
            if opened.clean {
                "warm after a clean stop".to_owned()
            } else {
                format!(
                    "recovered after a crash, {} records replayed",
                    opened.replayed
                )
            },
            spilled.describe()
        );
    }
    Ok(Arc::new(spilled))
}

/// The bucket `s3://BUCKET` names, signed with the standard AWS environment
/// variables (those aws-cli and boto3 read): the endpoint from
/// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, the keys from
/// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, the region from
/// `AWS_REGION` or `AWS_DEFAULT_REGION` (default `us-east-1`).
fn s3_origin(bucket: &str, n: &Names) -> Result<S3Config> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let bucket = bucket.trim_end_matches('/');
    if bucket.is_empty() || bucket.contains('/') {
        bail!(
            "{} s3://{bucket}: name one bucket, s3://BUCKET (the whole bucket is served)",
            n.files
        );
    }
    let Some(endpoint) = var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL")) else {
        bail!(
            "{} s3://{bucket}: set AWS_ENDPOINT_URL to the store's URL (e.g. \
             https://s3.eu-west-1.amazonaws.com, or http://127.0.0.1:7480 for a Ceph RGW)",
            n.files
        );
    };
    let (Some(access_key), Some(secret_key)) =
        (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
    else {
        bail!(
            "{files} s3://{bucket}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (for an \
             anonymous bucket use {files} {endpoint}/{bucket})",
            files = n.files,
            endpoint = endpoint.trim_end_matches('/')
        );
    };
    Ok(S3Config {
        endpoint,
        bucket: bucket.to_owned(),
        region: var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_owned()),
        access_key,
        secret_key,
        timeout: HttpBackendConfig::default().io_timeout,
    })
}

/// What one --files names: an origin (an S3 bucket `s3://BUCKET`, or a URL
/// `http://HOST:PORT/BUCKET`: anything with `://`), or the directories an
/// object is striped over (one, or several separated by commas).
enum Source {
    Origin(String),
    Dirs(Vec<PathBuf>),
}

impl Source {
    fn of(files: &Path) -> Self {
        let text = files.to_string_lossy();
        if text.contains("://") {
            Source::Origin(text.into_owned())
        } else if text.contains(',') {
            Source::Dirs(text.split(',').map(PathBuf::from).collect())
        } else {
            Source::Dirs(vec![files.to_path_buf()])
        }
    }

    /// The servers a block's readahead window spans (papers/001): the
    /// striped directories, or one origin.
    fn servers(&self) -> u64 {
        match self {
            Source::Origin(_) => 1,
            Source::Dirs(dirs) => dirs.len() as u64,
        }
    }
}

/// The backend of `source`: directories striped in stripes of `unit` bytes,
/// throttled by `throttle` (`cairn bench files`'s syntax, e.g.
/// `2ms,200MiB/s`) if given.
fn backend(
    source: &Source,
    throttle: Option<&str>,
    unit: u64,
    n: &Names,
) -> Result<Arc<dyn Backend>> {
    let throttle = match throttle {
        Some(text) => parse_throttle(text).context(n.throttle)?,
        None => None,
    };
    let dirs = match source {
        Source::Dirs(dirs) => dirs,
        Source::Origin(text) => {
            if throttle.is_some() {
                bail!(
                    "{} slows directories, not an origin URL (give it `none`)",
                    n.throttle
                );
            }
            let backend = match text.strip_prefix("s3://") {
                // aws-cli's variable for a private CA, before SSL_CERT_FILE.
                Some(bucket) => HttpBackend::s3(
                    &s3_origin(bucket, n)?,
                    HttpBackendConfig {
                        ca_file: std::env::var_os("AWS_CA_BUNDLE")
                            .filter(|v| !v.is_empty())
                            .map(PathBuf::from),
                        ..HttpBackendConfig::default()
                    },
                ),
                None => HttpBackend::new(text, HttpBackendConfig::default()),
            }
            .map_err(|e| anyhow::anyhow!("{} {e}", n.files))?;
            return Ok(Arc::new(backend));
        }
    };
    let open = |path: &Path| -> Result<Arc<dyn Backend>> {
        let dir =
            DirBackend::open(path).with_context(|| format!("{} {}", n.files, path.display()))?;
        Ok(match throttle {
            Some(throttle) => Arc::new(ThrottledBackend::new(dir, throttle)),
            None => Arc::new(dir),
        })
    };
    if let [dir] = dirs.as_slice() {
        return open(dir);
    }
    let servers = dirs
        .iter()
        .map(|dir| open(dir))
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(
        StripedBackend::new(servers, unit).map_err(|e| anyhow::anyhow!("{}: {e}", n.files))?,
    ))
}

/// The backend of every --files, in order, each with its --throttle: one
/// is itself, several a union (papers/004: each member its own cost group).
fn union(dirs: &[Source], throttles: &[String], unit: u64, n: &Names) -> Result<Arc<dyn Backend>> {
    if throttles.len() > 1 && throttles.len() != dirs.len() {
        bail!(
            "{} given {} times for {} {}: give one for all, or one for each (`none` for one \
             not slowed)",
            n.throttle,
            throttles.len(),
            dirs.len(),
            n.files
        );
    }
    let throttle = |i: usize| throttles.get(if throttles.len() == 1 { 0 } else { i });
    if let [dir] = dirs {
        return backend(dir, throttle(0).map(String::as_str), unit, n);
    }
    let members = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| backend(dir, throttle(i).map(String::as_str), unit, n))
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(
        UnionBackend::new(members).map_err(|e| anyhow::anyhow!("{}: {e}", n.files))?,
    ))
}

/// One file export started: its gateway listening, its cache, its spill.
pub(super) struct Started {
    gateway: Gateway<Arc<dyn Backend>>,
    cache: Arc<FileCache<Arc<dyn Backend>>>,
    spilled: Option<Arc<SpillBackend>>,
    counters: Arc<GatewayCounters>,
    bound: std::net::SocketAddr,
    /// The sources, as given.
    shown: String,
    export: String,
    since: Instant,
}

/// Builds the backends, the spill and the cache `args` describe and binds
/// the gateway (it serves from [`Started::serve`]).
pub(super) fn start(args: &FilesArgs) -> Result<Started> {
    let n = args.names;
    let shown = args
        .dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(" + ");
    let sources: Vec<Source> = args.dirs.iter().map(|d| Source::of(d)).collect();
    let any_origin = sources.iter().any(|s| matches!(s, Source::Origin(_)));
    let address = match &args.listen {
        None => DEFAULT_LISTEN.to_owned(),
        Some(ListenAddress::Tcp(address)) => address.clone(),
        Some(other) => bail!(
            "a file export listens on TCP only ({} tcp:HOST:PORT), not {other}",
            n.listen
        ),
    };
    let mut cache_config = FileCacheConfig::default();
    if let Some(size) = args.block_size {
        cache_config.block_size_bytes = size;
    }
    if let Some(size) = args.cache_size {
        cache_config.capacity_bytes = size;
    }
    if let Some(policy) = &args.policy {
        cache_config.policy = policy.clone();
    }
    cache_config.revalidate = match &args.revalidate {
        Some(text) => std::time::Duration::from_micros(
            parse_duration_us(text).map_err(|e| anyhow::anyhow!("{} {e}", n.revalidate))?,
        ),
        None if any_origin => ORIGIN_REVALIDATE,
        None => std::time::Duration::ZERO,
    };
    // The most striped directories of any --files.
    let servers = sources.iter().map(Source::servers).max().unwrap_or(1);
    cache_config.prefetch_window_blocks = args.prefetch_stripes.saturating_mul(servers);
    let mut config = GatewayConfig::new(&args.export);
    if let Some(connections) = args.connections_max {
        config.connections_max = connections;
    }
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("{}: {e}", n.export))?;
    let backend = union(&sources, &args.throttles, cache_config.block_size_bytes, n)?;
    let spilled = args
        .spill
        .as_ref()
        .map(|s| spill(Arc::clone(&backend), s, cache_config.block_size_bytes, n))
        .transpose()?;
    let backend: Arc<dyn Backend> = match &spilled {
        Some(s) => Arc::clone(s) as Arc<dyn Backend>,
        None => backend,
    };
    let cache = Arc::new(
        FileCache::new(backend, &cache_config)
            .with_context(|| format!("the file cache ({})", n.cache))?,
    );
    let gateway = Gateway::bind(address.as_str(), Arc::clone(&cache), config)
        .with_context(|| format!("listening on tcp:{address}"))?;
    let bound = gateway.local_addr()?;
    if !bound.ip().to_canonical().is_loopback() {
        tracing::warn!(
            "serving {} on tcp:{bound}, not a loopback address: the gateway has no authentication, \
             whoever reaches it reads every file under the directory",
            shown
        );
    }
    tracing::info!(
        "serving the files under {} as bucket {:?} at http://{bound}/{}/ \
         ({} blocks of {} bytes, {} shards, policy {}, readahead {} blocks)",
        shown,
        args.export,
        args.export,
        cache.capacity_bytes() / cache.block_size(),
        cache.block_size(),
        cache.shards(),
        cache.policy_name(),
        cache_config.prefetch_window_blocks
    );
    Ok(Started {
        counters: gateway.counters(),
        gateway,
        cache,
        spilled,
        bound,
        shown,
        export: args.export.clone(),
        since: Instant::now(),
    })
}

impl Started {
    /// The line that says where it answers.
    pub(super) fn announcement(&self) -> String {
        let (bound, export) = (self.bound, &self.export);
        format!(
            "Serving {} at http://{bound}/{export}/KEY (S3: --endpoint-url http://{bound}, bucket {export}, path-style)",
            self.shown
        )
    }

    /// Setting it stops [`serve`](Self::serve).
    pub(super) fn stop_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.gateway.stop_flag()
    }

    /// Serves until the stop flag is set.
    pub(super) fn serve(&self) -> Result<()> {
        self.gateway.serve().context("serving")
    }

    /// Closes the spill (a checkpoint) and logs what the export did.
    pub(super) fn finish(&self) {
        let (cache, counters) = (&self.cache, &self.counters);
        let stats = cache.stats();
        if let Some(spilled) = &self.spilled {
            // Exclusive: what DRAM holds goes down first, so the restart
            // finds it.
            let handed = cache.demote_all();
            let t = spilled.tier().metrics();
            let closed = spilled.close();
            tracing::info!(
                "file export {:?}: spill: {} blocks read from the SSD, {} from the backend through \
                 it, {} promoted{}; {}",
                self.export,
                t.hits,
                t.misses,
                t.promotions,
                if spilled.exclusive() {
                    let up = if spilled.promotes() {
                        format!("{} taken back up", t.taken_blocks)
                    } else {
                        format!("{} reads served in place", spilled.kept())
                    };
                    format!(" (exclusive: {up}; {handed} DRAM blocks handed down at the stop)")
                } else {
                    String::new()
                },
                match closed {
                    Ok(()) => "checkpointed (the next start is warm at once)".to_owned(),
                    Err(e) => format!("its close failed ({e}): the next start replays its journal"),
                }
            );
        }
        if cache.backend().parts() > 1 {
            let costs: Vec<String> = cache.backend_costs().map(|c| format!("{c:.2}")).collect();
            tracing::info!(
                "learned backend costs, in --files order: {}",
                costs.join(", ")
            );
        }
        tracing::info!(
            "file export {:?} stopped: {} connections ({} refused), {} requests; blocks: {} hits, \
             {} misses, {} coalesced, {} backend errors; {} bytes from the cache, {} from the \
             backend; read ahead: {} issued, {} used, {} wasted (evicted unused), {} dropped",
            self.export,
            counters.connections.load(Ordering::Relaxed),
            counters.refused.load(Ordering::Relaxed),
            counters.requests(),
            stats.hits,
            stats.misses,
            stats.coalesced,
            stats.backend_errors.total(),
            stats.bytes_from_cache,
            stats.bytes_from_backend,
            stats.prefetch_issued,
            stats.prefetch_used,
            stats.prefetch_wasted,
            stats.prefetch_dropped
        );
    }

    /// What its control socket and metrics listener show of it.
    pub(super) fn snapshot(&self) -> FileExportSnapshot {
        let cache = self.cache.stats();
        let by = self.counters.requests_by();
        let mut requests = Vec::with_capacity(METHODS.len() * STATUS_CLASSES.len());
        for (method, counts) in METHODS.iter().zip(by.counts) {
            for (status, count) in STATUS_CLASSES.iter().zip(counts) {
                requests.push(HttpRequests {
                    method: (*method).to_owned(),
                    status: (*status).to_owned(),
                    count,
                });
            }
        }
        let errors = cache.backend_errors;
        let count = |n: &std::sync::atomic::AtomicUsize| n.load(Ordering::Relaxed) as u64;
        FileExportSnapshot {
            name: self.export.clone(),
            policy: self.cache.policy_name().to_owned(),
            block_size_bytes: self.cache.block_size(),
            connections_open: count(&self.counters.open),
            connections_total: count(&self.counters.connections),
            connections_refused: count(&self.counters.refused),
            requests,
            backend_errors: BackendErrors {
                not_found: errors.not_found,
                timeout: errors.timeout,
                other: errors.other,
            },
            cache: {
                let mut metrics = cache.metrics();
                self.cache.backend_metrics(&mut metrics);
                metrics
            },
            backends: self.cache.backend_groups(),
        }
    }
}

/// The answer to a layer command sent to a file export.
pub(super) fn no_layers(export: &str, command: &LayerCommand) -> String {
    format!(
        "{}: {export:?} is a file export (cairn serve --files), which has no layers to \
         steer; cairn stats shows its counters",
        command.name()
    )
}

/// Serves one file export until SIGINT or SIGTERM (`cairn serve --files`).
pub(super) fn run(args: &FilesArgs, beside_args: &Beside<'_>) -> Result<()> {
    let started = start(args)?;
    let metrics = beside_args
        .metrics
        .map(|address| MetricsListener::bind(address, beside_args.metrics_public))
        .transpose()
        .context("--metrics")?;
    let control_socket = control::bind(beside_args.control, None)?;
    let beside = control::Beside {
        socket: control_socket.as_ref(),
        metrics: metrics.as_ref(),
    };
    let exports = [started];
    if !beside_args.quiet {
        announce(&exports, &beside);
    }
    beside.log("the export's name and traffic");
    serve_alone(&exports, &beside, || {
        tracing::info!("SIGHUP: nothing to reload (restart to change --files' flags)");
    })
}

/// Prints where each file export answers and how to watch them. A closed
/// stdout is no reason not to serve.
pub(super) fn announce(exports: &[Started], beside: &control::Beside<'_>) {
    let mut stdout = std::io::stdout().lock();
    for export in exports {
        let _ = writeln!(stdout, "{}", export.announcement());
    }
    let _ = write!(stdout, "{}", beside.how_to_watch());
    let _ = stdout.flush();
}

/// Serves `exports` with no block export beside them (`cairn serve --files`,
/// or a spec of `[[files]]` only) until SIGINT or SIGTERM, or until one of
/// them fails, which stops the others; then closes their spills and logs
/// what each did. SIGHUP runs `on_hup` (a spec's `log_level` re-read; SIGHUP's
/// default would kill the process without the spills' checkpoint); SIGUSR1
/// and SIGUSR2 are logged and ignored.
pub(super) fn serve_alone(
    exports: &[Started],
    beside: &control::Beside<'_>,
    on_hup: impl Fn() + Send + 'static,
) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let signals = super::signals::spawn(move || flag.swap(true, Ordering::Relaxed), on_hup)?;
    let served = ServedFiles(exports);
    let ((), failed) = control::run_beside(beside, &served, || {
        serve_each(exports, |ended| {
            while !stop.load(Ordering::Relaxed) && !ended.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    });
    signals.close();
    let mut failed = failed.into_iter();
    match failed.next() {
        None => Ok(()),
        Some(first) => {
            for e in failed {
                tracing::error!("{e:#}");
            }
            Err(first)
        }
    }
}

impl FilesArgs {
    /// The export a spec's `[[files]]` table describes: relative
    /// directories and the spill's paths under `data_dir`.
    pub(super) fn of_spec(spec: &FilesSpec, data_dir: &Path) -> Result<Self> {
        let under = |path: &Path| {
            if path.is_absolute() {
                path.to_path_buf()
            } else {
                data_dir.join(path)
            }
        };
        let dirs = spec
            .source
            .iter()
            .map(|source| {
                if source.contains("://") {
                    PathBuf::from(source)
                } else {
                    let joined: Vec<String> = source
                        .split(',')
                        .map(|dir| under(Path::new(dir)).display().to_string())
                        .collect();
                    PathBuf::from(joined.join(","))
                }
            })
            .collect::<Vec<_>>();
        if dirs.is_empty() {
            bail!("source: name at least one directory or origin");
        }
        Ok(Self {
            dirs,
            listen: Some(
                spec.listen
                    .parse()
                    .map_err(|e| anyhow::anyhow!("listen {:?}: {e}", spec.listen))?,
            ),
            export: spec.name.clone(),
            block_size: spec.block_size.map(cairn_policy::Bytes::get),
            cache_size: spec.cache_size.map(cairn_policy::Bytes::get),
            policy: spec.policy.as_ref().map(|p| p.0.clone()),
            connections_max: spec.connections_max,
            throttles: spec.throttle.clone(),
            revalidate: spec.revalidate.clone(),
            prefetch_stripes: spec.prefetch_stripes,
            spill: spec.spill.as_ref().map(|s| SpillArgs {
                path: under(&s.path),
                size: s.size.map(cairn_policy::Bytes::get),
                map: s.map.as_deref().map(under),
                policy: s.policy.as_ref().map(|p| p.0.clone()),
                direct: s.direct,
                exclusive: s.exclusive,
                promote: s.promote,
            }),
            names: &FIELDS,
        })
    }
}

/// Refuses a spec whose `[[files]]` repeat a name or take a block export's
/// (each name is its counters' `export` label).
pub(super) fn check_names(spec: &cairn_store::VolumeSpec) -> Result<()> {
    for (i, files) in spec.files.iter().enumerate() {
        if spec.files[..i].iter().any(|f| f.name == files.name) {
            bail!(
                "files[{i}].name: {:?} is the name of an earlier [[files]]",
                files.name
            );
        }
        if spec.exports.iter().any(|e| e.name == files.name) {
            bail!(
                "files[{i}].name: {:?} is also an [[export]]'s name; give the file export its own",
                files.name
            );
        }
    }
    Ok(())
}

/// Runs `serve` (the block exports' server) with every file export of
/// `exports` served beside it, each on its own thread; when `serve` returns
/// (a signal stopped it), stops them, then closes their spills and logs
/// what each did, and any that failed.
pub(super) fn beside<T>(exports: &[Started], serve: impl FnOnce() -> T) -> T {
    let (result, failed) = serve_each(exports, |_| serve());
    for e in failed {
        tracing::error!("{e:#}");
    }
    result
}

/// Serves every export of `exports` on its own thread while `serve` runs.
/// `serve` gets a flag set as soon as one of those threads ends (an export
/// failed). When `serve` returns, stops them all, waits for them, closes
/// their spills and logs what each did. Returns `serve`'s result and each
/// export's failure.
fn serve_each<T>(
    exports: &[Started],
    serve: impl FnOnce(&AtomicBool) -> T,
) -> (T, Vec<anyhow::Error>) {
    let ended = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        let threads: Vec<_> = exports
            .iter()
            .map(|export| {
                let ended = &ended;
                scope.spawn(move || {
                    let served = export.serve();
                    ended.store(true, Ordering::Relaxed);
                    served
                })
            })
            .collect();
        let result = serve(&ended);
        for export in exports {
            export.stop_flag().store(true, Ordering::Relaxed);
        }
        let failed: Vec<anyhow::Error> = exports
            .iter()
            .zip(threads)
            .filter_map(|(export, thread)| {
                let served = thread
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("its thread panicked")));
                served
                    .err()
                    .map(|e| e.context(format!("file export {:?}", export.export)))
            })
            .collect();
        (result, failed)
    });
    for export in exports {
        export.finish();
    }
    result
}

/// The block exports' handler with the spec's file exports added: their
/// snapshots in `files`, layer commands to them refused.
pub(super) struct WithFiles<'a> {
    /// The volume's exports.
    pub volumes: control::Served<'a>,
    /// The file exports.
    pub files: &'a [Started],
}

impl Handler for WithFiles<'_> {
    fn stats(&self) -> Snapshot {
        let mut snapshot = self.volumes.stats();
        snapshot.files = self.files.iter().map(Started::snapshot).collect();
        snapshot
    }

    fn control(
        &self,
        export: &str,
        layer: Option<&str>,
        command: &LayerCommand,
    ) -> Result<Vec<String>, String> {
        if self.files.iter().any(|f| f.export == export) {
            return Err(no_layers(export, command));
        }
        self.volumes.control(export, layer, command)
    }
}

/// File exports served alone, as their control socket and metrics
/// listener see them.
struct ServedFiles<'a>(&'a [Started]);

impl Handler for ServedFiles<'_> {
    fn stats(&self) -> Snapshot {
        Snapshot {
            pid: std::process::id(),
            uptime_seconds: self
                .0
                .iter()
                .map(|f| f.since.elapsed().as_secs_f64())
                .fold(0.0, f64::max),
            counting: true,
            exports: Vec::new(),
            files: self.0.iter().map(Started::snapshot).collect(),
        }
    }

    fn control(
        &self,
        export: &str,
        _layer: Option<&str>,
        command: &LayerCommand,
    ) -> Result<Vec<String>, String> {
        if self.0.iter().any(|f| f.export == export) {
            return Err(no_layers(export, command));
        }
        let names: Vec<String> = self.0.iter().map(|f| format!("{:?}", f.export)).collect();
        Err(format!(
            "no export {export:?} (file exports: {})",
            names.join(", ")
        ))
    }
}
