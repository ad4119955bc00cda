//! The vectorisable functions of [`super::functions`] as C and CUDA C
//! source: `ws_exp`, `ws_log`, `ws_sin`, `ws_cos`, `ws_tanh` and `ws_pow`,
//! the same operations in the same order, so that a generated kernel gives
//! the interpreter's bits (generated code is compiled without contraction;
//! the fused multiply-adds `exp` uses are written as `fma` calls, which C
//! and CUDA round once, as Rust's `mul_add` does). Every C helper is
//! `always_inline`: gcc 12 stops inlining `ws_exp` into a kernel that
//! calls it 30 times (the hoisted coupled sources of the ExprLib test),
//! and a call left in the loop keeps it from vectorising.
//! A compound condition is written as a chain of single-level `?:` on one
//! comparison each, never as `&&`, `||`, nested `?:` or `int` flags
//! combined with `&`: gcc 12 vectorises the former and refuses the others
//! (short-circuits are control flow; masks selected by masks are
//! unsupported statements). `operators/tests/suite/codegen.rs` compiles every function and compares its
//! bits with the Rust version over wide argument ranges.

use super::Dialect;
use super::functions::*;
use super::literal;
use std::fmt::Write as _;

/// `let name = c0; name = name * var + c1; ...` as C statements.
fn horner(name: &str, var: &str, coefficients: &[f64], dialect: Dialect) -> String {
    horner_steps(name, var, coefficients, dialect, false)
}

/// `let name = c0; name = fma(name, var, c1); ...`: Horner steps as fused
/// multiply-adds, as [`super::functions::exp`] computes them.
fn horner_fused(name: &str, var: &str, coefficients: &[f64], dialect: Dialect) -> String {
    horner_steps(name, var, coefficients, dialect, true)
}

/// Horner's scheme over `coefficients` (highest first) in `name`, each
/// step a fused multiply-add (`fused`) or a product then a sum.
fn horner_steps(
    name: &str,
    var: &str,
    coefficients: &[f64],
    dialect: Dialect,
    fused: bool,
) -> String {
    let mut text = format!(
        "    double {name} = {};\n",
        literal(coefficients[0], dialect)
    );
    for c in &coefficients[1..] {
        let c = literal(*c, dialect);
        let step = if fused {
            format!("fma({name}, {var}, {c})")
        } else {
            format!("{name} * {var} + {c}")
        };
        let _ = writeln!(text, "    {name} = {step};");
    }
    text
}

/// The helper functions generated kernels use (bit casts and the
/// functions above), in `dialect`.
pub fn source(dialect: Dialect) -> String {
    let (q, to_bits, prelude) = match dialect {
        Dialect::C => (
            "static inline __attribute__((always_inline))",
            "ws_to_bits",
            "static inline unsigned long long ws_to_bits(double v) { unsigned long long u; __builtin_memcpy(&u, &v, 8); return u; }\n\
             static inline double ws_from_bits(unsigned long long u) { double v; __builtin_memcpy(&v, &u, 8); return v; }\n",
        ),
        Dialect::Cuda => (
            "__device__ __forceinline__",
            "(unsigned long long)__double_as_longlong",
            "__device__ __forceinline__ double ws_from_bits(unsigned long long u) { return __longlong_as_double((long long)u); }\n",
        ),
    };
    let lit = |v: f64| literal(v, dialect);
    let mut text = String::from(prelude);
    text.push_str("typedef struct { double hi; double lo; } ws_pair;\n");
    text.push_str(
        "typedef struct { double hi; double lo; unsigned long long quadrant; } ws_reduced;\n",
    );

    // exp
    let _ = write!(
        text,
        "{q} double ws_exp(double x) {{\n\
    double high = x > {highest} ? {highest} : x;\n\
    x = x < {lowest} ? {lowest} : high;\n\
    double t = fma(x, {log2e}, {rounder});\n\
    double n = t - {rounder};\n\
    double r = fma(n, {minus_ln2_hi}, x);\n\
    r = fma(n, {minus_ln2_lo}, r);\n\
{steps}\
    unsigned long long n_bits = {to_bits}(t) - {to_bits}({rounder});\n\
    unsigned long long biased = n_bits + (x < 0.0 ? {negative_bias}ULL : {positive_bias}ULL);\n\
    double last = x < 0.0 ? {two_minus_54} : 2.0;\n\
    return (p * ws_from_bits(biased << 52)) * last;\n\
}}\n",
        highest = lit(EXP_HIGHEST),
        lowest = lit(EXP_LOWEST),
        rounder = lit(ROUNDER),
        log2e = lit(LOG2_E),
        minus_ln2_hi = lit(-LN2_HI),
        minus_ln2_lo = lit(-LN2_LO),
        negative_bias = EXP_NEGATIVE_BIAS,
        positive_bias = EXP_POSITIVE_BIAS,
        two_minus_54 = lit(TWO_MINUS_54),
        steps = horner_fused("p", "r", &EXP_COEFFICIENTS, dialect),
    );

    // log
    let _ = write!(
        text,
        "{q} ws_pair ws_log_reduce(double x) {{\n\
    int subnormal = x < {min_normal};\n\
    double scaled = subnormal ? x * {two_54} : x;\n\
    unsigned long long bits = {to_bits}(scaled);\n\
    double biased = ws_from_bits((bits >> 52) | {two_52_bits}ULL) - {two_52};\n\
    double m = ws_from_bits((bits & {fraction}ULL) | {one_bits}ULL);\n\
    int big = m > {sqrt2};\n\
    m = big ? m * 0.5 : m;\n\
    double adjust = big ? 1.0 : 0.0;\n\
    double unscale = subnormal ? 54.0 : 0.0;\n\
    ws_pair out;\n\
    out.hi = biased - 1023.0 + adjust - unscale;\n\
    out.lo = m;\n\
    return out;\n\
}}\n\
{q} double ws_log(double x) {{\n\
    ws_pair km = ws_log_reduce(x);\n\
    double k = km.hi;\n\
    double f = km.lo - 1.0;\n\
    double s = f / (2.0 + f);\n\
    double z = s * s;\n\
{steps}\
    double r = p * z;\n\
    double hfsq = 0.5 * f * f;\n\
    double value = k * {ln2_hi} - ((hfsq - (s * (hfsq + r) + k * {ln2_lo})) - f);\n\
    return x > 0.0 ? (x == {inf} ? {inf} : value) : (x == 0.0 ? {neg_inf} : {nan});\n\
}}\n",
        min_normal = lit(f64::MIN_POSITIVE),
        two_54 = lit(TWO_54),
        two_52_bits = format_args!("0x{:016x}", TWO_52.to_bits()),
        two_52 = lit(TWO_52),
        fraction = format_args!("0x{FRACTION_MASK:016x}"),
        one_bits = format_args!("0x{ONE_BITS:016x}"),
        sqrt2 = lit(SQRT_2),
        ln2_hi = lit(LN2_HI),
        ln2_lo = lit(LN2_LO),
        inf = lit(f64::INFINITY),
        neg_inf = lit(f64::NEG_INFINITY),
        nan = lit(f64::NAN),
        steps = horner("p", "z", &LOG_COEFFICIENTS, dialect),
    );

    // Exact sums and products.
    let _ = write!(
        text,
        "{q} ws_pair ws_two_sum(double a, double b) {{\n\
    ws_pair out;\n\
    out.hi = a + b;\n\
    double bb = out.hi - a;\n\
    out.lo = (a - (out.hi - bb)) + (b - bb);\n\
    return out;\n\
}}\n\
{q} ws_pair ws_fast_two_sum(double a, double b) {{\n\
    ws_pair out;\n\
    out.hi = a + b;\n\
    out.lo = b - (out.hi - a);\n\
    return out;\n\
}}\n\
{q} ws_pair ws_two_product(double a, double b) {{\n\
    ws_pair out;\n\
    out.hi = a * b;\n\
    double ca = {splitter} * a;\n\
    double a_hi = ca - (ca - a);\n\
    double a_lo = a - a_hi;\n\
    double cb = {splitter} * b;\n\
    double b_hi = cb - (cb - b);\n\
    double b_lo = b - b_hi;\n\
    out.lo = ((a_hi * b_hi - out.hi) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;\n\
    return out;\n\
}}\n",
        splitter = lit(SPLITTER),
    );

    // sin, cos
    let _ = write!(
        text,
        "{q} ws_reduced ws_reduce_half_pi(double x) {{\n\
    double t = x * {frac_2_pi} + {rounder};\n\
    double n = t - {rounder};\n\
    ws_reduced out;\n\
    out.quadrant = {to_bits}(t) & 3ULL;\n\
    double a = x - n * {p0};\n\
    ws_pair h1 = ws_two_sum(a, -(n * {p1}));\n\
    ws_pair h2 = ws_two_sum(h1.hi, -(n * {p2}));\n\
    double lo = h1.lo + h2.lo - n * {p3} - n * {p4};\n\
    ws_pair r = ws_fast_two_sum(h2.hi, lo);\n\
    out.hi = r.hi;\n\
    out.lo = r.lo;\n\
    return out;\n\
}}\n\
{q} ws_pair ws_sin_cos_reduced(double r_hi, double r_lo) {{\n\
    double z = r_hi * r_hi;\n\
{sin_steps}{cos_steps}\
    ws_pair out;\n\
    out.hi = r_hi - (r_hi * (z * ps) - r_lo * (1.0 - 0.5 * z));\n\
    double hz = 0.5 * z;\n\
    double w = 1.0 - hz;\n\
    out.lo = w + (((1.0 - w) - hz) + (z * z * pc - r_hi * r_lo));\n\
    return out;\n\
}}\n\
{q} double ws_by_quadrant(unsigned long long q, double sin_r, double cos_r) {{\n\
    double v = (q & 1ULL) == 1ULL ? cos_r : sin_r;\n\
    return (q & 2ULL) == 2ULL ? -v : v;\n\
}}\n\
{q} double ws_sin(double x) {{\n\
    ws_reduced r = ws_reduce_half_pi(x);\n\
    ws_pair sc = ws_sin_cos_reduced(r.hi, r.lo);\n\
    double value = ws_by_quadrant(r.quadrant, sc.hi, sc.lo);\n\
    double a = fabs(x);\n\
    return a < {tiny} ? x : (a <= {limit} ? value : {nan});\n\
}}\n\
{q} double ws_cos(double x) {{\n\
    ws_reduced r = ws_reduce_half_pi(x);\n\
    ws_pair sc = ws_sin_cos_reduced(r.hi, r.lo);\n\
    double value = ws_by_quadrant(r.quadrant + 1ULL, sc.hi, sc.lo);\n\
    return fabs(x) <= {limit} ? value : {nan};\n\
}}\n",
        frac_2_pi = lit(FRAC_2_PI),
        rounder = lit(ROUNDER),
        p0 = lit(PIO2[0]),
        p1 = lit(PIO2[1]),
        p2 = lit(PIO2[2]),
        p3 = lit(PIO2[3]),
        p4 = lit(PIO2[4]),
        sin_steps = horner("ps", "z", &SIN_COEFFICIENTS, dialect),
        cos_steps = horner("pc", "z", &COS_COEFFICIENTS, dialect),
        tiny = lit(SIN_TINY),
        limit = lit(SIN_COS_MAX_ARGUMENT),
        nan = lit(f64::NAN),
    );

    // tanh
    let _ = write!(
        text,
        "{q} double ws_tanh(double x) {{\n\
    double z = x * x;\n\
{steps}\
    double series = x + x * (z * p);\n\
    double a = fabs(x);\n\
    double e = ws_exp(2.0 * a);\n\
    double large = 1.0 - 2.0 / (e + 1.0);\n\
    large = copysign(large, x);\n\
    return a < {tiny} ? x : (a < {limit} ? series : large);\n\
}}\n",
        steps = horner("p", "z", &TANH_COEFFICIENTS, dialect),
        tiny = lit(SIN_TINY),
        limit = lit(TANH_SERIES_LIMIT),
    );

    // pow
    let _ = write!(
        text,
        "{q} ws_pair ws_log_double_double(double a) {{\n\
    ws_pair km = ws_log_reduce(a);\n\
    double k = km.hi;\n\
    double m = km.lo;\n\
    double numerator = m - 1.0;\n\
    ws_pair d = ws_two_sum(m, 1.0);\n\
    double u_hi = numerator / d.hi;\n\
    ws_pair p = ws_two_product(u_hi, d.hi);\n\
    double u_lo = (((numerator - p.hi) - p.lo) - u_hi * d.lo) / d.hi;\n\
    ws_pair zz = ws_two_product(u_hi, u_hi);\n\
    double z = zz.hi;\n\
    ws_pair cube = ws_two_product(z, u_hi);\n\
    double cube_lo = cube.lo + zz.lo * u_hi;\n\
    ws_pair third = ws_two_product(cube.hi, {c3_hi});\n\
    double third_lo = third.lo + (cube_lo * {c3_hi} + cube.hi * {c3_lo});\n\
{steps}\
    double rest = 2.0 * cube.hi * (z * q) + 2.0 * z * u_lo;\n\
    ws_pair s1 = ws_two_sum(k * {ln2_hi}, 2.0 * u_hi);\n\
    ws_pair h = ws_two_sum(s1.hi, third.hi);\n\
    double lo = (s1.lo + h.lo) + (k * {ln2_lo} + (2.0 * u_lo + (third_lo + rest)));\n\
    return ws_fast_two_sum(h.hi, lo);\n\
}}\n\
{q} double ws_pow(double x, double y) {{\n\
    double ax = fabs(x);\n\
    double ay = fabs(y);\n\
    ws_pair l = ws_log_double_double(ax);\n\
    double hi = ax == 0.0 ? {neg_inf} : (ax == {inf} ? {inf} : (ax != ax ? {nan} : l.hi));\n\
    double lo = ax == 0.0 ? 0.0 : (ax == {inf} ? 0.0 : (ax != ax ? 0.0 : l.lo));\n\
    ws_pair t0 = ws_two_product(y, hi);\n\
    double tl = t0.lo + y * lo;\n\
    ws_pair t_sum = ws_fast_two_sum(t0.hi, tl);\n\
    double t = fabs(tl) < 1.0 ? t_sum.hi : t0.hi;\n\
    t = fabs(t0.hi) < 1000.0 ? t : t0.hi;\n\
    double t_lo = fabs(tl) < 1.0 ? t_sum.lo : 0.0;\n\
    t_lo = fabs(t0.hi) < 1000.0 ? t_lo : 0.0;\n\
    double e = ws_exp(t);\n\
    double magnitude = e == {inf} ? e : e + e * t_lo;\n\
    double y_integer = (ay + {two_52}) - {two_52} == ay ? 1.0 : 0.0;\n\
    y_integer = ay >= {two_52} ? 1.0 : y_integer;\n\
    unsigned long long parity_bits = ay < {two_52} ? {to_bits}(ay + {two_52}) : {to_bits}(ay);\n\
    double parity = (parity_bits & 1ULL) == 1ULL ? 1.0 : 0.0;\n\
    double y_odd = ay < {two_53} ? y_integer * parity : 0.0;\n\
    double negated = y_odd != 0.0 ? -magnitude : magnitude;\n\
    double signed_value = ({to_bits}(x) >> 63) == 1ULL ? negated : magnitude;\n\
    double r = y_integer == 0.0 ? {nan} : signed_value;\n\
    r = x < 0.0 ? r : signed_value;\n\
    r = x > {neg_inf} ? r : signed_value;\n\
    double at_one = ay == {inf} ? 1.0 : r;\n\
    r = ax == 1.0 ? at_one : r;\n\
    r = x == 1.0 ? 1.0 : r;\n\
    return y == 0.0 ? 1.0 : r;\n\
}}\n",
        steps = horner("q", "z", &ATANH_COEFFICIENTS, dialect),
        c3_hi = lit(TWO_THIRDS_HI),
        c3_lo = lit(TWO_THIRDS_LO),
        ln2_hi = lit(LN2_HI),
        ln2_lo = lit(LN2_LO),
        inf = lit(f64::INFINITY),
        neg_inf = lit(f64::NEG_INFINITY),
        nan = lit(f64::NAN),
        two_52 = lit(TWO_52),
        two_53 = lit(TWO_53),
    );
    text
}
