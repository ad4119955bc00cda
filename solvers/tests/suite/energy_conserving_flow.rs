//! The conservative convection forms of Morinishi et al. (1998) on the
//! periodic box: in the inviscid limit the kinetic energy drifts only by the
//! time integration's error (third order in dt with SSP-RK3), the total
//! momentum stays constant to round-off, at second and fourth order; the
//! cell-averaged advective form does neither.

use std::f64::consts::PI;
use watershed_fields::{Grid, XFace, YFace, ZFace};
use watershed_operators::interior_sum;
use watershed_solvers::{
    ConvectionForm, IncompressibleFlow, IncompressibleFlowBuilder, SpaceOrder,
};

/// The 3D Taylor-Green vortex on `n^3` cells, inviscid, with the given form
/// and order (`extra`: a uniform velocity added, so that momentum is not
/// zero by symmetry, and a small perturbation that breaks the symmetries).
fn vortex(n: usize, form: ConvectionForm, order: SpaceOrder, extra: bool) -> IncompressibleFlow {
    let grid = Grid::new([n; 3], [2.0 * PI; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let patch = grid.whole_domain(order.ghost_layers_for_flow());
    let flow = IncompressibleFlowBuilder::new(&patch, 0.0)
        .convection(form)
        .space_order(order)
        .build()
        .unwrap();
    let (a, b) = if extra { (0.3, 0.1) } else { (0.0, 0.0) };
    flow.set_velocity::<XFace>(|[x, y, z]| {
        x.sin() * y.cos() * z.cos() + a + b * (2.0 * y + z).sin()
    })
    .unwrap();
    flow.set_velocity::<YFace>(|[x, y, z]| {
        -x.cos() * y.sin() * z.cos() - 0.5 * a + b * (x - 3.0 * z).cos()
    })
    .unwrap();
    flow.set_velocity::<ZFace>(|[x, y, _]| 0.2 * a + b * (x + y).sin())
        .unwrap();
    flow
}

/// `|K(t_end) / K(0+) - 1|` with a fixed `dt`, `K(0+)` taken after the
/// first step's projection of the initial velocity... measured from the
/// projected initial field: one step of zero length is not possible, so
/// the energy after the first step is compared with the one after the
/// last, over `steps - 1` steps.
fn energy_drift(n: usize, form: ConvectionForm, order: SpaceOrder, dt: f64, end: f64) -> f64 {
    let mut flow = vortex(n, form, order, false);
    let steps = (end / dt).round() as usize;
    flow.step(dt).unwrap();
    let first = flow.kinetic_energy().unwrap();
    for _ in 1..steps {
        flow.step(dt).unwrap();
    }
    (flow.kinetic_energy().unwrap() / first - 1.0).abs()
}

fn momentum(flow: &IncompressibleFlow) -> [f64; 3] {
    [
        flow.with_velocity::<XFace, _>(|u| interior_sum(u).unwrap())
            .unwrap(),
        flow.with_velocity::<YFace, _>(|v| interior_sum(v).unwrap())
            .unwrap(),
        flow.with_velocity::<ZFace, _>(|w| interior_sum(w).unwrap())
            .unwrap(),
    ]
}

#[test]
fn inviscid_energy_drift_falls_at_third_order_in_dt() {
    for order in [SpaceOrder::Second, SpaceOrder::Fourth] {
        for form in [ConvectionForm::Divergence, ConvectionForm::SkewSymmetric] {
            let drifts: Vec<f64> = [0.2, 0.1, 0.05]
                .iter()
                .map(|&dt| energy_drift(16, form, order, dt, 2.0))
                .collect();
            eprintln!("order {} {form:?}: drifts {drifts:?}", order.number());
            for pair in drifts.windows(2) {
                let observed = (pair[0] / pair[1]).log2();
                assert!(
                    observed > 2.7,
                    "order {} {form:?}: drift order {observed:.2} from {drifts:?}",
                    order.number()
                );
            }
            let last = drifts[drifts.len() - 1];
            assert!(
                last < 1e-6,
                "order {} {form:?}: drift {last:e} at dt = 0.05",
                order.number()
            );
        }
    }
}

/// The old form gains energy on the same run: the drift test above can
/// tell a conservative form from one that is not.
#[test]
fn the_cell_averaged_advective_form_does_not_conserve_energy() {
    let drift = energy_drift(
        16,
        ConvectionForm::CellAveragedAdvective,
        SpaceOrder::Second,
        0.05,
        2.0,
    );
    eprintln!("cell-averaged advective: drift {drift:.3e}");
    assert!(drift > 1e-4, "drift {drift:e}");
}

#[test]
fn total_momentum_is_constant_to_round_off() {
    for order in [SpaceOrder::Second, SpaceOrder::Fourth] {
        for form in [ConvectionForm::Divergence, ConvectionForm::SkewSymmetric] {
            let mut flow = vortex(12, form, order, true);
            flow.step(0.05).unwrap();
            let start = momentum(&flow);
            for _ in 0..10 {
                flow.step(0.05).unwrap();
            }
            let end = momentum(&flow);
            let cells = 12.0f64.powi(3);
            for axis in 0..3 {
                let change = (end[axis] - start[axis]).abs() / cells;
                eprintln!(
                    "order {} {form:?}: mean momentum {axis} {:.15} -> {:.15}",
                    order.number(),
                    start[axis] / cells,
                    end[axis] / cells
                );
                assert!(
                    change < 1e-13,
                    "order {} {form:?} axis {axis}: mean momentum moved by {change:e}",
                    order.number()
                );
            }
        }
    }
}

#[test]
fn fourth_order_needs_three_ghost_layers() {
    let grid = Grid::new([8; 3], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let error = IncompressibleFlowBuilder::new(&grid.whole_domain(2), 0.01)
        .space_order(SpaceOrder::Fourth)
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, watershed_solvers::SolverError::Setup { .. }),
        "{error:?}"
    );
    assert!(
        message.contains("2 ghost layers") && message.contains("at least 3"),
        "{message}"
    );
    let error = IncompressibleFlowBuilder::new(&grid.whole_domain(3), 0.01)
        .space_order(SpaceOrder::Fourth)
        .convection(ConvectionForm::CellAveragedAdvective)
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("second order only"), "{error}");
}
