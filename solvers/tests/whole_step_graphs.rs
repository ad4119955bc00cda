//! The whole step in the language: boundary conditions as language
//! modifiers against the native reference loops (`BoundaryConditions::apply`)
//! for every kind, side and location in 1D, 2D and 3D; the structure of the
//! solvers' graphs (no native node); a time-dependent source read through
//! the stage-time parameter; and the rotation of time levels.

use std::f64::consts::PI;
use watershed_exprgraph::{ExpressionKind, GraphError, Tag};
use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, Location, Patch, SpatialField, XFace, YFace, ZFace,
};
use watershed_operators::{AssignOptions, Region, Side, assign_node_reading_target};
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, Diffusivity, IncompressibleFlowBuilder, TimeIntegrator,
    TransportEquation, TransportSolverBuilder,
};

fn filled<L: Location>(patch: &Patch, seed: u64) -> SpatialField<L> {
    let mut field = SpatialField::<L>::new("phi", patch, Device::Cpu).unwrap();
    let mut state = seed;
    for v in field.values_mut().unwrap() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *v = (state % 10_000) as f64 / 5_000.0 - 1.0;
    }
    field
}

/// Applies `conditions` to a copy of the same values both ways and compares
/// every allocated point bit for bit.
fn compare<L: Location>(patch: &Patch, conditions: BoundaryConditions, what: &str) {
    let mut native = filled::<L>(patch, 7);
    let mut language = filled::<L>(patch, 7);
    let native_result = conditions.apply(&mut native);
    let id = language.id();
    let layout = language.layout().clone();
    let assignments = conditions.assignments::<L>(&layout, id, "phi");
    match (native_result, assignments) {
        (Ok(()), Ok(list)) => {
            for (region, root) in &list {
                let options = AssignOptions {
                    region: Region::Box(*region),
                    ..Default::default()
                };
                assign_node_reading_target(&mut language, id, root, &[], options)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            let (a, b) = (native.values().unwrap(), language.values().unwrap());
            for index in layout.allocated() {
                let k = layout.linear_index(index);
                assert!(
                    a[k] == b[k],
                    "{what} on {}: at {index:?} native {} vs language {}",
                    L::KIND,
                    a[k],
                    b[k]
                );
            }
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{what}"),
        (a, b) => panic!("{what}: native {a:?} vs language {:?}", b.map(|l| l.len())),
    }
}

fn kinds(periodic: bool) -> Vec<BoundaryCondition> {
    let mut list = vec![
        BoundaryCondition::Dirichlet(0.7),
        BoundaryCondition::Neumann(-0.3),
        BoundaryCondition::Flux {
            flux: 0.2,
            diffusivity: 0.5,
        },
    ];
    if periodic {
        list.push(BoundaryCondition::Periodic);
    }
    list
}

#[test]
fn language_boundary_modifiers_equal_the_native_loops() {
    for cells in [[6, 1, 1], [5, 4, 1], [4, 3, 5]] {
        for periodic in [false, true] {
            for ghosts in [1, 2] {
                let active = cells.map(|c| c > 1);
                let grid = Grid::new(cells, [1.0, 0.7, 1.3], [0.0; 3])
                    .unwrap()
                    .with_periodic(if periodic { active } else { [false; 3] });
                let patch = Patch::new(&grid, [0; 3], cells, GhostWidth::uniform(ghosts)).unwrap();
                for kind in kinds(periodic) {
                    let mut cases = vec![(
                        format!("{kind:?} everywhere, {cells:?}, {ghosts} ghosts"),
                        BoundaryConditions::all(kind),
                    )];
                    for side in Side::ALL.into_iter().filter(|s| active[s.axis]) {
                        cases.push((
                            format!("{kind:?} on {}, {cells:?}, {ghosts} ghosts", side.name()),
                            BoundaryConditions::new().with(side, kind),
                        ));
                    }
                    for (what, conditions) in cases {
                        compare::<CellCentre>(&patch, conditions, &what);
                        compare::<XFace>(&patch, conditions, &what);
                        if active[1] {
                            compare::<YFace>(&patch, conditions, &what);
                        }
                        if active[2] {
                            compare::<ZFace>(&patch, conditions, &what);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_condition_without_ghosts_is_refused_naming_the_side() {
    let grid = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = Patch::new(&grid, [0; 3], [4, 4, 1], GhostWidth::none()).unwrap();
    let layout =
        watershed_fields::FieldLayout::new(&patch, watershed_fields::LocationKind::CellCentre);
    let error = BoundaryConditions::new()
        .with(Side::MINUS_Y, BoundaryCondition::Neumann(0.0))
        .assignments::<CellCentre>(&layout, 1, "T")
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("'T'") && text.contains("-y") && text.contains("0 ghost layers"),
        "{text}"
    );
}

#[test]
fn the_solvers_graphs_have_no_native_node() {
    let grid = Grid::new([16, 16, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let mut builder = TransportSolverBuilder::new(&patch).equation(
        TransportEquation::new("Y")
            .diffusion(Diffusivity::Constant(0.01))
            .convection(
                velocity.clone(),
                watershed_solvers::ConvectiveScheme::Upwind,
            )
            .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0))),
    );
    builder
        .factory_mut()
        .placeholder(velocity[0].clone(), watershed_fields::LocationKind::XFace)
        .unwrap();
    builder
        .factory_mut()
        .placeholder(velocity[1].clone(), watershed_fields::LocationKind::YFace)
        .unwrap();
    let solver = builder.build().unwrap();
    let flow = IncompressibleFlowBuilder::new(&patch, 0.01)
        .velocity_conditions(
            0,
            BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0)),
        )
        .velocity_conditions(
            1,
            BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0)),
        )
        .build()
        .unwrap();
    // Transport: the boundary modifier of STATE_NP1 is fused into the
    // update; the flow's velocity conditions stay on STATE_N (the
    // projection writes the velocity outside the graph).
    for (name, graph, nodes, updates) in [
        ("transport", solver.graph(), 1, 1),
        ("momentum", flow.graph(), 4, 2),
    ] {
        assert_eq!(
            graph.native_node_count(),
            0,
            "{name}: {:?}",
            graph.execution_order()
        );
        assert_eq!(
            graph.node_count(),
            nodes,
            "{name}: {:?}",
            graph.execution_order()
        );
        assert!(graph.nodes_of_kind(ExpressionKind::Language) == nodes);
        // The stage updates check what they write: no separate scan of
        // the solutions per step.
        let checked = graph.finite_checked_nodes();
        assert_eq!(checked.len(), updates, "{name}: {checked:?}");
    }
}

/// `dT/dt = cos(t)` with the stage time as a parameter: every integrator
/// must reproduce `T = sin(t)` to its order.
#[test]
fn a_source_that_depends_on_time_follows_the_stage_time() {
    let grid = Grid::new([4, 1, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, false, false]);
    let dt = PI / 40.0;
    // Forward Euler's error is dt/2 (f(0) - f(T)) to leading order: the
    // stage time is read (a wrong time would give another error).
    for (integrator, expected_error, tolerance) in [
        (TimeIntegrator::ForwardEuler, dt / 2.0, 2e-3),
        (TimeIntegrator::SspRk2, 0.0, 2e-3),
        (TimeIntegrator::SspRk3, 0.0, 1e-5),
    ] {
        let builder = TransportSolverBuilder::new(&grid.whole_domain(1));
        let time = builder.stage_parameters().time.clone();
        let mut solver =
            builder
                .equation(TransportEquation::new("T").source_expression(move |_| {
                    watershed_operators::cos(time.expr::<CellCentre>())
                }))
                .integrator(integrator)
                .build()
                .unwrap();
        solver.set_initial_condition("T", |_| 0.0).unwrap();
        solver
            .advance(PI / 2.0, watershed_solvers::TimeStep::Fixed(dt))
            .unwrap();
        let value = solver
            .with_solution("T", |t| {
                t.values().unwrap()[t.layout().linear_index([1, 0, 0])]
            })
            .unwrap();
        assert!(
            (value - 1.0 - expected_error).abs() < tolerance,
            "{integrator:?}: T(pi/2) = {value}, exact 1"
        );
    }
}

#[test]
fn rotating_a_scratch_field_or_mixed_locations_is_refused() {
    let grid = Grid::new([8, 1, 1], [1.0; 3], [0.0; 3]).unwrap();
    let solver = TransportSolverBuilder::new(&grid.whole_domain(1))
        .equation(
            TransportEquation::new("T")
                .diffusion(Diffusivity::Constant(1.0))
                .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))),
        )
        .graph_options(watershed_exprgraph::GraphOptions {
            no_fusion: true,
            ..Default::default()
        })
        .build()
        .unwrap();
    let equation = TransportEquation::new("T");
    let error = solver
        .graph()
        .rotate_fields(&[equation.solution_tag(), equation.rhs_tag()])
        .unwrap_err();
    assert!(
        matches!(&error, GraphError::FieldUnavailable { tag, .. } if *tag == equation.rhs_tag()),
        "{error:?}"
    );
    let flux = equation.flux_tag(0);
    let error = solver
        .graph()
        .rotate_fields(&[equation.solution_tag(), flux.clone()])
        .unwrap_err();
    assert!(
        matches!(&error, GraphError::FieldUnavailable { tag, .. } | GraphError::WrongLocation { tag, .. } if *tag == flux),
        "{error:?}"
    );
}

/// Initial values from an array indexed `[i, j, k]` in any memory order:
/// the interior takes them, the ghosts follow the boundary conditions, and a
/// wrong shape or a value that is not finite is refused before anything is
/// written.
#[test]
fn initial_values_come_from_an_array() {
    use ndarray::{Array3, ShapeBuilder};
    use watershed_solvers::SolverError;
    let patch = Grid::new([5, 3, 2], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let solver = TransportSolverBuilder::new(&patch)
        .equation(
            TransportEquation::new("T")
                .diffusion(Diffusivity::Constant(0.1))
                .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Dirichlet(1.0))),
        )
        .build()
        .unwrap();
    let value = |i: usize, j: usize, k: usize| (i + 10 * j + 100 * k) as f64;
    // Fortran order (x fastest), as Watershed stores fields.
    let mut values = Array3::<f64>::zeros((5, 3, 2).f());
    for ((i, j, k), v) in values.indexed_iter_mut() {
        *v = value(i, j, k);
    }
    solver.set_initial_values("T", values.view()).unwrap();
    solver
        .with_solution("T", |t| {
            let layout = t.layout();
            let data = t.values().unwrap();
            for [i, j, k] in layout.interior() {
                assert_eq!(
                    data[layout.linear_index([i, j, k])],
                    value(i as usize, j as usize, k as usize)
                );
            }
            // Dirichlet 1: the ghost is 2 - its mirror partner.
            let ghost = data[layout.linear_index([-1, 1, 0])];
            assert_eq!(ghost, 2.0 - value(0, 1, 0));
        })
        .unwrap();
    // C order gives the same field.
    let c_order = Array3::from_shape_fn((5, 3, 2), |(i, j, k)| value(i, j, k));
    solver.set_initial_values("T", c_order.view()).unwrap();
    solver
        .with_solution("T", |t| {
            let layout = t.layout();
            assert_eq!(
                t.values().unwrap()[layout.linear_index([4, 2, 1])],
                value(4, 2, 1)
            );
        })
        .unwrap();
    // Refusals leave the field as it was.
    let wrong = Array3::<f64>::zeros((3, 5, 2));
    match solver.set_initial_values("T", wrong.view()) {
        Err(SolverError::Setup { equation, reason }) => {
            assert_eq!(equation, "T");
            assert!(
                reason.contains("[3, 5, 2]") && reason.contains("[5, 3, 2]"),
                "{reason}"
            );
        }
        other => panic!("expected Setup, got {other:?}"),
    }
    let mut bad = c_order.clone();
    bad[[2, 1, 1]] = f64::NAN;
    match solver.set_initial_values("T", bad.view()) {
        Err(SolverError::NonFiniteInput { cell, .. }) => assert_eq!(cell, [2, 1, 1]),
        other => panic!("expected NonFiniteInput, got {other:?}"),
    }
    match solver.set_initial_values("nope", c_order.view()) {
        Err(SolverError::Setup { equation, .. }) => assert_eq!(equation, "nope"),
        other => panic!("expected Setup, got {other:?}"),
    }
    solver
        .with_solution("T", |t| {
            let layout = t.layout();
            assert_eq!(
                t.values().unwrap()[layout.linear_index([2, 1, 1])],
                value(2, 1, 1)
            );
        })
        .unwrap();
}
