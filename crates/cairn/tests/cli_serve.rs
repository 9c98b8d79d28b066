//! `cairn serve` as a process: SIGTERM finishes and exits 0, the default
//! volume (a log disk with its NV cache) and a file volume keep their data
//! across restarts, specs are read from files with clear errors, `--stdio` serves one connection on
//! stdin/stdout, systemd socket activation works (through libnbd's
//! `nbdinfo -- [ cmd ]`, which starts servers that way), and TLS from a
//! spec's `[tls]` table serves `nbds://` clients and refuses plaintext ones.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Stdio};

use cairn_nbd::proto::{CMD_DISC, CMD_FLUSH, CMD_READ, CMD_WRITE};
use common::{Raw, cairn, certificates, connect, terminate, tool};

#[test]
fn a_file_volume_keeps_its_data_across_sigterm_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cairn.sock");
    let volume = dir.path().join("volume.img");
    let listen = format!("unix:{}", socket.display());
    let serve = |extra: &[&str]| {
        cairn()
            .args(["serve", "--quiet", "--listen", &listen, "--file"])
            .arg(&volume)
            .args(extra)
            .spawn()
            .unwrap()
    };
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 253) as u8).collect();

    let child = serve(&["--size", "8MiB"]);
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 8 << 20);
    client.request(CMD_WRITE, 4096, data.len() as u32, &data);
    client.request(CMD_FLUSH, 0, 0, &[]);
    terminate(child);
    assert!(!socket.exists(), "the socket is removed on exit");

    let child = serve(&[]);
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 8 << 20);
    assert_eq!(client.request(CMD_READ, 4096, data.len() as u32, &[]), data);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
}

#[test]
fn stdio_mode_serves_one_connection_and_exits() {
    let mut child = cairn()
        .args(["serve", "--stdio", "--memory", "4MiB"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = Raw {
        reader: child.stdout.take().unwrap(),
        writer: child.stdin.take().unwrap(),
    };
    assert_eq!(client.handshake(), 4 << 20);
    client.request(CMD_WRITE, 0, 4, &[1, 2, 3, 4]);
    assert_eq!(client.request(CMD_READ, 0, 4, &[]), [1, 2, 3, 4]);
    client.request(CMD_DISC, 0, 0, &[]);
    drop(client);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn systemd_socket_activation_through_nbdinfo() {
    let Ok(output) = Command::new("nbdinfo")
        .args(["--json", "--", "["])
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(["serve", "--memory", "8MiB", "]"])
        .output()
    else {
        eprintln!("SKIPPED: nbdinfo is not installed (test.sh installs libnbd-bin)");
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("\"export-size\": 8388608"), "{text}");
}

#[test]
fn tls_from_the_spec_serves_nbds_clients_and_refuses_plaintext() {
    if tool("nbdinfo").is_none() {
        eprintln!("SKIPPED: nbdinfo is not installed (test.sh installs libnbd-bin)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pki")).unwrap();
    let Some(pki) = certificates(&dir.path().join("pki")) else {
        return;
    };
    let socket = dir.path().join("cairn.sock");
    let spec = dir.path().join("tls.toml");
    std::fs::write(
        &spec,
        format!(
            "listen = \"unix:{}\"\n\
             [tls]\nmode = \"require\"\ncertificates = \"pki\"   # relative to this file\n\
             verify_peer = true\n\
             [[export]]\nname = \"cairn\"\ndevice = \"m\"\n\
             [device.m]\nkind = \"memory\"\nsize = \"8MiB\"\n",
            socket.display()
        ),
    )
    .unwrap();
    let child = cairn()
        .args(["serve", "--config"])
        .arg(&spec)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(connect(&socket)); // waits until it listens
    let tls_uri = format!(
        "nbds+unix:///cairn?socket={}&tls-certificates={}",
        socket.display(),
        pki.display()
    );
    let nbdinfo = |uri: &str| Command::new("nbdinfo").arg(uri).output().unwrap();
    let plain = nbdinfo(&format!("nbd+unix:///cairn?socket={}", socket.display()));
    assert!(!plain.status.success(), "a plaintext client was served");
    let output = nbdinfo(&tls_uri);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("with TLS") && text.contains("8388608"),
        "{text}"
    );
    // verify_peer: the CA certificate alone (no client certificate) is not
    // enough.
    let anonymous = dir.path().join("anonymous");
    std::fs::create_dir(&anonymous).unwrap();
    std::fs::copy(pki.join("ca-cert.pem"), anonymous.join("ca-cert.pem")).unwrap();
    let output = nbdinfo(&format!(
        "nbds+unix:///cairn?socket={}&tls-certificates={}",
        socket.display(),
        anonymous.display()
    ));
    assert!(
        !output.status.success(),
        "a client without a certificate was served"
    );
    terminate(child);
}

#[test]
fn bad_serve_arguments_are_clear_errors() {
    for (args, expected) in [
        (
            &["serve", "--listen", "http://x"][..],
            "expected unix:PATH or tcp:HOST:PORT",
        ),
        (&["serve", "--memory", "lots"], "size \"lots\""),
        (&["serve", "--memory", "0"], "more than 0 bytes"),
        (
            &["serve", "--file", "/nonexistent/dir/v.img"],
            "/nonexistent/dir/v.img",
        ),
        (
            &["serve", "--memory", "1MiB", "--tls", "maybe"],
            "expected off, on or require",
        ),
        (
            &["serve", "--memory", "1MiB", "--tls", "on"],
            "--tls-certificates DIR",
        ),
        (
            &["serve", "--memory", "1MiB", "--tls-certificates", "/tmp"],
            "TLS is off",
        ),
        (
            &["serve", "--memory", "1MiB", "--tls-verify-peer"],
            "TLS is off",
        ),
        (
            &[
                "serve",
                "--memory",
                "1MiB",
                "--tls",
                "require",
                "--tls-certificates",
                "/nonexistent/pki",
            ],
            "/nonexistent/pki/server-cert.pem",
        ),
    ] {
        // In a directory of its own: a data directory belongs to one server,
        // and other tests serve from theirs meanwhile.
        let dir = tempfile::tempdir().unwrap();
        let output = cairn().args(args).current_dir(dir.path()).output().unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn a_server_whose_stdout_and_stderr_closed_keeps_serving_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cairn.sock");
    let mut child = cairn()
        .args(["serve", "--memory", "4MiB", "--listen"])
        .arg(format!("unix:{}", socket.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = connect(&socket);
    // The starter goes away: every later log line or print fails with EPIPE.
    drop(child.stdout.take());
    drop(child.stderr.take());
    assert_eq!(client.handshake(), 4 << 20);
    client.request(CMD_WRITE, 0, 4, &[1, 2, 3, 4]);
    assert_eq!(client.request(CMD_READ, 0, 4, &[]), [1, 2, 3, 4]);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
}

/// Removes the NV cache region a default-spec server put on /dev/shm (named
/// in what it printed).
fn remove_nv_region(printed: &str) {
    if let Some(start) = printed.find("/dev/shm/cairn-") {
        let path: String = printed[start..]
            .chars()
            .take_while(|c| !c.is_whitespace())
            .collect();
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn the_default_volume_keeps_its_data_across_sigterm_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cairn-data/cairn.sock");
    let stdout = dir.path().join("stdout.txt");
    let serve = || {
        cairn()
            .arg("serve")
            .current_dir(dir.path())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let tail: Vec<u8> = (0..8192u32).map(|i| (i % 13) as u8 + 1).collect();

    let child = serve();
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 1 << 30, "the default volume is 1 GiB");
    client.request(CMD_WRITE, 5 << 20, data.len() as u32, &data);
    client.request(CMD_FLUSH, 0, 0, &[]);
    // Acknowledged but never flushed by the client: a graceful stop keeps it.
    client.request(CMD_WRITE, (1 << 30) - 8192, tail.len() as u32, &tail);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
    let printed = std::fs::read_to_string(&stdout).unwrap();
    let cleanup = Cleanup(printed.clone());
    assert!(
        printed.contains("log disk") && printed.contains("nbdinfo"),
        "{printed}"
    );
    assert!(dir.path().join("cairn-data/disk.img").exists());
    assert!(
        dir.path().join("cairn-data/log.clean").exists(),
        "closed cleanly"
    );

    let child = serve();
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 1 << 30);
    assert_eq!(
        client.request(CMD_READ, 5 << 20, data.len() as u32, &[]),
        data
    );
    assert_eq!(
        client.request(CMD_READ, (1 << 30) - 8192, tail.len() as u32, &[]),
        tail
    );
    assert!(
        !dir.path().join("cairn-data/log.clean").exists(),
        "open again"
    );
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
    drop(cleanup);
}

struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_nv_region(&self.0);
    }
}

#[test]
fn the_default_spec_prints_and_serves_from_a_config_file() {
    let output = cairn()
        .args(["serve", "--print-default-config"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("kind = \"log\"") && text.contains("[[export]]"),
        "{text}"
    );
    // The same spec from a file, small, with its NV cache in the data dir;
    // data_dir is relative to the file.
    let dir = tempfile::tempdir().unwrap();
    let small = text
        .replace("size = \"1GiB\"", "size = \"16MiB\"")
        .replace("size = \"1280MiB\"", "size = \"24MiB\"")
        .replace(
            "nv_cache = { size = \"64MiB\" }",
            "nv_cache = { path = \"log.nv\", size = \"4MiB\" }",
        );
    assert_ne!(small, text);
    let config = dir.path().join("conf/small.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, small).unwrap();
    let socket = dir.path().join("s.sock");
    let child = cairn()
        .args(["serve", "--quiet", "--config"])
        .arg(&config)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .spawn()
        .unwrap();
    let mut client = connect(&socket);
    assert_eq!(client.handshake(), 16 << 20);
    client.request(CMD_WRITE, 0, 4, &[1, 2, 3, 4]);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
    assert!(dir.path().join("conf/cairn-data/disk.img").exists());
    assert!(dir.path().join("conf/cairn-data/log.nv").exists());
}

#[test]
fn bad_specs_are_clear_errors_naming_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let spec = "[[export]]\nname = \"x\"\ndevice = \"log\"\n\
                [device.log]\nkind = \"log\"\nover = \"f\"\n\
                [device.f]\nkind = \"file\"\npath = \"f.img\"\nsize = \"8MiB\"\n";
    let unknown = write(
        "unknown.toml",
        &spec.replace("kind = \"file\"", "kind = \"file\"\nsyze = 1"),
    );
    let missing = write(
        "missing.toml",
        &spec.replace("over = \"f\"", "over = \"g\""),
    );
    let level = write("level.toml", &format!("log_level = \"loud\"\n{spec}"));
    let foreign = write("foreign.toml", spec);
    std::fs::create_dir_all(dir.path().join("cairn-data")).unwrap();
    std::fs::write(dir.path().join("cairn-data/f.img"), b"not a cairn disk").unwrap();
    for (path, expected) in [
        (&unknown, &["unknown.toml", "syze"][..]),
        (&missing, &["missing.toml", "device.log.over", "\"g\""]),
        (
            &foreign,
            &[
                "foreign.toml",
                "device.log.over",
                "f.img",
                "refusing to format",
            ],
        ),
        (&level, &["level.toml", "log_level", "\"loud\""]),
        (&dir.path().join("absent.toml"), &["absent.toml"]),
    ] {
        let output = cairn()
            .arg("serve")
            .arg("--config")
            .arg(path)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{}", path.display());
        let stderr = String::from_utf8_lossy(&output.stderr);
        for word in expected {
            assert!(
                stderr.contains(word),
                "{}: {word:?} missing: {stderr}",
                path.display()
            );
        }
    }
    assert!(
        std::fs::read(dir.path().join("cairn-data/f.img")).unwrap() == b"not a cairn disk",
        "the foreign file is left as it was"
    );
}
