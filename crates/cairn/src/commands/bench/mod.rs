//! `cairn bench`: measurements against named peers, same run, same machine,
//! each reported as a ratio. One module per subcommand.

use anyhow::Result;

pub mod files;
pub mod hetero;
pub mod logdisk;
pub mod nbd;
pub mod ntl;
pub mod objects;
pub mod stream;
pub mod tier;

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
    /// The object volume's costs in the store: write amplification, requests
    /// per GiB and space per cleaner; throughput and PUTs per segment object size.
    #[command(long_about = objects::OBJECTS_LONG_ABOUT)]
    Objects(objects::ObjectsBenchArgs),
    /// The NVM translation layer against pread/pwrite, `O_DIRECT` and memcpy, and
    /// atomic against in-place writes.
    #[command(long_about = ntl::NTL_LONG_ABOUT)]
    Ntl(ntl::NtlBenchArgs),
    /// papers/000's streaming experiment on real I/O: N threads reading one
    /// file through the block cache (no cache, LRU, LFU, ONS) from an emulated disk.
    #[command(long_about = stream::STREAM_LONG_ABOUT)]
    Stream(stream::StreamBenchArgs),
    /// papers/004's experiment on real I/O: a trace through the block cache
    /// over an SSD and an HDD at 3:1, LRU against cost groups with online costs.
    #[command(long_about = hetero::HETERO_LONG_ABOUT)]
    Hetero(hetero::HeteroBenchArgs),
    /// papers/000's streaming server over HTTP: Cairn's file gateway against
    /// nginx's `proxy_cache` + `slice` over the same slowed origin.
    #[command(long_about = files::FILES_LONG_ABOUT, after_long_help = files::FILES_EXAMPLES)]
    Files(files::FilesBenchArgs),
    /// Cairn's cache tier against nbdkit's cache filter over the same emulated
    /// slow device (calibrated first), through fio's nbd engine.
    #[command(long_about = tier::TIER_LONG_ABOUT)]
    Tier(tier::TierBenchArgs),
}

/// Run `cairn bench`.
pub fn run(command: &BenchCommand, quiet: bool) -> Result<()> {
    match command {
        BenchCommand::Nbd(args) => nbd::run(args),
        BenchCommand::Logdisk(args) => logdisk::run(args),
        BenchCommand::Ntl(args) => ntl::run(args, quiet),
        BenchCommand::Objects(args) => objects::run(args),
        BenchCommand::Stream(args) => stream::run(args),
        BenchCommand::Hetero(args) => hetero::run(args),
        BenchCommand::Tier(args) => tier::run(args),
        BenchCommand::Files(args) if args.workload == files::FilesWorkload::Table1 => {
            files::table1::run(args)
        }
        BenchCommand::Files(args) if args.workload == files::FilesWorkload::Restart => {
            files::restart::run(args)
        }
        BenchCommand::Files(args) => files::run(args),
    }
}
