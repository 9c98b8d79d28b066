//! Trace-driven cache simulation for Cairn.
