//! The serve side of the control socket: what `cairn stats` and `cairn ctl`
//! reach in a running `cairn serve` (the socket itself is
//! `cairn_control::ControlSocket`).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{Context, Result};
use cairn_control::{ControlSocket, ExportSnapshot, Handler, Snapshot};
use cairn_nbd::Server;
use cairn_store::Volume;
use cairn_store::stats::LayerCommand;

/// The control socket's file name in the data directory.
pub const SOCKET_NAME: &str = "cairn.ctl";

/// The default control socket of a server whose data directory is
/// `data_dir`.
pub fn default_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_NAME)
}

/// A running server as its control socket sees it.
pub struct Served<'a> {
    pub server: &'a Server,
    pub volume: &'a Volume,
    pub started: Instant,
}

impl Handler for Served<'_> {
    fn stats(&self) -> Snapshot {
        let exports = self
            .volume
            .exports()
            .iter()
            .enumerate()
            .map(|(index, export)| ExportSnapshot {
                name: export.name.clone(),
                size_bytes: export.device.len(),
                read_only: self.server.exports()[index].read_only,
                io: self.server.export_io(index).unwrap_or_default(),
                layers: self.volume.stats(index),
            })
            .collect();
        Snapshot {
            pid: std::process::id(),
            uptime_seconds: self.started.elapsed().as_secs_f64(),
            counting: self.server.counting(),
            exports,
        }
    }

    fn control(
        &self,
        export: &str,
        layer: Option<&str>,
        command: &LayerCommand,
    ) -> Result<Vec<String>, String> {
        self.volume
            .control(export, layer, command)
            .map_err(|e| e.to_string())
    }
}

/// Binds the control socket: `explicit` (`--control PATH`; failing is an
/// error), else `default` (a failure there is a warning: the server runs
/// without one), else none.
pub fn bind(explicit: Option<&Path>, default: Option<&Path>) -> Result<Option<ControlSocket>> {
    if let Some(path) = explicit {
        let socket = ControlSocket::bind(path).context("--control")?;
        return Ok(Some(socket));
    }
    let Some(path) = default else {
        return Ok(None);
    };
    match ControlSocket::bind(path) {
        Ok(socket) => Ok(Some(socket)),
        Err(e) => {
            tracing::warn!("{e}; serving without a control socket (cairn stats will not reach it)");
            Ok(None)
        }
    }
}

/// Runs `serve` while `socket` (if any) answers control requests for
/// `served`; the socket stops when `serve` returns.
pub fn run_beside<T>(
    socket: Option<&ControlSocket>,
    served: &Served<'_>,
    serve: impl FnOnce() -> T,
) -> T {
    let Some(socket) = socket else {
        return serve();
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let control = std::thread::Builder::new()
            .name("control".into())
            .spawn_scoped(scope, || socket.serve(served, &stop));
        if let Err(e) = &control {
            tracing::warn!("cannot start the control socket's thread: {e}");
        }
        let result = serve();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        result
    })
}
