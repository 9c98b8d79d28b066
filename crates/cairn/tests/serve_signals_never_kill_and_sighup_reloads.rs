//! Signals to a running `cairn serve`: SIGHUP, SIGUSR1, SIGUSR2 and SIGPIPE
//! never stop it (the default action of the first three is to kill the
//! process, and SIGPIPE's too unless ignored) and each is logged; SIGHUP
//! re-reads the spec's `log_level` and the TLS certificates (new connections
//! get the new certificate; a failed reload keeps the old one); SIGTERM then
//! stops it with status 0, the data written before still readable up to
//! the end.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_nbd::proto::{CMD_DISC, CMD_READ, CMD_WRITE};
use common::{Raw, cairn, certificates, connect, terminate, tool};

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name}");
}

/// Waits up to 10 s for the server's log to hold `text` `times` times.
fn wait_for_log(log: &Path, text: &str, times: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logged = std::fs::read_to_string(log).unwrap();
        if logged.matches(text).count() >= times {
            return logged;
        }
        assert!(
            Instant::now() < deadline,
            "{text:?} not logged {times} times:\n{logged}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A new connection writes `byte` at `offset` and reads it back; the old
/// connection reads it too.
fn still_serves(socket: &Path, old: &mut Raw<UnixStream, UnixStream>, offset: u64, byte: u8) {
    let mut client = connect(socket);
    assert_eq!(client.handshake(), 8 << 20);
    client.request(CMD_WRITE, offset, 4096, &[byte; 4096]);
    assert_eq!(client.request(CMD_READ, offset, 4096, &[]), [byte; 4096]);
    client.request(CMD_DISC, 0, 0, &[]);
    assert_eq!(old.request(CMD_READ, offset, 4096, &[]), [byte; 4096]);
}

fn spec(socket: &Path, log_level: &str, size: &str) -> String {
    format!(
        "listen = \"unix:{}\"\nlog_level = \"{log_level}\"\n\
         [[export]]\nname = \"cairn\"\ndevice = \"m\"\n\
         [device.m]\nkind = \"memory\"\nsize = \"{size}\"\n",
        socket.display()
    )
}

#[test]
fn sighup_usr1_usr2_and_pipe_are_logged_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cairn.sock");
    let config = dir.path().join("spec.toml");
    let log = dir.path().join("stderr.log");
    std::fs::write(&config, spec(&socket, "info", "8MiB")).unwrap();
    let child = cairn()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut old = connect(&socket);
    assert_eq!(old.handshake(), 8 << 20);

    for (i, (name, logged)) in [
        (
            "HUP",
            "SIGHUP: nothing else to reload; restart to apply spec changes",
        ),
        ("USR1", "SIGUSR1: ignored"),
        ("USR2", "SIGUSR2: ignored"),
    ]
    .into_iter()
    .enumerate()
    {
        signal(&child, name);
        wait_for_log(&log, logged, 1);
        still_serves(&socket, &mut old, i as u64 * 4096, i as u8 + 1);
    }
    // SIGPIPE is ignored: nothing to log, the server must simply be there.
    signal(&child, "PIPE");
    std::thread::sleep(Duration::from_millis(200));
    still_serves(&socket, &mut old, 3 * 4096, 4);

    // The spec's log_level is re-read: at warn, SIGUSR1 (logged at info) is
    // no longer said; back at info it is.
    std::fs::write(&config, spec(&socket, "warn", "8MiB")).unwrap();
    signal(&child, "HUP");
    wait_for_log(&log, "SIGHUP: log level \"warn\"", 1);
    signal(&child, "USR1");
    still_serves(&socket, &mut old, 4 * 4096, 5);
    std::fs::write(&config, spec(&socket, "info", "8MiB")).unwrap();
    signal(&child, "HUP");
    wait_for_log(&log, "SIGHUP: log level \"info\"", 2);
    signal(&child, "USR1");
    let logged = wait_for_log(&log, "SIGUSR1: ignored", 2);
    assert_eq!(logged.matches("SIGUSR1: ignored").count(), 2, "{logged}");

    // A bad log_level, then a change that needs a restart: logged, ignored.
    std::fs::write(&config, spec(&socket, "loud", "8MiB")).unwrap();
    signal(&child, "HUP");
    wait_for_log(&log, "log level unchanged", 1);
    std::fs::write(&config, spec(&socket, "info", "16MiB")).unwrap();
    signal(&child, "HUP");
    wait_for_log(&log, "changed beyond log_level", 1);
    still_serves(&socket, &mut old, 5 * 4096, 6);

    old.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains("panicked"), "{logged}");
}

#[test]
fn sighup_without_a_spec_file_says_where_the_level_comes_from() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cairn.sock");
    let log = dir.path().join("stderr.log");
    let child = cairn()
        .args(["serve", "--memory", "8MiB", "--listen"])
        .arg(format!("unix:{}", socket.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut old = connect(&socket);
    assert_eq!(old.handshake(), 8 << 20);
    signal(&child, "HUP");
    wait_for_log(&log, "SIGHUP: TLS is off", 1);
    wait_for_log(&log, "log level comes from the command line", 1);
    signal(&child, "PIPE");
    still_serves(&socket, &mut old, 0, 9);
    old.request(CMD_DISC, 0, 0, &[]);
    terminate(child);
}

/// Certificates A at start; B's files copied over A's and SIGHUP: a client
/// trusting only B's CA fails before and gets in after, one trusting only
/// A's fails after; a broken key file at the next SIGHUP keeps B. The client
/// is qemu-io, which checks the server's certificate against its CA (nbdinfo
/// 1.14 over a Unix socket does not).
#[test]
fn sighup_reloads_the_tls_certificates() {
    if tool("qemu-io").is_none() {
        eprintln!("SKIPPED: qemu-io is not installed (test.sh installs qemu-utils)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (Some(a), Some(b)) = (
        certificates(&dir.path().join("a")),
        certificates(&dir.path().join("b")),
    ) else {
        return;
    };
    let pki = dir.path().join("pki");
    let trust = |name: &str, from: &Path| {
        let trusting = dir.path().join(name);
        std::fs::create_dir_all(&trusting).unwrap();
        std::fs::copy(from.join("ca-cert.pem"), trusting.join("ca-cert.pem")).unwrap();
        trusting
    };
    let (trust_a, trust_b) = (trust("trust-a", &a), trust("trust-b", &b));
    let install = |from: &Path| {
        std::fs::create_dir_all(&pki).unwrap();
        for file in ["server-cert.pem", "server-key.pem", "ca-cert.pem"] {
            std::fs::copy(from.join(file), pki.join(file)).unwrap();
        }
    };
    install(&a);
    let socket = dir.path().join("cairn.sock");
    let log = dir.path().join("stderr.log");
    let child = cairn()
        .args([
            "serve",
            "--memory",
            "8MiB",
            "--tls",
            "require",
            "--tls-certificates",
        ])
        .arg(&pki)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    drop(connect(&socket)); // waits until it listens
    let client = |trusting: &Path| {
        Command::new("qemu-io")
            .arg("--object")
            .arg(format!(
                "tls-creds-x509,id=tls0,dir={},endpoint=client",
                trusting.display()
            ))
            .arg("--image-opts")
            .arg(format!(
                "driver=nbd,server.type=unix,server.path={},export=cairn,\
                 tls-creds=tls0,tls-hostname=localhost",
                socket.display()
            ))
            .args(["-c", "write -P 0x5a 0 4k", "-c", "read -P 0x5a 0 4k"])
            .output()
            .unwrap()
    };
    assert!(client(&trust_a).status.success(), "A is served at start");
    assert!(!client(&trust_b).status.success(), "B before the reload");

    install(&b);
    signal(&child, "HUP");
    wait_for_log(&log, "SIGHUP: TLS certificates reloaded", 1);
    let output = client(&trust_b);
    assert!(
        output.status.success(),
        "B after the reload: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!client(&trust_a).status.success(), "A after the reload");

    std::fs::write(pki.join("server-key.pem"), "not a key").unwrap();
    signal(&child, "HUP");
    wait_for_log(&log, "not reloaded, keeping the old ones", 1);
    assert!(
        client(&trust_b).status.success(),
        "B kept after a failed reload"
    );
    terminate(child);
}
