//! `cairn sim` with no arguments must work anywhere: it replays the sample
//! trace embedded in the binary and prints a policy × size table of miss
//! ratios. Guards the embedded trace, the default policy set (only names the
//! policy crate knows) and the default sizes.

use std::process::Command;

#[test]
fn default_run_prints_a_table_with_an_lru_row_and_four_size_columns() {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["sim", "--quiet"])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("cairn runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stderr: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["policy", "1%", "5%", "10%", "20%"], "{stdout}");
    let lru: Vec<&str> = lines
        .iter()
        .find(|l| l.starts_with("lru "))
        .expect("an lru row")
        .split_whitespace()
        .collect();
    assert_eq!(lru.len(), 5, "{stdout}");
    let ratios: Vec<f64> = lru[1..]
        .iter()
        .map(|c| c.parse().expect("a number"))
        .collect();
    for (cell, ratio) in lru[1..].iter().zip(&ratios) {
        assert!((0.0..=1.0).contains(ratio), "{ratio}");
        assert_eq!(
            cell.split('.').nth(1).map(str::len),
            Some(4),
            "4 decimals: {cell}"
        );
    }
    assert!(
        ratios.windows(2).all(|w| w[1] <= w[0]),
        "LRU's miss ratio never rises with size: {ratios:?}"
    );
}
