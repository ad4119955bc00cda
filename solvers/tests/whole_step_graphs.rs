//! The whole step in the language: boundary conditions as language
//! assignments against a hand-written reference loop
//! for every kind, side and location in 1D, 2D and 3D; the structure of the
//! solvers' graphs (no native node); a time-dependent source read through
//! the stage-time parameter; the rotation of time levels; and the flow's
//! CFL limit from its graph reductions against a hand loop.

// The decomposed case of `tests/suite/patched.rs`; this file uses its
// recipe, grid and initial values only.
#[allow(dead_code)]
#[path = "support/patched_case.rs"]
mod case;

use std::f64::consts::PI;
use watershed_exprgraph::{ExpressionKind, GraphError, Tag};
use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, Location, Patch, SpatialField, XFace, YFace, ZFace,
};
use watershed_operators::Side;
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, Diffusivity, IncompressibleFlowBuilder, TimeIntegrator,
    TransportEquation, TransportSolver, TransportSolverBuilder,
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

/// The ghost values of `conditions` by a plain loop over every allocated
/// point, written from the formulas of the `boundary` module's doc: the
/// reference the language assignments are checked against. Sides are
/// filled in the order -x, +x, -y, +y, -z, +z, each across the whole
/// allocated extent of the other axes (corners take the later side's value).
fn reference<L: Location>(field: &mut SpatialField<L>, conditions: BoundaryConditions) {
    let layout = field.layout().clone();
    let grid = layout.patch().grid();
    let values = field.values_mut().unwrap();
    let n = layout.interior_extent().map(|e| e as isize);
    for side in Side::ALL {
        let axis = side.axis;
        let periodic = grid.periodic()[axis] && grid.active_dimensions()[axis];
        let condition = if periodic {
            BoundaryCondition::Periodic
        } else {
            match conditions.get(side) {
                Some(c) => c.clone(),
                None => continue,
            }
        };
        let h = grid.spacing()[axis];
        // Face fields normal to the axis have a point on the boundary:
        // index 0 on the minus side, n - 1 on the plus side.
        let on_face = L::KIND.face_axis() == Some(axis) && !periodic;
        for index in layout.allocated() {
            let i = index[axis];
            let boundary = if side.plus { n[axis] - 1 } else { 0 };
            let outward = if side.plus { 1 } else { -1 };
            let depth = (i - boundary) * outward; // > 0 in the ghosts
            let at = |along: isize| {
                let mut p = index;
                p[axis] = along;
                layout.linear_index(p)
            };
            if depth == 0 && on_face {
                if let BoundaryCondition::Dirichlet(v) = condition {
                    values[at(i)] = v;
                }
                continue;
            }
            if depth <= 0 {
                continue;
            }
            let (partner, distance) = if on_face {
                (boundary - outward * depth, 2.0 * depth as f64 * h)
            } else {
                (boundary - outward * (depth - 1), (2 * depth - 1) as f64 * h)
            };
            values[at(i)] = match condition {
                BoundaryCondition::Dirichlet(v) => 2.0 * v - values[at(partner)],
                BoundaryCondition::Neumann(q) => values[at(partner)] + distance * q,
                BoundaryCondition::Flux { flux, diffusivity } => {
                    values[at(partner)] + distance * (-flux / diffusivity)
                }
                BoundaryCondition::Periodic => values[at(i.rem_euclid(n[axis]))],
                ref other => panic!("the reference loop takes constant values, not {other:?}"),
            };
        }
    }
}

/// Fills a copy of the same values with the reference loop and with the
/// language (`BoundaryConditions::apply`), and compares every allocated
/// point bit for bit.
fn compare<L: Location>(patch: &Patch, conditions: BoundaryConditions, what: &str) {
    let mut expected = filled::<L>(patch, 7);
    let mut language = filled::<L>(patch, 7);
    // A periodic condition on an axis the grid does not wrap is refused,
    // naming the side.
    let grid = patch.grid();
    let misplaced = Side::ALL.into_iter().find(|s| {
        conditions.get(*s) == Some(&BoundaryCondition::Periodic) && !grid.periodic()[s.axis]
    });
    match (conditions.apply(&mut language), misplaced) {
        (Ok(()), None) => {}
        (Err(e), Some(side)) => {
            let text = e.to_string();
            assert!(
                text.contains(&format!("side {}", side.name())) && text.contains("with_periodic"),
                "{what}: {text}"
            );
            return;
        }
        (result, misplaced) => panic!("{what}: {result:?} with a misplaced side {misplaced:?}"),
    }
    reference(&mut expected, conditions);
    let layout = language.layout().clone();
    let (a, b) = (expected.values().unwrap(), language.values().unwrap());
    for index in layout.allocated() {
        let k = layout.linear_index(index);
        assert!(
            a[k] == b[k],
            "{what} on {}: at {index:?} reference {} vs language {}",
            L::KIND,
            a[k],
            b[k]
        );
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
fn language_boundary_conditions_equal_a_reference_loop() {
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
                        BoundaryConditions::all(kind.clone()),
                    )];
                    for side in Side::ALL.into_iter().filter(|s| active[s.axis]) {
                        cases.push((
                            format!("{kind:?} on {}, {cells:?}, {ghosts} ghosts", side.name()),
                            BoundaryConditions::new().with(side, kind.clone()),
                        ));
                    }
                    for (what, conditions) in cases {
                        compare::<CellCentre>(&patch, conditions.clone(), &what);
                        compare::<XFace>(&patch, conditions.clone(), &what);
                        if active[1] {
                            compare::<YFace>(&patch, conditions.clone(), &what);
                        }
                        if active[2] {
                            compare::<ZFace>(&patch, conditions.clone(), &what);
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
    // update. The flow: the velocity conditions on STATE_N (2 modifiers),
    // the updates to u* and v* (their conditions fused), div(u*), its norm,
    // the Poisson solve, the pressure, the corrections u and v (their
    // conditions fused), the norm of div(u) and the CFL limit's max |u|
    // and max |v|: the whole projection is in the graph, and only the
    // solve is not a language node.
    for (name, graph, nodes, updates, solves) in [
        ("transport", solver.graph(), 1, 1, 0),
        ("momentum", flow.graph(), 13, 4, 1),
    ] {
        let order = graph.execution_order();
        assert_eq!(graph.native_node_count(), 0, "{name}: {order:?}");
        assert_eq!(graph.node_count(), nodes, "{name}: {order:?}");
        assert_eq!(
            graph.nodes_of_kind(ExpressionKind::IterativeSolve),
            solves,
            "{name}: {order:?}"
        );
        let reductions = graph.nodes_of_kind(ExpressionKind::Reduction);
        assert_eq!(
            graph.nodes_of_kind(ExpressionKind::Language) + reductions + solves,
            nodes,
            "{name}: {order:?}"
        );
        // The stage updates (and the flow's corrections) check what they
        // write: no separate scan of the solutions per step.
        let checked = graph.finite_checked_nodes();
        assert_eq!(checked.len(), updates, "{name}: {checked:?}");
    }
    // Every node can run on a GPU: reductions, finiteness-checked updates
    // and the flow's Poisson solve included.
    for (name, graph) in [("transport", solver.graph()), ("momentum", flow.graph())] {
        for node in graph.execution_order() {
            let capable = graph.gpu_capability(&node, 0).unwrap().unwrap();
            assert_eq!(capable, Ok(()), "{name}: {node}");
        }
    }
    // The solve runs after div(u*) and before the corrections and the
    // pressure that read psi.
    let order = flow.graph().execution_order();
    let at = |name: &str| order.iter().position(|n| n.starts_with(name)).unwrap();
    assert!(at("div(u*)") < at("psi"));
    for reader in ["u", "v", "p"] {
        assert!(at("psi") < order.iter().position(|n| n == reader).unwrap());
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

/// The projection inside the graph: after a step of the lid-driven cavity
/// the velocity is divergence-free to the solve's tolerance (measured here
/// with a hand-written loop over the faces, not the graph's reduction),
/// and a solve that cannot converge fails the step with the solver's own
/// error, not a graph summary.
#[test]
fn the_projection_in_the_graph_leaves_no_divergence_and_reports_a_failed_solve() {
    let grid = Grid::new([16, 16, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let lid = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))
        .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0));
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let build = |options: watershed_solvers::MultigridOptions| {
        IncompressibleFlowBuilder::new(&patch, 0.01)
            .velocity_conditions(0, lid.clone())
            .velocity_conditions(1, walls.clone())
            .poisson_options(options)
            .build()
            .unwrap()
    };
    let mut flow = build(Default::default());
    for _ in 0..3 {
        let dt = flow.stable_time_step(0.5, 0.25).unwrap();
        flow.step(dt).unwrap();
    }
    let h = 1.0 / 16.0;
    let mut largest: f64 = 0.0;
    flow.with_velocity::<XFace, _>(|u| {
        flow.with_velocity::<YFace, _>(|v| {
            let (lu, lv) = (u.layout(), v.layout());
            let (u, v) = (u.values().unwrap(), v.values().unwrap());
            for j in 0..16 {
                for i in 0..16 {
                    let du = u[lu.linear_index([i + 1, j, 0])] - u[lu.linear_index([i, j, 0])];
                    let dv = v[lv.linear_index([i, j + 1, 0])] - v[lv.linear_index([i, j, 0])];
                    largest = largest.max(((du + dv) / h).abs());
                }
            }
        })
        .unwrap()
    })
    .unwrap();
    let report = flow.last_projection().clone();
    assert!(largest < 1e-6, "max |div(u)| = {largest}");
    assert!(report.iterations > 0, "{report:?}");
    assert!(report.divergence_after < 1e-8 * report.divergence_before.max(1e-300) + 1e-9);
    // The pressure is psi / (b dt): non-zero once the lid moves.
    let pressure_range = flow
        .with_pressure(|p| {
            let values = p.values().unwrap();
            let layout = p.layout();
            let interior: Vec<f64> = (0..16)
                .flat_map(|j| (0..16).map(move |i| [i, j, 0]))
                .map(|index| values[layout.linear_index(index)])
                .collect();
            let max = interior.iter().cloned().fold(f64::MIN, f64::max);
            let min = interior.iter().cloned().fold(f64::MAX, f64::min);
            max - min
        })
        .unwrap();
    assert!(pressure_range > 0.0);

    let mut failing = build(watershed_solvers::MultigridOptions {
        max_iterations: 1,
        relative_tolerance: 1e-14,
        ..Default::default()
    });
    let dt = failing.stable_time_step(0.5, 0.25).unwrap();
    let error = failing.step(dt).unwrap_err();
    assert!(
        matches!(&error, watershed_solvers::SolverError::NotConverged { solver, iterations: 1, .. } if solver.contains("CG")),
        "{error}"
    );
}

#[test]
fn the_transport_solver_places_its_whole_step_on_a_gpu() {
    let _gpu = gpu_alone();
    let grid = Grid::new([12, 10, 8], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let build = |placement| {
        TransportSolverBuilder::new(&grid.whole_domain(1))
            .equation(
                TransportEquation::new("T")
                    .diffusion(Diffusivity::Constant(0.1))
                    .source_expression(|s| {
                        watershed_operators::exp(s.field::<CellCentre>(&Tag::new(
                            "T",
                            watershed_exprgraph::Context::StateN,
                        ))) * 0.01
                    }),
            )
            .graph_options(watershed_exprgraph::GraphOptions {
                placement,
                ..Default::default()
            })
            .build()
            .unwrap()
    };
    let solver = build(watershed_exprgraph::PlacementPolicy::Gpu(0));
    // Planned without a GPU: every node there, the start value copied in.
    let graph = solver.graph();
    assert_eq!(graph.device_plan().gpu_nodes(), graph.node_count());
    let initial = |p: [f64; 3]| (p[0] * 0.5).sin() + 0.1 * p[1] - 0.05 * p[2];
    if watershed_fields::gpu::gpu_unavailable_reason(0).is_some() {
        // No GPU here: stepping is refused, naming the node and the device.
        let mut solver = solver;
        solver.set_initial_condition("T", initial).unwrap();
        let error = solver.step(1e-3).unwrap_err().to_string();
        assert!(
            error.contains("GPU 0") || error.contains("Gpu(0)"),
            "{error}"
        );
        assert!(error.contains("T"), "{error}");
        return;
    }
    // On a GPU: five steps there give the CPU's bits at every point.
    let mut on_gpu = solver;
    let mut on_cpu = build(watershed_exprgraph::PlacementPolicy::Cpu);
    for solver in [&mut on_gpu, &mut on_cpu] {
        solver.set_initial_condition("T", initial).unwrap();
        for _ in 0..5 {
            solver.step(0.05).unwrap();
        }
    }
    let values = |solver: &TransportSolver| {
        solver
            .with_solution("T", |f| f.values().unwrap().to_vec())
            .unwrap()
    };
    let (gpu, cpu) = (values(&on_gpu), values(&on_cpu));
    let differing = differing_bits(&gpu, &cpu);
    assert_eq!(differing, 0, "{differing} of {} points differ", cpu.len());
    assert!(cpu.iter().all(|v| v.is_finite()));
}

/// The flow's whole step, its pressure solve included, is placed on a GPU
/// (planned without one): every node there and no field copied between
/// nodes, only the host's placeholders copied in. Without a GPU stepping is refused naming
/// it; with one, three steps there give the CPU's bits for the velocity
/// and the pressure.
#[test]
fn the_flow_places_its_whole_step_and_its_pressure_solve_on_a_gpu() {
    let _gpu = gpu_alone();
    use watershed_exprgraph::{PlacementPolicy, Target};
    let grid = Grid::new([16, 16, 1], [1.0; 3], [0.0; 3]).unwrap();
    let build = |placement| {
        let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
        IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01)
            .velocity_conditions(
                0,
                walls
                    .clone()
                    .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0)),
            )
            .velocity_conditions(1, walls)
            .placement(placement)
            .build()
            .unwrap()
    };
    for placement in [PlacementPolicy::Gpu(0), PlacementPolicy::Heterogeneous(0)] {
        let flow = build(placement.clone());
        let graph = flow.graph();
        let plan = graph.device_plan();
        assert_eq!(plan.gpu_nodes(), graph.node_count(), "{placement}");
        // Only the placeholders the host writes (the velocity and its
        // start value) are copied in; no field crosses between nodes.
        assert!(
            plan.transfers()
                .iter()
                .all(|t| t.after.is_none() && t.to == Device::Gpu(0)),
            "{placement}: {:?}",
            plan.transfers()
        );
        let solve = graph
            .execution_order()
            .into_iter()
            .find(|n| n.starts_with("psi"))
            .unwrap();
        assert_eq!(graph.target_of(&solve), Some(Target::Gpu(0)), "{placement}");
    }
    let mut on_gpu = build(PlacementPolicy::Gpu(0));
    if watershed_fields::gpu::gpu_unavailable_reason(0).is_some() {
        let error = on_gpu.step(0.01).unwrap_err().to_string();
        assert!(error.contains("GPU 0"), "{error}");
        return;
    }
    let mut on_cpu = build(PlacementPolicy::Cpu);
    for flow in [&mut on_gpu, &mut on_cpu] {
        for _ in 0..3 {
            flow.step(0.01).unwrap();
        }
    }
    for (name, c) in assert_same_flow_bits(&on_gpu, &on_cpu, "cavity") {
        assert!(c.iter().all(|x| x.is_finite()), "{name}");
    }
    assert_eq!(
        on_gpu.last_projection().iterations,
        on_cpu.last_projection().iterations
    );
}

/// The flow's CFL limit after steps, read from its graph reductions, is
/// `cfl h / max |u|` with the maximum taken by a plain loop over every
/// face of the interior (boundary faces included), bit for bit; so is the
/// limit of a velocity written from outside between steps.
#[test]
fn the_flow_time_step_matches_a_hand_loop_over_the_faces() {
    let grid = Grid::new([20, 14, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let mut flow = IncompressibleFlowBuilder::new(&patch, 1e-7)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(0.25)),
        )
        .velocity_conditions(1, walls)
        .integrator(TimeIntegrator::SspRk3)
        .build()
        .unwrap();
    flow.set_velocity::<XFace>(|[x, y, _]| 2.0 * (3.0 * x).sin() * (2.0 * y).cos())
        .unwrap();
    flow.set_velocity::<YFace>(|[x, y, _]| -1.5 * (x * y).cos())
        .unwrap();
    fn largest<F: Location>(u: &SpatialField<F>) -> f64 {
        let layout = u.layout();
        let values = u.values().unwrap();
        let mut m: f64 = 0.0;
        for index in layout.interior() {
            m = m.max(values[layout.linear_index(index)].abs());
        }
        m
    }
    let h = 1.0f64 / 20.0;
    let expected = |flow: &watershed_solvers::IncompressibleFlow| {
        let u = flow.with_velocity::<XFace, _>(largest).unwrap();
        let v = flow.with_velocity::<YFace, _>(largest).unwrap();
        0.4 * h / u.max(v).max(0.25)
    };
    for step in 0..4 {
        let dt = flow.stable_time_step(0.4, 0.25).unwrap();
        assert_eq!(dt, expected(&flow), "before step {step}");
        flow.step(dt).unwrap();
    }
    // Written from outside: the limit follows the new values.
    flow.with_velocity_mut::<XFace, _>(|u| {
        let layout = u.layout().clone();
        let values = u.values_mut().unwrap();
        values[layout.linear_index([3, 4, 0])] = -7.0;
    })
    .unwrap();
    let dt = flow.stable_time_step(0.4, 0.25).unwrap();
    assert_eq!(dt, 0.4 * h / 7.0);
}

/// Forward Euler never reads the step's start value, so its steps swap
/// two time levels and its graph has no third (`start`); SSP-RK3 reads
/// it in its later stages and rotates it into place every step. Both give
/// the hand-computed values of `dT/dt = 1` (`T = T0 + t`): forward Euler
/// exactly (`T + dt` with dyadic numbers), SSP-RK3 to a few ulps (its
/// stage weights 1/3 and 2/3 are not exact in binary, and the update
/// `a T0 + b T + (b dt) rhs` rounds each weight once).
#[test]
fn only_integrators_that_read_the_start_value_rotate_it() {
    let patch = Grid::new([4, 3, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    for (integrator, rotates) in [
        (TimeIntegrator::ForwardEuler, false),
        (TimeIntegrator::SspRk3, true),
    ] {
        let equation = TransportEquation::new("T")
            .source_expression(|_| watershed_operators::Expr::constant(1.0))
            .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0)));
        let start = equation.start_tag();
        let mut solver = TransportSolverBuilder::new(&patch)
            .equation(equation)
            .integrator(integrator)
            .build()
            .unwrap();
        solver.set_initial_condition("T", |_| 2.0).unwrap();
        if rotates {
            let before = solver.graph().field_version(&start).unwrap();
            for _ in 0..3 {
                solver.step(0.25).unwrap();
            }
            let after = solver.graph().field_version(&start).unwrap();
            assert_ne!(after, before, "{integrator:?}");
        } else {
            // Forward Euler's update is `now + dt rhs`: no start level at all.
            let missing = solver.graph().field_version(&start).unwrap_err();
            assert!(
                matches!(&missing, GraphError::UnknownTag { tag, .. } if *tag == start),
                "{missing:?}"
            );
            for _ in 0..3 {
                solver.step(0.25).unwrap();
            }
        }
        solver
            .with_solution("T", |t| {
                let layout = t.layout();
                for index in layout.interior() {
                    let value = t.values().unwrap()[layout.linear_index(index)];
                    if rotates {
                        assert!(
                            (value - 2.75).abs() <= 4.0 * f64::EPSILON * 2.75,
                            "{integrator:?}: {value}"
                        );
                    } else {
                        assert_eq!(value, 2.75, "{integrator:?}");
                    }
                }
            })
            .unwrap();
    }
}

/// The conservative convection forms at orders 2 and 4 (with the
/// enstrophy reductions and the fourth-order projection) on a GPU give the
/// CPU's bits after two steps of the 3D Taylor-Green vortex; without a GPU
/// the test ends after building both plans.
#[test]
fn the_conservative_forms_give_the_cpu_bits_on_a_gpu() {
    let _gpu = gpu_alone();
    use watershed_exprgraph::PlacementPolicy;
    use watershed_fields::ZFace;
    use watershed_solvers::{ConvectionForm, SpaceOrder};
    let grid = Grid::new([12; 3], [2.0 * std::f64::consts::PI; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    for (form, order) in [
        (ConvectionForm::SkewSymmetric, SpaceOrder::Second),
        (ConvectionForm::Divergence, SpaceOrder::Fourth),
        (ConvectionForm::Advective, SpaceOrder::Fourth),
    ] {
        let build = |placement| {
            let flow = IncompressibleFlowBuilder::new(
                &grid.whole_domain(order.ghost_layers_for_flow()),
                1.0 / 400.0,
            )
            .convection(form)
            .space_order(order)
            .track_enstrophy()
            .placement(placement)
            .build()
            .unwrap();
            flow.set_velocity::<XFace>(|[x, y, z]| x.sin() * y.cos() * z.cos())
                .unwrap();
            flow.set_velocity::<YFace>(|[x, y, z]| -x.cos() * y.sin() * z.cos())
                .unwrap();
            flow.set_velocity::<ZFace>(|[x, _, z]| 0.1 * (x + z).sin())
                .unwrap();
            flow
        };
        let mut on_gpu = build(PlacementPolicy::Gpu(0));
        if watershed_fields::gpu::gpu_unavailable_reason(0).is_some() {
            eprintln!("skipped: no GPU (set WATERSHED_EMULATE_GPUS=1 to emulate one)");
            return;
        }
        let mut on_cpu = build(PlacementPolicy::Cpu);
        for flow in [&mut on_gpu, &mut on_cpu] {
            for _ in 0..2 {
                flow.step(0.05).unwrap();
            }
        }
        assert_same_flow_bits(
            &on_gpu,
            &on_cpu,
            &format!("{form:?} order {}", order.number()),
        );
        let (g, c) = (on_gpu.enstrophy().unwrap(), on_cpu.enstrophy().unwrap());
        assert!(c.is_some_and(f64::is_finite), "{c:?}");
        assert_eq!(g.map(f64::to_bits), c.map(f64::to_bits), "enstrophy");
    }
}

/// A flow with an immersed body on a GPU: the forcing nodes, the force
/// reductions and the projection with the body's closed faces (their
/// coefficient fields on every closed multigrid level moved there) give
/// the CPU's bits after three steps, the force included. Without a GPU
/// stepping is refused naming it.
#[test]
fn an_immersed_body_gives_the_cpu_bits_on_a_gpu() {
    let _gpu = gpu_alone();
    use watershed_exprgraph::PlacementPolicy;
    use watershed_solvers::{Body, BoundaryExpression, Shape};
    let grid = Grid::new([32, 16, 1], [2.0, 1.0, 1.0], [0.0; 3]).unwrap();
    let build = |placement| {
        let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
        let inflow = BoundaryExpression::new("inflow", |p| 4.0 * p.y.clone() * (1.0 - p.y.clone()));
        IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.02)
            .velocity_conditions(
                0,
                walls.clone().with(
                    Side::MINUS_X,
                    BoundaryCondition::DirichletExpression(inflow),
                ),
            )
            .velocity_conditions(1, walls)
            .outflow(Side::PLUS_X)
            .body(Body::fixed("disc", Shape::circle([0.6, 0.45, 0.0], 0.12)).force_band(0.06, 0.15))
            .placement(placement)
            .build()
            .unwrap()
    };
    let mut on_gpu = build(PlacementPolicy::Gpu(0));
    if watershed_fields::gpu::gpu_unavailable_reason(0).is_some() {
        let error = on_gpu.step(0.01).unwrap_err().to_string();
        assert!(error.contains("GPU 0"), "{error}");
        return;
    }
    let mut on_cpu = build(PlacementPolicy::Cpu);
    for flow in [&mut on_gpu, &mut on_cpu] {
        for _ in 0..3 {
            flow.step(0.01).unwrap();
        }
    }
    assert_same_flow_bits(&on_gpu, &on_cpu, "flow past a disc");
    let (force_gpu, force_cpu) = (
        on_gpu.body_force("disc").unwrap(),
        on_cpu.body_force("disc").unwrap(),
    );
    assert_eq!(force_gpu.map(f64::to_bits), force_cpu.map(f64::to_bits));
    assert!(force_cpu[0] > 0.0, "{force_cpu:?}");
}

/// The values of a flow's velocity components (u, v, and w in 3D) and
/// pressure, ghosts included, named.
fn flow_fields(flow: &watershed_solvers::IncompressibleFlow) -> Vec<(&'static str, Vec<f64>)> {
    let mut fields = vec![
        (
            "u",
            flow.with_velocity::<XFace, _>(|f| f.values().unwrap().to_vec())
                .unwrap(),
        ),
        (
            "v",
            flow.with_velocity::<YFace, _>(|f| f.values().unwrap().to_vec())
                .unwrap(),
        ),
    ];
    if flow.active_axes().contains(&2) {
        fields.push((
            "w",
            flow.with_velocity::<ZFace, _>(|f| f.values().unwrap().to_vec())
                .unwrap(),
        ));
    }
    fields.push((
        "p",
        flow.with_pressure(|f| f.values().unwrap().to_vec())
            .unwrap(),
    ));
    fields
}

/// Asserts that `on_gpu`'s velocity and pressure have `on_cpu`'s bits at
/// every point (`what` names the flow in the message, with the largest
/// relative difference and the first points that differ); returns the
/// CPU's fields.
fn assert_same_flow_bits(
    on_gpu: &watershed_solvers::IncompressibleFlow,
    on_cpu: &watershed_solvers::IncompressibleFlow,
    what: &str,
) -> Vec<(&'static str, Vec<f64>)> {
    let cpu = flow_fields(on_cpu);
    for ((name, g), (_, c)) in flow_fields(on_gpu).iter().zip(&cpu) {
        let worst = g
            .iter()
            .zip(c)
            .map(|(a, b)| (a - b).abs() / b.abs().max(1e-300))
            .fold(0.0_f64, f64::max);
        let differing = differing_bits(g, c);
        let first: Vec<String> = g
            .iter()
            .zip(c)
            .enumerate()
            .filter(|(_, (a, b))| a.to_bits() != b.to_bits())
            .take(8)
            .map(|(i, (a, b))| format!("{i}: GPU {a:e}, CPU {b:e}"))
            .collect();
        assert_eq!(
            differing,
            0,
            "{what} {name}: {differing} of {} points differ (largest relative difference {worst:e}; first: {first:?})",
            c.len()
        );
    }
    cpu
}

/// A flow on 2 x 2 patches of one GPU with its projection on the patches
/// (a lid-driven cavity: walls, a singular Poisson problem) and on
/// 2 x 1 x 2 patches of a periodic box (a 3D vortex): the Poisson solve
/// runs on the GPU (`projection_device`), and three steps give the bits
/// of the same patches on the CPU for the velocity and the pressure, with
/// the same CG iterations.
#[test]
fn a_decomposed_flow_on_a_gpu_solves_its_projection_there_with_the_cpus_bits() {
    let _gpu = gpu_alone();
    use std::rc::Rc;
    use watershed_exprgraph::PlacementPolicy;
    use watershed_fields::PatchLayout;
    use watershed_fields::ranks::SingleProcess;
    let cavity = |placement: PlacementPolicy| {
        let grid = Grid::new([16, 16, 1], [1.0; 3], [0.0; 3]).unwrap();
        let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
        IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01)
            .velocity_conditions(
                0,
                walls
                    .clone()
                    .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0)),
            )
            .velocity_conditions(1, walls)
            .patches(
                PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(1)).unwrap(),
                Rc::new(SingleProcess),
            )
            .placement(placement)
            .build()
            .unwrap()
    };
    let vortex = |placement: PlacementPolicy| {
        let grid = Grid::new([16, 16, 16], [2.0 * PI; 3], [0.0; 3])
            .unwrap()
            .with_periodic([true; 3]);
        let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01)
            .patches(
                PatchLayout::new(&grid, [2, 1, 2], GhostWidth::uniform(1)).unwrap(),
                Rc::new(SingleProcess),
            )
            .placement(placement)
            .build()
            .unwrap();
        flow.set_velocity::<XFace>(|[x, y, z]| x.sin() * y.cos() * z.cos())
            .unwrap();
        flow.set_velocity::<YFace>(|[x, y, z]| -x.cos() * y.sin() * z.cos())
            .unwrap();
        flow
    };
    if watershed_fields::gpu::gpu_unavailable_reason(0).is_some() {
        // Built without a GPU; refused, naming it, when it steps.
        let mut flow = cavity(PlacementPolicy::Gpu(0));
        assert_eq!(flow.projection_device(), Some(Device::Gpu(0)));
        let error = flow.step(0.01).unwrap_err().to_string();
        assert!(error.contains("GPU 0"), "{error}");
        println!("skipped: no GPU 0 (set WATERSHED_EMULATE_GPUS to emulate one)");
        return;
    }
    type Build = dyn Fn(PlacementPolicy) -> watershed_solvers::IncompressibleFlow;
    let cases: [(&str, &Build); 2] = [("cavity", &cavity), ("vortex", &vortex)];
    for (name, build) in cases {
        let mut on_gpu = build(PlacementPolicy::Gpu(0));
        assert_eq!(on_gpu.projection_device(), Some(Device::Gpu(0)), "{name}");
        let mut on_cpu = build(PlacementPolicy::Cpu);
        assert_eq!(on_cpu.projection_device(), Some(Device::Cpu), "{name}");
        for flow in [&mut on_gpu, &mut on_cpu] {
            for _ in 0..3 {
                flow.step(0.01).unwrap();
            }
        }
        for (field, c) in assert_same_flow_bits(&on_gpu, &on_cpu, name) {
            assert!(c.iter().all(|x| x.is_finite()), "{name} {field}");
        }
        assert_eq!(
            on_gpu.last_projection().iterations,
            on_cpu.last_projection().iterations,
            "{name}"
        );
    }
}

/// The same solver on 2 x 2 x 1 patches of one GPU (a periodic box, so
/// no condition is refilled on the host after a seam write): its seams
/// are exchanged on the GPU, no field crosses to the host in a step once
/// the first has run, and every patch's solution equals the same patches
/// on the CPU at every point, ghosts included.
#[test]
fn decomposed_transport_on_a_gpu_exchanges_its_seams_there() {
    let _gpu = gpu_alone();
    if watershed_fields::gpu::gpu_unavailable_reason(0).is_some() {
        println!("skipped: no GPU 0 (set WATERSHED_EMULATE_GPUS to emulate one)");
        return;
    }
    let grid = Grid::new([16, 12, 6], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let layout =
        watershed_fields::PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(1)).unwrap();
    let run = |placement: watershed_exprgraph::PlacementPolicy| {
        let recipe = |patch: &Patch| {
            TransportSolverBuilder::new(patch)
                .equation(TransportEquation::new("T").diffusion(Diffusivity::Constant(0.1)))
                .graph_options(watershed_exprgraph::GraphOptions {
                    placement: placement.clone(),
                    ..Default::default()
                })
                .build()
        };
        let mut patched = watershed_solvers::PatchedTransport::build(
            layout.clone(),
            std::rc::Rc::new(watershed_fields::ranks::SingleProcess),
            recipe,
        )
        .unwrap();
        patched
            .set_initial_condition("T", |p| (p[0] * 0.5).sin() + 0.1 * p[1] - 0.05 * p[2])
            .unwrap();
        for _ in 0..2 {
            patched.step(0.05).unwrap();
        }
        let before = watershed_fields::gpu_calls();
        patched.step(0.05).unwrap();
        patched.settle().unwrap();
        let moved = watershed_fields::gpu_calls().since(&before);
        let values: Vec<Vec<f64>> = patched
            .solvers()
            .iter()
            .map(|s| {
                s.with_solution("T", |f| f.values().unwrap().to_vec())
                    .unwrap()
            })
            .collect();
        (moved, values)
    };
    let (_, cpu) = run(watershed_exprgraph::PlacementPolicy::Cpu);
    let (moved, gpu) = run(watershed_exprgraph::PlacementPolicy::Gpu(0));
    // What crossed is each update's finiteness word (8 bytes a copy), no
    // field: before, every exchange took each patch's field to the host
    // and back (5 KiB each way here).
    assert!(moved.copies > 0, "{moved}");
    assert_eq!(moved.copied_bytes, 8 * moved.copies, "{moved}");
    for (k, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
        let differing = differing_bits(g, c);
        assert_eq!(
            differing,
            0,
            "patch {k}: {differing} of {} points differ",
            c.len()
        );
    }
}

/// The decomposed transport case with physical sides (a Dirichlet value
/// that moves in time on -y, Neumann on +y, periodic along x; two
/// equations, a limited convection) on 3 x 2 x 1 patches of a GPU: the
/// seams are exchanged there and the conditions refilled there after
/// them, so no field crosses to the host in a step, and after every step
/// each patch's every point (interior, seams, physical ghosts and the
/// corners where they meet) equals the same patches on the CPU.
#[test]
fn decomposed_transport_with_walls_refills_its_conditions_on_the_gpu() {
    let _gpu = gpu_alone();
    if watershed_fields::gpu::gpu_unavailable_reason(0).is_some() {
        println!("skipped: no GPU 0 (set WATERSHED_EMULATE_GPUS to emulate one)");
        return;
    }
    let layout =
        watershed_fields::PatchLayout::new(&case::grid(), [3, 2, 1], GhostWidth::uniform(2))
            .unwrap();
    let build = |placement: watershed_exprgraph::PlacementPolicy| {
        let options = watershed_exprgraph::GraphOptions {
            placement,
            ..Default::default()
        };
        let patched = watershed_solvers::PatchedTransport::build(
            layout.clone(),
            std::rc::Rc::new(watershed_fields::ranks::SingleProcess),
            |patch| case::recipe_with(patch, options.clone()),
        )
        .unwrap();
        for (name, initial) in case::EQUATIONS {
            patched.set_initial_condition(name, initial).unwrap();
        }
        patched
    };
    let (mut on_cpu, mut on_gpu) = (
        build(watershed_exprgraph::PlacementPolicy::Cpu),
        build(watershed_exprgraph::PlacementPolicy::Gpu(0)),
    );
    let solutions = |patched: &watershed_solvers::PatchedTransport| -> Vec<Vec<u64>> {
        let mut all = Vec::new();
        for solver in patched.solvers() {
            for (name, _) in case::EQUATIONS {
                all.push(
                    solver
                        .with_solution(name, |f| {
                            f.values().unwrap().iter().map(|v| v.to_bits()).collect()
                        })
                        .unwrap(),
                );
            }
        }
        all
    };
    for step in 0..4 {
        let dt = on_cpu.stable_time_step(0.4, 0.2).unwrap();
        on_cpu.step(dt).unwrap();
        on_cpu.settle().unwrap();
        let before = watershed_fields::gpu_calls();
        on_gpu.step(dt).unwrap();
        on_gpu.settle().unwrap();
        let moved = watershed_fields::gpu_calls().since(&before);
        if step > 1 {
            // Once the point lists and the tables of the time levels'
            // addresses are on the GPU (they rotate at each stage), the
            // updates' 8-byte finiteness words cross, no field.
            assert_eq!(moved.copied_bytes, 8 * moved.copies, "step {step}: {moved}");
        }
        let (cpu, gpu) = (solutions(&on_cpu), solutions(&on_gpu));
        for (k, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
            let differing = g.iter().zip(c).filter(|(a, b)| a != b).count();
            assert_eq!(
                differing,
                0,
                "step {step}, field {k}: {differing} of {} points differ",
                c.len()
            );
        }
    }
}

/// Serialises this file's tests that use a GPU: the driver-call census
/// is the process's, so a test that counts the bytes of its own steps
/// must not share the GPU with another test's.
fn gpu_alone() -> std::sync::MutexGuard<'static, ()> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How many of the values of `got` and `want`, taken in pairs, differ in
/// any bit.
fn differing_bits(got: &[f64], want: &[f64]) -> usize {
    got.iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count()
}
