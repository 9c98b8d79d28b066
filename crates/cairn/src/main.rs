//! The `cairn` command.

use clap::Parser;

/// Cairn: a storage cache engine for heterogeneous storage, and its simulator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {}

fn main() {
    let _args = Args::parse();
}
