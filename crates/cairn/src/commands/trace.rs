//! `cairn trace gen|stats|convert`: the hook for the trace tools.
//!
//! The library side (generators, statistics, writers) is being built in
//! `cairn-trace`; this module is where its subcommands get their flags and
//! call it. Until then the command says so and exits non-zero.

use anyhow::{Result, bail};

/// `cairn trace` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum TraceCommand {
    /// Generate a synthetic trace (zipf, scan, hot-spot mix, streams).
    Gen,
    /// Print a trace's statistics (requests, working set, read/write mix).
    Stats,
    /// Convert a trace between formats.
    Convert,
}

/// Runs `cairn trace …`.
pub fn run(command: &TraceCommand) -> Result<()> {
    bail!("`cairn trace {command:?}` is not available in this build yet")
}
