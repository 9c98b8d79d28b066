//! Errors of simulation: each says which configuration or input is at fault.

use cairn_policy::ConfigError;
use cairn_trace::TraceError;

/// A simulation that cannot run or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A policy configuration cannot be built at its capacity.
    #[error("configuration `{label}`: {source}")]
    Policy {
        /// The configuration's label, as given by the caller.
        label: String,
        /// Why the policy refused.
        #[source]
        source: ConfigError,
    },
    /// A cache size cannot be parsed or resolved.
    #[error("cache size `{text}`: {reason}")]
    Size {
        /// The size as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The cost model does not cover every cost group the group map produces.
    #[error(
        "cost model has {have} group(s) but the group map produces {needed}; \
         add cost groups or simplify the group map"
    )]
    CostGroups {
        /// Groups the group map can produce.
        needed: usize,
        /// Groups the cost model defines.
        have: usize,
    },
    /// A cost or group parameter is outside its range.
    #[error("cost model: `{parameter}` = {value}: {expected}")]
    CostParameter {
        /// The parameter's name, as in the config file.
        parameter: &'static str,
        /// The value given, as text.
        value: String,
        /// What would be accepted.
        expected: &'static str,
    },
    /// A trace cannot be analyzed: no requests, or a window too short.
    #[error("trace analysis: {reason}")]
    Analysis {
        /// What is wrong, and what to do.
        reason: String,
    },
    /// A configuration combines what the simulator does not model together.
    #[error("configuration `{label}`: {what} is not modelled")]
    Unsupported {
        /// The configuration's label.
        label: String,
        /// What it asked for.
        what: &'static str,
    },
    /// Nothing to simulate.
    #[error("no configurations to simulate")]
    NoConfigurations,
    /// A worker thread panicked (a bug in a policy); the run is void.
    #[error("worker thread panicked while replaying `{label}`; this is a bug in the policy")]
    WorkerPanicked {
        /// A configuration the worker owned.
        label: String,
    },
}

/// Result of simulation operations.
pub type Result<T, E = SimError> = std::result::Result<T, E>;
