//! `cairn bench`: measurements against named peers, same run, same machine,
//! each reported as a ratio. One module per subcommand.

use anyhow::Result;

pub mod nbd;
pub mod ntl;

/// `cairn bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// fio (ioengine=nbd) against Cairn, nbdkit memory and qemu-nbd.
    #[command(long_about = nbd::NBD_LONG_ABOUT)]
    Nbd(nbd::NbdBenchArgs),
    /// The NVM translation layer against pread/pwrite, `O_DIRECT` and memcpy, and
    /// atomic against in-place writes.
    #[command(long_about = ntl::NTL_LONG_ABOUT)]
    Ntl(ntl::NtlBenchArgs),
}

/// Run `cairn bench`.
pub fn run(command: &BenchCommand, quiet: bool) -> Result<()> {
    match command {
        BenchCommand::Nbd(args) => nbd::run(args),
        BenchCommand::Ntl(args) => ntl::run(args, quiet),
    }
}
