//! Analytic accuracy of the staggered stencils.
//!
//! Smooth functions are sampled on a sequence of refined grids (ghost points
//! filled with the analytic values too), the operators are applied, and the
//! max-norm error over the interior against the analytic derivative is
//! measured. The observed order `p = log(e_coarse / e_fine) / log 2` must be
//! second order, `|p - 2| < 0.1`, for the face gradient, the divergence of a
//! face field, the cell Laplacian and the variable-coefficient diffusion
//! operator `div(interp(gamma) * grad(phi))`, in 1D, 2D and 3D.
//!
//! On quadratic polynomials (and linear coefficients) these operators have
//! no truncation error at all, so they must be exact to round-off.

use crate::common;

use common::*;
use std::f64::consts::PI;
use watershed_fields::{CellCentre, Grid, Location, Patch, SpatialField, XFace, YFace, ZFace};
use watershed_operators::*;

/// Max-norm error of `field` over its interior against `exact` evaluated at
/// each point's coordinates.
fn max_error<L: Location>(field: &SpatialField<L>, exact: impl Fn([f64; 3]) -> f64) -> f64 {
    let layout = field.layout();
    layout
        .interior()
        .iter()
        .map(|i| (at(field, i) - exact(layout.coordinate(i))).abs())
        .fold(0.0, f64::max)
}

/// The observed orders between consecutive errors of grids refined by 2.
fn orders(errors: &[f64]) -> Vec<f64> {
    errors
        .windows(2)
        .map(|pair| (pair[0] / pair[1]).ln() / 2f64.ln())
        .collect()
}

/// Asserts the last `pairs` observed orders of `errors` are 2 within 0.1.
#[track_caller]
fn assert_second_order(what: &str, errors: &[f64], pairs: usize) {
    let p = orders(errors);
    eprintln!("{what}: orders {p:?} errors {errors:?}");
    for &order in &p[p.len() - pairs..] {
        assert!(
            (order - 2.0).abs() < 0.1,
            "{what}: observed orders {p:?} from max errors {errors:?}"
        );
    }
}

/// The unit square `[0, 1]^2` (nz = 1) with `n x n` cells and one ghost layer.
fn square(n: usize) -> Patch {
    Grid::new([n, n, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1)
}

/// Grid sizes of the 2D studies.
const SIZES_2D: [usize; 3] = [16, 32, 64];

/// The test function of the 2D studies and its derivatives.
fn phi(x: [f64; 3]) -> f64 {
    (2.0 * PI * x[0]).sin() * (PI * x[1]).cos()
}
fn phi_x(x: [f64; 3]) -> f64 {
    2.0 * PI * (2.0 * PI * x[0]).cos() * (PI * x[1]).cos()
}
fn phi_y(x: [f64; 3]) -> f64 {
    -PI * (2.0 * PI * x[0]).sin() * (PI * x[1]).sin()
}
fn phi_laplacian(x: [f64; 3]) -> f64 {
    -5.0 * PI * PI * phi(x)
}

#[test]
fn gradient_on_faces_is_second_order() {
    let (mut ex, mut ey) = (Vec::new(), Vec::new());
    for n in SIZES_2D {
        let patch = square(n);
        let p = field_from::<CellCentre>("phi", &patch, |_, x| phi(x));
        let mut gx = sentinel_target::<XFace>("gx", &patch);
        let mut gy = sentinel_target::<YFace>("gy", &patch);
        gx.assign(gradient::<XFace>(&p)).unwrap();
        gy.assign(gradient::<YFace>(&p)).unwrap();
        ex.push(max_error(&gx, phi_x));
        ey.push(max_error(&gy, phi_y));
    }
    assert_second_order("d/dx on x faces", &ex, 2);
    assert_second_order("d/dy on y faces", &ey, 2);
}

#[test]
fn gradient_in_1d_is_second_order() {
    let f = |x: [f64; 3]| x[0].exp() * (3.0 * x[0]).sin();
    let df = |x: [f64; 3]| x[0].exp() * ((3.0 * x[0]).sin() + 3.0 * (3.0 * x[0]).cos());
    let mut errors = Vec::new();
    for n in SIZES_2D {
        let patch = Grid::new([n, 1, 1], [2.0, 1.0, 1.0], [-0.5, 0.0, 0.0])
            .unwrap()
            .whole_domain(1);
        let cells = field_from::<CellCentre>("f", &patch, |_, x| f(x));
        let mut faces = sentinel_target::<XFace>("df", &patch);
        faces.assign(grad(&cells).x.unwrap()).unwrap();
        errors.push(max_error(&faces, df));
    }
    assert_second_order("1D gradient", &errors, 2);
}

#[test]
fn divergence_of_a_face_field_is_second_order() {
    // F = (sin(2 pi x) cos(pi y), cos(pi x) sin(2 pi y)).
    let fx = |x: [f64; 3]| (2.0 * PI * x[0]).sin() * (PI * x[1]).cos();
    let fy = |x: [f64; 3]| (PI * x[0]).cos() * (2.0 * PI * x[1]).sin();
    let div_f = |x: [f64; 3]| {
        2.0 * PI * (2.0 * PI * x[0]).cos() * (PI * x[1]).cos()
            + 2.0 * PI * (PI * x[0]).cos() * (2.0 * PI * x[1]).cos()
    };
    let mut errors = Vec::new();
    for n in SIZES_2D {
        let patch = square(n);
        let x_faces = field_from::<XFace>("Fx", &patch, |_, x| fx(x));
        let y_faces = field_from::<YFace>("Fy", &patch, |_, x| fy(x));
        let mut cells = sentinel_target::<CellCentre>("divF", &patch);
        cells
            .assign(div(FaceVector {
                x: Some(field(&x_faces)),
                y: Some(field(&y_faces)),
                z: None,
            }))
            .unwrap();
        errors.push(max_error(&cells, div_f));
    }
    assert_second_order("divergence", &errors, 2);
}

#[test]
fn laplacian_on_cells_is_second_order() {
    let mut errors = Vec::new();
    for n in SIZES_2D {
        let patch = square(n);
        let p = field_from::<CellCentre>("phi", &patch, |_, x| phi(x));
        let mut lap = sentinel_target::<CellCentre>("lap", &patch);
        lap.assign(laplacian(&p)).unwrap();
        errors.push(max_error(&lap, phi_laplacian));
    }
    assert_second_order("laplacian", &errors, 2);
}

#[test]
fn variable_coefficient_diffusion_is_second_order_in_2d() {
    // div(gamma grad phi) = gamma lap(phi) + grad(gamma) . grad(phi).
    let gamma = |x: [f64; 3]| 1.0 + 0.5 * (PI * x[0]).sin() * (PI * x[1]).sin();
    let gamma_x = |x: [f64; 3]| 0.5 * PI * (PI * x[0]).cos() * (PI * x[1]).sin();
    let gamma_y = |x: [f64; 3]| 0.5 * PI * (PI * x[0]).sin() * (PI * x[1]).cos();
    let exact =
        |x: [f64; 3]| gamma(x) * phi_laplacian(x) + gamma_x(x) * phi_x(x) + gamma_y(x) * phi_y(x);
    let mut errors = Vec::new();
    for n in SIZES_2D {
        let patch = square(n);
        let p = field_from::<CellCentre>("phi", &patch, |_, x| phi(x));
        let g = field_from::<CellCentre>("gamma", &patch, |_, x| gamma(x));
        let mut rhs = sentinel_target::<CellCentre>("rhs", &patch);
        rhs.assign(div(interp(&g) * grad(&p))).unwrap();
        errors.push(max_error(&rhs, exact));
    }
    assert_second_order("div(interp(gamma) grad(phi)) in 2D", &errors, 2);
}

#[test]
fn variable_coefficient_diffusion_is_second_order_in_3d() {
    let phi3 = |x: [f64; 3]| (PI * x[0]).sin() * (PI * x[1]).cos() * (PI * x[2]).sin();
    let grad3 = |x: [f64; 3]| {
        let (s, c) = (x.map(|v| (PI * v).sin()), x.map(|v| (PI * v).cos()));
        [
            PI * c[0] * c[1] * s[2],
            -PI * s[0] * s[1] * s[2],
            PI * s[0] * c[1] * c[2],
        ]
    };
    let gamma = |x: [f64; 3]| 2.0 + x[0] * x[1] + (PI * x[2]).cos();
    let grad_gamma = |x: [f64; 3]| [x[1], x[0], -PI * (PI * x[2]).sin()];
    let exact = |x: [f64; 3]| {
        let (gp, gg) = (grad3(x), grad_gamma(x));
        gamma(x) * (-3.0 * PI * PI * phi3(x)) + gp[0] * gg[0] + gp[1] * gg[1] + gp[2] * gg[2]
    };
    let mut errors = Vec::new();
    for n in [6, 12, 24] {
        let patch = Grid::new([n; 3], [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let p = field_from::<CellCentre>("phi", &patch, |_, x| phi3(x));
        let g = field_from::<CellCentre>("gamma", &patch, |_, x| gamma(x));
        let mut rhs = sentinel_target::<CellCentre>("rhs", &patch);
        rhs.assign(div(interp(&g) * grad(&p))).unwrap();
        errors.push(max_error(&rhs, exact));
    }
    // The 6^3 grid is too coarse to be asymptotic; the last pair decides.
    assert_second_order("div(interp(gamma) grad(phi)) in 3D", &errors, 1);
}

/// A quadratic in 3D with mixed terms, its gradient and (constant) Laplacian.
fn quadratic(x: [f64; 3]) -> f64 {
    let [x, y, z] = x;
    1.0 + 2.0 * x - 3.0 * y + 0.5 * z + x * x - 2.0 * y * y + 1.5 * z * z + x * y - y * z
        + 0.25 * x * z
}
fn quadratic_gradient(x: [f64; 3]) -> [f64; 3] {
    let [x, y, z] = x;
    [
        2.0 + 2.0 * x + y + 0.25 * z,
        -3.0 - 4.0 * y + x - z,
        0.5 + 3.0 * z - y + 0.25 * x,
    ]
}
const QUADRATIC_LAPLACIAN: f64 = 2.0 - 4.0 + 3.0;

/// The largest error of `field` over its interior against `exact`, which
/// must be round-off: `tolerance`.
#[track_caller]
fn assert_exact<L: Location>(
    what: &str,
    field: &SpatialField<L>,
    exact: impl Fn([f64; 3]) -> f64,
    tolerance: f64,
) {
    let error = max_error(field, exact);
    assert!(
        error <= tolerance,
        "{what}: max error {error:e} exceeds round-off {tolerance:e}"
    );
}

#[test]
fn quadratics_are_differentiated_exactly() {
    // An anisotropic box away from the origin, on a partial patch.
    let grid = Grid::new([9, 7, 8], [1.2, 0.9, 1.6], [-0.3, 0.4, -1.0]).unwrap();
    let patch = Patch::new(
        &grid,
        [1, 0, 2],
        [7, 7, 5],
        watershed_fields::GhostWidth::uniform(1),
    )
    .unwrap();
    let p = field_from::<CellCentre>("q", &patch, |_, x| quadratic(x));
    let magnitude = p
        .values()
        .unwrap()
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let h_min = grid.spacing().into_iter().fold(f64::INFINITY, f64::min);
    // Round-off of a difference quotient of values of size `magnitude`.
    let first = 64.0 * f64::EPSILON * magnitude / h_min;
    let second = 64.0 * f64::EPSILON * magnitude / (h_min * h_min);

    let mut gx = sentinel_target::<XFace>("gx", &patch);
    let mut gy = sentinel_target::<YFace>("gy", &patch);
    let mut gz = sentinel_target::<ZFace>("gz", &patch);
    gx.assign(gradient::<XFace>(&p)).unwrap();
    gy.assign(gradient::<YFace>(&p)).unwrap();
    gz.assign(gradient::<ZFace>(&p)).unwrap();
    assert_exact("d/dx", &gx, |x| quadratic_gradient(x)[0], first);
    assert_exact("d/dy", &gy, |x| quadratic_gradient(x)[1], first);
    assert_exact("d/dz", &gz, |x| quadratic_gradient(x)[2], first);

    let mut cells = sentinel_target::<CellCentre>("lap", &patch);
    cells.assign(laplacian(&p)).unwrap();
    assert_exact("laplacian", &cells, |_| QUADRATIC_LAPLACIAN, second);

    // Linear gamma: interpolation is exact, and gamma * d(phi)/dx is a
    // quadratic flux whose divergence is exact as well.
    let gamma = |x: [f64; 3]| 1.0 + 0.5 * x[0] + 0.25 * x[1] - 0.1 * x[2];
    let g = field_from::<CellCentre>("gamma", &patch, |_, x| gamma(x));
    gx.assign(interpolate_to_face::<XFace>(&g)).unwrap();
    assert_exact("interpolated gamma", &gx, gamma, 16.0 * f64::EPSILON * 4.0);
    cells.assign(div(interp(&g) * grad(&p))).unwrap();
    let exact = |x: [f64; 3]| {
        let gp = quadratic_gradient(x);
        gamma(x) * QUADRATIC_LAPLACIAN + 0.5 * gp[0] + 0.25 * gp[1] - 0.1 * gp[2]
    };
    assert_exact("div(interp(gamma) grad(q))", &cells, exact, 8.0 * second);
}

#[test]
fn interpolation_to_faces_and_back_is_second_order() {
    let mut to_face = Vec::new();
    let mut to_cell = Vec::new();
    for n in SIZES_2D {
        let patch = square(n);
        let cells = field_from::<CellCentre>("phi", &patch, |_, x| phi(x));
        let faces = field_from::<YFace>("phi_y", &patch, |_, x| phi(x));
        let mut on_faces = sentinel_target::<YFace>("f", &patch);
        on_faces
            .assign(interpolate_to_face::<YFace>(&cells))
            .unwrap();
        to_face.push(max_error(&on_faces, phi));
        let mut on_cells = sentinel_target::<CellCentre>("c", &patch);
        on_cells
            .assign(interpolate_to_cell::<YFace>(&faces))
            .unwrap();
        to_cell.push(max_error(&on_cells, phi));
    }
    assert_second_order("interpolation to y faces", &to_face, 2);
    assert_second_order("interpolation from y faces", &to_cell, 2);
}
