//! Vectorisable math: `exp`, `log`, `sin`, `cos`, `tanh` and `pow`
//! written only with arithmetic, comparisons, selections and bit
//! operations, so that a compiler turns a loop over them into SIMD code
//! (AVX2, AVX-512) instead of one call to the scalar libm function per
//! element (`sqrt` and `abs` are single instructions already).
//!
//! Each algorithm exists three times, operation for operation: in Rust
//! ([`functions`], used by the row interpreter and constant folding), and
//! as C and CUDA C source ([`source()`], used by the code generator).
//! Generated code is compiled without floating-point contraction, so the
//! three give bitwise identical results and a kernel's value never depends
//! on the back end that ran it.
//!
//! Accuracy against the correctly rounded value, measured against the
//! platform's libm over millions of arguments (`operators/tests/suite/vmath.rs`),
//! in units in the last place (ulp):
//!
//! | function | bound (tested) | range |
//! | --- | --- | --- |
//! | [`exp`] | [`MAX_ULP_ERROR`] = 2 | all doubles; overflow `+inf`, underflow `0` |
//! | [`log`] | [`LOG_MAX_ULP_ERROR`] = 1 | all doubles, subnormals included |
//! | [`sin`], [`cos`] | [`SIN_COS_MAX_ULP_ERROR`] = 1 | `|x| <= `[`SIN_COS_MAX_ARGUMENT`] (2.1e8); NaN beyond |
//! | [`tanh`] | [`TANH_MAX_ULP_ERROR`] = 2 | all doubles |
//! | [`pow`] | [`POW_MAX_ULP_ERROR`] = 2 | normal results; C99 special cases |
//!
//! `sin` and `cos` of a larger argument are NaN rather than an inaccurate
//! number (an exact reduction there needs table lookups that do not
//! vectorise); the finiteness checks of the engine report them.

pub mod functions;
mod source;

pub use functions::{
    LOG_MAX_ULP_ERROR, MAX_ULP_ERROR, POW_MAX_ULP_ERROR, SIN_COS_MAX_ARGUMENT,
    SIN_COS_MAX_ULP_ERROR, TANH_MAX_ULP_ERROR, cos, exp, log, pow, sin, tanh,
};
pub use source::source;

/// A C-family dialect the code generator writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// C99 for the system compiler (gcc, clang).
    C,
    /// CUDA C for NVRTC: no `#include`s, device functions.
    Cuda,
}

/// Prints `v` as a literal the C-family compilers read back exactly.
pub fn literal(v: f64, dialect: Dialect) -> String {
    if v.is_finite() {
        // Rust prints the shortest decimal that reads back to the same
        // value; C compilers round decimal literals correctly.
        let text = format!("{v:?}");
        let text = if text.contains(['.', 'e', 'E']) {
            text
        } else {
            format!("{text}.0")
        };
        if v.is_sign_negative() {
            format!("({text})")
        } else {
            text
        }
    } else {
        match dialect {
            Dialect::C => format!("ws_from_bits(0x{:016x}ULL)", v.to_bits()),
            Dialect::Cuda => format!("__longlong_as_double(0x{:016x}LL)", v.to_bits()),
        }
    }
}

/// Distance between two values in units in the last place (0 when equal,
/// including two NaNs; `u64::MAX` when only one is NaN).
pub fn ulp_distance(a: f64, b: f64) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    // Map the sign-magnitude bits onto a monotonic integer line.
    let key = |v: f64| {
        let bits = v.to_bits() as i64;
        if bits < 0 { i64::MIN - bits } else { bits }
    };
    key(a).abs_diff(key(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_distance_counts_representable_values() {
        assert_eq!(ulp_distance(1.0, 1.0), 0);
        assert_eq!(ulp_distance(1.0, f64::from_bits(1.0f64.to_bits() + 3)), 3);
        assert_eq!(ulp_distance(0.0, -0.0), 0);
        assert_eq!(ulp_distance(f64::from_bits(1), -f64::from_bits(1)), 2);
        assert_eq!(ulp_distance(f64::NAN, 1.0), u64::MAX);
    }

    #[test]
    fn literals_read_back_exactly() {
        for v in [0.1, -2.5e-300, 1e300, 3.0, -0.0, 1.0 / 3.0, 5e-324] {
            let text = literal(v, Dialect::C);
            let text = text.trim_start_matches('(').trim_end_matches(')');
            assert_eq!(
                text.parse::<f64>().unwrap().to_bits(),
                v.to_bits(),
                "{text}"
            );
        }
        assert!(literal(f64::INFINITY, Dialect::C).contains("0x7ff0000000000000"));
        assert!(literal(f64::NAN, Dialect::Cuda).starts_with("__longlong_as_double"));
    }
}
