//! Central convection of a scalar on the periodic square: the flux form
//! (`ConvectiveScheme::Central`) conserves the scalar to round-off; the
//! skew-symmetric form conserves its square for any velocity, so the
//! square's drift is the time integration's alone (third order in dt with
//! SSP-RK3), at second and fourth order. The velocity here is not
//! divergence-free, which the flux form's square notices.

use std::f64::consts::PI;
use watershed_exprgraph::Tag;
use watershed_fields::{CellCentre, Grid, LocationKind, XFace, YFace};
use watershed_operators::interior_sum;
use watershed_solvers::*;

fn solver(scheme: ConvectiveScheme, order: SpaceOrder) -> TransportSolver {
    let grid = Grid::new([24, 24, 1], [2.0 * PI, 2.0 * PI, 1.0], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let mut builder =
        TransportSolverBuilder::new(&grid.whole_domain(order.ghost_layers_for_transport()))
            .integrator(TimeIntegrator::SspRk3)
            .equation(
                TransportEquation::new("c")
                    .convection(velocity.clone(), scheme)
                    .space_order(order),
            );
    builder
        .factory_mut()
        .placeholder(velocity[0].clone(), LocationKind::XFace)
        .unwrap();
    builder
        .factory_mut()
        .placeholder(velocity[1].clone(), LocationKind::YFace)
        .unwrap();
    let solver = builder.build().unwrap();
    let set = |u: &mut watershed_fields::SpatialField<XFace>| {
        let layout = u.layout().clone();
        let values = u.values_mut().unwrap();
        for i in layout.allocated() {
            let [x, y, _] = layout.coordinate(i);
            values[layout.linear_index(i)] = 0.6 + 0.4 * x.sin() * y.cos();
        }
    };
    solver
        .graph()
        .with_field_mut::<XFace, _>(&velocity[0], set)
        .unwrap();
    solver
        .graph()
        .with_field_mut::<YFace, _>(&velocity[1], |v| {
            let layout = v.layout().clone();
            let values = v.values_mut().unwrap();
            for i in layout.allocated() {
                let [x, y, _] = layout.coordinate(i);
                values[layout.linear_index(i)] = -0.3 + 0.5 * (x + 2.0 * y).cos();
            }
        })
        .unwrap();
    solver
        .set_initial_condition("c", |[x, y, _]| {
            (2.0 * x).sin() * y.cos() + 0.5 * (x - y).cos()
        })
        .unwrap();
    solver
}

/// (sum c, sum c^2) over the interior.
fn moments(solver: &TransportSolver) -> (f64, f64) {
    solver
        .with_solution("c", |c: &watershed_fields::SpatialField<CellCentre>| {
            (
                interior_sum(c).unwrap(),
                interior_sum(watershed_operators::field(c) * watershed_operators::field(c))
                    .unwrap(),
            )
        })
        .unwrap()
}

fn square_drift(scheme: ConvectiveScheme, order: SpaceOrder, dt: f64) -> f64 {
    let mut solver = solver(scheme, order);
    let (_, start) = moments(&solver);
    let steps = (1.0 / dt).round() as usize;
    for _ in 0..steps {
        solver.step(dt).unwrap();
    }
    (moments(&solver).1 / start - 1.0).abs()
}

#[test]
fn the_flux_form_conserves_the_scalar_to_round_off() {
    for order in [SpaceOrder::Second, SpaceOrder::Fourth] {
        let mut solver = solver(ConvectiveScheme::Central, order);
        let (start, _) = moments(&solver);
        for _ in 0..20 {
            solver.step(0.02).unwrap();
        }
        let (end, _) = moments(&solver);
        assert!(
            (end - start).abs() < 1e-12 * 576.0,
            "order {}: sum {start} -> {end}",
            order.number()
        );
    }
}

#[test]
fn the_skew_symmetric_form_conserves_the_square() {
    for order in [SpaceOrder::Second, SpaceOrder::Fourth] {
        let drifts: Vec<f64> = [0.04, 0.02, 0.01]
            .iter()
            .map(|&dt| square_drift(ConvectiveScheme::SkewSymmetric, order, dt))
            .collect();
        eprintln!("order {}: drifts {drifts:?}", order.number());
        for pair in drifts.windows(2) {
            let observed = (pair[0] / pair[1]).log2();
            assert!(observed > 2.7, "order {}: {drifts:?}", order.number());
        }
        assert!(drifts[2] < 1e-6, "order {}: {drifts:?}", order.number());
        // The flux form, same run: the velocity's divergence makes the
        // square drift by far more.
        let central = square_drift(ConvectiveScheme::Central, order, 0.01);
        eprintln!("order {}: central drift {central:e}", order.number());
        assert!(
            central > 1e3 * drifts[2],
            "order {}: {central:e}",
            order.number()
        );
    }
}

#[test]
fn upwinding_has_no_fourth_order() {
    let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let error = TransportSolverBuilder::new(&grid.whole_domain(2))
        .equation(
            TransportEquation::new("c")
                .convection(velocity, ConvectiveScheme::Upwind)
                .space_order(SpaceOrder::Fourth),
        )
        .build()
        .unwrap_err();
    assert!(
        matches!(&error, SolverError::Setup { equation, reason } if equation == "c" && reason.contains("Upwind")),
        "{error:?}"
    );
}
