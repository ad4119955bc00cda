//! The force on an immersed body and the errors of bodies that cannot be.

use watershed_fields::Grid;
use watershed_operators::Side;
use watershed_solvers::*;

fn box_grid(n: usize) -> Grid {
    Grid::new([n, n, 1], [1.0, 1.0, 1.0], [0.0; 3]).unwrap()
}

fn walls() -> BoundaryConditions {
    BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))
}

/// Fluid at rest in a closed box under a body force `f` per unit mass
/// holds the pressure gradient `grad p = f`; the force on a disc in it is
/// the hydrostatic `-f V` (the pressure pushes against `f`), with
/// `V = pi r^2` per unit depth. The direct forcing leaves small spurious
/// currents next to the disc (the projection's slip `b dt dp/dn` on the
/// forced faces), and the force converges with the grid: 9.9 % low at
/// 32^2, 0.97 % at 64^2 (measured 2026-11-28).
#[test]
fn a_disc_in_fluid_at_rest_feels_the_hydrostatic_force() {
    let radius = 0.2;
    let f = [0.7, -0.4, 0.0];
    let mut errors = Vec::new();
    for n in [32, 64] {
        let body = Body::fixed("disc", Shape::circle([0.5, 0.5, 0.0], radius))
            .force_band(2.0 / n as f64, 0.25);
        let mut flow = IncompressibleFlowBuilder::new(&box_grid(n).whole_domain(1), 0.01)
            .velocity_conditions(0, walls())
            .velocity_conditions(1, walls())
            .body_force(f)
            .body(body)
            .build()
            .unwrap();
        for _ in 0..400 {
            flow.step(2e-3).unwrap();
        }
        let force = flow.body_force("disc").unwrap();
        let volume = std::f64::consts::PI * radius * radius;
        let mut worst = 0.0f64;
        for k in 0..2 {
            let expected = -f[k] * volume;
            worst = worst.max((force[k] - expected).abs() / expected.abs());
        }
        let energy = flow.kinetic_energy().unwrap();
        eprintln!("{n}^2: F = {force:?}, relative error {worst:.2e}, kinetic energy {energy:e}");
        assert!(
            energy < 1e-7,
            "{n}: spurious currents, kinetic energy {energy:e}"
        );
        errors.push(worst);
    }
    assert!(errors[0] < 0.12 && errors[1] < 0.015, "{errors:?}");
    assert!(errors[0] / errors[1] > 4.0, "{errors:?}");
}

#[test]
fn bodies_that_cannot_be_are_refused_with_their_name() {
    let patch = box_grid(16).whole_domain(1);
    let builder = || {
        IncompressibleFlowBuilder::new(&patch, 0.01)
            .velocity_conditions(0, walls())
            .velocity_conditions(1, walls())
    };
    // Across a side.
    let plate = Body::fixed(
        "plate",
        Shape::Box {
            lo: [0.4, -1.0, -1.0],
            hi: [0.6, 0.5, 1.0],
        },
    );
    let error = builder().body(plate).build().unwrap_err();
    assert!(matches!(error, SolverError::Setup { .. }), "{error:?}");
    assert!(
        error.to_string().contains("body 'plate' cuts side -y"),
        "{error}"
    );
    // A negative radius.
    let error = builder()
        .body(Body::fixed("dot", Shape::circle([0.5; 3], -0.1)))
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("body 'dot'"), "{error}");
    // Fourth order.
    let patch3 = box_grid(16).whole_domain(3);
    let error = IncompressibleFlowBuilder::new(&patch3, 0.01)
        .velocity_conditions(0, walls())
        .velocity_conditions(1, walls())
        .space_order(SpaceOrder::Fourth)
        .body(Body::fixed("disc", Shape::circle([0.5; 3], 0.1)))
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("space order 2"), "{error}");
    // A pocket of fluid the outflow cannot reach.
    let ring = Body::fixed(
        "ring",
        Shape::distance_function("ring", |x| {
            ((x[0] - 0.5).hypot(x[1] - 0.5) - 0.25).abs() - 0.05
        }),
    );
    let error = builder()
        .outflow(Side::PLUS_X)
        .body(ring)
        .build()
        .unwrap_err();
    assert!(
        error.to_string().contains("cut off a region of fluid"),
        "{error}"
    );
    // The force: before a step, of an unknown body, of a band that does
    // not fit.
    let near_wall = Body::fixed("low", Shape::circle([0.5, 0.25, 0.0], 0.1));
    let mut flow = builder().body(near_wall).build().unwrap();
    let why = flow.force_unavailable("low").unwrap();
    assert!(why.contains("within two cells of a side"), "{why}");
    flow.step(1e-3).unwrap();
    let error = flow.body_force("low").unwrap_err();
    assert!(error.to_string().contains("force on body 'low'"), "{error}");
    let error = flow.body_force("nothing").unwrap_err();
    assert!(
        error.to_string().contains("its bodies: [\"low\"]"),
        "{error}"
    );
    let body = Body::fixed("disc", Shape::circle([0.5, 0.5, 0.0], 0.1)).force_band(0.1, 0.2);
    let flow = builder().body(body).build().unwrap();
    let error = flow.body_force("disc").unwrap_err();
    assert!(error.to_string().contains("no step has run"), "{error}");
}

/// A cylinder on the centre line of a symmetric channel feels no lift:
/// the grid, the body and the inflow are mirror-symmetric about the
/// centre line, and so are the forcing and the force's weights.
#[test]
fn a_symmetric_channel_gives_no_lift() {
    let n = 32;
    let grid = Grid::new([4 * n, n, 1], [2.0, 0.5, 1.0], [0.0; 3]).unwrap();
    let inflow = BoundaryExpression::new("parabola", |p| {
        4.0 * p.y.clone() * (0.5 - p.y.clone()) / 0.25
    });
    let cylinder = Body::fixed("cylinder", Shape::circle([0.4, 0.25, 0.0], 0.06));
    let mut flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01)
        .velocity_conditions(
            0,
            walls().with(
                Side::MINUS_X,
                BoundaryCondition::DirichletExpression(inflow),
            ),
        )
        .velocity_conditions(1, walls())
        .outflow(Side::PLUS_X)
        .body(cylinder)
        .build()
        .unwrap();
    for _ in 0..100 {
        let dt = flow.stable_time_step(0.5, 0.2).unwrap().min(0.005);
        flow.step(dt).unwrap();
    }
    let force = flow.body_force("cylinder").unwrap();
    eprintln!("symmetric channel: F = {force:?}");
    assert!(force[0] > 0.0);
    assert!(force[1].abs() < 1e-9 * force[0], "{force:?}");
}

/// A flow rebuilt from another's fields and its bodies' weighted momentum
/// sums (what a checkpoint keeps) computes the next step's force with the
/// bits of the flow that was never interrupted; without the sums, or
/// after a write to the velocity, the force is unknown. Sums of another
/// count are refused, naming the bodies.
#[test]
fn restored_force_sums_give_the_next_steps_force_bit_for_bit() {
    let n = 32;
    let build = || {
        let body = Body::fixed("disc", Shape::circle([0.5, 0.5, 0.0], 0.2))
            .force_band(2.0 / n as f64, 0.25);
        IncompressibleFlowBuilder::new(&box_grid(n).whole_domain(1), 0.01)
            .velocity_conditions(0, walls())
            .velocity_conditions(1, walls())
            .body_force([0.7, -0.4, 0.0])
            .body(body)
            .build()
            .unwrap()
    };
    let mut straight = build();
    for _ in 0..3 {
        straight.step(2e-3).unwrap();
    }
    let sums = straight.force_sums();
    assert_eq!(sums.len(), 3, "{:?}", straight.force_unavailable("disc"));
    // The rebuilt flow: the same fields, ghosts included.
    let copy = |from: &IncompressibleFlow, to: &mut IncompressibleFlow| {
        let u = from
            .with_velocity::<watershed_fields::XFace, _>(|f| f.values().unwrap().to_vec())
            .unwrap();
        to.with_velocity_mut::<watershed_fields::XFace, _>(|f| {
            f.values_mut().unwrap().copy_from_slice(&u)
        })
        .unwrap();
        let v = from
            .with_velocity::<watershed_fields::YFace, _>(|f| f.values().unwrap().to_vec())
            .unwrap();
        to.with_velocity_mut::<watershed_fields::YFace, _>(|f| {
            f.values_mut().unwrap().copy_from_slice(&v)
        })
        .unwrap();
        let p = from
            .with_pressure(|f| f.values().unwrap().to_vec())
            .unwrap();
        to.with_pressure_mut(|f| f.values_mut().unwrap().copy_from_slice(&p))
            .unwrap();
        let psi = from
            .with_projection_potential(|f| f.values().unwrap().to_vec())
            .unwrap();
        to.with_projection_potential_mut(|f| f.values_mut().unwrap().copy_from_slice(&psi))
            .unwrap();
        to.set_clock(from.time(), from.steps()).unwrap();
    };
    let mut restored = build();
    copy(&straight, &mut restored);
    restored.restore_force_sums(&sums).unwrap();
    let mut without = build();
    copy(&straight, &mut without);
    let mut overwritten = build();
    copy(&straight, &mut overwritten);
    overwritten.restore_force_sums(&sums).unwrap();
    // A write after the restore: the sums no longer describe the velocity.
    overwritten
        .with_velocity_mut::<watershed_fields::XFace, _>(|f| f.values_mut().map(|_| ()))
        .unwrap()
        .unwrap();
    for flow in [&mut straight, &mut restored, &mut without, &mut overwritten] {
        flow.step(2e-3).unwrap();
    }
    let expected = straight.body_force("disc").unwrap().map(f64::to_bits);
    assert_eq!(
        restored.body_force("disc").unwrap().map(f64::to_bits),
        expected
    );
    for flow in [&without, &overwritten] {
        let error = flow.body_force("disc").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("no step has run since the velocity was set"),
            "{error}"
        );
    }
    let error = restored.restore_force_sums(&sums[..2]).unwrap_err();
    assert!(
        matches!(&error, SolverError::Setup { equation, reason }
            if equation.contains("weighted momentum") && reason.contains("2 values given, this flow reduces 3") && reason.contains("\"disc\"")),
        "{error}"
    );
}
