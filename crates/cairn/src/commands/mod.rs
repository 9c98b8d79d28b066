//! One module per `cairn` command: its clap flags, their validation, and the run.

pub mod bench;
pub mod check;
pub mod control;
pub mod mrc;
pub mod reproduce;
pub mod serve;
pub mod sim;
pub mod stats;
pub mod trace;
