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

/// The checks most configs make of their knobs, each a clear
/// [`ConfigError::OutOfRange`] naming the policy and the knob.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Knobs(pub &'static str);

impl Knobs {
    fn out_of_range(
        self,
        parameter: &'static str,
        value: &dyn ToString,
        expected: &'static str,
    ) -> ConfigError {
        ConfigError::OutOfRange {
            policy: self.0,
            parameter,
            value: value.to_string(),
            expected,
        }
    }

    /// `value` in (0, 1).
    pub fn open_fraction(self, parameter: &'static str, value: f64) -> Result<(), ConfigError> {
        if value > 0.0 && value < 1.0 {
            Ok(())
        } else {
            Err(self.out_of_range(parameter, &value, "a fraction in (0, 1)"))
        }
    }

    /// `value` in [0, 1].
    pub fn fraction(self, parameter: &'static str, value: f64) -> Result<(), ConfigError> {
        if (0.0..=1.0).contains(&value) {
            Ok(())
        } else {
            Err(self.out_of_range(parameter, &value, "a fraction in [0, 1]"))
        }
    }

    /// `value` in `1..=max`; `expected` says so in words ("1 to 65535").
    pub fn one_to(
        self,
        parameter: &'static str,
        value: u32,
        max: u32,
        expected: &'static str,
    ) -> Result<(), ConfigError> {
        if (1..=max).contains(&value) {
            Ok(())
        } else {
            Err(self.out_of_range(parameter, &value, expected))
        }
    }

    /// `value` in `min..=max`; `expected` says so in words ("2 to 1024").
    pub fn within(
        self,
        parameter: &'static str,
        value: u32,
        min: u32,
        max: u32,
        expected: &'static str,
    ) -> Result<(), ConfigError> {
        if (min..=max).contains(&value) {
            Ok(())
        } else {
            Err(self.out_of_range(parameter, &value, expected))
        }
    }

    /// `value` in (0, 1]: a rate that must do something.
    pub fn rate(self, parameter: &'static str, value: f64) -> Result<(), ConfigError> {
        if value > 0.0 && value <= 1.0 {
            Ok(())
        } else {
            Err(self.out_of_range(parameter, &value, "above 0, at most 1"))
        }
    }

    /// The knobs of S3-FIFO's probationary front, shared by `s3fifo`,
    /// `qdlp`, `s3lru` and `clock2qplus`: the small FIFO's share in (0, 1),
    /// the ghost's in [0, 1], hits to move to main 1 to 65535.
    pub fn s3fifo_front(
        self,
        small_size_ratio: f64,
        ghost_size_ratio: f64,
        move_to_main_threshold: u32,
    ) -> Result<(), ConfigError> {
        self.open_fraction("small_size_ratio", small_size_ratio)?;
        self.fraction("ghost_size_ratio", ghost_size_ratio)?;
        self.one_to(
            "move_to_main_threshold",
            move_to_main_threshold,
            u32::from(u16::MAX),
            "1 to 65535",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_name_the_policy_the_knob_and_the_range() {
        let knobs = Knobs("p");
        assert!(knobs.open_fraction("a", 0.5).is_ok() && knobs.fraction("a", 0.0).is_ok());
        for bad in [0.0, 1.0, f64::NAN] {
            assert!(knobs.open_fraction("a", bad).is_err(), "{bad}");
        }
        assert!(knobs.fraction("a", -0.1).is_err() && knobs.fraction("a", f64::NAN).is_err());
        assert!(knobs.one_to("n", 15, 15, "1 to 15").is_ok());
        assert_eq!(
            knobs.one_to("n", 0, 15, "1 to 15").unwrap_err().to_string(),
            "p: `n` = 0 is out of range: 1 to 15"
        );
        assert!(
            knobs.within("n", 2, 2, 4, "2 to 4").is_ok() && knobs.within("n", 4, 2, 4, "").is_ok()
        );
        assert!(knobs.within("n", 1, 2, 4, "").is_err() && knobs.within("n", 5, 2, 4, "").is_err());
        assert!(knobs.rate("r", 1.0).is_ok() && knobs.rate("r", 1e-9).is_ok());
        for bad in [0.0, 1.5, f64::NAN] {
            assert!(knobs.rate("r", bad).is_err(), "{bad}");
        }
        let front = |small, ghost, threshold| knobs.s3fifo_front(small, ghost, threshold);
        assert!(front(0.1, 0.9, 1).is_ok() && front(0.1, 0.0, 65535).is_ok());
        assert!(front(1.0, 0.9, 1).is_err() && front(0.1, 1.1, 1).is_err());
        assert!(front(0.1, 0.9, 0).is_err() && front(0.1, 0.9, 65536).is_err());
    }
}
