//! The systemd units in `contrib/systemd/` are ones systemd accepts and
//! that serve: `systemd-analyze verify` finds nothing to say about
//! `cairn@.service` and `cairn@.socket` (their `ExecStart` pointed at the built
//! binary, since /usr/local/bin/cairn is not installed here), `systemd-analyze
//! security` rates the service's hardening "OK" (exposure at most 2.5 of 10),
//! and the service's `ExecStart` as written (for an instance `vol`), started
//! the way the socket unit starts it (`systemd-socket-activate`, which passes
//! a listening socket as systemd does), serves a spec whose `data_dir` is
//! absolute, as the README writes it. Each part skips, saying why, where its
//! tool is missing. (Not tested: the units under a running systemd, which
//! this machine has not; User=cairn and the seccomp filter are checked only
//! by `verify` and `security`.)
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cairn_nbd::proto::CMD_DISC;
use common::{Server, connect, small_default_spec, terminate, tool};

/// Where the units expect the binary (installed from source).
const INSTALLED: &str = "/usr/local/bin/cairn";

fn units() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd")
}

/// The service's `ExecStart` arguments after the binary, as written (`%i`
/// and all).
fn exec_start_arguments() -> String {
    let service = std::fs::read_to_string(units().join("cairn@.service")).unwrap();
    let line = service
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    line.strip_prefix(INSTALLED)
        .unwrap_or_else(|| panic!("ExecStart runs {INSTALLED}: {line}"))
        .trim()
        .to_owned()
}

/// The units in `dir`, the service's `ExecStart` pointed at the built binary.
fn units_with_built_binary(dir: &Path) {
    let service = std::fs::read_to_string(units().join("cairn@.service")).unwrap();
    let service = service.replace(
        &format!("ExecStart={INSTALLED} "),
        &format!("ExecStart={} ", env!("CARGO_BIN_EXE_cairn")),
    );
    assert!(!service.contains(INSTALLED), "ExecStart changed shape");
    std::fs::write(dir.join("cairn@.service"), service).unwrap();
    std::fs::copy(units().join("cairn@.socket"), dir.join("cairn@.socket")).unwrap();
}

#[test]
fn systemd_analyze_verify_accepts_the_units() {
    let Some(analyze) = tool("systemd-analyze") else {
        println!("skipped: systemd-analyze is not installed (Debian: apt-get install systemd)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    units_with_built_binary(dir.path());
    // An instance of each template, as `systemctl enable cairn@vol.socket`
    // makes one; verify also checks the socket finds its service.
    let output = Command::new(&analyze)
        .args(["verify", "--man=no"])
        .arg(dir.path().join("cairn@vol.service"))
        .arg(dir.path().join("cairn@vol.socket"))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    // Unknown keys and bad values are warnings with status 0: none at all.
    assert_eq!(said, "", "systemd-analyze verify has remarks");
}

#[test]
fn the_service_is_hardened() {
    let Some(analyze) = tool("systemd-analyze") else {
        println!("skipped: systemd-analyze is not installed (Debian: apt-get install systemd)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    units_with_built_binary(dir.path());
    let output = Command::new(&analyze)
        .args(["security", "--offline=yes", "--threshold=25", "--no-pager"])
        .arg(dir.path().join("cairn@vol.service"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("unrecognized option") {
        println!("skipped: this systemd-analyze has no offline security check: {stderr}");
        return;
    }
    assert!(
        output.status.success(),
        "exposure above 2.5:\n{stdout}{stderr}"
    );
    assert!(stdout.contains("Overall exposure level"), "{stdout}");
}

#[test]
fn exec_start_serves_under_socket_activation() {
    let Some(activate) = tool("systemd-socket-activate") else {
        println!(
            "skipped: systemd-socket-activate is not installed (Debian: apt-get install systemd)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nv = common::nv_dir();
    // The README's spec: the default one with an absolute data_dir.
    let state = dir.path().join("var/lib/cairn/vol");
    let spec = small_default_spec("16MiB", "20MiB", nv.path());
    let data_dir = spec
        .lines()
        .find(|line| line.starts_with("data_dir = "))
        .expect("the default spec has a data_dir line");
    let spec = spec.replace(data_dir, &format!("data_dir = \"{}\"", state.display()));
    let config = dir.path().join("etc/cairn/vol.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, spec).unwrap();

    // ExecStart's arguments, for instance "vol", with /etc/cairn where this
    // test has it.
    let etc = format!("{}/", config.parent().unwrap().display());
    let arguments = exec_start_arguments()
        .replace("%i", "vol")
        .replace("/etc/cairn/", &etc);
    let socket = dir.path().join("run/cairn/vol.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let mut server = Server(Some(
        Command::new(activate)
            .arg("--listen")
            .arg(&socket)
            .arg(env!("CARGO_BIN_EXE_cairn"))
            .args(arguments.split_whitespace())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 16 << 20);
    client.request(CMD_DISC, 0, 0, &[]);
    assert!(
        state.join("disk.img").exists(),
        "the data lives in data_dir"
    );
    assert!(
        !state.join("cairn.sock").exists(),
        "the passed socket is used, not one of its own"
    );
    terminate(server.take());
}
