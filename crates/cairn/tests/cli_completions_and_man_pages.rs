//! The files an operator installs from the binary itself: `cairn completions
//! SHELL` prints a script the shell loads and that completes commands, flags
//! and fixed values; `cairn man` renders the top page and `cairn man --dir`
//! writes one page per command, each of which groff formats without a
//! warning and whose examples read as `--help` prints them, line for line
//! (a `\` at a line's end kept, not read as roff's line continuation).
//! Every example in `cairn completions --help` and `cairn man --help` runs as
//! printed (in a scratch HOME and directory).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::examples::{bash, examples, text};
use common::{cairn, tool};

/// What bash completes for `words` (the last being the one under the cursor).
fn completions(words: &[&str], dir: &Path) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        "source <(cairn completions bash) && COMP_WORDS=({}) && COMP_CWORD={} && \
         _cairn cairn {} {} && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        quoted.join(" "),
        words.len() - 1,
        quoted[words.len() - 1],
        quoted[words.len() - 2],
    );
    let output = bash(&script, dir);
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn bash_loads_the_completion_script_and_it_completes_commands_flags_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let output = bash(
        "source <(cairn completions bash); complete -p cairn",
        dir.path(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stderr), "");
    assert!(
        text(&output.stdout).contains("-F _cairn cairn"),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(completions(&["cairn", "ser"], dir.path()), ["serve"]);
    assert_eq!(
        completions(&["cairn", "serve", "--log-f"], dir.path()),
        ["--log-format"]
    );
    assert_eq!(
        completions(&["cairn", "serve", "--log-level", ""], dir.path()),
        ["error", "warn", "info", "debug", "trace"]
    );
    let shells = completions(&["cairn", "completions", ""], dir.path());
    let shells: Vec<&str> = shells
        .iter()
        .map(String::as_str)
        .filter(|word| !word.starts_with('-'))
        .collect();
    assert_eq!(shells, ["bash", "elvish", "fish", "powershell", "zsh"]);
}

#[test]
fn every_shell_gets_a_script_naming_cairn_and_a_bad_shell_is_a_usage_error() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let output = cairn().args(["completions", shell]).output().unwrap();
        assert!(output.status.success(), "{shell}: {}", text(&output.stderr));
        let script = text(&output.stdout);
        assert!(script.len() > 1000, "{shell}: {script}");
        assert!(script.contains("log-format"), "{shell}");
    }
    let output = cairn().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("possible values"));
}

#[test]
fn the_completions_help_examples_run_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let examples = examples(&["completions", "--help"]);
    assert_eq!(examples.len(), 6, "{examples:?}");
    for example in &examples {
        let output = bash(example, dir.path());
        assert!(
            output.status.success(),
            "{example}: {}",
            text(&output.stderr)
        );
    }
    for installed in [
        ".local/share/bash-completion/completions/cairn",
        ".zfunc/_cairn",
        ".config/fish/completions/cairn.fish",
    ] {
        let script = std::fs::read_to_string(dir.path().join(installed)).unwrap();
        assert!(script.contains("cairn"), "{installed}");
    }
}

#[test]
fn man_dir_writes_a_page_per_command_and_groff_formats_each_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let output = cairn()
        .args(["man", "--dir"])
        .arg(dir.path().join("man1"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let mut pages: Vec<String> = std::fs::read_dir(dir.path().join("man1"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    // Every command of `cairn --help` has its page; `help` has none.
    let help = text(&cairn().arg("--help").output().unwrap().stdout);
    let (_, commands) = help.split_once("Commands:\n").unwrap();
    let commands: Vec<&str> = commands
        .lines()
        .take_while(|line| !line.is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .map(|line| line.split_whitespace().next().unwrap())
        .filter(|name| *name != "help")
        .collect();
    assert!(commands.len() >= 10, "{commands:?}");
    for command in commands {
        let page = format!("cairn-{command}.1");
        assert!(pages.contains(&page), "{page} missing from {pages:?}");
    }
    for page in ["cairn.1", "cairn-trace-gen.1", "cairn-bench-nbd.1"] {
        assert!(pages.iter().any(|p| p == page), "{page}: {pages:?}");
    }
    assert!(!pages.iter().any(|p| p.contains("help")), "{pages:?}");
    assert!(pages.iter().all(|p| p.ends_with(".1")), "{pages:?}");

    for page in &pages {
        let roff = std::fs::read_to_string(dir.path().join("man1").join(page)).unwrap();
        let name = page.trim_end_matches(".1");
        assert!(roff.contains(&format!(".TH {name} 1 ")), "{page}");
        for section in [".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS"] {
            assert!(roff.contains(section), "{page}: no {section}");
        }
    }
    let Some(groff) = tool("groff") else {
        println!("skipped: groff is not installed; the pages' sections were checked above");
        return;
    };
    for page in &pages {
        // -k: the pages are UTF-8 (preconv, as man does); -ww: every warning.
        let output = Command::new(&groff)
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(dir.path().join("man1").join(page))
            .output()
            .unwrap();
        assert!(output.status.success(), "{page}");
        assert_eq!(text(&output.stderr), "", "groff warns on {page}");
    }
}

#[test]
fn the_man_help_examples_run_as_printed_and_examples_read_as_typed() {
    let Some(_) = tool("man") else {
        println!("skipped: man is not installed (the examples pipe into it)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let printed = examples(&["man", "--help"]);
    assert_eq!(printed.len(), 3, "{printed:?}");
    for example in &printed {
        let output = bash(example, dir.path());
        let stdout = text(&output.stdout);
        assert!(
            output.status.success(),
            "{example}: {}",
            text(&output.stderr)
        );
        assert!(stdout.contains("NAME"), "{example}: {stdout}");
    }
    // `man cairn-serve` shows the examples as `cairn serve --help` prints
    // them, one a line, backslashes and quotes as typed.
    let page = text(&bash("MANPATH=$PWD/man: man cairn-serve", dir.path()).stdout);
    for example in examples(&["serve", "--help"]) {
        assert!(page.contains(&example), "{example:?} not in\n{page}");
    }
    let top = text(&bash("cairn man | man -l -", dir.path()).stdout);
    assert!(top.contains("cairn-serve(1)"), "{top}");
}
