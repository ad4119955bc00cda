//! The vectorisable functions in Rust: `exp`, `log`, `sin`, `cos`, `tanh`
//! and `pow`, written with arithmetic, comparisons, selections and bit
//! operations only (no table lookups, no calls, no data-dependent
//! branches), so that a loop over them becomes SIMD code. The row
//! interpreter and constant folding call these; [`super::source`] writes
//! the same operations, in the same order, as C and CUDA C.
//!
//! Every function states its accuracy in units in the last place (ulp)
//! against the correctly rounded value; `operators/tests/suite/vmath.rs` measures
//! it against the platform's libm over millions of arguments.

/// `1.5 * 2^52`: adding it rounds to an integer held in the low mantissa bits.
pub(super) const ROUNDER: f64 = 6_755_399_441_055_744.0;
/// `2^52`: the smallest double whose neighbours are one apart.
pub(super) const TWO_52: f64 = 4_503_599_627_370_496.0;
/// `2^53`: every double at or above it is an even integer.
pub(super) const TWO_53: f64 = 9_007_199_254_740_992.0;
/// `2^54`, which scales a subnormal argument into the normal range.
pub(super) const TWO_54: f64 = 18_014_398_509_481_984.0;
/// `2^27 + 1`: Veltkamp's splitting constant for exact products.
pub(super) const SPLITTER: f64 = 134_217_729.0;
/// The fraction bits of a double.
pub(super) const FRACTION_MASK: u64 = 0x000f_ffff_ffff_ffff;
/// The bits of `1.0`.
pub(super) const ONE_BITS: u64 = 0x3ff0_0000_0000_0000;

// ---------------------------------------------------------------- exp

/// The largest difference from the correctly rounded `exp`, in units in
/// the last place, that the tests accept (the measured maximum is 1).
pub const MAX_ULP_ERROR: u64 = 2;

/// Arguments above this are taken as this: `e^710` overflows to `+inf`
/// through the computation itself, as every argument above
/// 709.782712893384 must.
pub(super) const EXP_HIGHEST: f64 = 710.0;
/// Arguments below this are taken as this: `e^-746` rounds to `0`, as
/// every argument below -745.1332191019412 must.
pub(super) const EXP_LOWEST: f64 = -746.0;
pub(super) const LOG2_E: f64 = std::f64::consts::LOG2_E;
/// `ln 2` split so that `n * LN2_HI` is exact for `|n| < 2^11`.
pub(super) const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
/// `ln 2 - LN2_HI`.
pub(super) const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// The exponent offset of `exp`'s scaling for a negative argument: `2^n`
/// is applied as `2^(n + 54)` (normal for every `n >= -1076`) times
/// `2^-54`, so that a subnormal result is rounded once.
pub(super) const EXP_NEGATIVE_BIAS: u64 = 1023 + 54;
/// The exponent offset for a non-negative argument: `2^(n - 1)` times 2,
/// so that `n = 1024` (arguments up to 710) does not overflow the
/// exponent field before the last, rounding, multiplication.
pub(super) const EXP_POSITIVE_BIAS: u64 = 1023 - 1;
/// `2^-54`, the last factor of a negative argument's scaling.
pub(super) const TWO_MINUS_54: f64 = f64::from_bits(0x3c90_0000_0000_0000);

/// The polynomial of `e^r` on `|r| <= ln 2 / 2`, highest coefficient
/// first, evaluated by Horner steps: `1 + r (1 + r q(r))`, with `q` the
/// degree-9 Chebyshev fit of `(e^r - 1 - r) / r^2` on
/// `|r| <= ln 2 / 2 + 5e-4` (`scripts/exp_coefficients.py`, mpmath). With
/// the coefficients rounded to doubles the truncation error is below
/// 1.7e-17 relative (0.15 ulp); the 13-degree Taylor polynomial it
/// replaced needed two more steps for 0.04 ulp.
pub(super) const EXP_COEFFICIENTS: [f64; 12] = [
    2.510_051_533_338_270_7e-8,
    2.762_025_728_298_572_5e-7,
    2.755_726_818_666_448e-6,
    2.480_152_094_052_136_4e-5,
    1.984_126_986_322_976_3e-4,
    1.388_888_891_744_277_2e-3,
    8.333_333_333_330_027e-3,
    4.166_666_666_662_367e-2,
    0.166_666_666_666_666_69,
    0.500_000_000_000_000_1,
    1.0,
    1.0,
];

/// `e^x`, vectorisable, within [`MAX_ULP_ERROR`] of the correctly rounded
/// value.
///
/// Algorithm: the argument is first clamped to `[-746, 710]` (NaN passes
/// through). `x = n ln 2 + r` with `n = round(x / ln 2)` (one fused
/// multiply-add and the `1.5 * 2^52` rounding trick) and `|r| <= ln 2 / 2`
/// (Cody-Waite reduction with a two-part `ln 2` in two fused
/// multiply-adds, exact for every `n` the range needs); `e^r` by the
/// polynomial `EXP_COEFFICIENTS` in Horner steps that are fused
/// multiply-adds (`fma` in the generated C and CUDA: the same bits); and
/// `2^n` built in the exponent field from `n`'s integer bits, applied as
/// an exact power of two and a last factor (`2^-54` for negative
/// arguments, 2 otherwise) so that subnormal results are rounded once
/// and `e^710` overflows to `+inf`. A NaN argument gives a NaN polynomial,
/// so NaN stays NaN whatever its bits make of the scale. The loop of
/// `exp` gcc 12 builds for AVX-512 holds 27 vector operations per 8
/// values (14 of them fused multiply-adds); the version before this one
/// (13-degree Taylor polynomial, two powers of two built by rounding,
/// range selections at the end) held 39 and ran 1.4x slower.
///
/// ```
/// let e = watershed_language::vmath::exp(1.0);
/// assert!((e - std::f64::consts::E).abs() <= 2.0 * f64::EPSILON * e);
/// assert_eq!(watershed_language::vmath::exp(1000.0), f64::INFINITY);
/// assert_eq!(watershed_language::vmath::exp(-1000.0), 0.0);
/// ```
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    // Both selections test the argument itself: gcc 12 turns the nested
    // form (the second testing the first's result) into three comparisons
    // and four mask operations instead of two and two.
    let high = if x > EXP_HIGHEST { EXP_HIGHEST } else { x };
    let x = if x < EXP_LOWEST { EXP_LOWEST } else { high };
    // One rounding per fused step; a single instruction where the CPU has
    // FMA (the interpreter's AVX2 loops and `-march=native` C).
    let t = x.mul_add(LOG2_E, ROUNDER);
    let n = t - ROUNDER;
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = EXP_COEFFICIENTS[0];
    for c in &EXP_COEFFICIENTS[1..] {
        p = p.mul_add(r, *c);
    }
    // n as an integer in the low bits of t: bits(t) - bits(1.5 * 2^52).
    let n_bits = t.to_bits().wrapping_sub(ROUNDER.to_bits());
    let negative = x < 0.0;
    let biased = n_bits.wrapping_add(if negative {
        EXP_NEGATIVE_BIAS
    } else {
        EXP_POSITIVE_BIAS
    });
    let last = if negative { TWO_MINUS_54 } else { 2.0 };
    (p * f64::from_bits(biased << 52)) * last
}

// ---------------------------------------------------------------- log

/// The largest difference from the correctly rounded `ln`, in ulp, that
/// the tests accept for [`log`].
pub const LOG_MAX_ULP_ERROR: u64 = 1;

/// `sqrt(2)`: the reduced argument lies in `[sqrt(1/2), sqrt(2))`.
pub(super) const SQRT_2: f64 = std::f64::consts::SQRT_2;

/// Coefficients of `R(z) = sum_{j>=1} 2 z^j / (2j + 1)` for `j = 10 .. 1`,
/// highest first: `log(1 + f) = 2 atanh(s)` with `s = f / (2 + f)` and
/// `z = s^2 <= 0.0295`; the first omitted term is below `6e-19` relative.
pub(super) const LOG_COEFFICIENTS: [f64; 10] = [
    2.0 / 21.0,
    2.0 / 19.0,
    2.0 / 17.0,
    2.0 / 15.0,
    2.0 / 13.0,
    2.0 / 11.0,
    2.0 / 9.0,
    2.0 / 7.0,
    2.0 / 5.0,
    2.0 / 3.0,
];

/// Splits a positive finite `x` into `2^k m` with `m` in
/// `[sqrt(1/2), sqrt(2))`: returns `(k, m)` with `k` an integer-valued
/// double. Subnormals are scaled by `2^54` first. Other arguments give
/// finite garbage that the callers replace.
#[inline(always)]
fn log_reduce(x: f64) -> (f64, f64) {
    let subnormal = x < f64::MIN_POSITIVE;
    let scaled = if subnormal { x * TWO_54 } else { x };
    let bits = scaled.to_bits();
    // The biased exponent as a double, without an integer conversion:
    // `2^52 + e` has `e` in its low mantissa bits.
    let biased = f64::from_bits((bits >> 52) | TWO_52.to_bits()) - TWO_52;
    let m = f64::from_bits((bits & FRACTION_MASK) | ONE_BITS);
    let big = m > SQRT_2;
    let m = if big { m * 0.5 } else { m };
    let adjust = if big { 1.0 } else { 0.0 };
    let unscale = if subnormal { 54.0 } else { 0.0 };
    let k = biased - 1023.0 + adjust - unscale;
    (k, m)
}

/// The natural logarithm, vectorisable, within [`LOG_MAX_ULP_ERROR`] of the
/// correctly rounded value.
///
/// Algorithm: `x = 2^k (1 + f)` with `1 + f` in `[sqrt(1/2), sqrt(2))`
/// (exponent and fraction taken from the bits, subnormals scaled first);
/// `log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2))` with `s = f / (2 + f)`,
/// the exact identity behind `2 atanh(s)`, which keeps the leading terms
/// exact; `k ln 2` in two parts. `log(0) = -inf`, `log(+inf) = +inf`, a
/// negative argument or NaN gives NaN.
///
/// ```
/// use watershed_language::vmath::log;
/// assert_eq!(log(1.0), 0.0);
/// assert!((log(std::f64::consts::E) - 1.0).abs() <= f64::EPSILON);
/// assert_eq!(log(0.0), f64::NEG_INFINITY);
/// assert!(log(-1.0).is_nan());
/// ```
#[inline(always)]
pub fn log(x: f64) -> f64 {
    let (k, m) = log_reduce(x);
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let mut p = LOG_COEFFICIENTS[0];
    for c in &LOG_COEFFICIENTS[1..] {
        p = p * z + *c;
    }
    let r = p * z;
    let hfsq = 0.5 * f * f;
    let value = k * LN2_HI - ((hfsq - (s * (hfsq + r) + k * LN2_LO)) - f);
    if x > 0.0 {
        if x == f64::INFINITY {
            f64::INFINITY
        } else {
            value
        }
    } else if x == 0.0 {
        f64::NEG_INFINITY
    } else {
        f64::NAN
    }
}

// ---------------------------------------------------------------- sin, cos

/// The largest difference from the correctly rounded `sin` and `cos`, in
/// ulp, that the tests accept for [`sin`] and [`cos`].
pub const SIN_COS_MAX_ULP_ERROR: u64 = 1;

/// The largest `|x|` that [`sin`] and [`cos`] reduce exactly: `x / (pi/2)`
/// rounds to an `n` below `2^27`, so that every `n * PIO2_k` is exact.
/// Beyond it both return NaN (never an inaccurate number), which the
/// engine's finiteness checks then report.
pub const SIN_COS_MAX_ARGUMENT: f64 = 2.1e8;

pub(super) const FRAC_2_PI: f64 = std::f64::consts::FRAC_2_PI;
/// `pi / 2` in five parts: four of 26 significant bits, the rest rounded
/// (157 bits in all; the next part is below `1e-48`).
pub(super) const PIO2: [f64; 5] = [
    f64::from_bits(0x3ff9_21fb_5000_0000),
    f64::from_bits(0x3e51_10b4_6000_0000),
    f64::from_bits(0x3c91_a626_3000_0000),
    f64::from_bits(0x3ae8_a2e0_3000_0000),
    f64::from_bits(0x394c_1cd1_2902_4e09),
];

/// Taylor coefficients of `(r - sin(r)) / r^3` in `z = r^2`, `(-1)^j /
/// (2j + 3)!` for `j = 8 .. 0`, highest first (`|r| <= pi/4`: the first
/// omitted term is below `1e-19` relative).
pub(super) const SIN_COEFFICIENTS: [f64; 9] = [
    1.0 / 121_645_100_408_832_000.0,
    -1.0 / 355_687_428_096_000.0,
    1.0 / 1_307_674_368_000.0,
    -1.0 / 6_227_020_800.0,
    1.0 / 39_916_800.0,
    -1.0 / 362_880.0,
    1.0 / 5_040.0,
    -1.0 / 120.0,
    1.0 / 6.0,
];

/// Taylor coefficients of `(cos(r) - 1 + r^2/2) / r^4` in `z = r^2`,
/// `(-1)^j / (2j + 4)!` for `j = 8 .. 0`, highest first.
pub(super) const COS_COEFFICIENTS: [f64; 9] = [
    1.0 / 2_432_902_008_176_640_000.0,
    -1.0 / 6_402_373_705_728_000.0,
    1.0 / 20_922_789_888_000.0,
    -1.0 / 87_178_291_200.0,
    1.0 / 479_001_600.0,
    -1.0 / 3_628_800.0,
    1.0 / 40_320.0,
    -1.0 / 720.0,
    1.0 / 24.0,
];

/// Below this, `sin(x)` rounds to `x` (`x^2 / 6 < 2^-55`).
pub(super) const SIN_TINY: f64 = 1.0 / 134_217_728.0;

/// `a + b` as an unevaluated sum `(sum, error)`, exactly (Knuth's TwoSum).
#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// `a + b` as `(sum, error)`, exactly, where `|a| >= |b|` (Dekker's
/// Fast2Sum): renormalises a double-double.
#[inline(always)]
fn fast_two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    (s, b - (s - a))
}

/// `a * b` as `(product, error)`, exactly, without a fused multiply-add
/// (Dekker's product with Veltkamp's splitting; `|a|, |b| < 2^995`).
#[inline(always)]
fn two_product(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    let ca = SPLITTER * a;
    let a_hi = ca - (ca - a);
    let a_lo = a - a_hi;
    let cb = SPLITTER * b;
    let b_hi = cb - (cb - b);
    let b_lo = b - b_hi;
    let e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
    (p, e)
}

/// `x = n pi/2 + r`: returns `(r_hi, r_lo, n mod 4)` with `r = r_hi + r_lo`
/// to about 2^-120 absolute, `|r| <= pi/4` (slightly more where `x * 2/pi`
/// rounds to the other integer, which the polynomials tolerate).
#[inline(always)]
fn reduce_half_pi(x: f64) -> (f64, f64, u64) {
    let t = x * FRAC_2_PI + ROUNDER;
    let n = t - ROUNDER;
    // `t`'s low mantissa bits hold n in two's complement: n mod 4.
    let quadrant = t.to_bits() & 3;
    // n * PIO2[k] is exact for n < 2^27, and x - n * PIO2[0] by Sterbenz.
    let a = x - n * PIO2[0];
    let (h, e1) = two_sum(a, -(n * PIO2[1]));
    let (h, e2) = two_sum(h, -(n * PIO2[2]));
    let lo = e1 + e2 - n * PIO2[3] - n * PIO2[4];
    let (r_hi, r_lo) = fast_two_sum(h, lo);
    (r_hi, r_lo, quadrant)
}

/// `(sin(r), cos(r))` for `r = r_hi + r_lo`, `|r| <= pi/4` (slightly more).
#[inline(always)]
fn sin_cos_reduced(r_hi: f64, r_lo: f64) -> (f64, f64) {
    let z = r_hi * r_hi;
    let mut ps = SIN_COEFFICIENTS[0];
    for c in &SIN_COEFFICIENTS[1..] {
        ps = ps * z + *c;
    }
    let mut pc = COS_COEFFICIENTS[0];
    for c in &COS_COEFFICIENTS[1..] {
        pc = pc * z + *c;
    }
    // sin(r) = r - r^3 (1/3! - z/5! + ...), the low part through cos(r).
    let sin_r = r_hi - (r_hi * (z * ps) - r_lo * (1.0 - 0.5 * z));
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    let cos_r = w + (((1.0 - w) - hz) + (z * z * pc - r_hi * r_lo));
    (sin_r, cos_r)
}

/// Picks `±sin(r)` or `±cos(r)` for quadrant `q` of the argument:
/// `sin(x) = [s, c, -s, -c][q]`.
#[inline(always)]
fn by_quadrant(q: u64, sin_r: f64, cos_r: f64) -> f64 {
    let v = if q & 1 == 1 { cos_r } else { sin_r };
    if q & 2 == 2 { -v } else { v }
}

/// The sine, vectorisable, within [`SIN_COS_MAX_ULP_ERROR`] of the
/// correctly rounded value for `|x| <= `[`SIN_COS_MAX_ARGUMENT`]; NaN
/// beyond it, for infinities and for NaN.
///
/// Algorithm: `x = n pi/2 + r` (Cody-Waite reduction with a five-part
/// `pi/2`, carried as a double-double so that arguments near a multiple
/// of `pi/2` keep their relative accuracy), then the Taylor polynomials of
/// `sin` and `cos` on `|r| <= pi/4` (degrees 19 and 20) and the quadrant.
///
/// ```
/// use watershed_language::vmath::sin;
/// assert!((sin(std::f64::consts::FRAC_PI_6) - 0.5).abs() <= f64::EPSILON);
/// assert_eq!(sin(1e-300), 1e-300);
/// assert!(sin(1e9).is_nan()); // beyond SIN_COS_MAX_ARGUMENT: never a wrong number
/// ```
#[inline(always)]
pub fn sin(x: f64) -> f64 {
    let (r_hi, r_lo, q) = reduce_half_pi(x);
    let (sin_r, cos_r) = sin_cos_reduced(r_hi, r_lo);
    let value = by_quadrant(q, sin_r, cos_r);
    let a = x.abs();
    if a < SIN_TINY {
        x
    } else if a <= SIN_COS_MAX_ARGUMENT {
        value
    } else {
        f64::NAN
    }
}

/// The cosine, vectorisable; accuracy and range as [`sin`].
///
/// ```
/// use watershed_language::vmath::cos;
/// assert_eq!(cos(0.0), 1.0);
/// assert!((cos(std::f64::consts::FRAC_PI_3) - 0.5).abs() <= f64::EPSILON);
/// ```
#[inline(always)]
pub fn cos(x: f64) -> f64 {
    let (r_hi, r_lo, q) = reduce_half_pi(x);
    let (sin_r, cos_r) = sin_cos_reduced(r_hi, r_lo);
    let value = by_quadrant(q.wrapping_add(1), sin_r, cos_r);
    if x.abs() <= SIN_COS_MAX_ARGUMENT {
        value
    } else {
        f64::NAN
    }
}

// ---------------------------------------------------------------- tanh

/// The largest difference from the correctly rounded `tanh`, in ulp, that
/// the tests accept for [`tanh`].
pub const TANH_MAX_ULP_ERROR: u64 = 2;

/// Below this `|x|`, [`tanh`] uses its Taylor polynomial.
pub(super) const TANH_SERIES_LIMIT: f64 = 0.55;

/// Taylor coefficients of `(tanh(x) - x) / x^3` in `z = x^2` (those of
/// `x^3 .. x^39`, from the Bernoulli numbers), highest first; at
/// `|x| <= 0.55` the first omitted term is below `4e-18` relative.
pub(super) const TANH_COEFFICIENTS: [f64; 19] = [
    f64::from_bits(0xbe5e_b322_9047_434c),
    f64::from_bits(0x3e72_efe8_db3a_ff1f),
    f64::from_bits(0xbe87_5cde_6563_fed9),
    f64::from_bits(0x3e9c_d299_de4a_e6bb),
    f64::from_bits(0xbeb1_c77d_f95c_1c0d),
    f64::from_bits(0x3ec5_ef2d_a474_e5b7),
    f64::from_bits(0xbedb_0f72_d3ee_24e9),
    f64::from_bits(0x3ef0_b132_d39a_6050),
    f64::from_bits(0xbf04_97d8_eea2_5259),
    f64::from_bits(0x3f19_67e1_8afc_afad),
    f64::from_bits(0xbf2f_57d7_734d_1664),
    f64::from_bits(0x3f43_5582_4803_6744),
    f64::from_bits(0xbf57_da36_452b_75e3),
    f64::from_bits(0x3f6d_6d3d_0e15_7de0),
    f64::from_bits(0xbf82_26e3_55e6_c23d),
    f64::from_bits(0x3f96_64f4_882c_10fa),
    f64::from_bits(0xbfab_a1ba_1ba1_ba1c),
    2.0 / 15.0,
    -1.0 / 3.0,
];

/// The hyperbolic tangent, vectorisable, within [`TANH_MAX_ULP_ERROR`] of
/// the correctly rounded value.
///
/// Algorithm: its Taylor polynomial below `|x| = 0.55`, else
/// `sign(x) (1 - 2 / (e^{2|x|} + 1))` with [`exp`] (the subtraction cancels
/// at most one bit there). `tanh(±inf) = ±1`, NaN stays NaN.
///
/// ```
/// use watershed_language::vmath::tanh;
/// assert_eq!(tanh(0.0), 0.0);
/// assert_eq!(tanh(40.0), 1.0);
/// assert!((tanh(1.0) - 0.761_594_155_955_764_9).abs() <= f64::EPSILON);
/// ```
#[inline(always)]
pub fn tanh(x: f64) -> f64 {
    let z = x * x;
    let mut p = TANH_COEFFICIENTS[0];
    for c in &TANH_COEFFICIENTS[1..] {
        p = p * z + *c;
    }
    let series = x + x * (z * p);
    let a = x.abs();
    let e = exp(2.0 * a);
    let large = 1.0 - 2.0 / (e + 1.0);
    // copysign, not a selection on `x < 0`: gcc 13 does not vectorise the
    // selection's form inside a loop that also reduces (the finiteness
    // test). They differ only for a NaN `x`, whose sign this keeps.
    let large = large.copysign(x);
    if a < SIN_TINY {
        x
    } else if a < TANH_SERIES_LIMIT {
        series
    } else {
        large
    }
}

// ---------------------------------------------------------------- pow

/// The largest difference from the correctly rounded `pow`, in ulp, that
/// the tests accept for [`pow`] with a normal result.
pub const POW_MAX_ULP_ERROR: u64 = 2;

/// Coefficients of `Q(z) = sum_{j>=2} z^{j-2} / (2j + 1)` for
/// `j = 10 .. 2`, highest first: `log(m) = 2u + (2/3) u^3 + 2 u^5 Q(u^2)`
/// with `u = (m - 1) / (m + 1)`, `u^2 <= 0.0295`.
pub(super) const ATANH_COEFFICIENTS: [f64; 9] = [
    1.0 / 21.0,
    1.0 / 19.0,
    1.0 / 17.0,
    1.0 / 15.0,
    1.0 / 13.0,
    1.0 / 11.0,
    1.0 / 9.0,
    1.0 / 7.0,
    1.0 / 5.0,
];
/// `2/3` as a double-double: the cubic term of the logarithm is carried
/// to about 2^-100 so that `pow` keeps its accuracy for large `|y ln x|`.
pub(super) const TWO_THIRDS_HI: f64 = f64::from_bits(0x3fe5_5555_5555_5555);
/// `2/3 - TWO_THIRDS_HI`.
pub(super) const TWO_THIRDS_LO: f64 = f64::from_bits(0x3c85_5555_5555_5555);

/// `ln(a)` for a positive finite `a` as a double-double `(hi, lo)`,
/// accurate to about 2^-64 relative: the leading terms `k ln 2 + 2u +
/// (2/3) u^3` are carried as double-doubles, only the quintic tail (below
/// 2^-14 of the result) is rounded.
#[inline(always)]
fn log_double_double(a: f64) -> (f64, f64) {
    let (k, m) = log_reduce(a);
    let numerator = m - 1.0;
    let (d_hi, d_lo) = two_sum(m, 1.0);
    let u_hi = numerator / d_hi;
    let (p, pe) = two_product(u_hi, d_hi);
    let u_lo = (((numerator - p) - pe) - u_hi * d_lo) / d_hi;
    // u^3 exactly as a double-double, then (2/3) u^3 to about 2^-100.
    let (z, z_lo) = two_product(u_hi, u_hi);
    let (cube, cube_lo) = two_product(z, u_hi);
    let cube_lo = cube_lo + z_lo * u_hi;
    let (third, third_lo) = two_product(cube, TWO_THIRDS_HI);
    let third_lo = third_lo + (cube_lo * TWO_THIRDS_HI + cube * TWO_THIRDS_LO);
    let mut q = ATANH_COEFFICIENTS[0];
    for c in &ATANH_COEFFICIENTS[1..] {
        q = q * z + *c;
    }
    // 2 u^5 Q(u^2), and the first-order effect of u_lo on the cubic term.
    let rest = 2.0 * cube * (z * q) + 2.0 * z * u_lo;
    let (s1, e1) = two_sum(k * LN2_HI, 2.0 * u_hi);
    let (hi, e2) = two_sum(s1, third);
    let lo = (e1 + e2) + (k * LN2_LO + (2.0 * u_lo + (third_lo + rest)));
    fast_two_sum(hi, lo)
}

/// `x^y`, vectorisable, within [`POW_MAX_ULP_ERROR`] of the correctly
/// rounded value where the result is normal (subnormal results may be
/// rounded twice), with C99's special cases (`pow(x, 0) = 1` even for
/// NaN, `pow(1, y) = 1`, `pow(-1, ±inf) = 1`, a negative finite base with a
/// non-integer exponent gives NaN, signs of zeros and infinities).
///
/// Algorithm: `|x|^y = e^{y ln|x|}` with `ln|x|` as a double-double
/// (about 2^-64 relative), `y ln|x|` as an exact product plus the rounded
/// low part, and `e^{hi + lo} = e^hi (1 + lo)` with [`exp`]; the sign
/// from the parity of an integer `y`.
///
/// ```
/// use watershed_language::vmath::pow;
/// assert!((pow(2.0, 0.5) - std::f64::consts::SQRT_2).abs() <= f64::EPSILON);
/// assert_eq!(pow(-2.0, 3.0), -8.0);
/// assert!(pow(-2.0, 0.5).is_nan());
/// assert_eq!(pow(f64::NAN, 0.0), 1.0);
/// ```
#[inline(always)]
pub fn pow(x: f64, y: f64) -> f64 {
    let ax = x.abs();
    let ay = y.abs();
    let (hi, lo) = log_double_double(ax);
    let (hi, lo) = if ax == 0.0 {
        (f64::NEG_INFINITY, 0.0)
    } else if ax == f64::INFINITY {
        (f64::INFINITY, 0.0)
    } else if ax.is_nan() {
        (f64::NAN, 0.0)
    } else {
        (hi, lo)
    };
    let (th, te) = two_product(y, hi);
    let tl = te + y * lo;
    // Beyond |t| = 1000 the result over- or underflows whatever the low
    // part; and the splitting of a huge y (above 2^995) overflows, which
    // must not turn `pow(±1, huge)` into NaN: then the low part is dropped.
    let (t, t_lo) = fast_two_sum(th, tl);
    let (t, t_lo) = if th.abs() < 1000.0 && tl.abs() < 1.0 {
        (t, t_lo)
    } else {
        (th, 0.0)
    };
    let e = exp(t);
    let magnitude = if e == f64::INFINITY { e } else { e + e * t_lo };
    // Integer and odd exponents, without an integer conversion.
    let y_integer = ay >= TWO_52 || (ay + TWO_52) - TWO_52 == ay;
    let parity_bits = if ay < TWO_52 {
        (ay + TWO_52).to_bits()
    } else {
        ay.to_bits()
    };
    let y_odd = y_integer && ay < TWO_53 && parity_bits & 1 == 1;
    let x_negative = x.to_bits() >> 63 == 1;
    let signed = if x_negative && y_odd {
        -magnitude
    } else {
        magnitude
    };
    if y == 0.0 || x == 1.0 || (ax == 1.0 && ay == f64::INFINITY) {
        1.0
    } else if x < 0.0 && x > f64::NEG_INFINITY && !y_integer {
        f64::NAN
    } else {
        signed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_special_values() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert!(exp(f64::NAN).is_nan());
        assert_eq!(exp(710.0), f64::INFINITY);
        assert_eq!(exp(-746.0), 0.0);
    }

    #[test]
    fn log_special_values() {
        assert_eq!(log(1.0), 0.0);
        assert_eq!(log(0.0), f64::NEG_INFINITY);
        assert_eq!(log(-0.0), f64::NEG_INFINITY);
        assert_eq!(log(f64::INFINITY), f64::INFINITY);
        assert!(log(-1e-300).is_nan());
        assert!(log(f64::NEG_INFINITY).is_nan());
        assert!(log(f64::NAN).is_nan());
        assert_eq!(log(2.0), std::f64::consts::LN_2);
        // Subnormal arguments are scaled into range first.
        assert_eq!(log(f64::from_bits(1)), (f64::from_bits(1)).ln());
    }

    #[test]
    fn sin_cos_special_values() {
        assert_eq!(sin(0.0), 0.0);
        assert_eq!(sin(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(cos(0.0), 1.0);
        assert!(sin(f64::INFINITY).is_nan());
        assert!(cos(f64::NEG_INFINITY).is_nan());
        assert!(sin(f64::NAN).is_nan());
        assert!(cos(SIN_COS_MAX_ARGUMENT * 1.0001).is_nan());
        assert!(!cos(SIN_COS_MAX_ARGUMENT).is_nan());
    }

    #[test]
    fn tanh_special_values() {
        assert_eq!(tanh(f64::INFINITY), 1.0);
        assert_eq!(tanh(f64::NEG_INFINITY), -1.0);
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f64).to_bits());
        assert!(tanh(f64::NAN).is_nan());
    }

    #[test]
    fn pow_special_values_follow_c99() {
        let inf = f64::INFINITY;
        let cases = [
            (0.0, -1.0),
            (-0.0, -1.0),
            (-0.0, -2.0),
            (-0.0, 3.0),
            (-0.0, 0.5),
            (-0.0, -0.5),
            (-1.0, inf),
            (-1.0, -inf),
            (0.5, inf),
            (0.5, -inf),
            (2.0, inf),
            (2.0, -inf),
            (-inf, 3.0),
            (-inf, -3.0),
            (-inf, 2.0),
            (-inf, 0.5),
            (inf, -2.0),
            (-2.0, 3.0),
            (-2.0, 1e300),
            (-2.0, 0.5),
            (f64::NAN, 0.0),
            (1.0, f64::NAN),
            (f64::NAN, 1.0),
            (2.0, f64::NAN),
            (-3.0, TWO_52 + 1.0),
            (-1.0000001, TWO_53 - 1.0),
            (10.0, 400.0),
            (10.0, -400.0),
        ];
        for (x, y) in cases {
            let (ours, libm) = (pow(x, y), x.powf(y));
            assert!(
                ours.to_bits() == libm.to_bits() || (ours.is_nan() && libm.is_nan()),
                "pow({x:e}, {y:e}) = {ours:e}, libm says {libm:e}"
            );
        }
    }
}
