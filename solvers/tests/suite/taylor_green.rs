//! Taylor-Green vortex (2D, periodic): the kinetic energy decays as
//! exp(-4 nu t), the velocity converges at second order in space, and every
//! projection leaves the velocity divergence-free to the Poisson solver's
//! tolerance.

use std::f64::consts::PI;
use watershed_fields::{Grid, XFace, YFace};
use watershed_solvers::{IncompressibleFlow, IncompressibleFlowBuilder};

const NU: f64 = 0.05;

fn vortex(n: usize) -> IncompressibleFlow {
    let grid = Grid::new([n, n, 1], [2.0 * PI, 2.0 * PI, 1.0], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), NU)
        .build()
        .unwrap();
    flow.set_velocity::<XFace>(|[x, y, _]| x.sin() * y.cos())
        .unwrap();
    flow.set_velocity::<YFace>(|[x, y, _]| -x.cos() * y.sin())
        .unwrap();
    flow
}

/// Max-norm error of u against the analytic vortex at time t.
fn velocity_error(flow: &IncompressibleFlow, t: f64) -> f64 {
    let decay = (-2.0 * NU * t).exp();
    flow.with_velocity::<XFace, _>(|u| {
        let layout = u.layout();
        let values = u.values().unwrap();
        layout
            .interior()
            .iter()
            .map(|i| {
                let [x, y, _] = layout.coordinate(i);
                (values[layout.linear_index(i)] - decay * x.sin() * y.cos()).abs()
            })
            .fold(0.0, f64::max)
    })
    .unwrap()
}

#[test]
fn kinetic_energy_decays_as_exp_minus_four_nu_t() {
    let mut flow = vortex(32);
    let initial = flow.kinetic_energy().unwrap();
    assert!((initial - 0.25).abs() < 1e-2, "initial energy {initial}");
    let end = 1.0;
    flow.advance(end, 0.3, 0.2).unwrap();
    let ratio = flow.kinetic_energy().unwrap() / initial;
    let exact = (-4.0 * NU * end).exp();
    eprintln!("energy ratio {ratio:.6} vs exact {exact:.6}");
    assert!(
        (ratio - exact).abs() < 2e-3 * exact,
        "energy ratio {ratio} vs {exact}"
    );
    let projection = flow.last_projection();
    assert!(
        projection.divergence_after <= 1e-8 * projection.divergence_before.max(1e-12) + 1e-12,
        "{projection:?}"
    );
}

#[test]
fn velocity_converges_at_second_order() {
    let end = 0.5;
    let errors: Vec<f64> = [16, 32, 64]
        .iter()
        .map(|&n| {
            let mut flow = vortex(n);
            flow.advance(end, 0.3, 0.2).unwrap();
            velocity_error(&flow, end)
        })
        .collect();
    eprintln!("errors {errors:?}");
    for pair in errors.windows(2) {
        let p = (pair[0] / pair[1]).log2();
        assert!((p - 2.0).abs() < 0.15, "order {p} from {errors:?}");
    }
}

#[test]
fn every_projection_reaches_the_solver_tolerance() {
    let mut flow = vortex(32);
    // Perturb the field so the first projections have real work to do.
    flow.set_velocity::<XFace>(|[x, y, _]| x.sin() * y.cos() + 0.1 * (2.0 * y).sin())
        .unwrap();
    for _ in 0..5 {
        let dt = flow.stable_time_step(0.3, 0.2).unwrap();
        flow.step(dt).unwrap();
        let p = flow.last_projection();
        assert!(p.iterations > 0 || p.divergence_before < 1e-12, "{p:?}");
        // The solver's contract: the final residual within 1e-10 of the
        // right-hand side's norm (its reduction from the warm start's
        // initial residual may be a little larger).
        assert!(
            p.relative_residual <= 1e-10 || p.divergence_before < 1e-12,
            "{p:?}"
        );
        assert!(
            p.divergence_after <= 1e-9 * p.divergence_before.max(1e-12) + 1e-12,
            "{p:?}"
        );
    }
}
