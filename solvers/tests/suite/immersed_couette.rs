//! Circular Couette flow between two immersed cylinders: the inner one
//! (radius R1) spins at `OMEGA`, the outer one (the solid outside radius
//! R2, covering the square domain's sides) is at rest. The steady
//! azimuthal velocity is `u_theta = A r + B / r` with
//! `A = -OMEGA R1^2 / (R2^2 - R1^2)`, `B = OMEGA R1^2 R2^2 / (R2^2 - R1^2)`.
//! Started from rest, the flow is run until the start-up has decayed
//! (`exp(-nu (pi / (R2 - R1))^2 t)` below 1e-3), then compared with the
//! exact profile on three grids.

use watershed_fields::{Grid, XFace, YFace};
use watershed_solvers::*;

const R1: f64 = 0.5;
const R2: f64 = 1.0;
const OMEGA: f64 = 1.0;
const NU: f64 = 1.0;
const HALF_WIDTH: f64 = 1.25;

fn exact(r: f64) -> f64 {
    let d = R2 * R2 - R1 * R1;
    -OMEGA * R1 * R1 / d * r + OMEGA * R1 * R1 * R2 * R2 / d / r
}

fn bodies() -> (Body, Body) {
    let rotor = Body::fixed("rotor", Shape::circle([0.0; 3], R1)).rotating([0.0, 0.0, OMEGA]);
    let stator = Body::fixed(
        "stator",
        Shape::Outside(Box::new(Shape::circle([0.0; 3], R2))),
    );
    (rotor, stator)
}

fn couette(n: usize) -> IncompressibleFlow {
    let grid = Grid::new(
        [n, n, 1],
        [2.0 * HALF_WIDTH, 2.0 * HALF_WIDTH, 1.0],
        [-HALF_WIDTH, -HALF_WIDTH, 0.0],
    )
    .unwrap();
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let (rotor, stator) = bodies();
    IncompressibleFlowBuilder::new(&grid.whole_domain(1), NU)
        .velocity_conditions(0, walls.clone())
        .velocity_conditions(1, walls)
        .integrator(TimeIntegrator::ForwardEuler)
        .body(rotor)
        .body(stator)
        .build()
        .unwrap()
}

struct Outcome {
    rms: f64,
    max: f64,
    solid_faces: usize,
    divergence: f64,
}

/// Runs to steady state and measures: the velocity error on every fluid
/// face against the exact profile (its component), that every face inside
/// a body holds the body's velocity exactly, and the largest divergence.
fn measure(n: usize) -> Outcome {
    let mut flow = couette(n);
    let decay = NU * (std::f64::consts::PI / (R2 - R1)).powi(2);
    let end = 7.0 / decay;
    let h = 2.0 * HALF_WIDTH / n as f64;
    let steps = (end / (0.2 * h * h / NU)).ceil();
    let dt = end / steps;
    for _ in 0..steps as usize {
        flow.step(dt).unwrap();
    }
    let (rotor, stator) = bodies();
    let (mut sum, mut count, mut max, mut solid) = (0.0, 0usize, 0.0f64, 0usize);
    let mut check = |x: [f64; 3], value: f64, component: usize| {
        let r = (x[0] * x[0] + x[1] * x[1]).sqrt();
        if r < R1 {
            assert_eq!(value, rotor.velocity_at(x)[component], "{x:?}");
            solid += 1;
        } else if r > R2 {
            assert_eq!(value, stator.velocity_at(x)[component], "{x:?}");
            solid += 1;
        } else {
            let direction = if component == 0 { -x[1] / r } else { x[0] / r };
            let error = value - exact(r) * direction;
            sum += error * error;
            count += 1;
            max = max.max(error.abs());
        }
    };
    flow.with_velocity::<XFace, _>(|u| {
        let layout = u.layout();
        let values = u.values().unwrap();
        for index in layout.interior().iter() {
            check(
                layout.coordinate(index),
                values[layout.linear_index(index)],
                0,
            );
        }
    })
    .unwrap();
    flow.with_velocity::<YFace, _>(|v| {
        let layout = v.layout();
        let values = v.values().unwrap();
        for index in layout.interior().iter() {
            check(
                layout.coordinate(index),
                values[layout.linear_index(index)],
                1,
            );
        }
    })
    .unwrap();
    let divergence = flow.last_projection().divergence_after;
    Outcome {
        rms: (sum / count as f64).sqrt(),
        max,
        solid_faces: solid,
        divergence,
    }
}

#[test]
fn circular_couette_flow_between_immersed_cylinders_converges_at_second_order() {
    let outcomes: Vec<Outcome> = [20, 40, 80].into_iter().map(measure).collect();
    for (n, o) in [20, 40, 80].iter().zip(&outcomes) {
        eprintln!(
            "couette {n}^2: rms {:.3e}, max {:.3e}, solid faces {}, |div u| {:.1e}",
            o.rms, o.max, o.solid_faces, o.divergence
        );
        assert!(o.solid_faces > 0);
        // No flow through the bodies: solid faces hold the bodies'
        // velocity exactly (checked above), and the fluid cells are
        // divergence-free to the solver's tolerance.
        assert!(o.divergence < 1e-8, "{n}: |div u| = {:e}", o.divergence);
    }
    let orders: Vec<f64> = outcomes
        .windows(2)
        .map(|w| (w[0].rms / w[1].rms).log2())
        .collect();
    eprintln!("couette rms orders {orders:?}");
    for order in &orders {
        assert!(*order > 1.6, "observed orders {orders:?}");
    }
    // The finest grid's error is a small fraction of the rotor's speed;
    // the largest, at the faces next to the cylinders (where the no-slip
    // condition is imposed by interpolation), falls at least at first order.
    assert!(outcomes[2].rms < 2e-3 * OMEGA * R1, "{}", outcomes[2].rms);
    assert!(outcomes[2].max < 1e-2 * OMEGA * R1, "{}", outcomes[2].max);
    assert!(outcomes[0].max / outcomes[2].max > 4.0);
}
