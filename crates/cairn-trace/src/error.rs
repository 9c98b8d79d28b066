//! Errors of trace reading and writing: each names the file and the record.

use std::path::PathBuf;

/// Where in a trace something went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// A 1-based line number of a text trace.
    Line(u64),
    /// A 0-based record number of a binary trace.
    Record(u64),
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Line(n) => write!(f, "line {n}"),
            Position::Record(n) => write!(f, "record {n}"),
        }
    }
}

/// A trace that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A record is malformed.
    #[error("{}: {position}: field `{field}`: {reason}", path.display())]
    Malformed {
        /// The trace file.
        path: PathBuf,
        /// Line or record.
        position: Position,
        /// The field at fault, as the format names it.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The file ends inside a record.
    #[error("{}: {position}: truncated: {got} of {want} bytes", path.display())]
    Truncated {
        /// The trace file.
        path: PathBuf,
        /// The record that is cut short.
        position: Position,
        /// Bytes present.
        got: usize,
        /// Bytes a record needs.
        want: usize,
    },
    /// The format could not be determined or is not supported.
    #[error("{}: {reason}", path.display())]
    Format {
        /// The trace file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A generator or reader configuration is invalid.
    #[error("invalid trace configuration: {reason}")]
    Config {
        /// What is wrong, naming the field.
        reason: String,
    },
}

/// Result of trace operations.
pub type Result<T, E = TraceError> = std::result::Result<T, E>;
