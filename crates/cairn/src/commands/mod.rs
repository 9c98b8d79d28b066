//! One module per `cairn` command: its clap flags, their validation, and the run.

pub mod analyze;
pub mod bench;
pub mod check;
pub mod completions;
pub mod control;
pub mod man;
pub mod mrc;
pub mod reproduce;
pub mod serve;
pub mod sim;
pub mod stats;
pub mod trace;
