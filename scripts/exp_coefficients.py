#!/usr/bin/env python3
"""The polynomial coefficients of Watershed's vectorised `exp`
(`language/src/vmath/functions.rs`, `EXP_COEFFICIENTS`).

`exp` reduces its argument to |r| <= ln 2 / 2 and evaluates
e^r = 1 + r (1 + r q(r)) in Horner steps. This script fits q, the degree-9
Chebyshev interpolant of (e^r - 1 - r) / r^2 on |r| <= ln 2 / 2 + 5e-4
(a margin for the rounding of n = round(x / ln 2)), rounds the coefficients
to doubles, and reports the worst relative error of the polynomial with
the rounded coefficients (evaluated exactly, in 40 digits) against e^r on a
dense grid, in units of 2^-53. It prints the coefficients highest first,
as the Rust constant lists them (followed there by the two 1.0 steps).

Run: python3 scripts/exp_coefficients.py  (needs mpmath: pip install mpmath)
"""
import mpmath as mp

mp.mp.dps = 40
HALF_WIDTH = mp.log(2) / 2 + mp.mpf("0.0005")
DEGREE = 9


def q(r):
    """(e^r - 1 - r) / r^2, with its limit near 0."""
    if abs(r) < mp.mpf("1e-15"):
        return mp.mpf(1) / 2 + r / 6
    return (mp.exp(r) - 1 - r) / r**2


def main():
    poly, err = mp.chebyfit(q, [-HALF_WIDTH, HALF_WIDTH], DEGREE + 1, error=True)
    coefficients = [float(c) for c in poly]  # highest first
    worst = mp.mpf(0)
    samples = 8000
    for i in range(samples + 1):
        r = -HALF_WIDTH + 2 * HALF_WIDTH * i / samples
        value = mp.mpf(0)
        for c in coefficients:
            value = value * r + mp.mpf(c)
        approximation = 1 + r * (1 + r * value)
        worst = max(worst, abs(approximation / mp.exp(r) - 1))
    print(f"Chebyshev error of q: {mp.nstr(err, 5)}")
    print(
        f"worst relative error of e^r with rounded coefficients: {mp.nstr(worst, 5)}"
        f" ({mp.nstr(worst / mp.mpf(2) ** -53, 4)} ulp of 2^-53)"
    )
    for c in coefficients:
        print(repr(c))


if __name__ == "__main__":
    main()
