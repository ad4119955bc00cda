//! Boundary values given as expressions of position and time
//! (`BoundaryCondition::DirichletExpression`, `NeumannExpression`,
//! `FluxExpression`), against exact solutions: each Runge-Kutta stage's
//! ghosts bound that stage's own state (third order in time with SSP-RK3),
//! second order in space, Neumann and flux values on every side in 2D and
//! 3D, face fields at their own positions, and the errors.

use std::f64::consts::PI;
use watershed_fields::{CellCentre, Device, Grid, SpatialField, XFace};
use watershed_operators::{Expr, Parameter, Side, cos, exp, field};
use watershed_solvers::*;

fn max_error(u: &SpatialField<CellCentre>, exact: impl Fn([f64; 3]) -> f64) -> f64 {
    let layout = u.layout();
    let values = u.values().expect("cpu");
    layout
        .interior()
        .iter()
        .map(|i| (values[layout.linear_index(i)] - exact(layout.coordinate(i))).abs())
        .fold(0.0, f64::max)
}

const K: f64 = 1.0;
const OMEGA: f64 = 2.0;
const PHASE: f64 = 0.3;

/// u = exp(-k w^2 t) cos(w x + phase): an exact solution of u_t = k u_xx
/// whose boundary values on x = 0 and x = 1 change in time.
fn decaying_wave([x, _, _]: [f64; 3], t: f64) -> f64 {
    (-K * OMEGA * OMEGA * t).exp() * (OMEGA * x + PHASE).cos()
}

/// The same as a boundary expression.
fn decaying_wave_on_the_boundary() -> BoundaryExpression {
    BoundaryExpression::new("decaying wave", |p| {
        exp(-K * OMEGA * OMEGA * p.t.clone()) * cos(OMEGA * p.x.clone() + PHASE)
    })
}

/// The 1D heat equation on `n` cells with the decaying wave's values on
/// both ends, advanced to `end` in steps of `dt`; the solution's interior
/// values with their positions.
fn decaying_wave_run(
    n: usize,
    integrator: TimeIntegrator,
    dt: f64,
    end: f64,
) -> Vec<([f64; 3], f64)> {
    let patch = Grid::new([n, 1, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let ends = BoundaryConditions::new()
        .with(
            Side::MINUS_X,
            BoundaryCondition::DirichletExpression(decaying_wave_on_the_boundary()),
        )
        .with(
            Side::PLUS_X,
            BoundaryCondition::DirichletExpression(decaying_wave_on_the_boundary()),
        );
    let mut solver = TransportSolverBuilder::new(&patch)
        .equation(
            TransportEquation::new("u")
                .diffusion(Diffusivity::Constant(K))
                .boundary_conditions(ends),
        )
        .integrator(integrator)
        .build()
        .unwrap();
    solver
        .set_initial_condition("u", |x| decaying_wave(x, 0.0))
        .unwrap();
    solver.advance(end, TimeStep::Fixed(dt)).unwrap();
    assert!((solver.time() - end).abs() < 1e-12);
    solver
        .with_solution("u", |u| {
            let layout = u.layout();
            let values = u.values().unwrap();
            layout
                .interior()
                .iter()
                .map(|i| (layout.coordinate(i), values[layout.linear_index(i)]))
                .collect()
        })
        .unwrap()
}

fn difference(a: &[([f64; 3], f64)], b: &[([f64; 3], f64)]) -> f64 {
    a.iter()
        .zip(b)
        .map(|((_, a), (_, b))| (a - b).abs())
        .fold(0.0, f64::max)
}

#[test]
fn a_time_dependent_dirichlet_value_keeps_ssp_rk3_third_order_in_time() {
    // Against a run with a 16 times smaller step on the same grid: the
    // space error cancels, the time error is left. Evaluated at the time
    // of the right-hand side instead of each stage's own state (a
    // mutation tried once), the boundary values made it order 1.8 with
    // ten times the error.
    let (n, end) = (24, 0.02);
    let reference = decaying_wave_run(n, TimeIntegrator::SspRk3, 5e-4 / 16.0, end);
    let errors: Vec<f64> = [5e-4, 2.5e-4, 1.25e-4]
        .iter()
        .map(|&dt| {
            difference(
                &decaying_wave_run(n, TimeIntegrator::SspRk3, dt, end),
                &reference,
            )
        })
        .collect();
    for pair in errors.windows(2) {
        let order = (pair[0] / pair[1]).log2();
        assert!(
            (order - 3.0).abs() < 0.25,
            "temporal order {order} from {errors:?}"
        );
    }
    // Forward Euler and SSP-RK2 keep theirs too (SSP-RK2 at least: its
    // error falls a little faster than second order at these steps).
    for (integrator, expected) in [
        (TimeIntegrator::ForwardEuler, 1.0),
        (TimeIntegrator::SspRk2, 2.0),
    ] {
        let reference = decaying_wave_run(n, integrator, 5e-4 / 64.0, end);
        let errors: Vec<f64> = [5e-4, 2.5e-4, 1.25e-4]
            .iter()
            .map(|&dt| difference(&decaying_wave_run(n, integrator, dt, end), &reference))
            .collect();
        eprintln!("{integrator:?}: errors {errors:?}");
        for pair in errors.windows(2) {
            let order = (pair[0] / pair[1]).log2();
            assert!(
                order > expected - 0.2 && order < expected + 0.5,
                "{integrator:?}: order {order} from {errors:?}"
            );
        }
    }
}

#[test]
fn a_time_dependent_dirichlet_value_converges_at_second_order_in_space() {
    let end = 0.02;
    let errors: Vec<f64> = [16, 32, 64]
        .iter()
        .map(|&n| {
            let h = 1.0 / n as f64;
            decaying_wave_run(n, TimeIntegrator::SspRk3, 0.05 * h * h, end)
                .iter()
                .map(|(x, u)| (u - decaying_wave(*x, end)).abs())
                .fold(0.0, f64::max)
        })
        .collect();
    for pair in errors.windows(2) {
        let order = (pair[0] / pair[1]).log2();
        assert!(
            (order - 2.0).abs() < 0.15,
            "spatial order {order} from {errors:?}"
        );
    }
    assert!(errors[2] < 2e-4, "{errors:?}");
    eprintln!("space errors {errors:?}");
}

/// u = x^2 + y z + z^2 / 2 + a t with a = k (2 + 1): quadratic in space,
/// linear in time, so second-order differences and any Runge-Kutta scheme
/// reproduce it exactly, if every boundary value is right at every stage.
/// (In 2D, z = 0 and a = 2 k.)
fn quadratic([x, y, z]: [f64; 3], t: f64, three_d: bool) -> f64 {
    let rate = if three_d { 3.0 * K } else { 2.0 * K };
    x * x + y * z + z * z / 2.0 + rate * t
}

/// Every kind of expression condition, one per side: Neumann on -x and
/// +x, Dirichlet with the time on -y (where u is linear along the normal,
/// so the mirror is exact), a flux on +y, and on z (3D) a Neumann value
/// and a flux that read the coordinates across the side.
fn quadratic_conditions(three_d: bool) -> BoundaryConditions {
    let rate = if three_d { 3.0 * K } else { 2.0 * K };
    // Outward derivatives: du/dx = 2x, du/dy = z, du/dz = y + z.
    let on_minus_x = BoundaryExpression::new("-du/dx on -x", |p| -2.0 * p.x.clone());
    let on_plus_x = BoundaryExpression::new("du/dx on +x", |p| 2.0 * p.x.clone());
    let dirichlet = BoundaryExpression::new("u on -y", move |p| {
        p.x.clone() * p.x.clone()
            + p.y.clone() * p.z.clone()
            + 0.5 * p.z.clone() * p.z.clone()
            + rate * p.t.clone()
    });
    // Flux -k du/dn outward on +y: -k z.
    let flux_plus_y = BoundaryExpression::new("flux on +y", |p| -K * p.z.clone());
    let mut conditions = BoundaryConditions::new()
        .with(
            Side::MINUS_X,
            BoundaryCondition::NeumannExpression(on_minus_x),
        )
        .with(
            Side::PLUS_X,
            BoundaryCondition::NeumannExpression(on_plus_x),
        )
        .with(
            Side::MINUS_Y,
            BoundaryCondition::DirichletExpression(dirichlet),
        )
        .with(
            Side::PLUS_Y,
            BoundaryCondition::FluxExpression {
                flux: flux_plus_y,
                diffusivity: K,
            },
        );
    if three_d {
        let on_minus_z =
            BoundaryExpression::new("-du/dz on -z", |p| -1.0 * (p.y.clone() + p.z.clone()));
        let flux_plus_z =
            BoundaryExpression::new("flux on +z", |p| -K * (p.y.clone() + p.z.clone()));
        conditions = conditions
            .with(
                Side::MINUS_Z,
                BoundaryCondition::NeumannExpression(on_minus_z),
            )
            .with(
                Side::PLUS_Z,
                BoundaryCondition::FluxExpression {
                    flux: flux_plus_z,
                    diffusivity: K,
                },
            );
    }
    conditions
}

#[test]
fn neumann_and_flux_expressions_on_every_side_give_the_exact_solution_in_2d_and_3d() {
    for three_d in [false, true] {
        let cells = if three_d { [6, 5, 4] } else { [8, 6, 1] };
        let lengths = [1.0, 0.8, 0.6];
        let patch = Grid::new(cells, lengths, [0.1, -0.2, 0.3])
            .unwrap()
            .whole_domain(1);
        for integrator in [TimeIntegrator::ForwardEuler, TimeIntegrator::SspRk3] {
            let mut solver = TransportSolverBuilder::new(&patch)
                .equation(
                    TransportEquation::new("u")
                        .diffusion(Diffusivity::Constant(K))
                        .boundary_conditions(quadratic_conditions(three_d)),
                )
                .integrator(integrator)
                .build()
                .unwrap();
            solver
                .set_initial_condition("u", |x| quadratic(x, 0.0, three_d))
                .unwrap();
            let end = 0.01;
            solver.advance(end, TimeStep::Fixed(1e-3)).unwrap();
            let error = solver
                .with_solution("u", |u| max_error(u, |x| quadratic(x, end, three_d)))
                .unwrap();
            assert!(
                error < 1e-12,
                "{integrator:?}, 3D {three_d}: error {error:e}"
            );
        }
    }
}

#[test]
fn a_face_field_gets_values_at_its_own_positions_and_time() {
    // u on x faces: the -x side's boundary face takes the value itself,
    // the ghosts on +y mirror about it, both at the faces' own x.
    let grid = Grid::new([4, 3, 1], [2.0, 1.5, 1.0], [0.5, 0.0, 0.0]).unwrap();
    let patch = grid.whole_domain(1);
    let time = Parameter::new("t", 0.75);
    let value = BoundaryExpression::new("x y t", |p| {
        p.x.clone() * 10.0 + p.y.clone() + p.t.clone() * 100.0
    });
    let conditions = BoundaryConditions::new()
        .with(
            Side::MINUS_X,
            BoundaryCondition::DirichletExpression(value.clone()),
        )
        .with(Side::PLUS_Y, BoundaryCondition::DirichletExpression(value))
        .with_time(&time);
    let mut u = SpatialField::<XFace>::new("u", &patch, Device::Cpu).unwrap();
    u.fill(0.25).unwrap();
    conditions.apply(&mut u).unwrap();
    let layout = u.layout().clone();
    let values = u.values().unwrap();
    let g = |x: f64, y: f64| x * 10.0 + y + 0.75 * 100.0;
    // The boundary faces of -x (x = 0.5), rows j = 0..3 at y = (j + 1/2) h.
    for j in 0..3 {
        let [x, y, _] = layout.coordinate([0, j, 0]);
        assert_eq!(x, 0.5);
        assert_eq!(
            values[layout.linear_index([0, j, 0])],
            g(0.5, y),
            "face {j}"
        );
    }
    // The +y ghosts (y = 1.5 is the boundary): 2 g(x_face, 1.5) - partner,
    // for faces x = 0.5 + i h, i = 1..=4.
    for i in 1..=4 {
        let [x, _, _] = layout.coordinate([i, 3, 0]);
        let expected = 2.0 * g(x, 1.5) - values[layout.linear_index([i, 2, 0])];
        assert_eq!(
            values[layout.linear_index([i, 3, 0])],
            expected,
            "ghost {i}"
        );
    }
    // A new time is read when the conditions are applied again.
    time.set(1.0);
    conditions.apply(&mut u).unwrap();
    let [_, y, _] = layout.coordinate([0, 1, 0]);
    assert_eq!(
        u.values().unwrap()[layout.linear_index([0, 1, 0])],
        0.5 * 10.0 + y + 100.0
    );
}

#[test]
fn an_expression_that_reads_a_field_or_an_unset_time_is_refused_by_name() {
    let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let other = SpatialField::<CellCentre>::new("other", &patch, Device::Cpu).unwrap();
    let leaf = other.id();
    let reads_a_field = BoundaryExpression::new("reads other", move |p| {
        p.x.clone() + Expr::<CellCentre>::symbol(leaf, "other")
    });
    let _ = field(&other);
    let mut phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu).unwrap();
    let error = BoundaryConditions::new()
        .with(
            Side::MINUS_X,
            BoundaryCondition::DirichletExpression(reads_a_field),
        )
        .apply(&mut phi)
        .unwrap_err();
    match &error {
        SolverError::Setup { equation, reason } => {
            assert_eq!(equation, "phi");
            assert!(reason.contains("`reads other` reads a field"), "{reason}");
        }
        other => panic!("expected a setup error, got {other:?}"),
    }
    let of_time = BoundaryExpression::new("ramp", |p| p.t.clone() * 2.0);
    let error = BoundaryConditions::new()
        .with(
            Side::PLUS_Y,
            BoundaryCondition::NeumannExpression(of_time.clone()),
        )
        .apply(&mut phi)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`ramp` on side +y reads the time") && error.contains("with_time"),
        "{error}"
    );
    // Without the time, an expression of position alone is fine.
    let still = BoundaryExpression::new("still", |p| p.y.clone() * 2.0);
    BoundaryConditions::new()
        .with(Side::PLUS_Y, BoundaryCondition::NeumannExpression(still))
        .apply(&mut phi)
        .unwrap();
    let _ = PI;
}

#[test]
fn expression_conditions_are_compiled_for_the_cpu_and_for_cuda() {
    use watershed_operators::codegen::generated_source;
    use watershed_operators::vmath::Dialect;
    let patch = Grid::new([8, 6, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let time = Parameter::new("t", 0.5);
    let conditions = BoundaryConditions::new()
        .with(
            Side::MINUS_X,
            BoundaryCondition::DirichletExpression(decaying_wave_on_the_boundary()),
        )
        .with(
            Side::PLUS_Y,
            BoundaryCondition::NeumannExpression(BoundaryExpression::new("y t", |p| {
                p.x.clone() * p.t.clone()
            })),
        )
        .with_time(&time);
    let u = SpatialField::<XFace>::new("u", &patch, Device::Cpu).unwrap();
    let assignments = conditions
        .assignments::<XFace>(u.layout(), u.id(), "u")
        .unwrap();
    assert!(!assignments.is_empty());
    for (_, node) in &assignments {
        for dialect in [Dialect::C, Dialect::Cuda] {
            let source = generated_source(node, &patch, dialect)
                .unwrap_or_else(|e| panic!("{dialect:?}: {e}"));
            assert!(source.contains("kernel("), "{dialect:?}");
        }
    }
}

#[test]
fn a_boundary_value_that_is_not_finite_is_named_at_the_start_and_when_it_appears() {
    let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let build = |value: BoundaryExpression| {
        TransportSolverBuilder::new(&patch)
            .equation(
                TransportEquation::new("T")
                    .diffusion(Diffusivity::Constant(0.1))
                    .boundary_conditions(
                        BoundaryConditions::all(BoundaryCondition::Neumann(0.0))
                            .with(Side::MINUS_X, BoundaryCondition::DirichletExpression(value)),
                    ),
            )
            .build()
            .unwrap()
    };
    // Outside its domain from the start: refused when it is first applied.
    let solver = build(BoundaryExpression::new("bad wall", |p| {
        watershed_operators::sqrt(p.y.clone() - 2.0)
    }));
    match solver.set_initial_condition("T", |_| 0.0) {
        Err(SolverError::NonFiniteInput { field, detail, .. }) => {
            assert_eq!(field, "T");
            assert!(
                detail.contains("side -x") && detail.contains("`bad wall`"),
                "{detail}"
            );
        }
        other => panic!("expected NonFiniteInput, got {other:?}"),
    }
    // Finite at first, not after t = 0.05: the step that meets it blames
    // the boundary value, not the right-hand side or dt.
    let mut solver = build(BoundaryExpression::new("running out", |p| {
        watershed_operators::sqrt(0.05 - p.t.clone())
    }));
    solver.set_initial_condition("T", |_| 0.0).unwrap();
    let error = solver
        .advance(0.1, TimeStep::Fixed(0.01))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("boundary condition on side -x") && error.contains("`running out`"),
        "{error}"
    );
}
