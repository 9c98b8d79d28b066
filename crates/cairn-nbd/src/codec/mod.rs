//! The NBD protocol as pure functions over bytes: no sockets, no threads.
//!
//! [`handshake`] is the server side of fixed-newstyle option haggling as a
//! state machine; [`transmission`] parses request headers, validates them
//! against the negotiated session and builds reply headers. Both have
//! client-side encoders/decoders too, which the tests, the fuzz targets and
//! the in-test raw clients use.

pub mod handshake;
pub mod transmission;

#[cfg(test)]
mod tests;
