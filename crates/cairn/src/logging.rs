//! Logs on stderr through `tracing`, as text or as JSON lines, with a level
//! `cairn serve` can change while running (SIGHUP re-reads the spec's
//! `log_level`).
//!
//! Precedence: `--log-level`, then `RUST_LOG`, then `-q`/`-v`, then the
//! spec's `log_level`, then `info`. The first three are the command line's
//! and are never overridden by a spec.

use std::sync::OnceLock;

use anyhow::{Result, bail};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The level when nothing sets one.
pub const DEFAULT_LEVEL: &str = "info";

/// `--log-level`: the least severe level logged.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// What the server does: start, stop, signals, clients refused (the default).
    Info,
    /// Every connection and handshake.
    Debug,
    /// Everything.
    Trace,
}

impl Level {
    fn directive(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warn => "warn",
            Self::Info => "info",
            Self::Debug => "debug",
            Self::Trace => "trace",
        }
    }
}

/// `--log-format`: how each log line is written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// LEVEL message key=value …, no timestamps (journald adds its own).
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target, message and every
    /// field (export, layer, peer, …) at the top level.
    Json,
}

/// What the command line says about logging.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// `-q`: warnings and errors only.
    pub quiet: bool,
    /// `-v` count: 1 debug, 2 or more trace.
    pub verbose: u8,
    /// `--log-level`.
    pub level: Option<Level>,
    /// `--log-format`.
    pub format: Format,
}

struct State {
    handle: reload::Handle<EnvFilter, Registry>,
    /// The directives `--log-level`, `RUST_LOG` or `-q`/`-v` set, if any.
    command_line: Option<String>,
    format: Format,
}

static STATE: OnceLock<State> = OnceLock::new();

/// Installs the subscriber on stderr: text without timestamps or targets, or
/// JSON lines with both.
pub fn init(options: Options) {
    let flags = match (options.quiet, options.verbose) {
        (true, _) => Some("warn"),
        (false, 0) => None,
        (false, 1) => Some("debug"),
        (false, _) => Some("trace"),
    };
    let environment = std::env::var("RUST_LOG")
        .ok()
        .filter(|text| EnvFilter::try_new(text).is_ok());
    let command_line = options
        .level
        .map(|level| level.directive().to_owned())
        .or(environment)
        .or(flags.map(str::to_owned));
    let filter = EnvFilter::new(command_line.as_deref().unwrap_or(DEFAULT_LEVEL));
    let (filter, handle) = reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    // A server whose stderr was closed (its starter's pipe ended) must keep
    // serving: the default reports a failed write with eprintln!, which
    // panics; hence log_internal_errors(false) in both formats.
    match options.format {
        Format::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    // Colours for a terminal only: not as escape codes in a log file.
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_target(false)
                    .without_time()
                    .log_internal_errors(false),
            )
            .init(),
        Format::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_writer(std::io::stderr)
                    .log_internal_errors(false),
            )
            .init(),
    }
    let _ = STATE.set(State {
        handle,
        command_line,
        format: options.format,
    });
}

/// Whether log lines are JSON.
pub fn is_json() -> bool {
    STATE
        .get()
        .is_some_and(|state| state.format == Format::Json)
}

/// The level `--log-level`, `RUST_LOG`, `-q` or `-v` set, which a spec
/// cannot override.
pub fn command_line_level() -> Option<&'static str> {
    STATE.get().and_then(|state| state.command_line.as_deref())
}

/// Checks a spec's `log_level`: a level name, or `RUST_LOG` directives each
/// of which names a level (`info`, `cairn_nbd=debug`), so that a typo is an
/// error rather than a filter for a module called "inf".
pub fn parse(text: &str) -> Result<EnvFilter> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    for directive in text.split(',') {
        let level = directive.rsplit_once('=').map_or(directive, |(_, l)| l);
        if !LEVELS.contains(&level.trim().to_ascii_lowercase().as_str()) {
            bail!(
                "log_level {text:?}: {directive:?} names no level (expected off, error, warn, \
                 info, debug or trace, or directives like \"info,cairn_nbd=debug\")"
            );
        }
    }
    EnvFilter::try_new(text).map_err(|e| anyhow::anyhow!("log_level {text:?}: {e}"))
}

/// Switches to `text` (see [`parse`]) from now on.
pub fn set(text: &str) -> Result<()> {
    let filter = parse(text)?;
    let Some(state) = STATE.get() else {
        bail!("logging is not initialised");
    };
    state
        .handle
        .reload(filter)
        .map_err(|e| anyhow::anyhow!("changing the log level: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives_parse_and_typos_do_not() {
        for good in [
            "info",
            "DEBUG",
            "off",
            "info,cairn_nbd=debug",
            "warn,cairn=TRACE",
        ] {
            assert!(parse(good).is_ok(), "{good}");
        }
        for bad in ["", "inf", "lots", "cairn_nbd", "info,cairn=loud"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
