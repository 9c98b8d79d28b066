//! `cairn completions SHELL`: a completion script generated from the clap
//! definitions, so it knows every command, flag and value the binary does.

use std::io::Write as _;

use anyhow::{Context, Result};
use clap_complete::Shell;

use crate::output;

const LONG_ABOUT: &str = "\
Print a completion script for SHELL on stdout, generated from this binary's
own command-line definitions: every command, flag and fixed value (--log-level
LEVEL, --log-format FORMAT, …) completes. Regenerate it after an upgrade.";

const EXAMPLES: &str = "\
Examples:
  source <(cairn completions bash)
      Completions in this bash session.
  mkdir -p ~/.local/share/bash-completion/completions
  cairn completions bash > ~/.local/share/bash-completion/completions/cairn
      In every new bash session of yours (bash-completion loads it on first use).
  mkdir -p ~/.zfunc && cairn completions zsh > ~/.zfunc/_cairn
      zsh, with `fpath+=~/.zfunc; autoload -U compinit; compinit` in ~/.zshrc.
  mkdir -p ~/.config/fish/completions
  cairn completions fish > ~/.config/fish/completions/cairn.fish
      fish.";

/// `cairn completions` flags, as typed.
#[derive(clap::Args, Debug)]
#[command(long_about = LONG_ABOUT, after_long_help = EXAMPLES)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    shell: Shell,
}

/// Run `cairn completions`: `command` is the whole CLI's definition.
pub fn run(args: &CompletionsArgs, mut command: clap::Command) -> Result<()> {
    // Into a buffer first: the generator panics on a failed write, and a
    // reader that goes away (`| head`) must be a quiet success.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "cairn", &mut script);
    let mut stdout = output::stdout();
    stdout
        .write_all(&script)
        .and_then(|()| stdout.flush())
        .context("writing the completion script")
}
