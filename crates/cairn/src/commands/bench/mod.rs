//! `cairn bench`: measurements against named peers, same run, same machine,
//! each reported as a ratio. One module per subcommand.

use anyhow::Result;

pub mod nbd;

/// `cairn bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// fio (ioengine=nbd) against Cairn, nbdkit memory and qemu-nbd.
    #[command(long_about = nbd::NBD_LONG_ABOUT)]
    Nbd(nbd::NbdBenchArgs),
}

/// Run `cairn bench`.
pub fn run(command: &BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Nbd(args) => nbd::run(args),
    }
}
