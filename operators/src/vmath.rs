//! Vectorisable math: an `exp` written only with arithmetic, comparisons
//! and bit operations, so that a compiler turns a loop over it into SIMD
//! code (AVX2, AVX-512) instead of one call to the scalar libm `exp` per
//! element.
//!
//! The same algorithm exists three times, operation for operation: in Rust
//! ([`exp`], used by the row interpreter), and as C and CUDA C source
//! ([`exp_source`], used by the code generator). Generated code is compiled
//! without floating-point contraction, so the three give bitwise identical
//! results and a kernel's value never depends on the back end that ran it.
//!
//! Algorithm: `x = n ln 2 + r` with `n = round(x / ln 2)` and `|r| <= ln 2 / 2`
//! (Cody-Waite reduction with a two-part `ln 2`, exact for every `n` the
//! range needs), `e^r` by its Taylor polynomial of degree 13 (truncation
//! error below 5e-18), and `2^n` applied as two exact powers of two so that
//! results in the subnormal range are rounded once. Overflow gives `+inf`,
//! underflow `0`, NaN stays NaN.
//!
//! Accuracy, measured against the platform's `f64::exp` over 2 million
//! arguments spread over the whole range (`tests` below and
//! `operators/tests/vmath.rs`): at most 2 units in the last place; see
//! [`MAX_ULP_ERROR`].

/// The largest difference from the correctly rounded `exp`, in units in
/// the last place, that the tests accept (the measured maximum is 1).
pub const MAX_ULP_ERROR: u64 = 2;

/// Above this, `exp` overflows to `+inf`.
const OVERFLOW: f64 = 709.782_712_893_384;
/// Below this, `exp` underflows to `0`.
const UNDERFLOW: f64 = -745.133_219_101_941_2;
const LOG2_E: f64 = std::f64::consts::LOG2_E;
/// `ln 2` split so that `n * LN2_HI` is exact for `|n| < 2^11`.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
/// `ln 2 - LN2_HI`.
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// `1.5 * 2^52`: adding it rounds to an integer held in the low mantissa bits.
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// Taylor coefficients `1 / k!` for `k = 13 .. 0`, highest first (Horner).
const COEFFICIENTS: [f64; 14] = [
    1.0 / 6_227_020_800.0,
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// `2^n` for an integer-valued `n` in `[-1022, 1023]`, given `n + ROUNDER`.
#[inline(always)]
fn power_of_two(rounded: f64) -> f64 {
    let n = rounded.to_bits().wrapping_sub(ROUNDER.to_bits());
    f64::from_bits(n.wrapping_add(1023) << 52)
}

/// `e^x`, vectorisable, within [`MAX_ULP_ERROR`] of the correctly rounded
/// value (see the module documentation).
///
/// ```
/// let e = watershed_operators::vmath::exp(1.0);
/// assert!((e - std::f64::consts::E).abs() <= 2.0 * f64::EPSILON * e);
/// assert_eq!(watershed_operators::vmath::exp(1000.0), f64::INFINITY);
/// assert_eq!(watershed_operators::vmath::exp(-1000.0), 0.0);
/// ```
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    let t = x * LOG2_E + ROUNDER;
    let n = t - ROUNDER;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = COEFFICIENTS[0];
    for c in &COEFFICIENTS[1..] {
        p = p * r + *c;
    }
    // n = n1 + n2 with both halves in the normal range of powers of two.
    let n1 = (n * 0.5 + ROUNDER) - ROUNDER;
    let n2 = n - n1;
    let scaled = p * power_of_two(n1 + ROUNDER) * power_of_two(n2 + ROUNDER);
    if x > OVERFLOW {
        f64::INFINITY
    } else if x < UNDERFLOW {
        0.0
    } else {
        scaled
    }
}

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

/// The helper functions generated kernels use (bit casts, `ws_exp`), in
/// `dialect`: the same operations, in the same order, as [`exp`].
pub fn exp_source(dialect: Dialect) -> String {
    let (qualifier, to_bits, from_bits, prelude) = match dialect {
        Dialect::C => (
            "static inline",
            "ws_to_bits",
            "ws_from_bits",
            "static inline unsigned long long ws_to_bits(double v) { unsigned long long u; __builtin_memcpy(&u, &v, 8); return u; }\n\
             static inline double ws_from_bits(unsigned long long u) { double v; __builtin_memcpy(&v, &u, 8); return v; }\n",
        ),
        Dialect::Cuda => (
            "__device__ __forceinline__",
            "(unsigned long long)__double_as_longlong",
            "ws_from_bits",
            "__device__ __forceinline__ double ws_from_bits(unsigned long long u) { return __longlong_as_double((long long)u); }\n",
        ),
    };
    let lit = |v: f64| literal(v, dialect);
    // Horner as a chain of statements keeps the evaluation order explicit.
    let mut steps = format!("    double p = {};\n", lit(COEFFICIENTS[0]));
    for c in &COEFFICIENTS[1..] {
        steps.push_str(&format!("    p = p * r + {};\n", lit(*c)));
    }
    format!(
        "{prelude}\
{qualifier} double ws_pow2(double rounded) {{\n\
    unsigned long long n = {to_bits}(rounded) - {to_bits}({rounder});\n\
    return {from_bits}((n + 1023ULL) << 52);\n\
}}\n\
{qualifier} double ws_exp(double x) {{\n\
    double t = x * {log2e} + {rounder};\n\
    double n = t - {rounder};\n\
    double r = x - n * {hi} - n * {lo};\n\
{steps}\
    double n1 = (n * 0.5 + {rounder}) - {rounder};\n\
    double n2 = n - n1;\n\
    double scaled = p * ws_pow2(n1 + {rounder}) * ws_pow2(n2 + {rounder});\n\
    return x > {overflow} ? {inf} : (x < {underflow} ? 0.0 : scaled);\n\
}}\n",
        rounder = lit(ROUNDER),
        log2e = lit(LOG2_E),
        hi = lit(LN2_HI),
        lo = lit(LN2_LO),
        overflow = lit(OVERFLOW),
        underflow = lit(UNDERFLOW),
        inf = lit(f64::INFINITY),
    )
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
    fn special_values() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert!(exp(f64::NAN).is_nan());
        assert_eq!(exp(710.0), f64::INFINITY);
        assert_eq!(exp(-746.0), 0.0);
    }

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
