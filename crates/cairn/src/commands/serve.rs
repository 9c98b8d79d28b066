//! `cairn serve`: a volume as an NBD export.
//!
//! For now the volume is one device: memory, or a file. The TOML volume spec
//! (read cache → write path → log disk with its NTL write cache → devices),
//! several exports from one config, and TLS come with the rest of issue 6;
//! `--config` will select them and these flags will stay as overrides.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use cairn_nbd::{Export, ListenAddress, Listener, Server};
use cairn_store::Device;
use cairn_store::device::{FileDevice, FileOptions, MemoryDevice};

/// Where `cairn serve` listens when neither --listen nor systemd says otherwise.
pub const DEFAULT_LISTEN: &str = "unix:./cairn-data/cairn.sock";
/// The memory volume's size when no --memory or --file is given.
const DEFAULT_MEMORY: &str = "1GiB";

const LONG_ABOUT: &str = "\
Serve a volume over NBD (the Network Block Device protocol), so that unmodified
clients use it as a disk: qemu and qemu-img/qemu-io, libnbd's nbdinfo, nbdcopy
and nbdfuse, fio's nbd engine, and the Linux kernel's nbd-client.

The volume is, for now, one device: memory (--memory, the default, 1 GiB; its
contents vanish when the server stops) or a file or block device (--file; with
--size the file is created sparse or grown to SIZE). Composed volumes — read
cache, log-structured disk with an NTL write cache — come next (see docs/nbd.md).

Listening: a Unix socket by default (unix:./cairn-data/cairn.sock, created with
its directory; a stale socket left by a dead server is replaced), or TCP with
--listen tcp:HOST:PORT (bind loopback unless you mean to expose the disk: NBD
has no authentication without TLS, which is not yet supported). When started by
systemd socket activation (LISTEN_FDS, LISTEN_PID) the passed socket is used.
With --stdio one connection is served on stdin/stdout and the server exits when
it ends, so libnbd can start it: nbdinfo -- [ cairn serve --stdio ].

Protocol: fixed newstyle handshake; options GO, INFO, EXPORT_NAME, LIST, ABORT,
STRUCTURED_REPLY, LIST/SET_META_CONTEXT (base:allocation); commands READ, WRITE,
FLUSH, TRIM, WRITE_ZEROES, CACHE, BLOCK_STATUS, with FUA; requests up to 64 MiB;
MULTI_CONN advertised (a flush on any connection covers every acknowledged
write). SIGINT or SIGTERM stops accepting, finishes in-flight requests, flushes
and exits 0.";

const EXAMPLES: &str = "\
Examples:
  cairn serve
      A 1 GiB memory disk on ./cairn-data/cairn.sock; prints how to connect.
  cairn serve --file disk.img --size 10GiB --listen tcp:127.0.0.1:10809
      A sparse 10 GiB file over TCP on loopback.
  nbdinfo -- [ cairn serve --stdio --memory 64MiB ]
      One connection on stdin/stdout, started by the client.
  qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' \\
      'nbd+unix:///cairn?socket=cairn-data/cairn.sock'
      Write and verify a pattern through a running server.";

/// `cairn serve` flags, as typed.
#[derive(clap::Args, Debug)]
#[command(long_about = LONG_ABOUT, after_long_help = EXAMPLES)]
pub struct ServeArgs {
    /// Where to listen: unix:PATH or tcp:HOST:PORT. Ignored under systemd
    /// socket activation.
    #[arg(long, value_name = "ADDRESS", default_value = DEFAULT_LISTEN)]
    listen: ListenAddress,

    /// Serve one connection on stdin/stdout, then exit.
    #[arg(long, conflicts_with = "listen")]
    stdio: bool,

    /// Serve a memory volume of SIZE bytes (e.g. 512MiB). Default when no
    /// --file is given: 1GiB.
    #[arg(long, value_name = "SIZE", conflicts_with = "file")]
    memory: Option<String>,

    /// Serve this file or block device.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,

    /// With --file: create the file sparse, or grow it, to SIZE (e.g. 10GiB).
    /// Without it the file must exist and its size is the volume's.
    #[arg(long, value_name = "SIZE", requires = "file")]
    size: Option<String>,

    /// The export's name. Clients that ask for the empty name get it too.
    #[arg(long, value_name = "NAME", default_value = "cairn")]
    export: String,

    /// Refuse writes: the export is flagged read-only and writes fail with EPERM.
    #[arg(long)]
    read_only: bool,
}

/// Run `cairn serve`.
pub fn run(args: &ServeArgs, quiet: bool) -> Result<()> {
    // Before any thread starts: taking the systemd socket edits the environment.
    let activated = if args.stdio {
        None
    } else {
        Listener::from_systemd().context("taking the socket systemd passed")?
    };
    let device = open_device(args)?;
    let description = device.describe();
    let server = Server::new(vec![Export {
        name: args.export.clone(),
        description: description.clone(),
        device,
        read_only: args.read_only,
    }])?;
    let shutdown = server.shutdown_handle();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("installing SIGINT/SIGTERM handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                // Trigger first: nothing after this line may keep the server up.
                shutdown.trigger();
                tracing::info!("signal {signal}: finishing in-flight requests, then exiting");
            }
        })
        .context("starting the signal thread")?;

    if args.stdio {
        server.serve_stdio()?;
        return Ok(());
    }
    // Under socket activation the client that started us knows where we are,
    // and our stdout may be its output: print nothing there.
    let (listener, print) = match activated {
        Some(listener) => (listener, false),
        None => (Listener::bind(&args.listen)?, !quiet),
    };
    let uri = listener.uri(&args.export);
    tracing::info!("serving {description} as export {:?} at {uri}", args.export);
    if print {
        print_how_to_connect(&uri);
    }
    server.serve(&listener)?;
    tracing::info!("stopped; every export flushed");
    Ok(())
}

fn open_device(args: &ServeArgs) -> Result<Arc<dyn Device>> {
    if let Some(path) = &args.file {
        let create_len = args.size.as_deref().map(parse_size).transpose()?;
        let options = FileOptions {
            create_len,
            direct: false,
            read_only: args.read_only,
        };
        let device = FileDevice::open(path, &options)
            .with_context(|| format!("opening the volume file {}", path.display()))?;
        if device.is_empty() {
            bail!(
                "{} is empty: give --size to create or grow it",
                path.display()
            );
        }
        return Ok(Arc::new(device));
    }
    let size = parse_size(args.memory.as_deref().unwrap_or(DEFAULT_MEMORY))?;
    if size == 0 {
        bail!("--memory must be more than 0 bytes");
    }
    Ok(Arc::new(MemoryDevice::new(size)))
}

fn parse_size(text: &str) -> Result<u64> {
    cairn_sim::parse_bytes(text).with_context(|| format!("size {text:?}"))
}

fn print_how_to_connect(uri: &str) {
    let text = format!(
        "Cairn is serving NBD at {uri}\n  nbdinfo '{uri}'\n  \
         qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' '{uri}'\n  \
         qemu-img convert -n -O raw disk.img '{uri}'\n  \
         nbdcopy --connections=4 '{uri}' copy.img\n\
         Stop with Ctrl-C (SIGINT) or SIGTERM: in-flight requests finish, then a flush.\n"
    );
    // Not println!: a closed stdout must not stop the server.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}
