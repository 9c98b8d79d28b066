//! `cairn bench tier`: the cache tier measured in parts. `fio`: against
//! nbdkit's cache filter, each in front of an emulated slow device, through
//! fio's nbd engine (`fio.rs`); `warm`: the hit ratio after a clean stop and
//! after kill -9 (`warm.rs`); `scan`: a hot set's hit ratio across a long
//! sequential read (`scan.rs`); `clean`: foreground write latency while the
//! cleaner drains (`clean.rs`); `dram`: the DRAM a cached block costs
//! (`dram.rs`).

use anyhow::{Context, Result, bail};

mod args;
mod clean;
mod common;
mod dram;
mod fio;
mod scan;
mod warm;

use args::{PARTS, Part};
pub use args::{TIER_LONG_ABOUT, TierBenchArgs};

/// Runs the parts `--part` names, in the order of [`PARTS`].
pub fn run(args: &TierBenchArgs) -> Result<()> {
    let cache = size_arg("--cache-size", &args.cache_size)?;
    let dram = size_arg("--dram-size", &args.dram_size)?;
    match args.part.as_slice() {
        [Part::WarmChild] => return warm::child(args, cache),
        [Part::DramChild] => return dram::child(args, dram),
        parts
            if parts
                .iter()
                .any(|p| matches!(p, Part::WarmChild | Part::DramChild)) =>
        {
            bail!("--part warm-child and dram-child run alone")
        }
        _ => {}
    }
    let all = args.part.contains(&Part::All);
    let chosen: Vec<Part> = PARTS
        .into_iter()
        .filter(|p| all || args.part.contains(p))
        .collect();
    if chosen.iter().any(|p| matches!(p, Part::Fio | Part::Clean)) && !super::nbd::fio_has_nbd() {
        bail!("--part fio and clean need fio with the nbd engine (apt-get install fio)");
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    for (index, part) in chosen.iter().enumerate() {
        if index > 0 {
            crate::output::outln!()?;
        }
        match part {
            Part::Fio => fio::run(args, cache)?,
            Part::Warm => warm::run(args, cache)?,
            Part::Scan => scan::run(args, cache)?,
            Part::Clean => clean::run(args, cache)?,
            Part::Dram => dram::run(args, dram)?,
            Part::All | Part::WarmChild | Part::DramChild => {}
        }
    }
    Ok(())
}

/// A size flag: a positive multiple of 1 MiB.
fn size_arg(flag: &str, text: &str) -> Result<u64> {
    let bytes = cairn_sim::parse_bytes(text).with_context(|| format!("{flag} {text:?}"))?;
    if bytes == 0 || !bytes.is_multiple_of(1 << 20) {
        bail!("{flag} must be a positive multiple of 1MiB");
    }
    Ok(bytes)
}
