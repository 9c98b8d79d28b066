//! [`ConfigError`]: why a policy configuration cannot be built. Beneath the
//! policies that return it and the [`PolicyConfig`](crate::PolicyConfig)
//! that names every policy.

/// A policy configuration that cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A parameter is outside the range the policy accepts.
    #[error("{policy}: `{parameter}` = {value} is out of range: {expected}")]
    OutOfRange {
        /// The policy's name.
        policy: &'static str,
        /// The parameter's name, as in the config file.
        parameter: &'static str,
        /// The value given, as text.
        value: String,
        /// What would be accepted.
        expected: &'static str,
    },
    /// The capacity is too small for the policy's structure (e.g. a segment
    /// would be empty).
    #[error("{policy}: capacity {capacity} is too small: {reason}")]
    CapacityTooSmall {
        /// The policy's name.
        policy: &'static str,
        /// The capacity given.
        capacity: u64,
        /// Why it does not suffice.
        reason: &'static str,
    },
}
