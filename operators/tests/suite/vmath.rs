//! Accuracy of the vectorisable math shared by the interpreter and the
//! generated kernels (`exp`, `log`, `sin`, `cos`, `tanh`, `pow`), against
//! the platform's libm (glibc's, within one ulp of the correctly rounded
//! value and usually correctly rounded): every function stays within its
//! stated bound in units in the last place over millions of arguments
//! spanning its whole range, including subnormals, values near the
//! thresholds and, for `sin` and `cos`, arguments next to multiples of
//! `pi/2`.

use crate::common;

use common::Xorshift;
use watershed_operators::vmath::{self, ulp_distance};

/// The largest ulp distance of `ours` from `libm` over `arguments`, and
/// where.
fn worst(
    arguments: impl Iterator<Item = f64>,
    ours: impl Fn(f64) -> f64,
    libm: impl Fn(f64) -> f64,
) -> (u64, f64) {
    let mut worst = (0, 0.0);
    for x in arguments {
        let d = ulp_distance(ours(x), libm(x));
        if d > worst.0 {
            worst = (d, x);
        }
    }
    worst
}

/// Asserts `ours` within `bound` ulp of `libm` on each `(lo, hi, count)`
/// range, with arguments uniform in the range and, where `log_uniform`,
/// uniform in the logarithm of their magnitude.
fn check(
    name: &str,
    ours: impl Fn(f64) -> f64,
    libm: impl Fn(f64) -> f64,
    bound: u64,
    ranges: &[(f64, f64, usize)],
    rng: &mut Xorshift,
) {
    for &(lo, hi, count) in ranges {
        let (ulps, at) = worst((0..count).map(|_| rng.uniform(lo, hi)), &ours, &libm);
        eprintln!("{name} on [{lo:e}, {hi:e}]: at most {ulps} ulp (at {at:e})");
        assert!(
            ulps <= bound,
            "{name}({at:e}) = {:e} is {ulps} ulp from libm's {:e} (bound {bound})",
            ours(at),
            libm(at)
        );
    }
}

/// Positive arguments spread over every binade from `2^lo` to `2^hi`.
fn binades(rng: &mut Xorshift, lo: f64, hi: f64, count: usize) -> Vec<f64> {
    (0..count)
        .map(|_| rng.uniform(lo, hi).exp2() * rng.uniform(1.0, 2.0))
        .collect()
}

#[test]
fn exp_is_within_the_stated_ulps_over_its_whole_range() {
    let mut rng = Xorshift::new(2026);
    check(
        "exp",
        vmath::exp,
        f64::exp,
        vmath::MAX_ULP_ERROR,
        &[
            (-745.2, 709.8, 1_000_000),
            (-1.0, 1.0, 500_000),
            (-745.2, -708.0, 250_000), // subnormal and smallest normal results
            (700.0, 709.8, 250_000),   // largest results
        ],
        &mut rng,
    );
}

#[test]
fn exp_handles_the_edges_of_its_range() {
    for x in [
        0.0,
        -0.0,
        1e-300,
        -1e-300,
        709.78,
        709.782712893384,
        -745.13,
        -708.4,
        1.0,
        -1.0,
    ] {
        assert!(
            ulp_distance(vmath::exp(x), x.exp()) <= vmath::MAX_ULP_ERROR,
            "exp({x:e})"
        );
    }
    assert_eq!(vmath::exp(709.8), f64::INFINITY);
    assert_eq!(vmath::exp(-745.2), 0.0);
    assert!(vmath::exp(f64::NAN).is_nan());
    // The largest finite result, and the first argument that overflows.
    let last_finite = 709.782_712_893_384_f64;
    assert!(vmath::exp(last_finite).is_finite());
    assert_eq!(
        vmath::exp(f64::from_bits(last_finite.to_bits() + 1)),
        f64::INFINITY
    );
    // Arguments are clamped to [-746, 710]: every one beyond gives what
    // libm gives, never a wrapped exponent.
    for x in [709.9, 710.0, 710.5, 1e4, 1e300, f64::MAX, f64::INFINITY] {
        assert_eq!(vmath::exp(x), f64::INFINITY, "exp({x:e})");
    }
    for x in [
        -745.2,
        -746.0,
        -746.5,
        -1e4,
        -1e300,
        f64::MIN,
        f64::NEG_INFINITY,
    ] {
        assert_eq!(vmath::exp(x), 0.0, "exp({x:e})");
    }
    // The smallest subnormal result, exactly as libm rounds it.
    assert_eq!(vmath::exp(-745.13), f64::from_bits(1));
    // Every NaN, whatever its payload and sign, stays NaN (the scale built
    // from a NaN's bits is garbage; the polynomial's NaN must win).
    for bits in [
        0x7ff0_0000_0000_0001_u64,
        0x7ff8_0000_0000_0000,
        0x7fff_ffff_ffff_ffff,
        0xfff0_0000_0000_0001,
        0xfff8_0000_0000_0000,
        0xffff_ffff_ffff_ffff,
        0x7ff4_0000_0000_1234,
    ] {
        assert!(vmath::exp(f64::from_bits(bits)).is_nan(), "{bits:#x}");
    }
}

#[test]
fn log_is_within_the_stated_ulps_over_every_binade() {
    let mut rng = Xorshift::new(7);
    check(
        "log",
        vmath::log,
        f64::ln,
        vmath::LOG_MAX_ULP_ERROR,
        &[
            (0.5, 2.0, 500_000),
            (0.9, 1.1, 300_000),
            (1e-3, 1e3, 300_000),
        ],
        &mut rng,
    );
    let spread = binades(&mut rng, -1074.0, 1023.0, 600_000);
    let (ulps, at) = worst(spread.into_iter(), vmath::log, f64::ln);
    eprintln!("log over all binades (subnormals included): at most {ulps} ulp (at {at:e})");
    assert!(ulps <= vmath::LOG_MAX_ULP_ERROR, "log({at:e}): {ulps} ulp");
    // Next to 1, where the result is tiny and relative accuracy matters.
    for k in 1..2000u64 {
        for x in [
            f64::from_bits(1.0f64.to_bits() + k * 977),
            f64::from_bits(1.0f64.to_bits() - k * 977),
        ] {
            let d = ulp_distance(vmath::log(x), x.ln());
            assert!(d <= vmath::LOG_MAX_ULP_ERROR, "log({x:e}): {d} ulp");
        }
    }
}

#[test]
fn sin_and_cos_are_within_the_stated_ulps_up_to_their_limit() {
    let mut rng = Xorshift::new(8);
    let limit = vmath::SIN_COS_MAX_ARGUMENT;
    let ranges = [
        (-4.0, 4.0, 600_000),
        (-100.0, 100.0, 300_000),
        (-1e5, 1e5, 200_000),
        (-limit, limit, 200_000),
    ];
    check(
        "sin",
        vmath::sin,
        f64::sin,
        vmath::SIN_COS_MAX_ULP_ERROR,
        &ranges,
        &mut rng,
    );
    check(
        "cos",
        vmath::cos,
        f64::cos,
        vmath::SIN_COS_MAX_ULP_ERROR,
        &ranges,
        &mut rng,
    );
    // Tiny arguments, every binade down to the subnormals.
    let tiny = binades(&mut rng, -1074.0, -1.0, 200_000);
    for (name, ours, libm) in [
        (
            "sin",
            vmath::sin as fn(f64) -> f64,
            f64::sin as fn(f64) -> f64,
        ),
        ("cos", vmath::cos, f64::cos),
    ] {
        let (ulps, at) = worst(tiny.iter().copied(), ours, libm);
        assert!(
            ulps <= vmath::SIN_COS_MAX_ULP_ERROR,
            "{name}({at:e}): {ulps} ulp"
        );
    }
    // The doubles nearest to multiples of pi/2, where the reduced argument
    // cancels to a few bits (relative accuracy must survive).
    for n in (1..200_000u64).step_by(7).chain([1 << 20, (1 << 26) + 3]) {
        let centre = n as f64 * std::f64::consts::FRAC_PI_2;
        for step in -3i64..=3 {
            let x = f64::from_bits((centre.to_bits() as i64 + step) as u64);
            for (name, ours, libm) in [
                (
                    "sin",
                    vmath::sin as fn(f64) -> f64,
                    f64::sin as fn(f64) -> f64,
                ),
                ("cos", vmath::cos, f64::cos),
            ] {
                let d = ulp_distance(ours(x), libm(x));
                assert!(
                    d <= vmath::SIN_COS_MAX_ULP_ERROR,
                    "{name}({x:e}) = {:e}, libm {:e}: {d} ulp",
                    ours(x),
                    libm(x)
                );
            }
        }
    }
}

#[test]
fn sin_and_cos_refuse_arguments_beyond_their_limit_with_nan() {
    let limit = vmath::SIN_COS_MAX_ARGUMENT;
    for x in [limit * 1.000_001, -limit * 2.0, 1e300, f64::INFINITY] {
        assert!(vmath::sin(x).is_nan(), "sin({x:e})");
        assert!(vmath::cos(x).is_nan(), "cos({x:e})");
    }
    assert!(ulp_distance(vmath::sin(limit), limit.sin()) <= vmath::SIN_COS_MAX_ULP_ERROR);
}

#[test]
fn tanh_is_within_the_stated_ulps_over_its_whole_range() {
    let mut rng = Xorshift::new(9);
    check(
        "tanh",
        vmath::tanh,
        f64::tanh,
        vmath::TANH_MAX_ULP_ERROR,
        &[
            (-0.6, 0.6, 500_000), // the series and the switch at 0.55
            (-3.0, 3.0, 500_000),
            (-25.0, 25.0, 300_000),
        ],
        &mut rng,
    );
    let tiny = binades(&mut rng, -1074.0, -1.0, 200_000);
    let (ulps, at) = worst(tiny.into_iter(), vmath::tanh, f64::tanh);
    assert!(
        ulps <= vmath::TANH_MAX_ULP_ERROR,
        "tanh({at:e}): {ulps} ulp"
    );
}

#[test]
fn pow_is_within_the_stated_ulps_for_normal_results() {
    let mut rng = Xorshift::new(10);
    let mut worst_seen = (0, 0.0, 0.0);
    let mut record = |x: f64, y: f64| {
        let (ours, libm) = (vmath::pow(x, y), x.powf(y));
        if libm.is_normal() || libm == 0.0 || libm.is_infinite() {
            let d = ulp_distance(ours, libm);
            if d > worst_seen.0 {
                worst_seen = (d, x, y);
            }
        }
    };
    // Combustion-like: temperature ratios to fractional powers.
    for _ in 0..300_000 {
        record(rng.uniform(0.05, 20.0), rng.uniform(-3.0, 3.0));
    }
    // Large exponents, results across the whole normal range.
    for _ in 0..300_000 {
        let x = rng.uniform(1e-3, 1e3);
        let y = rng.uniform(-700.0, 700.0) / x.ln();
        record(x, y);
    }
    // Bases next to 1 with huge exponents (the log's low part matters).
    for _ in 0..200_000 {
        let x = 1.0 + rng.uniform(-1e-6, 1e-6);
        record(x, rng.uniform(-1e8, 1e8));
    }
    // Negative bases with integer exponents, and small integer powers.
    for _ in 0..200_000 {
        let x = rng.uniform(-50.0, 50.0);
        record(x, rng.int(0, 60) as f64 - 30.0);
    }
    let (ulps, x, y) = worst_seen;
    eprintln!("pow: at most {ulps} ulp (at x = {x:e}, y = {y:e})");
    assert!(
        ulps <= vmath::POW_MAX_ULP_ERROR,
        "pow({x:e}, {y:e}) = {:e}, libm {:e}: {ulps} ulp",
        vmath::pow(x, y),
        x.powf(y)
    );
}

#[test]
fn pow_special_cases_match_libm_on_a_grid_of_edges() {
    let edges = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.0,
        -3.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::from_bits(1),
        f64::MAX,
        9_007_199_254_740_993.0,
        4_503_599_627_370_497.0,
    ];
    for &x in &edges {
        for &y in &edges {
            let (ours, libm) = (vmath::pow(x, y), x.powf(y));
            let same = ours.to_bits() == libm.to_bits() || (ours.is_nan() && libm.is_nan());
            let close = ours.is_finite()
                && libm.is_normal()
                && ulp_distance(ours, libm) <= vmath::POW_MAX_ULP_ERROR;
            assert!(same || close, "pow({x:e}, {y:e}) = {ours:e}, libm {libm:e}");
        }
    }
}
