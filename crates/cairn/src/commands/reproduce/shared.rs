//! What every reproduction shares, beneath the reproductions and the
//! `reproduce` command that runs them: the [`Common`] flags, the judged
//! [`Claim`]s and how they are printed and saved, and reading a spec.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use crate::output::csv_field;

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
