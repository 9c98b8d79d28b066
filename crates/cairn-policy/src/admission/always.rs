//! `always`: admit every miss (a cache with no filter; the default).
//!
//! Open CAS's `always` promotion policy. [`AdmissionConfig::wrap`] returns the
//! policy itself for it, unwrapped, so a run with `always` is the unfiltered
//! run, access for access.
//!
//! [`AdmissionConfig::wrap`]: super::AdmissionConfig::wrap

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy};
use crate::Access;

/// `always` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlwaysConfig {}

/// Admits everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct Always;

impl Admission for Always {
    fn name(&self) -> &'static str {
        "always"
    }

    fn admit(&mut self, _access: &Access, _occupancy: Occupancy) -> bool {
        true
    }
}
