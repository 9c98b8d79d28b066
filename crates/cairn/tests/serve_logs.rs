//! `cairn serve`'s logs are for operators and their log collectors: with
//! `--log-format json` every line on stderr is one JSON object, and a request
//! that fails is a warning that names the export, the layer that failed and
//! the client, as fields of their own (not only words in a message). Guards
//! too that `cairn --help`'s logging example runs as printed, that
//! `--log-level` wins over `RUST_LOG`, and that the error that ends a command
//! is a JSON line too.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use cairn_nbd::proto::{CMD_DISC, CMD_READ};
use common::{Server, cairn, connect, terminate};
use serde_json::Value;

/// Each stderr line of `child` as it comes, on a channel.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().unwrap();
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    receive
}

/// A JSON log line, which it must be.
fn json(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
}

/// The lines until (and with) the first whose message contains `wanted`.
fn lines_until(lines: &mpsc::Receiver<String>, wanted: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("no log line with {wanted:?} ({e}); saw {seen:#?}"));
        let value = json(&line);
        let found = value["message"].as_str().unwrap_or("").contains(wanted);
        seen.push(value);
        if found {
            return seen;
        }
    }
}

#[test]
fn the_help_example_logs_json_lines() {
    let help = cairn().arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let example = help
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("cairn --log-format json"))
        .expect("a --log-format json example in `cairn --help`");
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server(Some(
        cairn()
            .args(example.split_whitespace().skip(1))
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let lines = stderr_lines(server.0.as_mut().unwrap());
    let seen = lines_until(&lines, "serving export");
    let serving = seen.last().unwrap();
    assert_eq!(serving["level"], "INFO", "{serving}");
    assert!(serving["timestamp"].is_string(), "{serving}");
    assert_eq!(serving["target"], "cairn::commands::serve", "{serving}");

    // The example asks for debug: a connection's handshake is logged, as
    // JSON with the client as a field.
    let mut client = connect(&dir.path().join("cairn-data/cairn.sock"));
    client.handshake();
    client.request(CMD_DISC, 0, 0, &[]);
    let seen = lines_until(&lines, "transmission");
    assert_eq!(seen.last().unwrap()["level"], "DEBUG");
    assert_eq!(seen.last().unwrap()["export"], "cairn");
    terminate(server.take());
    for line in &lines {
        json(&line);
    }
}

#[test]
fn a_failed_read_is_a_warning_naming_export_layer_and_client() {
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("volume.img");
    let socket = dir.path().join("cairn.sock");
    std::fs::write(&volume, vec![0u8; 1 << 20]).unwrap();
    let mut server = Server(Some(
        cairn()
            .args([
                "--log-format",
                "json",
                "serve",
                "--export",
                "logs",
                "--file",
            ])
            .arg(&volume)
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let lines = stderr_lines(server.0.as_mut().unwrap());
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 1 << 20);
    // Another process cuts the file short under the server (advisory locks
    // do not stop truncate): the read finds no bytes there, an I/O error.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&volume)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert!(client.try_request(CMD_READ, 8192, 4096, &[]).is_err());
    let seen = lines_until(&lines, "read failed");
    let failed = seen.last().unwrap();
    assert_eq!(failed["level"], "WARN", "{failed}");
    assert_eq!(failed["export"], "logs", "{failed}");
    assert_eq!(
        failed["layer"].as_str(),
        Some(volume.to_str().unwrap()),
        "{failed}"
    );
    let peer = format!("unix pid {} uid ", std::process::id());
    assert!(
        failed["peer"].as_str().unwrap().starts_with(&peer),
        "{failed}"
    );
    assert!(
        failed["error"].as_str().unwrap().contains("offset 8192"),
        "{failed}"
    );
    // The server goes on: the next connection is served.
    client.request(CMD_DISC, 0, 0, &[]);
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 1 << 20);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(server.take());
}

/// `cairn serve --stdio` on an empty stdin: a connection that leaves during
/// its handshake (logged at debug), then a stop (logged at info).
fn serve_closed_stdio(log_flags: &[&str], rust_log: &str) -> Output {
    // Its data directory (./cairn-data, locked while it runs) in a directory
    // of its own.
    let dir = tempfile::tempdir().unwrap();
    cairn()
        .args(log_flags)
        .args(["serve", "--stdio", "--memory", "4MiB"])
        .env("RUST_LOG", rust_log)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn log_level_wins_over_rust_log() {
    let output = serve_closed_stdio(&[], "debug");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("left during the handshake"), "{stderr}");
    assert!(stderr.contains("stopped"), "{stderr}");

    let output = serve_closed_stdio(&["--log-level", "warn"], "debug");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stderr, "", "--log-level warn over RUST_LOG=debug");

    // RUST_LOG still works (over -v), and with its directives.
    let output = serve_closed_stdio(&["-v"], "warn,cairn_nbd=debug");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("left during the handshake"), "{stderr}");
    assert!(!stderr.contains("stopped"), "{stderr}");
}

#[test]
fn the_error_that_ends_a_command_is_a_json_line() {
    let dir = tempfile::tempdir().unwrap();
    let output = cairn()
        .args(["--log-format", "json", "serve", "--memory", "0"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let error = json(lines[0]);
    assert_eq!(error["level"], "ERROR", "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("--memory must be more than 0 bytes"),
        "{error}"
    );
}
