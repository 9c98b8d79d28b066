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

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::output::{csv_field, outln};

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

/// Flags shared by every reproduction.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Directory for the CSV files and plots (created if missing).
    #[arg(long, value_name = "DIR", default_value = "out/reproduce")]
    pub out: PathBuf,

    /// Scale the experiment's sizes (file, cache) by this factor, for a quick
    /// look; 1 is the paper's scale. The claims are still judged, but the
    /// paper's numbers are for scale 1.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub scale: f64,
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

/// One claim of a paper, judged against our run.
#[derive(Clone, Debug)]
pub struct Claim {
    /// Which paper and figure.
    pub source: String,
    /// What the paper says.
    pub text: String,
    /// The paper's number, as text with units.
    pub paper: String,
    /// Our number, as text with units.
    pub ours: String,
    /// Whether our run shows the same.
    pub confirmed: bool,
}

impl Claim {
    /// `confirmed` / `not confirmed`.
    pub fn verdict(&self) -> &'static str {
        if self.confirmed {
            "confirmed"
        } else {
            "not confirmed"
        }
    }
}

/// Prints claims as one block of lines.
pub fn print_claims(out: &mut dyn Write, claims: &[Claim]) -> std::io::Result<()> {
    writeln!(out, "Claims")?;
    for c in claims {
        writeln!(
            out,
            "  [{}] {}: {}\n      paper: {}; ours: {}",
            c.verdict(),
            c.source,
            c.text,
            c.paper,
            c.ours
        )?;
    }
    Ok(())
}

/// Writes claims as CSV (`source,claim,paper,ours,verdict`).
pub fn write_claims_csv(path: &Path, claims: &[Claim]) -> Result<()> {
    let mut text = String::from("source,claim,paper,ours,verdict\n");
    for c in claims {
        let _ = writeln!(
            text,
            "{},{},{},{},{}",
            csv_field(&c.source),
            csv_field(&c.text),
            csv_field(&c.paper),
            csv_field(&c.ours),
            c.verdict()
        );
    }
    save(path, &text)
}

/// Writes `text` to `path`, naming the file in any error.
pub fn save(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Reads a spec: the file at `path`, or the embedded `default` (the text of
/// `reproduce/<file>`). Returns it with the name errors should use.
pub fn read_spec<T: serde::de::DeserializeOwned>(
    path: Option<&PathBuf>,
    default: &str,
    file: &str,
) -> Result<(T, String)> {
    let (text, name) = match path {
        Some(path) => (
            std::fs::read_to_string(path)
                .with_context(|| format!("reading spec {}", path.display()))?,
            path.display().to_string(),
        ),
        None => (default.to_owned(), format!("reproduce/{file} (embedded)")),
    };
    let spec = toml::from_str(&text).with_context(|| format!("spec {name}"))?;
    Ok((spec, name))
}

/// Creates the output directory.
pub fn prepare_out(common: &Common) -> Result<()> {
    if !(common.scale > 0.0 && common.scale <= 1.0) {
        anyhow::bail!("--scale {}: expected a factor in (0, 1]", common.scale);
    }
    std::fs::create_dir_all(&common.out)
        .with_context(|| format!("creating output directory {}", common.out.display()))
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
