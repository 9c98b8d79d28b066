//! The serve side of the control socket and the metrics listener: what
//! `cairn stats`, `cairn ctl`, Prometheus and the dashboard reach in a
//! running `cairn serve` (the listeners themselves are
//! `cairn_control::ControlSocket` and `cairn_control::MetricsListener`;
//! both answer from the same [`Served::stats`] snapshot; `cairn serve
//! --files` has a handler of its own, `serve::files::ServedFiles`).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{Context, Result};
use cairn_control::{ControlSocket, ExportSnapshot, Handler, MetricsListener, Snapshot};
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
            files: Vec::new(),
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

/// What answers beside the NBD server: the control socket and the
/// metrics listener, each if there is one.
pub struct Beside<'a> {
    pub socket: Option<&'a ControlSocket>,
    pub metrics: Option<&'a MetricsListener>,
}

impl Beside<'_> {
    /// Logs where the metrics listener and the control socket answer,
    /// warning when the metrics are reachable from other machines (whoever
    /// reaches them sees `seen`: "every export's name and traffic").
    pub fn log(&self, seen: &str) {
        if let Some(metrics) = self.metrics {
            let address = metrics.address();
            if !address.ip().to_canonical().is_loopback() {
                tracing::warn!(
                    "metrics on {address}, not a loopback address (--metrics-public): whoever \
                     reaches it sees {seen}"
                );
            }
            tracing::info!(
                "metrics at http://{address}/metrics, dashboard at http://{address}/ \
                 (snapshot: /stats.json)"
            );
        }
        if let Some(socket) = self.socket {
            tracing::info!(
                "control socket at {} (cairn stats --socket {0})",
                socket.path().display()
            );
        }
    }

    /// The lines telling a user where to watch the server (`Statistics:`
    /// and `Metrics:`, each ending in a newline); empty with neither.
    pub fn how_to_watch(&self) -> String {
        use std::fmt::Write as _;
        let mut lines = String::new();
        if let Some(socket) = self.socket {
            let _ = writeln!(
                lines,
                "Statistics: cairn stats --socket {}",
                socket.path().display()
            );
        }
        if let Some(metrics) = self.metrics {
            let address = metrics.address();
            let _ = writeln!(
                lines,
                "Metrics: http://{address}/metrics (Prometheus); dashboard: http://{address}/"
            );
        }
        lines
    }
}

/// Runs `serve` while the control socket and the metrics listener (those
/// there are) answer for `served`, each on a thread of its own; they stop
/// when `serve` returns.
pub fn run_beside<T>(beside: &Beside<'_>, served: &dyn Handler, serve: impl FnOnce() -> T) -> T {
    if beside.socket.is_none() && beside.metrics.is_none() {
        return serve();
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        if let Some(socket) = beside.socket {
            let control = std::thread::Builder::new()
                .name("control".into())
                .spawn_scoped(scope, || socket.serve(served, &stop));
            if let Err(e) = &control {
                tracing::warn!("cannot start the control socket's thread: {e}");
            }
        }
        if let Some(metrics) = beside.metrics {
            let thread = std::thread::Builder::new()
                .name("metrics".into())
                .spawn_scoped(scope, || metrics.serve(served, &stop));
            if let Err(e) = &thread {
                tracing::warn!("cannot start the metrics listener's thread: {e}");
            }
        }
        let result = serve();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        result
    })
}
