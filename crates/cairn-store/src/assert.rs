//! Assertions that CI can make hard.
//!
//! `strict_assert!` and `strict_assert_eq!` are `debug_assert!` and
//! `debug_assert_eq!` by default, so a release build pays nothing for them, and
//! `assert!` / `assert_eq!` when cairn-store is built with the `strict-assertions`
//! feature (which `./test.sh` turns on), so the release-mode test run checks them
//! too. Use them for invariants whose check costs more than the hot path should
//! pay in production: an encoder decoding what it just encoded, a structure's
//! `verify` after every change. An invariant that is cheap to check belongs in a
//! plain `assert!`.
//!
//! Pattern: foyer's `foyer-common/src/assert.rs`.

/// `assert!` under the `strict-assertions` feature, `debug_assert!` otherwise.
#[allow(unused_macros, reason = "a layer may use only one of the pair")]
macro_rules! strict_assert {
    ($($arg:tt)*) => {
        if cfg!(feature = "strict-assertions") {
            assert!($($arg)*);
        } else {
            debug_assert!($($arg)*);
        }
    };
}

/// `assert_eq!` under the `strict-assertions` feature, `debug_assert_eq!` otherwise.
#[allow(unused_macros, reason = "a layer may use only one of the pair")]
macro_rules! strict_assert_eq {
    ($($arg:tt)*) => {
        if cfg!(feature = "strict-assertions") {
            assert_eq!($($arg)*);
        } else {
            debug_assert_eq!($($arg)*);
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn strict_assert_passes_on_truth() {
        strict_assert!(1 + 1 == 2, "arithmetic");
        strict_assert_eq!(2 * 2, 4);
    }

    #[test]
    #[cfg(any(debug_assertions, feature = "strict-assertions"))]
    #[should_panic(expected = "checked")]
    fn strict_assert_fails_on_falsehood() {
        let x = 3;
        strict_assert!(x == 4, "checked: {x}");
    }
}
