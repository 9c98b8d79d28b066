//! Bad input on the command line is the user's mistake, not a crash: `cairn`
//! must exit non-zero with one `error:` line that names what is wrong, and
//! never panic.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("cairn runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_policy_is_named_with_the_known_ones() {
    let (ok, stderr) = run(&["sim", "-q", "--policy", "nosuch"]);
    assert!(!ok);
    assert!(
        stderr.contains("error:") && stderr.contains("unknown policy `nosuch`"),
        "{stderr}"
    );
    assert!(stderr.contains("lru"), "lists the known policies: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_bad_policy_parameter_or_pair_is_named() {
    for (spec, want) in [
        ("lru:bogus=1", "bogus"),
        ("lru:oops", "not key=value"),
        (":x=1", "missing policy name"),
    ] {
        let (ok, stderr) = run(&["sim", "-q", "--policy", spec]);
        assert!(!ok, "{spec}");
        assert!(stderr.contains(want), "{spec}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn bad_sizes_and_missing_traces_are_named() {
    for (args, want) in [
        (vec!["sim", "-q", "--size", "150%"], "150%"),
        (vec!["sim", "-q", "--size", "12XB"], "12XB"),
        (
            vec!["sim", "-q", "--trace", "/nonexistent/t.bin"],
            "/nonexistent/t.bin",
        ),
        (vec!["sim", "-q", "--unit", "block:0"], "block:0"),
        (vec!["mrc", "-q", "--shards", "2"], "--shards"),
    ] {
        let (ok, stderr) = run(&args);
        assert!(!ok, "{args:?}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
