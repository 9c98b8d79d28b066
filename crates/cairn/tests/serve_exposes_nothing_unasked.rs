//! What `cairn serve` tells the network: clients see an export's
//! description only as the spec writes it, never the stack's own (which
//! names files under the data directory and the geometry); and a plaintext
//! TCP listener on a non-loopback address is warned about at start, since
//! NBD has no authentication.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cairn, connect, terminate, tool};

#[test]
fn clients_see_the_configured_description_and_no_host_path() {
    if tool("nbdinfo").is_none() {
        eprintln!("SKIPPED: nbdinfo is not installed (test.sh installs libnbd-bin)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cairn.sock");
    let config = dir.path().join("spec.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"secret-data-dir\"\nlisten = \"unix:{}\"\n\
             [[export]]\nname = \"plain\"\ndevice = \"f\"\n\
             [[export]]\nname = \"named\"\ndevice = \"m\"\ndescription = \"the team's scratch disk\"\n\
             [device.f]\nkind = \"file\"\npath = \"hidden-volume.img\"\nsize = \"8MiB\"\n\
             [device.m]\nkind = \"memory\"\nsize = \"4MiB\"\n",
            socket.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    let child = cairn()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    drop(connect(&socket)); // waits until it listens
    let output = Command::new("nbdinfo")
        .args(["--json", "--list"])
        .arg(format!("nbd+unix:///?socket={}", socket.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exports = json["exports"].as_array().unwrap();
    assert_eq!(exports.len(), 2, "{text}");
    for export in exports {
        let description = export.get("description").and_then(|d| d.as_str());
        match export["export-name"].as_str().unwrap() {
            "plain" => assert_eq!(description, None, "{text}"),
            "named" => assert_eq!(description, Some("the team's scratch disk"), "{text}"),
            other => panic!("unexpected export {other}: {text}"),
        }
    }
    // (nbdinfo prints the URI it was given, socket path included: what the
    // server sent is everything else.)
    for secret in ["secret-data-dir", "hidden-volume.img", "8388608 bytes"] {
        assert!(!text.contains(secret), "{secret} sent to a client: {text}");
    }
    terminate(child);
    // The server's own log still says what the stack is.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("hidden-volume.img"), "{logged}");
}

/// Starts `cairn serve` with `args`, waits for it to log that it serves,
/// stops it, and returns what it logged.
fn log_of_start(args: &[&str], dir: &Path) -> String {
    let log = dir.join("stderr.log");
    let child = cairn()
        .arg("serve")
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("serving export")
    {
        assert!(Instant::now() < deadline, "the server never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    terminate(child);
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn a_plaintext_listener_off_loopback_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let logged = log_of_start(
        &["--memory", "4MiB", "--listen", "tcp:0.0.0.0:0"],
        dir.path(),
    );
    assert!(
        logged.contains("WARN")
            && logged.contains("tcp:0.0.0.0:")
            && logged.contains("NBD has no authentication")
            && logged.contains("--tls require")
            && logged.contains("127.0.0.1"),
        "{logged}"
    );
    let logged = log_of_start(
        &["--memory", "4MiB", "--listen", "tcp:127.0.0.1:0"],
        dir.path(),
    );
    assert!(!logged.contains("no authentication"), "{logged}");
}
