//! `cairn bench`: measurements against named peers, same run, same machine,
//! each reported as a ratio. One module per subcommand.

use anyhow::Result;

pub mod logdisk;
pub mod nbd;
pub mod ntl;

/// `cairn bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// fio (ioengine=nbd) against Cairn, nbdkit memory and qemu-nbd.
    #[command(long_about = nbd::NBD_LONG_ABOUT)]
    Nbd(nbd::NbdBenchArgs),
    /// Log-disk 4 KiB random writes against the device's sequential bandwidth;
    /// write amplification per cleaner.
    #[command(long_about = logdisk::LOGDISK_LONG_ABOUT)]
    Logdisk(logdisk::LogdiskBenchArgs),
    /// The NVM translation layer against pread/pwrite, `O_DIRECT` and memcpy, and
    /// atomic against in-place writes.
    #[command(long_about = ntl::NTL_LONG_ABOUT)]
    Ntl(ntl::NtlBenchArgs),
}

/// Run `cairn bench`.
pub fn run(command: &BenchCommand, quiet: bool) -> Result<()> {
    match command {
        BenchCommand::Nbd(args) => nbd::run(args),
        BenchCommand::Logdisk(args) => logdisk::run(args),
        BenchCommand::Ntl(args) => ntl::run(args, quiet),
    }
}
