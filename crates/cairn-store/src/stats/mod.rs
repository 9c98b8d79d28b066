//! Live statistics and runtime control of the layers of a stack, through one
//! trait: [`Layer`].
//!
//! Every layer with something to report (the block cache, the tier, the log
//! disk, the object volume) implements [`Layer::stats`], which appends its
//! counters to a [`LayerStats`] as named [`Metric`]s, and may implement
//! [`Layer::control`] for the [`LayerCommand`]s it supports (the others
//! answer [`LayerCommandError::NotSupported`]). A [`crate::Volume`] keeps
//! each export's layers, top of the stack first, and walks them
//! ([`crate::Volume::stats`], [`crate::Volume::control`]); `cairn stats` and
//! `cairn ctl` read them over the server's control socket.
//!
//! A snapshot is taken off the I/O path: the layers' counters are relaxed
//! atomics or fields behind locks the layers already take, read when asked.
//! Names follow one convention so that an exporter (Prometheus) can map them
//! mechanically: lower snake case, unit last (`_bytes`, `_blocks`, `_ns`),
//! a [`MetricKind::Counter`] only ever grows, a [`MetricKind::Gauge`] is a
//! level now.
//!
//! Each layer's latency is timed outside it, by the [`Timed`] device the
//! volume puts in front of it ([`timed`]), into [`histogram`]'s lock-free
//! histograms; a snapshot carries it as [`LayerStats::latency`].

pub mod histogram;
mod layers;
pub mod timed;

pub use timed::{LayerLatency, LayerTimes, Timed};

use serde::{Deserialize, Serialize};

/// Whether a metric only grows (a count of events since the server
/// started, or since the image was formatted where the layer says so) or is
/// a level now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    /// Only grows.
    Counter,
    /// A level now (may go down).
    Gauge,
}

/// A metric's value: a count (exact), or a ratio or estimate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// A whole number, exact.
    Integer(u64),
    /// A ratio, a mean or an estimate.
    Real(f64),
}

impl Value {
    /// The value as a float (exact below 2^53).
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Integer(v) => v as f64,
            Value::Real(v) => v,
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Integer(v) => write!(f, "{v}"),
            Value::Real(v) if v.is_finite() && v.fract() != 0.0 && v.abs() < 1e6 => {
                write!(f, "{v:.3}")
            }
            Value::Real(v) => write!(f, "{v}"),
        }
    }
}

/// One named value of a layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// Lower snake case, unit last (`hit_bytes`, `dirty_blocks`).
    pub name: String,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The value at the snapshot.
    pub value: Value,
    /// One line: what it counts.
    pub help: String,
}

/// A group of metrics inside a layer that share a label (a cost group of
/// the block cache: device × access pattern).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupStats {
    /// The group's label (`device0-sequential`).
    pub name: String,
    /// Its metrics.
    pub metrics: Vec<Metric>,
}

/// One layer's snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerStats {
    /// The layer's name in the volume spec (`cache` for `[devices.cache]`).
    pub name: String,
    /// What it is: `cache`, `tier`, `log`, `objects`.
    pub kind: String,
    /// Its metrics.
    pub metrics: Vec<Metric>,
    /// Labelled groups of metrics (the block cache's cost groups).
    pub groups: Vec<GroupStats>,
    /// The layer's service times (reads, writes, flushes), the layers
    /// below it included; empty when the layer is not timed.
    #[serde(default)]
    pub latency: LayerLatency,
}

impl LayerStats {
    /// An empty snapshot of the layer `name` of kind `kind`.
    pub fn new(name: &str, kind: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind: kind.to_owned(),
            metrics: Vec::new(),
            groups: Vec::new(),
            latency: LayerLatency::default(),
        }
    }

    /// The metric called `name`, if the layer reported it.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.metrics
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.value)
    }
}

/// Appends metrics to a list (a layer's, or a group's).
pub struct MetricSink<'a>(pub &'a mut Vec<Metric>);

impl MetricSink<'_> {
    fn push(&mut self, name: &str, kind: MetricKind, value: Value, help: &str) {
        self.0.push(Metric {
            name: name.to_owned(),
            kind,
            value,
            help: help.to_owned(),
        });
    }

    /// A count that only grows.
    pub fn counter(&mut self, name: &str, value: u64, help: &str) {
        self.push(name, MetricKind::Counter, Value::Integer(value), help);
    }

    /// A level now.
    pub fn gauge(&mut self, name: &str, value: u64, help: &str) {
        self.push(name, MetricKind::Gauge, Value::Integer(value), help);
    }

    /// A ratio, mean or estimate now (a gauge); `None` (no data yet) is left
    /// out.
    pub fn real(&mut self, name: &str, value: Option<f64>, help: &str) {
        if let Some(value) = value {
            self.push(name, MetricKind::Gauge, Value::Real(value), help);
        }
    }
}

/// A runtime command for a layer (`cairn ctl EXPORT COMMAND`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum LayerCommand {
    /// Write every dirty block back to the device below, and make it
    /// durable.
    Flush,
    /// Drop every clean block the layer caches (the data stays below).
    DropClean,
    /// Switch the cache mode (`write-through`, `write-back`,
    /// `write-around`, `pass-through`).
    Mode {
        /// The mode's name.
        mode: String,
    },
    /// Write every dirty block back and detach the cache: the layer passes
    /// everything through from now on.
    Detach,
}

impl LayerCommand {
    /// The command as typed (`drop-clean`, `mode write-back`).
    pub fn name(&self) -> String {
        match self {
            LayerCommand::Flush => "flush".into(),
            LayerCommand::DropClean => "drop-clean".into(),
            LayerCommand::Mode { mode } => format!("mode {mode}"),
            LayerCommand::Detach => "detach".into(),
        }
    }
}

/// Why a layer did not carry out a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayerCommandError {
    /// The layer has no such operation.
    #[error("{command} is not supported by this layer ({kind}): {why}")]
    NotSupported {
        /// The command, as typed.
        command: String,
        /// The layer's kind.
        kind: String,
        /// What the layer does instead, or when it will.
        why: String,
    },
    /// No layer of the export's stack has the operation.
    #[error("{command} is not supported by any layer of export {export:?}: {why}")]
    NotSupportedByAny {
        /// The command, as typed.
        command: String,
        /// The export.
        export: String,
        /// Each layer and why not.
        why: String,
    },
    /// No export or layer of that name.
    #[error("{0}")]
    NotFound(String),
    /// The argument is not one the layer takes.
    #[error("{0}")]
    Invalid(String),
    /// The operation ran and failed (a device error).
    #[error("{0}")]
    Failed(String),
}

/// A layer of a stack, as statistics and runtime control see it.
pub trait Layer: Send + Sync {
    /// What it is: `cache`, `tier`, `log`, `objects`.
    fn kind(&self) -> &'static str;
    /// Appends the layer's metrics (and groups) to `out`. Called off the I/O
    /// path; may take the layer's locks briefly and allocate.
    fn stats(&self, out: &mut LayerStats);
    /// Carries out `command`; a line saying what was done. The default
    /// supports nothing.
    fn control(&self, command: &LayerCommand) -> Result<String, LayerCommandError> {
        Err(not_supported(
            self.kind(),
            command,
            "it has no runtime commands",
        ))
    }
}

/// The [`LayerCommandError::NotSupported`] of `command` on a layer of `kind`.
pub fn not_supported(kind: &str, command: &LayerCommand, why: &str) -> LayerCommandError {
    LayerCommandError::NotSupported {
        command: command.name(),
        kind: kind.to_owned(),
        why: why.to_owned(),
    }
}
