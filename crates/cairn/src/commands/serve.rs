//! `cairn serve`: volumes as NBD exports.
//!
//! The volumes come from a spec (`--config FILE`, or the embedded default: a
//! DRAM read cache over a log disk with its NV write cache over a file under
//! `./cairn-data`), or from
//! the quick overrides `--memory SIZE` and `--file PATH` (one raw device).
//! The spec is assembled by `cairn_store::Volume`; at shutdown every export is
//! flushed and every log disk destaged and checkpointed. `--files DIR` serves
//! a directory over HTTP and S3 instead (`files.rs`).

mod files;
mod signals;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_control::{ControlSocket, MetricsListener};
use cairn_nbd::{Export, ListenAddress, Listener, Server, TlsConfig, TlsMode};
use cairn_policy::Bytes;
use cairn_store::Volume;
use cairn_store::volume::{
    DeviceSpec, ExportSpec, FileSpec, MemorySpec, OpenOptions, TlsModeSpec, VolumeSpec,
};

use super::control;
use crate::logging;
use crate::volume_spec::{self, DEFAULT_SPEC, Loaded};

/// `cairn serve --help`'s description.
pub const LONG_ABOUT: &str = "\
Serve volumes over NBD (the Network Block Device protocol), so that unmodified
clients use them as disks: the Linux kernel's nbd-client, qemu and
qemu-img/qemu-io, libnbd's nbdinfo, nbdcopy and nbdfuse, fio's nbd engine.

With no arguments it runs the embedded default volume: one export, \"cairn\", a
1 GiB disk kept under ./cairn-data — a 64 MiB DRAM read cache (S3-FIFO) over
the log-structured disk (papers/003) over a sparse file, each write made
durable in the log disk's NV write cache (./cairn-data/log.nv: an acknowledged
write survives kill -9, and every FLUSH or FUA syncs the cache to disk, so a
flushed write survives a power cut; `volatile = true` in a spec puts it in
RAM, /dev/shm, and the server then warns at every start). It prints how to connect.
The first start formats; later starts recover, so the data survives restarts,
kill -9 and power cuts; a start after a crash says \"recovered after an
unclean stop\".

A server owns what it opens: the data directory, every file, image and NV
region is locked (flock; block devices also O_EXCL) for its life, and a second
server on any of them is refused with the holder's PID. --read-only opens
everything read-only with shared locks and writes nothing at all (an object
volume, kind = \"objects\", only a reader pin in its store: it may be served
read-only while another server writes it, as of its newest checkpoint).
--print-default-config prints that spec; edit it and pass it back with --config.

--config FILE reads a volume spec (TOML, docs/volumes.md): devices (file,
memory, throttled, striped, concat, ntl, log, cache, tier, objects) stacked into one or more
exports.
Relative paths in it are under its data_dir, itself relative to the spec file.
A layer with an on-disk format (log disk, NTL image) is formatted only on blank
storage (missing, sparse or all zeroes) and opened otherwise; storage holding
anything else is refused, never formatted over.

Quick overrides: --memory SIZE serves DRAM (empty at every start); --file PATH
serves a file or block device as is (with --size, created sparse or grown).

Files (docs/files.md): --files DIR serves the regular files under DIR
(--files http://HOST:PORT/BUCKET or https://…: the objects of an HTTP origin,
read by HEAD and ranged GET, listed by ListObjectsV2; https checks the
origin's certificate against $SSL_CERT_FILE or the system's CA bundle),
read-only, over HTTP/1.1 and the S3 GET/HEAD object API instead of NBD
volumes: GET and HEAD /BUCKET/KEY, BUCKET being --export's name (path-style
S3: boto3, aws-cli and curl read through it), single byte ranges, ETag and
Last-Modified with conditional requests, keep-alive, ListObjectsV2 at GET
/BUCKET. Anonymous: an Authorization header is accepted and not checked.
Reads go through a DRAM cache of --block-size blocks (256KiB to 4MiB, default
1MiB) holding --cache-size bytes (default 256MiB), replaced by --policy
(default ons, papers/000); concurrent readers of a missing block share one
read of the file. It listens on --listen tcp:HOST:PORT (default
tcp:127.0.0.1:8080), at most --connections-max connections (default 256; more
are answered 503). --metrics serves its counters as for volumes (below), named
cairn_files_* with the label export: requests by method and status class,
block hits, misses and coalesced waits, backend errors by kind, bytes from the
cache and from the backend, resident blocks and bytes, connections, with
dual its preface size and active files, and with several --files (a union:
each object from the first that has it) each one's reads and learned cost
(cairn_files_union_cost{member=\"N\"}, papers/004, what --policy cost ranks
by); --control PATH (none by default) lets `cairn stats --socket PATH` print
them. SIGINT or SIGTERM stops it; SIGHUP does not. --spill PATH keeps a second
level of that cache on a local SSD, warm across restarts. A spec's [[files]]
tables (docs/volumes.md; examples/volumes/files.toml) serve the same beside its
block exports, one listener each, fields for these flags; a spec of [[files]]
alone serves them with no NBD server.

Listening: a Unix socket by default, <data_dir>/cairn.sock (created with its
directory; a stale socket left by a dead server is replaced), or the spec's
`listen`, or --listen unix:PATH | tcp:HOST:PORT (bind loopback unless you mean to
expose the disk: NBD itself has no authentication; a TCP address other than
loopback without --tls require is warned about at start). Clients see an
export's description only as the spec's `description` writes it. Under systemd socket activation (LISTEN_FDS, LISTEN_PID) the passed
socket is used, so libnbd can start the server itself: nbdinfo -- [ cairn serve
--memory 1GiB ]. With --stdio one connection is served on stdin/stdout and the
server exits when it ends, for clients that run their server on a pipe
(libnbd's nbd_connect_command: nbdfuse MNT --command cairn serve --stdio …).

TLS (NBD_OPT_STARTTLS, X.509, rustls; docs/nbd.md): --tls off (the default) |
on (a client may upgrade; plaintext clients are still served) | require (every
option but STARTTLS and ABORT is refused with NBD_REP_ERR_TLS_REQD until TLS is
up, so plaintext clients cannot use any export). --tls-certificates DIR names a
directory in the nbdkit/qemu/libnbd layout: server-cert.pem and server-key.pem
(the server's), ca-cert.pem (the CA clients check the server against). Clients
connect with nbds:// URIs, e.g. nbdinfo
'nbds+unix:///cairn?socket=cairn-data/cairn.sock&tls-certificates=DIR'. By
default client certificates are not asked for: TLS gives encryption and server
authentication. --tls-verify-peer (nbdkit's flag of that name) also makes
every client present a certificate signed by DIR/ca-cert.pem (libnbd and qemu
send client-cert.pem and client-key.pem from their own certificates
directory); a client without one fails its TLS handshake. A spec's [tls] table
sets the same (mode, certificates, verify_peer; the flags override it).

Protocol: fixed newstyle handshake; options GO, INFO, EXPORT_NAME, LIST, ABORT,
STARTTLS, STRUCTURED_REPLY, LIST/SET_META_CONTEXT (base:allocation); commands
READ, WRITE, FLUSH, TRIM, WRITE_ZEROES, CACHE, BLOCK_STATUS, with FUA; requests
up to 64 MiB; MULTI_CONN advertised (a flush on any connection covers every
acknowledged write).

Control socket: <data_dir>/cairn.ctl (--control PATH elsewhere, --no-control
none; none with --stdio unless --control), mode 0600 and only for the uid the
server runs as (checked with SO_PEERCRED). `cairn stats` reads every export's
requests, bytes, latency percentiles and connections and every layer's
counters from it; `cairn ctl EXPORT flush | drop-clean | mode MODE | detach`
steers the cache layers (docs/operations.md). Requests are counted and timed
per connection, and every layer of a stack (cache, tier, log, objects) times
its reads, writes and flushes, without locks; --no-stats turns both off, only
to measure what they cost.

Metrics (off by default): --metrics tcp:HOST:PORT serves, over HTTP on that
address, /metrics in Prometheus's text format (cairn_requests_total,
cairn_bytes_total, cairn_cache_hits_total, cairn_dirty_bytes, the latency
histograms cairn_request_duration_seconds and cairn_layer_duration_seconds,
and every layer's counters: docs/operations.md lists them), / a dashboard page
with live charts (hit ratio, throughput, latency percentiles, dirty data,
cleaner work, cost-group costs; built into the binary, it loads nothing from
elsewhere), and /stats.json, the snapshot it polls (as `cairn stats --json`).
It has no authentication: an address that is not loopback is refused unless
--metrics-public is given too. Port 0 picks a free port (logged).

Signals: SIGINT or SIGTERM stops accepting, finishes in-flight requests,
flushes every export, destages and checkpoints every log disk, checkpoints
every cache tier (logging its hits, misses and write-backs), and exits 0.
SIGHUP reloads the TLS certificates (new connections use them, open ones keep
theirs; a failed reload keeps the old ones) and, with --config, the spec's
log_level (--log-level, RUST_LOG, -q and -v win over it); other spec changes
need a restart. SIGUSR1 and SIGUSR2 are logged and ignored; SIGPIPE is ignored.
Each is logged on stderr.

Logs: on stderr, as text or (--log-format json) one JSON object a line, at
--log-level (or RUST_LOG's directives, or the spec's log_level; see `cairn
--help`). A failed request is a warning naming its export, the layer that
failed (the file an I/O error names, else the export's device stack) and the
client (peer: a TCP address, or a Unix socket client's pid and uid).";

const EXAMPLES: &str = "\
Examples:
  cairn serve
      The default volume (1 GiB cached log disk under ./cairn-data); prints how to connect.
  cairn serve --print-default-config > my.toml && cairn serve --config my.toml
      Start from the default spec, edit it, serve it.
  cairn serve --config examples/volumes/tiered.toml --listen tcp:127.0.0.1:10809
      A spec's exports over TCP on loopback.
  cairn serve --memory 4GiB
      A 4 GiB DRAM disk (contents vanish at exit).
  cairn serve --file disk.img --size 10GiB
      A sparse 10 GiB file served as is.
  nbdinfo -- [ cairn serve --memory 64MiB ]
      Started by the client, which hands it a listening socket (systemd socket activation).
  cairn serve --memory 1GiB --tls require --tls-certificates pki/
  nbdinfo 'nbds+unix:///cairn?socket=cairn-data/cairn.sock&tls-certificates=pki/'
      TLS only (pki/ holds ca-cert.pem, server-cert.pem, server-key.pem).
  cairn serve --memory 1GiB --tls require --tls-certificates pki/ --tls-verify-peer
      TLS only, and only for clients with a certificate from pki/ca-cert.pem.
  qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' \\
      'nbd+unix:///cairn?socket=cairn-data/cairn.sock'
      Write and verify a pattern through a running server.
  cairn stats --watch 2
      A running server's counters (the one in ./cairn-data), redrawn every 2 s.
  cairn serve --memory 1GiB --metrics tcp:127.0.0.1:9100
  curl -s http://127.0.0.1:9100/metrics
      Prometheus metrics on loopback port 9100; the dashboard is http://127.0.0.1:9100/.
  cairn serve --files ./videos --export media --listen tcp:127.0.0.1:8080
  curl -r 0-1023 -o head.bin http://127.0.0.1:8080/media/movie.mp4
      A directory over HTTP and S3 (bucket \"media\"); the first KiB of one file.
  cairn serve --files ./videos --export media --metrics tcp:127.0.0.1:9101
  curl -s http://127.0.0.1:9101/metrics | grep cairn_files_hits_total
      The same with Prometheus metrics: block hits, misses, bytes, requests by status.
  cairn serve --files ./local --files ./remote --throttle none --throttle 20ms,10MiB/s \\
      --policy cost --export media --listen tcp:127.0.0.1:8081 --metrics tcp:127.0.0.1:9102
  curl -s http://127.0.0.1:9102/metrics | grep _cost
      A union: ./local first, then ./remote slowed as a remote bucket; each one's learned
      cost (1 for the fastest) is what --policy cost keeps blocks by.
  cairn serve --files ./videos --export media --spill spill.img --spill-size 1GiB \\
      --listen tcp:127.0.0.1:8082 --metrics tcp:127.0.0.1:9103
  curl -s http://127.0.0.1:9103/metrics | grep spill_
      A second level on an SSD (spill.img, its map spill.img.map beside it): blocks the DRAM
      cache drops are read back from it, and a restart (after a crash too) finds them there.
  kill -HUP $(pgrep -f 'cairn serve')
      Reload the TLS certificates and the spec's log_level.";

/// `cairn serve` flags, as typed.
#[derive(clap::Args, Debug)]
#[command(after_long_help = EXAMPLES)]
#[allow(clippy::struct_excessive_bools)] // one per flag
pub struct ServeArgs {
    /// Serve the volumes of this spec (TOML; see docs/volumes.md).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["memory", "file"])]
    config: Option<PathBuf>,

    /// Print the embedded default spec and exit.
    #[arg(long, exclusive = true)]
    print_default_config: bool,

    /// Where to listen: unix:PATH or tcp:HOST:PORT; overrides the spec's
    /// `listen`. Default `unix:<data_dir>/cairn.sock`. Ignored under systemd
    /// socket activation.
    #[arg(long, value_name = "ADDRESS")]
    listen: Option<ListenAddress>,

    /// Serve one connection on stdin/stdout, then exit.
    #[arg(long, conflicts_with = "listen")]
    stdio: bool,

    /// Serve a DRAM volume of SIZE bytes (e.g. 512MiB) instead of the default
    /// volume; its contents vanish when the server stops.
    #[arg(long, value_name = "SIZE", conflicts_with = "file")]
    memory: Option<String>,

    /// Serve this file or block device as is, instead of the default volume.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,

    /// Serve the files under DIR — or the objects of the HTTP origin
    /// http://HOST:PORT/BUCKET (another gateway, an S3-compatible store), or
    /// of the bucket `s3://BUCKET` with SigV4-signed requests (the store and
    /// keys from `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`; https endpoints checked against
    /// `AWS_CA_BUNDLE`, `SSL_CERT_FILE` or the system's CAs) — over HTTP/1.1 and the S3 GET/HEAD object
    /// API (read-only, docs/files.md) instead of NBD volumes; the bucket is
    /// --export's name, the address --listen tcp:HOST:PORT (default
    /// tcp:127.0.0.1:8080). DIR1,DIR2,...: objects striped round robin over
    /// the directories in stripes of --block-size (docs/files.md's layout).
    /// Repeated (--files A --files B): a union, each object from the first
    /// that has it, listings merged; each one's reads are timed and its cost
    /// learned online, which --policy cost uses to keep the slow one's blocks.
    #[arg(
        long,
        value_name = "DIR|URL",
        action = clap::ArgAction::Append,
        conflicts_with_all = ["config", "memory", "file", "stdio", "tls", "read_only"]
    )]
    files: Vec<PathBuf>,

    /// With --files: the cache's block size, a power of two from 256KiB to
    /// 4MiB. Default 1MiB.
    #[arg(long, value_name = "SIZE", requires = "files")]
    block_size: Option<String>,

    /// With --files: the cache's capacity. Default 256MiB.
    #[arg(long, value_name = "SIZE", requires = "files")]
    cache_size: Option<String>,

    /// With --files: the cache's replacement policy, `name` or
    /// `name:key=value,...` as `cairn sim --policy` takes, e.g.
    /// dual:alpha=20 (not opt and its offline kin). Default ons.
    #[arg(long, value_name = "POLICY", requires = "files")]
    policy: Option<String>,

    /// With --files: connections served at once; more are answered 503.
    /// Default 256.
    #[arg(long, value_name = "N", requires = "files")]
    connections_max: Option<usize>,

    /// With --files: slow every directory (each striped one on its own) to a
    /// cost per read plus its length at a bandwidth, one read at a time, as a
    /// disk or a remote server: OP,BANDWIDTH, e.g. 8ms,12MiB/s or 500us,1GiB/s.
    /// With several --files: once for all of them, or once for each in
    /// order, `none` for one not slowed.
    #[arg(
        long,
        value_name = "OP,BANDWIDTH",
        requires = "files",
        action = clap::ArgAction::Append
    )]
    throttle: Vec<String>,

    /// With --files: how long what the backend said of an object (its size
    /// and version) is trusted before a request asks again, e.g. 0s, 500ms,
    /// 1m; a changed object is served as it was for up to this long. Default
    /// 0s for directories (a stat per request), 1s for an HTTP or S3 origin
    /// (a HEAD per object per second at most).
    #[arg(long, value_name = "DURATION", requires = "files")]
    revalidate: Option<String>,
    /// With --files: papers/001's readahead. A read continuing its file's
    /// sequence (or at its start) has the next N × DIRS blocks read ahead,
    /// DIRS the striped directories (1 for one directory or an origin), in
    /// parallel over them. Default 0: off.
    #[arg(long, value_name = "N", requires = "files")]
    prefetch_stripes: Option<u64>,

    /// With --files: keep a second level of the cache on a local SSD, in
    /// this file (created with --spill-size) or block device, through the
    /// flash tier: blocks the DRAM cache drops are read back from it rather
    /// than the backend, and a restart finds them there (a clean stop or a
    /// crash; a changed object is read anew). Beside it, PATH.map names the
    /// objects it holds (--spill-map to put it elsewhere). docs/files.md.
    #[arg(long, value_name = "PATH", requires = "files")]
    spill: Option<PathBuf>,

    /// With --spill: create the file, or grow it, to SIZE (e.g. 20GiB).
    #[arg(long, value_name = "SIZE", requires = "spill")]
    spill_size: Option<String>,

    /// With --spill: the map file (default PATH.map; needed for a block
    /// device, whose directory is /dev).
    #[arg(long, value_name = "FILE", requires = "spill")]
    spill_map: Option<PathBuf>,

    /// With --spill: the SSD tier's replacement policy, as --policy takes
    /// it. Default s3fifo.
    #[arg(long, value_name = "POLICY", requires = "spill")]
    spill_policy: Option<String>,

    /// With --spill: open it with `O_DIRECT`, so that what the spill holds is
    /// not kept a second time in the page cache (the gateway's memory is
    /// then --cache-size and the kernel's page cache is left to others).
    /// The file system must take `O_DIRECT` (tmpfs does from Linux 6.6).
    #[arg(long, requires = "spill")]
    spill_direct: bool,

    /// With --spill: an exclusive second level. The SSD takes a block only
    /// when the DRAM cache drops it, and lets go of a block the DRAM cache
    /// reads back, so the two levels hold different blocks (--cache-size
    /// plus the spill's capacity in all) and a block the DRAM cache keeps
    /// costs no SSD write. A clean stop hands the DRAM cache's blocks down,
    /// so a restart is warm with both. Default: inclusive (every block read
    /// from the backend is also written to the SSD).
    #[arg(long, requires = "spill")]
    spill_exclusive: bool,

    /// With --spill-exclusive: a block the DRAM cache reads from the SSD is
    /// served from there and stays there, rather than moving up into DRAM
    /// (and pushing a DRAM block down: a write per SSD hit). DRAM then takes
    /// blocks only from the backend. Pick it when an SSD hit is about as
    /// fast as a DRAM hit (a spill the page cache holds, a fast flash
    /// drive) and the writes cost more than the moves gain: many readers
    /// streaming the same files.
    #[arg(long, requires = "spill_exclusive")]
    spill_no_promote: bool,

    /// With --file: create the file sparse, or grow it, to SIZE (e.g. 10GiB).
    /// Without it the file must exist and its size is the volume's.
    #[arg(long, value_name = "SIZE", requires = "file")]
    size: Option<String>,

    /// The export's name with --memory or --file (clients that ask for the
    /// empty name get the first export), and the bucket with --files.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "cairn",
        conflicts_with = "config"
    )]
    export: String,

    /// Serve every export read-only: flagged read-only to clients (writes
    /// fail with EPERM), every file opened read-only with a shared lock (other
    /// read-only servers may share it, a writer may not), and nothing written
    /// at start or stop — no checkpoint, no clean-stop marker, no NV cache
    /// change — so an image on read-only media or owned by another user can
    /// be served. A log disk stopped uncleanly is recovered in memory only.
    /// An object volume takes no lease (another server may be writing it):
    /// it is read as of its newest checkpoint and the segments after it,
    /// kept by a reader pin in the store, removed at the stop.
    #[arg(long)]
    read_only: bool,

    /// Remove the volatile NV regions earlier servers left on /dev/shm for
    /// data directories that no longer exist (each is listed at start
    /// otherwise); a region whose data directory exists is never touched.
    #[arg(long)]
    remove_orphaned_regions: bool,

    /// Start even if a log disk's NV write cache region is missing (e.g.
    /// /dev/shm after a reboot) although the disk was not stopped cleanly:
    /// the writes acknowledged only to that cache are given up.
    #[arg(long)]
    accept_lost_nv_cache: bool,

    /// The control socket, for `cairn stats` and `cairn ctl` (a Unix
    /// socket, owner-only; only this server's uid may use it). Default
    /// `<data_dir>/cairn.ctl` (none with --stdio or --files); a default
    /// socket that cannot be made is warned about, an explicit one is an
    /// error.
    #[arg(long, value_name = "PATH", conflicts_with = "no_control")]
    control: Option<PathBuf>,

    /// No control socket.
    #[arg(long)]
    no_control: bool,

    /// Do not count or time requests (the per-export counters and latency
    /// histograms of `cairn stats` stay zero, and so do the layers' latency
    /// histograms; the layers' own counters still count). Only for
    /// measuring what counting costs.
    #[arg(long)]
    no_stats: bool,

    /// Serve Prometheus metrics (/metrics), the dashboard page (/) and the
    /// snapshot as JSON (/stats.json) over HTTP at tcp:HOST:PORT (e.g.
    /// tcp:127.0.0.1:9100; port 0 picks one). Loopback only, unless
    /// --metrics-public.
    #[arg(long, value_name = "ADDRESS")]
    metrics: Option<String>,

    /// Allow --metrics on an address other hosts can reach (e.g.
    /// tcp:0.0.0.0:9100). The metrics and the page have no authentication:
    /// they show every export's name and traffic; put a firewall or an
    /// authenticating proxy in front.
    #[arg(long, requires = "metrics")]
    metrics_public: bool,

    /// TLS: off (default), on (clients may upgrade with STARTTLS; plaintext
    /// still served) or require (plaintext clients refused). Overrides the
    /// spec's [tls] mode.
    #[arg(long, value_name = "MODE")]
    tls: Option<TlsMode>,

    /// Directory with server-cert.pem and server-key.pem (nbdkit/libnbd
    /// layout; clients use its ca-cert.pem). Needed by --tls on|require;
    /// overrides the spec's [tls] certificates.
    #[arg(long, value_name = "DIR")]
    tls_certificates: Option<PathBuf>,

    /// Clients must present a certificate signed by the certificates
    /// directory's ca-cert.pem (nbdkit's --tls-verify-peer). Needs --tls
    /// on|require; a spec sets the same in its [tls] table.
    #[arg(long)]
    tls_verify_peer: bool,
}

/// Run `cairn serve`.
pub fn run(args: &ServeArgs, quiet: bool) -> Result<()> {
    if args.print_default_config {
        print(DEFAULT_SPEC);
        return Ok(());
    }
    if !args.files.is_empty() {
        let size = |flag: &str, text: &Option<String>| {
            text.as_deref()
                .map(parse_size)
                .transpose()
                .context(flag.to_owned())
        };
        let policy = |flag: &str, text: &Option<String>| {
            text.as_deref()
                .map(crate::policy_spec::parse)
                .transpose()
                .context(flag.to_owned())
        };
        let files_args = files::FilesArgs {
            dirs: args.files.clone(),
            listen: args.listen.clone(),
            export: args.export.clone(),
            block_size: size("--block-size", &args.block_size)?,
            cache_size: size("--cache-size", &args.cache_size)?,
            policy: policy("--policy", &args.policy)?,
            connections_max: args.connections_max,
            throttles: args.throttle.clone(),
            revalidate: args.revalidate.clone(),
            prefetch_stripes: args.prefetch_stripes.unwrap_or(0),
            spill: match &args.spill {
                Some(path) => Some(files::SpillArgs {
                    path: path.clone(),
                    size: size("--spill-size", &args.spill_size)?,
                    map: args.spill_map.clone(),
                    policy: policy("--spill-policy", &args.spill_policy)?,
                    direct: args.spill_direct,
                    exclusive: args.spill_exclusive,
                    promote: !args.spill_no_promote,
                }),
                None => None,
            },
            names: &files::FLAGS,
        };
        return files::run(
            &files_args,
            &files::Beside {
                metrics: args.metrics.as_deref(),
                metrics_public: args.metrics_public,
                control: args.control.as_deref(),
                quiet,
            },
        );
    }
    // Before any thread starts: taking the systemd socket edits the environment.
    let activated = Listener::from_systemd().context("taking the socket systemd passed")?;
    if args.stdio && activated.is_some() {
        bail!(
            "--stdio serves one connection on stdin and stdout, but a listening socket was \
             passed too (LISTEN_FDS, as systemd and libnbd's `nbdinfo -- [ CMD ]` pass one): \
             leave out --stdio to serve on that socket"
        );
    }
    let loaded = spec_of(args)?;
    start_log_level(&loaded)?;
    no_tls_without_exports(args, &loaded)?;
    let tls = tls_of(args, &loaded)?;
    orphans(args.remove_orphaned_regions)?;
    let options = OpenOptions {
        accept_lost_nv_cache: args.accept_lost_nv_cache,
        read_only: args.read_only,
    };
    let volume = Volume::open(&loaded.spec, &loaded.base, &options)
        .with_context(|| format!("volume spec {}", loaded.origin))?;
    for note in volume.notes() {
        tracing::info!("{note}");
    }
    for warning in volume.warnings() {
        tracing::warn!("{warning}");
    }
    let served = serve(args, &loaded, &volume, tls, activated, quiet);
    // Whatever happened to the server, leave the disks clean.
    let closed = volume
        .close()
        .with_context(|| format!("closing the volumes of {}", loaded.origin));
    // What each tier did this run, one line each (after the close, so the
    // write-backs of the final flush are counted).
    for line in volume
        .tier_report()
        .into_iter()
        .chain(volume.object_report())
    {
        tracing::info!("{line}");
    }
    served?;
    closed?;
    if volume.exports().is_empty() {
        tracing::info!("stopped; the spec has file exports only: no block export to flush");
    } else if volume.exports().iter().all(|e| e.read_only) && volume.object_report().is_empty() {
        tracing::info!("stopped; read-only: nothing was written");
    } else if volume.exports().iter().all(|e| e.read_only) {
        tracing::info!(
            "stopped; read-only: nothing was written but the object volumes' reader pins, \
             removed now"
        );
    } else if volume.tiers().next().is_some() {
        tracing::info!("stopped; every export flushed, every log disk and every tier checkpointed");
    } else {
        tracing::info!("stopped; every export flushed, every log disk checkpointed");
    }
    Ok(())
}

fn serve(
    args: &ServeArgs,
    loaded: &Loaded,
    volume: &Volume,
    tls: Tls,
    activated: Option<Listener>,
    quiet: bool,
) -> Result<()> {
    if volume.exports().is_empty() {
        return serve_files_only(args, loaded, volume.data_dir(), activated.is_some(), quiet);
    }
    let exports: Vec<Export> = volume
        .exports()
        .iter()
        .map(|e| Export {
            name: e.name.clone(),
            description: sent_description(&loaded.spec, &e.name),
            device: e.device.clone(),
            read_only: e.read_only || args.read_only,
        })
        .collect();
    let reload = Reload {
        config: args.config.clone().map(|path| (path, loaded.spec.clone())),
        tls: tls
            .certificates
            .clone()
            .map(|directory| (tls.mode, directory, tls.config.verifies_peers())),
    };
    let server = Server::with_tls(exports, tls.config)?;
    server.set_counting(!args.no_stats);
    volume.set_layer_timing(!args.no_stats);
    let (metrics, control_socket) = listeners_beside(args, volume.data_dir())?;
    handle_signals(server.clone(), reload)?;
    // The spec's file exports, each listening before the block exports do.
    let file_exports = start_files(loaded, volume.data_dir())?;
    let served = files::WithFiles {
        volumes: control::Served {
            server: &server,
            volume,
            started: Instant::now(),
        },
        files: &file_exports,
    };
    let beside = control::Beside {
        socket: control_socket.as_ref(),
        metrics: metrics.as_ref(),
    };
    beside.log("every export's name and traffic");
    if args.stdio {
        control::run_beside(&beside, &served, || {
            files::beside(&file_exports, || server.serve_stdio())
        })?;
        return Ok(());
    }
    // Under socket activation the client that started us knows where we are,
    // and our stdout may be its output: print nothing there.
    let (listener, show) = if let Some(listener) = activated {
        (listener, false)
    } else {
        let address = listen_address(args, loaded, volume.data_dir())?;
        (Listener::bind(&address)?, !quiet)
    };
    warn_if_exposed(&listener, tls.mode);
    let uri = |name: &str| tls_uri(listener.uri(name), tls.certificates.as_deref());
    for export in volume.exports() {
        tracing::info!(
            "serving export {:?} ({}) at {} (TLS {})",
            export.name,
            export.description,
            uri(&export.name),
            tls.mode
        );
    }
    if show {
        print(&how_to_connect(&uri, tls.mode != TlsMode::Off, volume));
        for export in &file_exports {
            print(&format!("{}\n", export.announcement()));
        }
        print(&beside.how_to_watch());
    }
    control::run_beside(&beside, &served, || {
        files::beside(&file_exports, || server.serve(&listener))
    })?;
    Ok(())
}

/// The metrics listener (--metrics) and the control socket (--control, or
/// `<data_dir>/cairn.ctl` unless --stdio or --no-control) beside the exports.
fn listeners_beside(
    args: &ServeArgs,
    data_dir: &Path,
) -> Result<(Option<MetricsListener>, Option<ControlSocket>)> {
    let metrics = args
        .metrics
        .as_deref()
        .map(|address| MetricsListener::bind(address, args.metrics_public))
        .transpose()
        .context("--metrics")?;
    let default_control = control::default_path(data_dir);
    let control_socket = control::bind(
        args.control.as_deref(),
        (!args.stdio && !args.no_control).then_some(default_control.as_path()),
    )?;
    Ok((metrics, control_socket))
}

/// Starts the spec's `[[files]]`, each listening on its own address.
fn start_files(loaded: &Loaded, data_dir: &Path) -> Result<Vec<files::Started>> {
    files::check_names(&loaded.spec)?;
    loaded
        .spec
        .files
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            files::FilesArgs::of_spec(spec, data_dir)
                .and_then(|a| files::start(&a))
                .with_context(|| format!("files[{i}] ({:?})", spec.name))
        })
        .collect()
}

/// TLS is NBD's (`NBD_OPT_STARTTLS`): a spec with no `[[export]]` has no use
/// for `[tls]` or the --tls flags (its `[[files]]` speak plain HTTP).
fn no_tls_without_exports(args: &ServeArgs, loaded: &Loaded) -> Result<()> {
    if !loaded.spec.exports.is_empty() {
        return Ok(());
    }
    if loaded.spec.tls.is_some() {
        bail!(
            "{}: [tls] is for [[export]]s over NBD and the spec has none (its [[files]] are \
             served over plain HTTP): remove [tls]",
            loaded.origin
        );
    }
    if args.tls.is_some() || args.tls_certificates.is_some() || args.tls_verify_peer {
        bail!(
            "--tls, --tls-certificates and --tls-verify-peer are for [[export]]s over NBD, and \
             {} has [[files]] only (served over plain HTTP)",
            loaded.origin
        );
    }
    Ok(())
}

/// A spec of `[[files]]` and no `[[export]]`: its file exports, with the
/// control socket and metrics, and no NBD server.
fn serve_files_only(
    args: &ServeArgs,
    loaded: &Loaded,
    data_dir: &Path,
    activated: bool,
    quiet: bool,
) -> Result<()> {
    if args.stdio {
        bail!(
            "--stdio serves an [[export]] on stdin and stdout, and {} has [[files]] only",
            loaded.origin
        );
    }
    if activated {
        bail!(
            "systemd passed a socket for NBD clients, and {} has no [[export]] to serve on it \
             (its [[files]] listen on their own addresses)",
            loaded.origin
        );
    }
    let (metrics, control_socket) = listeners_beside(args, data_dir)?;
    let file_exports = start_files(loaded, data_dir)?;
    let beside = control::Beside {
        socket: control_socket.as_ref(),
        metrics: metrics.as_ref(),
    };
    if !quiet {
        files::announce(&file_exports, &beside);
    }
    beside.log("every file export's name and traffic");
    let reload = Reload {
        config: args.config.clone().map(|path| (path, loaded.spec.clone())),
        tls: None,
    };
    files::serve_alone(&file_exports, &beside, move || reload.run(None))
}

/// Lists (or with `remove`, removes) the volatile NV regions left on
/// /dev/shm for data directories that are gone.
fn orphans(remove: bool) -> Result<()> {
    for orphan in cairn_store::volume::orphaned_regions() {
        if remove {
            orphan
                .remove()
                .with_context(|| format!("removing {}", orphan.path.display()))?;
            tracing::info!(
                "removed the orphaned NV region {} ({} bytes of RAM; its data directory {} is gone)",
                orphan.path.display(),
                orphan.bytes,
                orphan.owner.display()
            );
        } else {
            tracing::warn!(
                "orphaned NV region {} holds {} bytes of RAM for the data directory {}, which is \
                 gone; --remove-orphaned-regions removes it",
                orphan.path.display(),
                orphan.bytes,
                orphan.owner.display()
            );
        }
    }
    Ok(())
}

/// The spec's `log_level` at start, unless the command line set the level;
/// a bad one is an error even then.
fn start_log_level(loaded: &Loaded) -> Result<()> {
    let Some(level) = &loaded.spec.log_level else {
        return Ok(());
    };
    logging::parse(level).with_context(|| format!("volume spec {}", loaded.origin))?;
    match logging::command_line_level() {
        Some(fixed) => tracing::debug!(
            "log level {fixed:?} from --log-level, RUST_LOG, -q or -v, over the spec's log_level {level:?}"
        ),
        None => logging::set(level)?,
    }
    Ok(())
}

/// What clients are told an export is (`NBD_INFO_DESCRIPTION`, `nbdinfo
/// --list`): the spec's `description` as written, else nothing. The stack's
/// own description (`Device::describe`) names files under the data directory
/// and the geometry: it goes to the server's log and its stdout only.
fn sent_description(spec: &VolumeSpec, export: &str) -> String {
    spec.exports
        .iter()
        .find(|e| e.name == export)
        .and_then(|e| e.description.clone())
        .unwrap_or_default()
}

/// Warns when the exports are reachable from other hosts without required
/// TLS: NBD itself has no authentication.
fn warn_if_exposed(listener: &Listener, mode: TlsMode) {
    let Listener::Tcp(tcp) = listener else {
        return;
    };
    let Ok(address) = tcp.local_addr() else {
        return;
    };
    if address.ip().to_canonical().is_loopback() || mode == TlsMode::Require {
        return;
    }
    let tls = if mode == TlsMode::On {
        "with TLS optional (--tls on serves plaintext clients too)"
    } else {
        "without TLS"
    };
    tracing::warn!(
        "listening on tcp:{address}, not a loopback address, {tls}: NBD has no \
         authentication, so whoever reaches this address can read and write every export; \
         use --tls require (and --tls-verify-peer to admit only clients with a certificate) \
         or bind 127.0.0.1"
    );
}

/// What SIGHUP can reload.
struct Reload {
    /// `--config`'s file and the spec as it was at start.
    config: Option<(PathBuf, VolumeSpec)>,
    /// With TLS: the mode, the certificates directory, and whether clients
    /// must present certificates.
    tls: Option<(TlsMode, PathBuf, bool)>,
}

/// The NBD server's signal thread ([`signals::spawn`]): SIGINT and SIGTERM
/// shut the server down, SIGHUP reloads the TLS certificates and the spec's
/// `log_level`.
fn handle_signals(server: Server, reload: Reload) -> Result<()> {
    let shutdown = server.shutdown_handle();
    signals::spawn(
        move || {
            let again = shutdown.is_requested();
            shutdown.trigger();
            again
        },
        move || reload.run(Some(&server)),
    )?;
    Ok(())
}

impl Reload {
    /// SIGHUP: everything that can change while serving, each step logged
    /// (no `server` for a spec of `[[files]]` only: no TLS to reload).
    fn run(&self, server: Option<&Server>) {
        if let (Some((mode, directory, verify_peer)), Some(server)) = (&self.tls, server) {
            let reloaded = TlsConfig::with_peer_verification(*mode, Some(directory), *verify_peer)
                .map_err(anyhow::Error::from)
                .and_then(|config| server.reload_tls(config).map_err(anyhow::Error::from));
            match reloaded {
                Ok(()) => tracing::info!(
                    "SIGHUP: TLS certificates reloaded from {}: new connections use them, open ones keep theirs",
                    directory.display()
                ),
                Err(e) => tracing::error!(
                    "SIGHUP: TLS certificates in {} not reloaded, keeping the old ones: {e:#}",
                    directory.display()
                ),
            }
        } else if server.is_some() {
            tracing::info!("SIGHUP: TLS is off, no certificates to reload");
        }
        let Some((path, started)) = &self.config else {
            tracing::info!(
                "SIGHUP: no --config, so the log level comes from the command line (--log-level, RUST_LOG, -q, -v); \
                 nothing else to reload"
            );
            return;
        };
        let spec = match volume_spec::load(path) {
            Ok(loaded) => loaded.spec,
            Err(e) => {
                tracing::error!("SIGHUP: {e:#}; log level unchanged");
                return;
            }
        };
        reload_log_level(path, spec.log_level.as_deref());
        let unchanged = VolumeSpec {
            log_level: started.log_level.clone(),
            ..spec
        } == *started;
        if unchanged {
            tracing::info!("SIGHUP: nothing else to reload; restart to apply spec changes");
        } else {
            tracing::warn!(
                "SIGHUP: {} changed beyond log_level (devices, exports, files, listen or tls): \
                 not applied; restart to apply spec changes",
                path.display()
            );
        }
    }
}

/// Applies a spec's `log_level` (at start, or re-read on SIGHUP) unless the
/// command line set the level.
fn reload_log_level(path: &Path, level: Option<&str>) {
    if let Some(fixed) = logging::command_line_level() {
        tracing::info!(
            "SIGHUP: log level stays {fixed:?}: set by --log-level, RUST_LOG, -q or -v, which override the spec's log_level"
        );
        return;
    }
    let (level, source) = match level {
        Some(level) => (level, format!("log_level in {}", path.display())),
        None => (
            logging::DEFAULT_LEVEL,
            format!("{} sets no log_level: the default", path.display()),
        ),
    };
    if let Err(e) = logging::parse(level) {
        tracing::error!("SIGHUP: {}: {e:#}; log level unchanged", path.display());
        return;
    }
    // Said under whichever filter lets it through: the old one, or the new
    // one when the old hid it (from `warn` to `info`).
    let said = tracing::enabled!(tracing::Level::INFO);
    if said {
        tracing::info!("SIGHUP: log level {level:?} ({source})");
    }
    match logging::set(level) {
        Ok(()) if !said => tracing::info!("SIGHUP: log level {level:?} ({source})"),
        Ok(()) => {}
        Err(e) => tracing::error!("SIGHUP: {}: {e:#}; log level unchanged", path.display()),
    }
}

/// The spec to serve: --config, a one-device spec for --memory/--file, or
/// the embedded default.
fn spec_of(args: &ServeArgs) -> Result<Loaded> {
    if let Some(path) = &args.config {
        return volume_spec::load(path);
    }
    let device = if let Some(size) = &args.memory {
        let size = parse_size(size)?;
        if size == 0 {
            bail!("--memory must be more than 0 bytes");
        }
        DeviceSpec::Memory(MemorySpec { size: Bytes(size) })
    } else if let Some(path) = &args.file {
        let size = args.size.as_deref().map(parse_size).transpose()?;
        if size == Some(0) {
            bail!("--size must be more than 0 bytes");
        }
        DeviceSpec::File(FileSpec {
            // Relative to the current directory, not to the data directory.
            path: std::path::absolute(path)
                .with_context(|| format!("--file {}", path.display()))?,
            size: size.map(Bytes),
            direct: false,
        })
    } else {
        let mut loaded = volume_spec::default_spec()?;
        loaded.spec.exports[0].name.clone_from(&args.export);
        return Ok(loaded);
    };
    let origin = if args.memory.is_some() {
        "--memory"
    } else {
        "--file"
    };
    let spec = VolumeSpec {
        data_dir: "cairn-data".into(),
        listen: None,
        tls: None,
        log_level: None,
        exports: vec![ExportSpec {
            name: args.export.clone(),
            device: "volume".into(),
            description: None,
            read_only: false,
        }],
        devices: [("volume".to_owned(), device)].into(),
        files: Vec::new(),
    };
    Ok(Loaded {
        spec,
        base: PathBuf::new(),
        origin: origin.into(),
    })
}

fn listen_address(args: &ServeArgs, loaded: &Loaded, data_dir: &Path) -> Result<ListenAddress> {
    if let Some(address) = &args.listen {
        return Ok(address.clone());
    }
    if let Some(text) = &loaded.spec.listen {
        return text
            .parse()
            .map_err(|e: String| anyhow::anyhow!("listen: {e}"))
            .with_context(|| format!("volume spec {}", loaded.origin));
    }
    Ok(ListenAddress::Unix(data_dir.join("cairn.sock")))
}

fn parse_size(text: &str) -> Result<u64> {
    cairn_sim::parse_bytes(text).with_context(|| format!("size {text:?}"))
}

/// TLS settings resolved from the flags and the spec.
struct Tls {
    mode: TlsMode,
    /// The certificates directory, absolute, when TLS is on or required.
    certificates: Option<PathBuf>,
    config: TlsConfig,
}

/// `--tls`/`--tls-certificates` over the spec's `[tls]` (whose relative
/// directory is relative to the spec file).
fn tls_of(args: &ServeArgs, loaded: &Loaded) -> Result<Tls> {
    let spec = loaded.spec.tls.as_ref();
    let mode = args.tls.unwrap_or(match spec.map(|t| t.mode) {
        None | Some(TlsModeSpec::Off) => TlsMode::Off,
        Some(TlsModeSpec::On) => TlsMode::On,
        Some(TlsModeSpec::Require) => TlsMode::Require,
    });
    let verify_peer = args.tls_verify_peer || spec.is_some_and(|t| t.verify_peer);
    if mode == TlsMode::Off {
        if args.tls_certificates.is_some() {
            bail!("--tls-certificates is given but TLS is off: add --tls on or --tls require");
        }
        if verify_peer {
            bail!(
                "client certificates are to be verified but TLS is off: add --tls on or --tls require"
            );
        }
        return Ok(Tls {
            mode,
            certificates: None,
            config: TlsConfig::off(),
        });
    }
    let directory = match (
        &args.tls_certificates,
        spec.and_then(|t| t.certificates.as_ref()),
    ) {
        (Some(directory), _) => directory.clone(),
        (None, Some(directory)) => loaded.base.join(directory),
        (None, None) => bail!(
            "--tls {mode} needs a certificates directory: --tls-certificates DIR \
             (or certificates = \"DIR\" in the spec's [tls])"
        ),
    };
    let directory = std::path::absolute(&directory).unwrap_or(directory);
    let config = TlsConfig::with_peer_verification(mode, Some(&directory), verify_peer)
        .with_context(|| format!("TLS certificates in {}", directory.display()))?;
    Ok(Tls {
        mode,
        certificates: Some(directory),
        config,
    })
}

/// An `nbd…://` URI as clients write it when TLS is offered: `nbds…://` with
/// libnbd's `tls-certificates` parameter.
fn tls_uri(uri: String, certificates: Option<&Path>) -> String {
    let Some(directory) = certificates else {
        return uri;
    };
    let Some(rest) = uri.strip_prefix("nbd") else {
        return uri;
    };
    let separator = if rest.contains('?') { '&' } else { '?' };
    format!(
        "nbds{rest}{separator}tls-certificates={}",
        directory.display()
    )
}

fn how_to_connect(uri: &dyn Fn(&str) -> String, tls: bool, volume: &Volume) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    for export in volume.exports() {
        let _ = writeln!(
            text,
            "Cairn is serving export {:?}: {} bytes, {}\n  at {}",
            export.name,
            export.device.len(),
            export.description,
            uri(&export.name)
        );
    }
    let uri = uri(&volume.exports()[0].name);
    let _ = write!(text, "Connect with:\n  nbdinfo '{uri}'\n  ");
    if tls {
        // qemu takes TLS credentials as an --object, not in the URI (docs/nbd.md).
        let _ = write!(text, "(qemu: --object tls-creds-x509, see docs/nbd.md)\n  ");
    } else {
        let _ = write!(
            text,
            "qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' '{uri}'\n  \
             qemu-img convert -n -O raw disk.img '{uri}'\n  "
        );
    }
    let _ = write!(
        text,
        "nbdcopy --connections=4 '{uri}' copy.img\n  \
         nbdfuse mnt/disk '{uri}' &   # then mkfs.ext4 mnt/disk; mount -o loop mnt/disk /mnt\n\
         Data lives in {}. Stop with Ctrl-C (SIGINT) or SIGTERM: in-flight requests finish, \
         every export is flushed and every log disk checkpointed.\n",
        volume.data_dir().display()
    );
    text
}

fn print(text: &str) {
    // Not println!: a closed stdout must not stop the server.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}
