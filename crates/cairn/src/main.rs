//! The `cairn` command: the storage cache engine's front end and its simulator.
//!
//! Arguments are parsed in two steps: clap structs mirror the flags (one
//! module per command under `commands/`), then each command validates them
//! into the configuration it runs. Errors carry context with `anyhow`; logs go
//! to stderr through `tracing`; results go to stdout, through
//! `output::stdout` only (so `print!`, which panics on a closed pipe, is
//! denied): a reader that stops early (`cairn sim | head -1`) ends the command
//! quietly with status 0.
#![deny(clippy::print_stdout)]

mod commands;
mod input;
mod logging;
mod output;
mod plot;
mod policy_spec;
mod progress;
mod volume_spec;

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

const LONG_ABOUT: &str = "\
Cairn is a storage cache engine for heterogeneous storage (DRAM, persistent
memory, SSD, HDD, network storage) and the trace-driven simulator that chooses
its policies. The same policy code runs in the simulator and in the engine.

`cairn sim` replays a trace against policies and cache sizes; `cairn mrc` computes
LRU miss-ratio curves. Both run with no arguments on a sample trace embedded in
the binary. `cairn reproduce` reruns the source papers' experiments and judges
each of their claims against our numbers.";

const EXAMPLES: &str = "\
Examples:
  cairn sim                         miss ratios of the default policies on the sample trace
  cairn sim --policy lru --size 10% --json -
  cairn mrc --shards 0.01           exact LRU curve and its SHARDS estimate
  cairn reproduce all               the papers' experiments, claims confirmed or not
  cairn help sim                    every flag of `sim`, with examples
  cairn --log-format json --log-level debug serve --memory 64MiB
                                    a server logging JSON lines on stderr

Logging: on stderr. --log-level wins over RUST_LOG (which takes directives,
e.g. RUST_LOG=info,cairn_nbd=debug), which wins over -q/-v, which win over a
volume spec's log_level; the default is info.";

/// Cairn: a storage cache engine for heterogeneous storage, and its simulator.
#[derive(Parser, Debug)]
#[command(version, about, long_about = LONG_ABOUT, after_long_help = EXAMPLES, propagate_version = true)]
struct Cli {
    /// Print only results and errors: no progress bar, no informational logs.
    #[arg(long, short, global = true)]
    quiet: bool,

    /// More logging on stderr (-v debug, -vv trace).
    #[arg(long, short, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,

    /// Log level on stderr; wins over RUST_LOG, -q/-v and a spec's log_level.
    #[allow(clippy::doc_markdown)] // the help text, shown as written
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<logging::Level>,

    /// Log lines as text, or as JSON objects (one a line, fields at the top level).
    #[arg(long, global = true, value_name = "FORMAT", default_value = "text")]
    log_format: logging::Format,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a trace against policies × cache sizes and report miss ratios.
    Sim(commands::sim::SimArgs),
    /// Compute LRU miss-ratio curves: exact, and estimated with SHARDS.
    Mrc(commands::mrc::MrcArgs),
    /// Trace tools: generate, inspect, convert, analyze.
    #[command(subcommand)]
    Trace(commands::trace::TraceCommand),
    /// The papers' experiments: tables beside the papers' numbers, CSV, plots,
    /// and each claim confirmed or not.
    #[command(subcommand)]
    Reproduce(commands::reproduce::ReproduceCommand),
    /// Check an image (log disk or NTL) and say exactly what is wrong.
    #[command(long_about = commands::check::FSCK_ABOUT)]
    Fsck(commands::check::FsckArgs),
    /// Describe an image: layout, segment use, saved metrics.
    #[command(long_about = commands::check::INSPECT_ABOUT)]
    Inspect(commands::check::InspectArgs),
    /// Serve volumes over NBD (default: a 1 GiB cached log-disk volume in ./cairn-data).
    #[command(long_about = commands::serve::LONG_ABOUT)]
    Serve(commands::serve::ServeArgs),
    /// A running server's live counters: per export and per layer (over its
    /// control socket).
    #[command(long_about = commands::stats::STATS_ABOUT)]
    Stats(commands::stats::StatsArgs),
    /// Steer a running server's cache layers: flush, drop-clean, mode, detach.
    #[command(long_about = commands::stats::CTL_ABOUT)]
    Ctl(commands::stats::CtlArgs),
    /// Benchmarks against peers (`bench nbd`: fio through Cairn, nbdkit, qemu-nbd;
    /// `bench ntl`: the NTL against pread/pwrite, `O_DIRECT` and memcpy).
    #[command(subcommand)]
    Bench(commands::bench::BenchCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(commands::completions::CompletionsArgs),
    /// Generate man pages: the top page to stdout, or every page into a directory.
    Man(commands::man::ManArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    logging::init(logging::Options {
        quiet: cli.quiet,
        verbose: cli.verbose,
        level: cli.log_level,
        format: cli.log_format,
    });
    let result = match cli.command {
        Command::Fsck(args) => return fsck_exit(commands::check::run_fsck(&args)),
        Command::Sim(args) => commands::sim::run(args, cli.quiet),
        Command::Mrc(args) => commands::mrc::run(&args, cli.quiet),
        Command::Trace(command) => commands::trace::run(&command, cli.quiet),
        Command::Reproduce(command) => commands::reproduce::run(&command, cli.quiet),
        Command::Inspect(args) => commands::check::run_inspect(&args),
        Command::Serve(args) => commands::serve::run(&args, cli.quiet),
        Command::Stats(args) => commands::stats::run_stats(&args),
        Command::Ctl(args) => commands::stats::run_ctl(&args),
        Command::Bench(command) => commands::bench::run(&command, cli.quiet),
        Command::Completions(args) => commands::completions::run(&args, Cli::command()),
        Command::Man(args) => commands::man::run(&args, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our stdout went away (`| head`): what it wanted, it
        // has; say nothing (ripgrep does the same).
        Err(error) if output::stdout_closed() && is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            report(&error);
            ExitCode::FAILURE
        }
    }
}

/// Prints clap's message (help, version or usage error) and picks the exit
/// status: clap's own (0 for help, 2 for usage errors), but `cairn fsck`'s
/// usage errors exit 16, as e2fsck's do, so that 2 never reads as "errors
/// corrected" to a script.
fn usage_error(error: &clap::Error) -> ExitCode {
    // A closed stdout (`cairn --help | head -1`) is not an error: clap's own
    // exit() ignores a failed print too.
    let _ = error.print();
    if !error.use_stderr() {
        return ExitCode::SUCCESS;
    }
    // The command is the first word that is neither a flag nor the value of
    // a global flag's separate argument (`--log-level warn fsck`).
    let mut args = std::env::args_os().skip(1);
    let mut fsck = false;
    while let Some(arg) = args.next() {
        if arg == "--log-level" || arg == "--log-format" {
            args.next();
        } else if !arg.as_encoded_bytes().starts_with(b"-") {
            fsck = arg == "fsck";
            break;
        }
    }
    if fsck {
        ExitCode::from(commands::check::FSCK_USAGE_ERROR)
    } else {
        ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
    }
}

/// `cairn fsck`'s exit status (e2fsck's numbers): the verdict, or 8 when the
/// image could not be examined.
fn fsck_exit(result: anyhow::Result<commands::check::Verdict>) -> ExitCode {
    match result {
        Ok(verdict) => ExitCode::from(verdict.exit_status()),
        Err(error) if output::stdout_closed() && is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            report(&error);
            ExitCode::from(commands::check::FSCK_OPERATIONAL_ERROR)
        }
    }
}

/// The error that ends the command, on stderr: `error: …` as text, or a
/// JSON log line under `--log-format json` (unless the level hides errors,
/// when it is printed as text all the same: it is never lost).
fn report(error: &anyhow::Error) {
    if logging::is_json() && tracing::enabled!(tracing::Level::ERROR) {
        tracing::error!(error = format!("{error:#}"), "the command failed");
    } else {
        eprintln!("error: {error:#}");
    }
}

/// Whether `error` comes from a write that found its pipe closed.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
