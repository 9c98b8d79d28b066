//! `cairn reproduce`: the papers' experiments, each from a TOML spec in
//! `reproduce/` (embedded in the binary; `--spec` runs an edited copy), printing
//! tables shaped like the paper's, writing CSV and SVG, and stating for each of
//! the paper's claims whether our run confirms it, with both numbers.

pub mod cost;
pub mod dual;
pub mod logdisk;
pub mod ntl;
pub mod ntl_ext4;
pub mod ons;
mod shared;

use std::io::Write;

use anyhow::Result;
use clap::{Args, Subcommand};

pub use shared::{Claim, Common, prepare_out, print_claims, read_spec, save, write_claims_csv};

use crate::output::outln;

/// `cairn reproduce …`
#[derive(Subcommand, Debug)]
pub enum ReproduceCommand {
    /// papers/000: ONS against FIFO, LRU and LFU for N concurrent readers of one
    /// file (Figs. 5, 6, 8 and Table 1), simulated.
    #[command(long_about = ons::LONG_ABOUT, after_long_help = ons::EXAMPLES)]
    Ons(ons::OnsArgs),
    /// papers/004: eviction-cost groups against LRU over an SSD and an HDD at
    /// SSD:HDD splits 0:100 ... 100:0 (Fig. 4), simulated.
    #[command(long_about = cost::LONG_ABOUT, after_long_help = cost::EXAMPLES)]
    Cost(cost::CostArgs),
    /// papers/001: the dual (file-preface + rest-of-file) cache against a single
    /// cache on its Table I workloads, and the α sweep (Figs. 4, 5), simulated.
    #[command(long_about = dual::LONG_ABOUT, after_long_help = dual::EXAMPLES)]
    Dual(dual::DualArgs),
    /// papers/003: partial segments on a log-structured disk and the NV write
    /// cache that removes them (Tables 2-7), on the real log disk.
    #[command(long_about = logdisk::LONG_ABOUT, after_long_help = logdisk::EXAMPLES)]
    Logdisk(logdisk::LogdiskArgs),
    /// papers/002: the NVM translation layer against pread/pwrite, `O_DIRECT` and
    /// memcpy, and atomic against in-place writes (Figs. 3, 4, §5), measured.
    #[command(long_about = ntl::LONG_ABOUT, after_long_help = ntl::EXAMPLES)]
    Ntl(ntl::NtlArgs),
    /// Every reproduction this build has, one after another, then a summary of
    /// every claim.
    All(AllArgs),
}

/// `cairn reproduce all`
#[derive(Args, Debug)]
pub struct AllArgs {
    /// Leave out papers/002's ext4 macro comparison (`reproduce ntl --skip-ext4`).
    #[arg(long)]
    skip_ext4: bool,

    #[command(flatten)]
    common: Common,
}

/// Runs `cairn reproduce`.
pub fn run(command: &ReproduceCommand, quiet: bool) -> Result<()> {
    match command {
        ReproduceCommand::Ons(args) => ons::run(args, quiet).map(|_| ()),
        ReproduceCommand::Cost(args) => cost::run(args, quiet).map(|_| ()),
        ReproduceCommand::Dual(args) => dual::run(args, quiet).map(|_| ()),
        ReproduceCommand::Logdisk(args) => logdisk::run(args, quiet).map(|_| ()),
        ReproduceCommand::Ntl(args) => ntl::run(args, quiet).map(|_| ()),
        ReproduceCommand::All(args) => {
            let mut claims = Vec::new();
            claims.extend(ons::run(&ons::OnsArgs::with(args.common.clone()), quiet)?);
            outln!()?;
            claims.extend(cost::run(
                &cost::CostArgs::with(args.common.clone()),
                quiet,
            )?);
            outln!()?;
            claims.extend(dual::run(
                &dual::DualArgs::with(args.common.clone()),
                quiet,
            )?);
            outln!()?;
            claims.extend(logdisk::run(
                &logdisk::LogdiskArgs::with(args.common.clone()),
                quiet,
            )?);
            outln!()?;
            claims.extend(ntl::run(
                &ntl::NtlArgs::with(args.common.clone(), args.skip_ext4),
                quiet,
            )?);
            let mut out = crate::output::stdout();
            writeln!(out, "\n== Summary of every claim")?;
            print_claims(&mut out, &claims)?;
            let confirmed = claims.iter().filter(|c| c.confirmed).count();
            write!(out, "{confirmed} of {} claims confirmed.", claims.len())?;
            if let Some(why) = args
                .skip_ext4
                .then(|| "--skip-ext4".to_owned())
                .or_else(ntl_ext4::missing_facility)
            {
                write!(
                    out,
                    " Not run: papers/002's ext4 mixes (Figs. 5, 6): {why}; see docs/reproductions.md."
                )?;
            }
            writeln!(out)?;
            write_claims_csv(&args.common.out.join("claims.csv"), &claims)
        }
    }
}
