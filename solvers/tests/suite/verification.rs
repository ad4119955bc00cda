//! Verification of the transport solver against analytic solutions:
//! spatial and temporal order of accuracy for the heat equation, order of
//! central and upwind advection, and boundedness of limited advection.

use std::f64::consts::PI;
use watershed_exprgraph::Tag;
use watershed_fields::{CellCentre, Grid, LocationKind, SpatialField, XFace};
use watershed_operators::Limiter;
use watershed_solvers::*;

/// Max-norm difference between the interior of `u` and `exact(x, y, z)`.
fn max_error(u: &SpatialField<CellCentre>, exact: impl Fn([f64; 3]) -> f64) -> f64 {
    let layout = u.layout();
    let values = u.values().expect("cpu");
    layout
        .interior()
        .iter()
        .map(|i| (values[layout.linear_index(i)] - exact(layout.coordinate(i))).abs())
        .fold(0.0, f64::max)
}

fn order(coarse: f64, fine: f64) -> f64 {
    (coarse / fine).log2()
}

/// 2D heat equation, T = exp(-2 pi^2 alpha t) sin(pi x) sin(pi y), T = 0 on
/// the boundary; returns the max-norm error at `end`.
fn heat_error(n: usize, integrator: TimeIntegrator, dt: f64, end: f64) -> (f64, f64) {
    let alpha = 1.0;
    let patch = Grid::new([n, n, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let equation = TransportEquation::new("T")
        .diffusion(Diffusivity::Constant(alpha))
        .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0)));
    let mut solver = TransportSolverBuilder::new(&patch)
        .equation(equation)
        .integrator(integrator)
        .build()
        .unwrap();
    solver
        .set_initial_condition("T", |[x, y, _]| (PI * x).sin() * (PI * y).sin())
        .unwrap();
    solver.advance(end, TimeStep::Fixed(dt)).unwrap();
    assert!((solver.time() - end).abs() < 1e-12);
    // Exact PDE solution, and the exact solution of the semi-discrete system
    // (the sampled sine is an eigenvector of the discrete Laplacian with
    // these boundary conditions).
    let h = 1.0 / n as f64;
    let lambda_h = -2.0 * 4.0 / (h * h) * (PI * h / 2.0).sin().powi(2) * alpha;
    let pde = solver
        .with_solution("T", |u| {
            max_error(u, |[x, y, _]| {
                (-2.0 * PI * PI * alpha * end).exp() * (PI * x).sin() * (PI * y).sin()
            })
        })
        .unwrap();
    let semi = solver
        .with_solution("T", |u| {
            max_error(u, |[x, y, _]| {
                (lambda_h * end).exp() * (PI * x).sin() * (PI * y).sin()
            })
        })
        .unwrap();
    (pde, semi)
}

#[test]
fn heat_equation_converges_at_second_order_in_space() {
    let end = 0.02;
    let errors: Vec<f64> = [8, 16, 32]
        .iter()
        .map(|&n| {
            let h = 1.0 / n as f64;
            // RK3 with a small step: the time error is far below the space error.
            heat_error(n, TimeIntegrator::SspRk3, 0.05 * h * h, end).0
        })
        .collect();
    for pair in errors.windows(2) {
        let p = order(pair[0], pair[1]);
        assert!(
            (p - 2.0).abs() < 0.1,
            "spatial order {p} from errors {errors:?}"
        );
    }
}

#[test]
fn heat_equation_converges_at_first_second_and_third_order_in_time() {
    let end = 0.02;
    for (integrator, expected) in [
        (TimeIntegrator::ForwardEuler, 1.0),
        (TimeIntegrator::SspRk2, 2.0),
        (TimeIntegrator::SspRk3, 3.0),
    ] {
        // Error against the semi-discrete solution isolates the time error.
        let errors: Vec<f64> = [4e-4, 2e-4, 1e-4]
            .iter()
            .map(|&dt| heat_error(16, integrator, dt, end).1)
            .collect();
        for pair in errors.windows(2) {
            let p = order(pair[0], pair[1]);
            assert!(
                (p - expected).abs() < 0.1,
                "{integrator:?}: temporal order {p} from {errors:?}"
            );
        }
        assert_eq!(integrator.order() as f64, expected);
    }
}

/// 1D periodic advection at unit speed; returns the max-norm error of the
/// smooth profile after `end`, or the extrema of a square wave.
fn advect(
    n: usize,
    scheme: ConvectiveScheme,
    initial: fn(f64) -> f64,
    end: f64,
    cfl: f64,
) -> (SpatialField<CellCentre>, f64) {
    let grid = Grid::new([n, 1, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, false, false]);
    let patch = grid.whole_domain(2);
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let mut builder = TransportSolverBuilder::new(&patch)
        .equation(TransportEquation::new("c").convection(velocity.clone(), scheme));
    builder
        .factory_mut()
        .placeholder(velocity[0].clone(), LocationKind::XFace)
        .unwrap();
    let mut solver = builder.integrator(TimeIntegrator::SspRk3).build().unwrap();
    solver
        .graph()
        .with_field_mut::<XFace, _>(&velocity[0], |u| u.fill(1.0))
        .unwrap()
        .unwrap();
    solver
        .set_initial_condition("c", |[x, _, _]| initial(x))
        .unwrap();
    let steps = solver
        .advance(
            end,
            TimeStep::Limited {
                cfl,
                // Positive as required; no diffusion, so it limits nothing.
                diffusion_number: 0.5,
            },
        )
        .unwrap();
    assert!(steps > 0);
    let error = solver
        .with_solution("c", |u| {
            max_error(u, |[x, _, _]| initial((x - end).rem_euclid(1.0)))
        })
        .unwrap();
    let copy = solver
        .with_solution("c", |u| {
            let mut c =
                SpatialField::<CellCentre>::new("copy", &patch, watershed_fields::Device::Cpu)
                    .unwrap();
            c.values_mut().unwrap().copy_from_slice(u.values().unwrap());
            c
        })
        .unwrap();
    (copy, error)
}

fn smooth(x: f64) -> f64 {
    (2.0 * PI * x).sin()
}

fn square(x: f64) -> f64 {
    if (0.25..0.5).contains(&x) { 1.0 } else { 0.0 }
}

#[test]
fn central_advection_converges_at_second_order() {
    let errors: Vec<f64> = [32, 64, 128]
        .iter()
        .map(|&n| advect(n, ConvectiveScheme::Central, smooth, 0.25, 0.1).1)
        .collect();
    for pair in errors.windows(2) {
        let p = order(pair[0], pair[1]);
        assert!((p - 2.0).abs() < 0.1, "central order {p} from {errors:?}");
    }
}

#[test]
fn upwind_advection_converges_at_first_order() {
    let errors: Vec<f64> = [64, 128, 256]
        .iter()
        .map(|&n| advect(n, ConvectiveScheme::Upwind, smooth, 0.25, 0.1).1)
        .collect();
    for pair in errors.windows(2) {
        let p = order(pair[0], pair[1]);
        assert!((p - 1.0).abs() < 0.1, "upwind order {p} from {errors:?}");
    }
}

#[test]
fn limited_advection_of_a_square_wave_creates_no_new_extrema() {
    for limiter in [Limiter::Minmod, Limiter::VanLeer, Limiter::Superbee] {
        let (c, _) = advect(100, ConvectiveScheme::Limited(limiter), square, 0.3, 0.4);
        let values = c.interior_view().unwrap();
        let (low, high) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                (l.min(v), h.max(v))
            });
        assert!(
            low >= -1e-12 && high <= 1.0 + 1e-12,
            "{limiter:?}: values in [{low}, {high}]"
        );
        // And it did move and spread the wave (not a frozen solution).
        assert!(
            high > 0.9 && values.iter().filter(|&&v| v > 0.5).count() > 10,
            "{limiter:?}"
        );
    }
    // Central differencing of the same wave overshoots: the check can fail.
    let (c, _) = advect(100, ConvectiveScheme::Central, square, 0.3, 0.4);
    let high = c
        .interior_view()
        .unwrap()
        .iter()
        .fold(f64::NEG_INFINITY, |h, &v| h.max(v));
    assert!(
        high > 1.01,
        "central advection should overshoot, max {high}"
    );
}
