//! `cairn man`: man pages generated from the clap definitions (the same text
//! as `--help`), the top page on stdout or one page per command in a
//! directory.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::output;

const LONG_ABOUT: &str = "\
Generate man pages (section 1, roff) from this binary's own command-line
definitions: each page is the command's --help, examples included. Without
--dir the top page, cairn(1), goes to stdout. With --dir every page is written
there: cairn.1 and one per command and subcommand, named after it
(cairn-serve.1, cairn-trace-generate.1, …); the directory is created.";

const EXAMPLES: &str = "\
Examples:
  cairn man | man -l -
      Read the top page now.
  cairn man --dir man/man1 && man -l man/man1/cairn-serve.1
      Every page into ./man/man1; read `cairn serve`'s.
  cairn man --dir man/man1 && MANPATH=$PWD/man: man cairn-serve
      The same, found by name (install: --dir /usr/local/share/man/man1).";

/// `cairn man` flags, as typed.
#[derive(clap::Args, Debug)]
#[command(long_about = LONG_ABOUT, after_long_help = EXAMPLES)]
pub struct ManArgs {
    /// Write every page into DIR (created if missing) instead of the top page
    /// to stdout.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Run `cairn man`: `command` is the whole CLI's definition.
pub fn run(args: &ManArgs, command: clap::Command) -> Result<()> {
    // The pages list commands, not `help`, which has no page of its own.
    let mut command = command.disable_help_subcommand(true);
    command.build();
    let Some(dir) = &args.dir else {
        let page = page(&command)?;
        let mut stdout = output::stdout();
        return stdout
            .write_all(&page)
            .and_then(|()| stdout.flush())
            .context("writing the man page");
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let written = write_pages(&command, dir)?;
    tracing::info!("wrote {written} man pages to {}", dir.display());
    Ok(())
}

/// `command`'s page and its subcommands' (depth first) into `dir`; how many.
fn write_pages(command: &clap::Command, dir: &Path) -> Result<usize> {
    let mut written = 0;
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        written += write_pages(sub, dir)?;
    }
    // The full name clap's `build` gave it: `cairn-serve`.
    let name = command.get_display_name().unwrap_or(command.get_name());
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, page(command)?).with_context(|| format!("writing {}", path.display()))?;
    tracing::debug!("wrote {}", path.display());
    Ok(written + 1)
}

/// One page in roff: `clap_mangen`'s sections, but the text after the flags
/// (`Examples:` in `--help`) as an EXAMPLES section kept as written, line
/// for line, so that each command reads (and copies) as printed.
fn page(command: &clap::Command) -> Result<Vec<u8>> {
    let version = command.get_version().unwrap_or_default();
    let man = clap_mangen::Man::new(command.clone())
        .source(format!("cairn {version}"))
        .manual("Cairn Manual");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if command.get_arguments().any(|arg| !arg.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if command.get_subcommands().any(|sub| !sub.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    if let Some(after) = command.get_after_long_help() {
        let text = after.to_string();
        let (title, text) = match text.strip_prefix("Examples:\n") {
            Some(examples) => ("EXAMPLES", examples),
            None => ("NOTES", text.as_str()),
        };
        out.extend_from_slice(format!(".SH {title}\n.nf\n").as_bytes());
        for line in text.lines() {
            out.extend_from_slice(roff_line(line).as_bytes());
            out.push(b'\n');
        }
        out.extend_from_slice(b".fi\n");
    }
    man.render_version_section(&mut out)?;
    Ok(out)
}

/// A line of text as roff prints it: backslashes, minus signs and
/// apostrophes escaped (so a pasted command has ASCII `-` and `'`), and a
/// leading `.` or `'` kept from reading as a request.
fn roff_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    if line.starts_with(['.', '\'']) {
        out.push_str("\\&");
    }
    for c in line.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            '\'' => out.push_str("\\(aq"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_lines_print_as_written() {
        assert_eq!(
            roff_line("cairn serve --memory 1GiB"),
            "cairn serve \\-\\-memory 1GiB"
        );
        assert_eq!(roff_line(".hidden"), "\\&.hidden");
        assert_eq!(roff_line("'quoted' \\"), "\\&\\(aqquoted\\(aq \\e");
    }
}
