//! The control socket answers bad input with a clear error and keeps
//! serving: garbage, an unknown request, an oversized frame, and a client
//! of another uid. Guards the promise that nothing a client sends on the
//! control socket stops the server or reaches another client, and that the
//! socket is its owner's only (mode 0600, peer credentials checked).
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_control::limits::REQUEST_MAX_BYTES;
use cairn_control::{Client, ControlSocket, Handler, Reply, Request, Snapshot};
use cairn_store::stats::LayerCommand;

struct Fake;

impl Handler for Fake {
    fn stats(&self) -> Snapshot {
        Snapshot {
            pid: 42,
            ..Snapshot::default()
        }
    }
    fn control(
        &self,
        export: &str,
        _layer: Option<&str>,
        command: &LayerCommand,
    ) -> Result<Vec<String>, String> {
        if export == "e" && *command == LayerCommand::Flush {
            Ok(vec!["flushed".into()])
        } else {
            Err(format!("no export {export:?}"))
        }
    }
}

fn error_of(reply: Reply) -> String {
    match reply {
        Reply::Error { message } => message,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

fn stats_work(client: &mut Client) {
    match client.request(&Request::Stats).unwrap() {
        Reply::Stats(snapshot) => assert_eq!(snapshot.pid, 42),
        other => panic!("expected stats, got {other:?}"),
    }
}

/// Sets its flag when dropped.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `test` against a control socket served by [`Fake`] (owned by
/// `owner`, default: this process's uid).
fn with_socket(owner: Option<u32>, test: impl FnOnce(&std::path::Path)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.ctl");
    let mut socket = ControlSocket::bind(&path).unwrap();
    if let Some(owner) = owner {
        socket = socket.with_owner(owner);
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| socket.serve(&Fake, &stop));
        // Stops the server even when the test fails (else the scope would
        // wait for it forever).
        let _stop = Stop(&stop);
        test(&path);
    });
    drop(socket);
    assert!(!path.exists(), "the socket file is removed at the end");
}

#[test]
fn the_socket_is_owner_only() {
    with_socket(None, |path| {
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
        let mut client = Client::connect(path).unwrap();
        stats_work(&mut client);
    });
}

#[test]
fn garbage_and_unknown_requests_get_an_error_and_the_connection_goes_on() {
    with_socket(None, |path| {
        let mut client = Client::connect(path).unwrap();
        let message = error_of(client.request_raw(b"\xff\x00 not json").unwrap());
        assert!(message.contains("not JSON"), "{message}");
        let message = error_of(client.request_raw(br#"{"request":"reboot"}"#).unwrap());
        assert!(message.contains("unknown request \"reboot\""), "{message}");
        let message = error_of(
            client
                .request_raw(br#"{"request":"ctl","export":"e","command":"explode"}"#)
                .unwrap(),
        );
        assert!(message.contains("explode"), "{message}");
        let message = error_of(
            client
                .request(&Request::Ctl {
                    export: "nope".into(),
                    layer: None,
                    command: LayerCommand::Flush,
                })
                .unwrap(),
        );
        assert!(message.contains("no export \"nope\""), "{message}");
        // The same connection still serves.
        stats_work(&mut client);
        let done = client
            .request(&Request::Ctl {
                export: "e".into(),
                layer: None,
                command: LayerCommand::Flush,
            })
            .unwrap();
        assert_eq!(
            done,
            Reply::Done {
                lines: vec!["flushed".into()]
            }
        );
    });
}

#[test]
fn an_oversized_frame_is_refused_unread_and_the_server_goes_on() {
    with_socket(None, |path| {
        let mut client = Client::connect(path).unwrap();
        let length = REQUEST_MAX_BYTES + 1;
        client.stream().write_all(&length.to_le_bytes()).unwrap();
        let message = error_of(client.read_reply().unwrap());
        assert!(
            message.contains(&format!("{length} bytes is over the limit")),
            "{message}"
        );
        // That connection is closed; a new one is served.
        assert!(client.request(&Request::Stats).is_err());
        stats_work(&mut Client::connect(path).unwrap());
    });
}

#[test]
fn a_client_of_another_uid_is_refused_and_the_server_goes_on() {
    let me = rustix::process::geteuid().as_raw();
    // The socket's owner stands for another user: this process is then
    // the stranger.
    with_socket(Some(me + 1), |path| {
        let mut client = Client::connect(path).unwrap();
        let message = error_of(client.read_reply().unwrap());
        assert!(
            message.contains(&format!("runs as uid {me}"))
                && message.contains(&format!("only the server's owner (uid {})", me + 1)),
            "{message}"
        );
        assert!(client.request(&Request::Stats).is_err(), "disconnected");
    });
    // And the owner is served (the same socket code, owner = me).
    with_socket(Some(me), |path| {
        let mut client = Client::connect(path).unwrap();
        stats_work(&mut client);
    });
}
