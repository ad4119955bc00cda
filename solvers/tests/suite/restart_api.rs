//! What restarts and coupled runs need from the solvers: setting the clock
//! (refusing a non-finite time), restoring fields, and carrying transport
//! equations with an incompressible flow's velocity (refusing a flow that
//! cannot cover the transport solver's ghosts).

use watershed_exprgraph::Tag;
use watershed_fields::{GhostWidth, Grid, LocationKind, XFace, YFace};
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, ConvectiveScheme, IncompressibleFlowBuilder,
    SolverError, TransportEquation, TransportSolver, TransportSolverBuilder,
};

fn transport(grid: &Grid, ghosts: usize) -> (TransportSolver, [Tag; 3]) {
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let mut builder = TransportSolverBuilder::new(&grid.whole_domain(ghosts)).equation(
        TransportEquation::new("c")
            .convection(velocity.clone(), ConvectiveScheme::Upwind)
            .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0))),
    );
    builder
        .factory_mut()
        .placeholder(velocity[0].clone(), LocationKind::XFace)
        .unwrap();
    builder
        .factory_mut()
        .placeholder(velocity[1].clone(), LocationKind::YFace)
        .unwrap();
    (builder.build().unwrap(), velocity)
}

#[test]
fn the_clock_can_be_set_but_not_to_a_non_finite_time() {
    let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3]).unwrap();
    let (mut solver, _) = transport(&grid, 1);
    solver.set_clock(2.5, 7).unwrap();
    assert_eq!((solver.time(), solver.steps()), (2.5, 7));
    match solver.set_clock(f64::NAN, 1) {
        Err(SolverError::TimeStep(message)) => assert!(message.contains("set_clock"), "{message}"),
        other => panic!("expected a TimeStep error, got {other:?}"),
    }
    let mut flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.1)
        .build()
        .unwrap();
    flow.set_clock(1.0, 3).unwrap();
    assert_eq!((flow.time(), flow.steps()), (1.0, 3));
    assert!(matches!(
        flow.set_clock(f64::INFINITY, 0),
        Err(SolverError::TimeStep(_))
    ));
}

#[test]
fn a_transport_equation_is_carried_by_the_flow_velocity() {
    let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(2), 0.1)
        .build()
        .unwrap();
    flow.set_velocity::<XFace>(|[x, y, _]| 1.0 + x + 10.0 * y)
        .unwrap();
    flow.set_velocity::<YFace>(|[x, _, _]| -x).unwrap();
    let (solver, velocity) = transport(&grid, 1);
    solver.carry_by(&flow, &velocity).unwrap();
    // set_velocity fills the ghosts from the (periodic) conditions: the
    // copy holds the flow's values, ghosts included, and f inside.
    let (flow_layout, expected) = flow
        .with_velocity::<XFace, _>(|u| (u.layout().clone(), u.values().unwrap().to_vec()))
        .unwrap();
    solver
        .graph()
        .with_field::<XFace, _>(&velocity[0], |u| {
            let layout = u.layout();
            let values = u.values().unwrap();
            for index in layout.allocated() {
                assert_eq!(
                    values[layout.linear_index(index)],
                    expected[flow_layout.linear_index(index)]
                );
            }
            for index in layout.interior() {
                let [x, y, _] = layout.coordinate(index);
                assert_eq!(values[layout.linear_index(index)], 1.0 + x + 10.0 * y);
            }
            assert!(expected.len() > values.len(), "the flow has more ghosts");
        })
        .unwrap();
    // A flow with fewer ghosts than the transport solver's fields: refused.
    let thin = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.1)
        .build()
        .unwrap();
    let (wide, velocity) = transport(&grid, 2);
    match wide.carry_by(&thin, &velocity) {
        Err(SolverError::Setup { equation, reason }) => {
            assert_eq!(equation, "u (STATE_NONE)");
            assert!(reason.contains("ghost"), "{reason}");
        }
        other => panic!("expected a Setup error, got {other:?}"),
    }
}

/// A solver on one patch of a decomposed grid takes its window of a flow
/// over the whole domain: each allocated point, seam and periodic ghosts
/// included, holds the flow's value at the same global point. A flow on
/// another grid is refused naming the field and both grids.
#[test]
fn a_solver_on_a_patch_is_carried_by_its_window_of_the_whole_flow() {
    let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(2), 0.1)
        .build()
        .unwrap();
    flow.set_velocity::<XFace>(|[x, y, _]| 1.0 + x + 10.0 * y)
        .unwrap();
    flow.set_velocity::<YFace>(|[x, _, _]| -x).unwrap();
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let offset = [4usize, 0, 0];
    let patch =
        watershed_fields::Patch::new(&grid, offset, [4, 8, 1], GhostWidth::uniform(1)).unwrap();
    let mut builder = TransportSolverBuilder::new(&patch).equation(
        TransportEquation::new("c").convection(velocity.clone(), ConvectiveScheme::Upwind),
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
    solver.carry_by(&flow, &velocity).unwrap();
    let (whole_layout, whole) = flow
        .with_velocity::<XFace, _>(|u| (u.layout().clone(), u.values().unwrap().to_vec()))
        .unwrap();
    let checked = solver
        .graph()
        .with_field::<XFace, _>(&velocity[0], |u| {
            let layout = u.layout();
            let values = u.values().unwrap();
            let mut checked = 0;
            for [i, j, k] in layout.allocated() {
                let global = [i + offset[0] as isize, j, k];
                assert_eq!(
                    values[layout.linear_index([i, j, k])].to_bits(),
                    whole[whole_layout.linear_index(global)].to_bits(),
                    "x face {:?} of the patch",
                    [i, j, k]
                );
                checked += 1;
            }
            // The patch's first face is the whole domain's face x = 0.5,
            // its first ghost face x = 0.375.
            let first = values[layout.linear_index([0, 0, 0])];
            assert_eq!(first, 1.0 + 0.5 + 10.0 * 0.0625);
            let ghost = values[layout.linear_index([-1, 0, 0])];
            assert_eq!(ghost, 1.0 + 0.375 + 10.0 * 0.0625);
            checked
        })
        .unwrap();
    assert!(checked > 4 * 8, "ghosts included: {checked} points");

    let other = Grid::new([16, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let foreign = IncompressibleFlowBuilder::new(&other.whole_domain(2), 0.1)
        .build()
        .unwrap();
    match solver.carry_by(&foreign, &velocity) {
        Err(SolverError::Setup { equation, reason }) => {
            assert_eq!(equation, "u (STATE_NONE)");
            assert!(reason.contains("[16, 8, 1]-cell grid"), "{reason}");
            assert!(reason.contains("[8, 8, 1]-cell grid"), "{reason}");
        }
        other => panic!("expected a Setup error, got {other:?}"),
    }
}
