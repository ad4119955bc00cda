//! Accuracy of the vectorisable `exp` shared by the interpreter and the
//! generated kernels, against the platform's `f64::exp` (glibc's, correctly
//! rounded in practice): at most `vmath::MAX_ULP_ERROR` units in the last
//! place over 2 million arguments spanning the whole range, including the
//! subnormal results near the underflow threshold.

mod common;

use common::Xorshift;
use watershed_operators::vmath::{MAX_ULP_ERROR, exp, ulp_distance};

fn worst(arguments: impl Iterator<Item = f64>) -> (u64, f64) {
    let mut worst = (0, 0.0);
    for x in arguments {
        let d = ulp_distance(exp(x), x.exp());
        if d > worst.0 {
            worst = (d, x);
        }
    }
    worst
}

#[test]
fn exp_is_within_the_stated_ulps_over_its_whole_range() {
    let mut rng = Xorshift::new(2026);
    let ranges = [
        (-745.2, 709.8, 1_000_000),
        (-1.0, 1.0, 500_000),
        (-745.2, -708.0, 250_000), // subnormal and smallest normal results
        (700.0, 709.8, 250_000),   // largest results
    ];
    for (lo, hi, count) in ranges {
        let (ulps, at) = worst((0..count).map(|_| rng.uniform(lo, hi)));
        eprintln!("exp on [{lo}, {hi}]: at most {ulps} ulp (at {at:e})");
        assert!(
            ulps <= MAX_ULP_ERROR,
            "exp({at:e}) is {ulps} ulp from the correctly rounded value"
        );
    }
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
        assert!(ulp_distance(exp(x), x.exp()) <= MAX_ULP_ERROR, "exp({x:e})");
    }
    assert_eq!(exp(709.8), f64::INFINITY);
    assert_eq!(exp(-745.2), 0.0);
    assert!(exp(f64::NAN).is_nan());
}
