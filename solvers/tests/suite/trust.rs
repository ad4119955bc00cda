//! Solvers fail loudly: ghost widths checked from the stencils, boundary
//! conditions never dropped, time-stepping parameters, non-physical
//! coefficients, non-finite solutions with their cause, multigrid inputs,
//! and the stable time step of a flow.

use watershed_exprgraph::{GraphError, Tag};
use watershed_fields::{CellCentre, Device, Grid, LocationKind, Patch, SpatialField, XFace, YFace};
use watershed_operators::{Limiter, Side, log};
use watershed_solvers::*;

fn channel(ghosts: usize) -> Patch {
    Grid::new([32, 4, 1], [1.0, 0.125, 1.0], [0.0; 3])
        .unwrap()
        .whole_domain(ghosts)
}

/// A scalar carried by a uniform wind u = 1 into an empty channel through
/// a Dirichlet inflow of 1.
fn inflow(ghosts: usize) -> SolverResult<TransportSolver> {
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let equation = TransportEquation::new("Y")
        .convection(
            velocity.clone(),
            ConvectiveScheme::Limited(Limiter::VanLeer),
        )
        .boundary_conditions(
            BoundaryConditions::new()
                .with(Side::MINUS_X, BoundaryCondition::Dirichlet(1.0))
                .with(Side::PLUS_X, BoundaryCondition::Neumann(0.0))
                .with(Side::MINUS_Y, BoundaryCondition::Neumann(0.0))
                .with(Side::PLUS_Y, BoundaryCondition::Neumann(0.0)),
        );
    let mut builder = TransportSolverBuilder::new(&channel(ghosts)).equation(equation);
    builder
        .factory_mut()
        .placeholder(velocity[0].clone(), LocationKind::XFace)?;
    builder
        .factory_mut()
        .placeholder(velocity[1].clone(), LocationKind::YFace)?;
    let solver = builder.build()?;
    solver
        .graph()
        .with_field_mut::<XFace, _>(&velocity[0], |u| u.fill(1.0))??;
    solver
        .graph()
        .with_field_mut::<YFace, _>(&velocity[1], |v| v.fill(0.0))??;
    solver.set_initial_condition("Y", |_| 0.0)?;
    Ok(solver)
}

/// With one ghost layer a limited scheme cannot compute the boundary
/// fluxes: an error at build naming the solution, the side and the widths
/// (before, the boundary cells stayed frozen at 0.016 with no error).
#[test]
fn a_limited_scheme_without_two_ghost_layers_is_refused() {
    let error = inflow(1).unwrap_err();
    let message = error.to_string();
    let SolverError::Graph(GraphError::MissingGhosts {
        tag,
        needed,
        available,
        ..
    }) = &error
    else {
        panic!("expected a MissingGhosts error, got {error:?}");
    };
    assert_eq!(tag.name.as_ref() as &str, "Y");
    assert_eq!((*needed, *available), (2, 1));
    assert!(message.contains("Y"), "{message}");
}

/// With two layers the inflow reaches the first cells.
#[test]
fn a_limited_scheme_with_two_ghost_layers_carries_the_inflow() {
    let mut solver = inflow(2).unwrap();
    solver.advance(0.5, TimeStep::Fixed(0.01)).unwrap();
    let first = solver
        .with_solution("Y", |y| {
            let layout = y.layout();
            y.values().unwrap()[layout.linear_index([0, 1, 0])]
        })
        .unwrap();
    assert!((first - 1.0).abs() < 1e-6, "first cell {first}");
}

/// A 0-ghost flow patch is refused at build, in the user's words.
#[test]
fn a_flow_without_ghost_layers_is_refused_at_build() {
    let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(0);
    let error = IncompressibleFlowBuilder::new(&patch, 0.01)
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, SolverError::Setup { .. }), "{error:?}");
    assert!(message.contains("0 ghost layers"), "{message}");
    assert!(
        !message.contains("tmp_u") && !message.contains("psi"),
        "{message}"
    );
}

#[test]
fn flow_parameters_are_checked() {
    let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let axis = IncompressibleFlowBuilder::new(&patch, 0.01)
        .velocity_conditions(5, BoundaryConditions::new())
        .build()
        .unwrap_err();
    assert!(axis.to_string().contains("axis 5"), "{axis}");
    for nu in [-0.1, f64::NAN, f64::INFINITY] {
        let error = IncompressibleFlowBuilder::new(&patch, nu)
            .build()
            .unwrap_err();
        assert!(
            matches!(&error, SolverError::Setup { reason, .. } if reason.contains("viscosity")),
            "{nu}: {error:?}"
        );
    }
}

/// A diffusivity field with negative values is refused before the first step.
#[test]
fn a_negative_diffusivity_field_is_refused() {
    let k = Tag::none("k");
    let mut builder = TransportSolverBuilder::new(&channel(1)).equation(
        TransportEquation::new("T")
            .diffusion(Diffusivity::Field(k.clone()))
            .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))),
    );
    builder
        .factory_mut()
        .placeholder(k.clone(), LocationKind::CellCentre)
        .unwrap();
    let mut solver = builder.build().unwrap();
    solver
        .graph()
        .with_field_mut::<CellCentre, _>(&k, |f| f.fill(-0.5))
        .unwrap()
        .unwrap();
    solver.set_initial_condition("T", |_| 1.0).unwrap();
    let error = solver.step(1e-4).unwrap_err();
    assert!(
        matches!(&error, SolverError::Setup { equation, reason } if equation == "T" && reason.contains("negative")),
        "{error:?}"
    );
}

#[test]
fn a_side_without_a_condition_is_refused_naming_it() {
    // Periodic in x: only the y sides need conditions, and -y lacks one.
    let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, false, false])
        .whole_domain(1);
    let equation = TransportEquation::new("T")
        .diffusion(Diffusivity::Constant(0.1))
        .boundary_conditions(
            BoundaryConditions::new().with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0)),
        );
    match TransportSolverBuilder::new(&patch)
        .equation(equation)
        .build()
    {
        Err(SolverError::Setup { equation, reason }) => {
            assert_eq!(equation, "T");
            assert!(
                reason.contains("side -y has no boundary condition"),
                "{reason}"
            );
        }
        other => panic!("a missing condition was accepted: {other:?}"),
    }
    // With it, and none on the periodic sides, the solver builds.
    let equation = TransportEquation::new("T")
        .diffusion(Diffusivity::Constant(0.1))
        .boundary_conditions(
            BoundaryConditions::new()
                .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0))
                .with(Side::MINUS_Y, BoundaryCondition::Neumann(0.0)),
        );
    assert!(
        TransportSolverBuilder::new(&patch)
            .equation(equation)
            .build()
            .is_ok()
    );
}

#[test]
fn non_physical_diffusivities_are_refused() {
    for k in [-1.0, f64::NAN, f64::INFINITY] {
        let error = TransportSolverBuilder::new(&channel(1))
            .equation(TransportEquation::new("T").diffusion(Diffusivity::Constant(k)))
            .build()
            .unwrap_err();
        assert!(
            matches!(&error, SolverError::Setup { equation, reason } if equation == "T" && reason.contains("diffusivity")),
            "{k}: {error:?}"
        );
    }
}

fn heat() -> TransportSolver {
    let solver = TransportSolverBuilder::new(&channel(1))
        .equation(
            TransportEquation::new("T")
                .diffusion(Diffusivity::Constant(1.0))
                .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))),
        )
        .build()
        .unwrap();
    solver
        .set_initial_condition("T", |[x, _, _]| (std::f64::consts::PI * x).sin())
        .unwrap();
    solver
}

/// Each bad time-stepping parameter is an error that names it.
#[test]
fn time_stepping_parameters_are_checked() {
    let mut solver = heat();
    let limited = |cfl, diffusion_number| TimeStep::Limited {
        cfl,
        diffusion_number,
    };
    let cases: Vec<(f64, TimeStep, &str)> = vec![
        (f64::NAN, TimeStep::Fixed(1e-4), "end_time"),
        (f64::INFINITY, TimeStep::Fixed(1e-4), "end_time"),
        (-1.0, TimeStep::Fixed(1e-4), "before the current time"),
        (0.1, TimeStep::Fixed(f64::NAN), "Fixed"),
        (0.1, TimeStep::Fixed(f64::INFINITY), "Fixed"),
        (0.1, TimeStep::Fixed(0.0), "Fixed"),
        (0.1, TimeStep::Fixed(-1e-3), "Fixed"),
        (0.1, limited(0.0, 0.2), "cfl"),
        (0.1, limited(-0.5, 0.2), "cfl"),
        (0.1, limited(f64::NAN, 0.2), "cfl"),
        (0.1, limited(0.5, 0.0), "diffusion_number"),
        (0.1, limited(0.5, f64::NAN), "diffusion_number"),
    ];
    for (end, step, name) in cases {
        let error = solver.advance(end, step).unwrap_err();
        assert!(
            matches!(&error, SolverError::TimeStep(m) if m.contains(name)),
            "{end} {step:?}: {error:?}"
        );
    }
    assert_eq!(solver.steps(), 0, "nothing ran");
    // A time step too small to move the clock is an error, not a hang.
    solver.step(1e-3).unwrap();
    let error = solver.step(1e-30).unwrap_err();
    assert!(
        matches!(&error, SolverError::TimeStep(m) if m.contains("t + dt == t")),
        "{error:?}"
    );
}

/// A non-finite initial condition is reported as an input, with its cell.
#[test]
fn a_non_finite_initial_condition_is_named() {
    let mut solver = heat();
    solver
        .set_initial_condition(
            "T",
            |[x, y, _]| if x > 0.5 && y > 0.06 { f64::NAN } else { 0.0 },
        )
        .unwrap();
    let error = solver.step(1e-4).unwrap_err();
    let message = error.to_string();
    let SolverError::NonFiniteInput { field, cell, .. } = &error else {
        panic!("expected NonFiniteInput, got {error:?}");
    };
    assert!(field.contains('T'), "{field}");
    assert_eq!(*cell, [16, 2, 0]);
    assert!(message.contains("initial condition"), "{message}");
    assert!(!message.contains("reduce the time step"), "{message}");
}

/// An unstable time step: the message names the cell and suggests a
/// smaller step.
#[test]
fn an_unstable_step_is_diagnosed_as_such() {
    let mut solver = heat();
    let mut outcome = Ok(());
    for _ in 0..200 {
        outcome = solver.step(0.05);
        if outcome.is_err() {
            break;
        }
    }
    let error = outcome.unwrap_err();
    let SolverError::Diverged {
        equation, cause, ..
    } = &error
    else {
        panic!("expected Diverged, got {error:?}");
    };
    assert_eq!(equation, "T");
    assert!(cause.contains("reduce the time step"), "{cause}");
}

/// A source evaluated outside its domain: the message blames an
/// expression, not the time step.
#[test]
fn a_non_finite_source_is_blamed_on_an_expression() {
    let mut solver = TransportSolverBuilder::new(&channel(1))
        .equation(
            TransportEquation::new("Y")
                .diffusion(Diffusivity::Constant(1e-3))
                .source_expression(|s| {
                    log(s.field::<CellCentre>(&Tag::new("Y", watershed_exprgraph::Context::StateN)))
                })
                .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0))),
        )
        .build()
        .unwrap();
    solver.set_initial_condition("Y", |_| -1.0).unwrap();
    let error = solver.step(1e-4).unwrap_err();
    let SolverError::Diverged { cause, cell, .. } = &error else {
        panic!("expected Diverged, got {error:?}");
    };
    assert_eq!(*cell, [0, 0, 0]);
    assert!(cause.contains("expression"), "{cause}");
    assert!(cause.contains("rhs"), "names the right-hand side: {cause}");
    assert!(!cause.contains("reduce the time step"), "{cause}");
}

/// A condition on a side without ghost layers would write nothing: error.
#[test]
fn a_dirichlet_condition_is_never_dropped() {
    let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(0);
    let mut field = SpatialField::<CellCentre>::new("T", &patch, Device::Cpu).unwrap();
    let error = BoundaryConditions::all(BoundaryCondition::Dirichlet(1.0))
        .apply(&mut field)
        .unwrap_err();
    assert!(
        matches!(&error, SolverError::Setup { equation, reason } if equation == "T" && reason.contains("0 ghost layers")),
        "{error:?}"
    );
    // A face field normal to the side holds the boundary value itself.
    let mut faces = SpatialField::<XFace>::new("u", &patch, Device::Cpu).unwrap();
    BoundaryConditions::new()
        .with(Side::MINUS_X, BoundaryCondition::Dirichlet(2.0))
        .apply(&mut faces)
        .unwrap();
    let layout = faces.layout().clone();
    assert_eq!(faces.values().unwrap()[layout.linear_index([0, 3, 0])], 2.0);
}

fn poisson_patch(cells: [usize; 3]) -> Patch {
    Grid::new(cells, [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1)
}

#[test]
fn multigrid_inputs_are_checked() {
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    // One cell: no problem to solve, and no endless coarsening.
    let single = Multigrid::new(
        &poisson_patch([1, 1, 1]),
        walls.clone(),
        MultigridOptions::default(),
    )
    .unwrap_err();
    assert!(
        single
            .to_string()
            .contains("no axis has more than one cell"),
        "{single}"
    );

    // Options that cannot converge.
    for (options, word) in [
        (
            MultigridOptions {
                weight: f64::NAN,
                ..Default::default()
            },
            "weight",
        ),
        (
            MultigridOptions {
                weight: 1.5,
                ..Default::default()
            },
            "weight",
        ),
        (
            MultigridOptions {
                weight: 0.0,
                ..Default::default()
            },
            "weight",
        ),
        (
            MultigridOptions {
                pre_smoothing: 0,
                post_smoothing: 0,
                ..Default::default()
            },
            "smoothing",
        ),
        (
            MultigridOptions {
                coarsest_sweeps: 0,
                ..Default::default()
            },
            "coarsest_sweeps",
        ),
        (
            MultigridOptions {
                coarsest_weight: f64::INFINITY,
                ..Default::default()
            },
            "coarsest_weight",
        ),
        (
            MultigridOptions {
                coarsest_weight: -0.5,
                ..Default::default()
            },
            "coarsest_weight",
        ),
        (
            MultigridOptions {
                relative_tolerance: f64::NAN,
                ..Default::default()
            },
            "relative_tolerance",
        ),
        (
            MultigridOptions {
                max_iterations: 0,
                ..Default::default()
            },
            "max_iterations",
        ),
    ] {
        let error =
            Multigrid::new(&poisson_patch([16, 16, 1]), walls.clone(), options).unwrap_err();
        assert!(
            matches!(&error, SolverError::Setup { reason, .. } if reason.contains(word)),
            "{options:?}: {error:?}"
        );
    }

    let patch = poisson_patch([16, 16, 1]);
    let mut mg = Multigrid::new(&patch, walls.clone(), MultigridOptions::default()).unwrap();
    let mut solution = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
    // Right-hand sides on other grids: never a panic, never a crop.
    for cells in [[8, 8, 1], [32, 32, 1], [16, 8, 1]] {
        let other =
            SpatialField::<CellCentre>::new("b", &poisson_patch(cells), Device::Cpu).unwrap();
        let error = mg.solve(&other, &mut solution).unwrap_err();
        assert!(
            matches!(&error, SolverError::Setup { reason, .. } if reason.contains("right-hand side 'b'")),
            "{cells:?}: {error:?}"
        );
    }
    // A non-finite right-hand side.
    for bad in [f64::NAN, f64::INFINITY] {
        let mut rhs = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu).unwrap();
        rhs.fill(1.0).unwrap();
        let layout = rhs.layout().clone();
        rhs.values_mut().unwrap()[layout.linear_index([3, 4, 0])] = bad;
        for cg in [false, true] {
            let error = if cg {
                mg.solve_preconditioned_cg(&rhs, &mut solution)
            } else {
                mg.solve(&rhs, &mut solution)
            }
            .unwrap_err();
            assert!(
                matches!(&error, SolverError::Setup { reason, .. } if reason.contains("[3, 4, 0]")),
                "{error:?}"
            );
        }
    }
    // A grid that cannot be coarsened says so when it does not converge.
    let odd = poisson_patch([15, 15, 1]);
    let mut slow = Multigrid::new(
        &odd,
        walls,
        MultigridOptions {
            max_iterations: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let mut rhs = SpatialField::<CellCentre>::new("b", &odd, Device::Cpu).unwrap();
    rhs.fill(1.0).unwrap();
    let mut x = SpatialField::<CellCentre>::new("x", &odd, Device::Cpu).unwrap();
    let error = slow.solve(&rhs, &mut x).unwrap_err();
    assert!(
        matches!(&error, SolverError::NotConverged { solver, .. } if solver.contains("cannot be coarsened")),
        "{error:?}"
    );
}

/// The stable time step of a driven cavity uses interior velocities and
/// the lid speed, not the mirrored ghost (2U - u) above the lid.
#[test]
fn the_cavity_time_step_uses_interior_velocities_and_the_lid() {
    let patch = Grid::new([16, 16, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let mut flow = IncompressibleFlowBuilder::new(&patch, 1e-6)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0)),
        )
        .velocity_conditions(1, walls)
        .build()
        .unwrap();
    let h = 1.0 / 16.0;
    // At rest: the lid limits the first step.
    let first = flow.stable_time_step(0.5, 0.25).unwrap();
    assert!((first - 0.5 * h).abs() < 1e-12, "{first}");
    for _ in 0..5 {
        let dt = flow.stable_time_step(0.5, 0.25).unwrap();
        flow.step(dt).unwrap();
    }
    let interior = flow
        .with_velocity::<XFace, _>(|u| {
            watershed_operators::interior_max(watershed_operators::abs(watershed_operators::field(
                u,
            )))
            .unwrap()
        })
        .unwrap();
    let v = flow
        .with_velocity::<YFace, _>(|v| {
            watershed_operators::interior_max(watershed_operators::abs(watershed_operators::field(
                v,
            )))
            .unwrap()
        })
        .unwrap();
    let dt = flow.stable_time_step(0.5, 0.25).unwrap();
    let expected = 0.5 * h / interior.max(v).max(1.0);
    assert!(
        (dt - expected).abs() < 1e-12 * expected,
        "dt {dt}, expected {expected}"
    );
}

/// A 3D forward-Euler heat run at a diffusion number of 0.5: above the
/// scheme's limit of 1/6 in 3D, so the step is capped there and the run
/// stays bounded (it diverged before); a step forced above the limit is
/// diagnosed with the limit of the integrator, not blamed on an expression.
#[test]
fn forward_euler_in_3d_is_limited_by_its_own_diffusion_limit() {
    let grid = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let build = || {
        let solver = TransportSolverBuilder::new(&grid.whole_domain(1))
            .integrator(TimeIntegrator::ForwardEuler)
            .equation(TransportEquation::new("T").diffusion(Diffusivity::Constant(1.0)))
            .build()
            .unwrap();
        // The checkerboard: the Laplacian's most negative eigenvalue.
        solver
            .set_initial_condition("T", |[x, y, z]| {
                let cell = |c: f64| (c * 8.0).floor() as i64;
                if (cell(x) + cell(y) + cell(z)) % 2 == 0 {
                    1.0
                } else {
                    -1.0
                }
            })
            .unwrap();
        solver
    };
    let h2 = (1.0f64 / 8.0).powi(2);
    let mut solver = build();
    let dt = solver.stable_time_step(1.0, 0.5).unwrap();
    assert!(
        (dt / h2 - 1.0 / 6.0).abs() < 1e-12,
        "dt / h^2 = {}",
        dt / h2
    );
    solver
        .advance(
            40.0 * dt,
            TimeStep::Limited {
                cfl: 1.0,
                diffusion_number: 0.5,
            },
        )
        .unwrap();
    let largest = solver.with_solution("T", interior_max_abs).unwrap();
    assert!(largest <= 1.0 + 1e-12, "max |T| = {largest}");
    let mut solver = build();
    let mut outcome = Ok(());
    // Each step multiplies the checkerboard by 1 - 0.5 * 12 = -5.
    for _ in 0..1000 {
        outcome = solver.step(0.5 * h2);
        if outcome.is_err() {
            break;
        }
    }
    let error = outcome.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, SolverError::Diverged { .. }), "{error:?}");
    assert!(
        message.contains("exceeds the explicit stability limit of ForwardEuler"),
        "{message}"
    );
    // The limit is printed to four digits, not to all seventeen.
    let about = message.split("(about ").nth(1).unwrap_or_default();
    let limit = about.split(')').next().unwrap_or_default();
    let mantissa = limit.split('e').next().unwrap_or_default();
    assert!(
        mantissa.len() == 5 && limit.parse::<f64>().is_ok(),
        "{limit} in {message}"
    );
}

fn interior_max_abs(t: &SpatialField<CellCentre>) -> f64 {
    let layout = t.layout();
    let values = t.values().unwrap();
    layout
        .interior()
        .iter()
        .map(|i| values[layout.linear_index(i)].abs())
        .fold(0.0, f64::max)
}

/// A boundary value that is not finite is refused at build, naming the
/// field, the side and the value (it used to run, and a later error blamed
/// the right-hand side); the same for a flow's lid speed.
#[test]
fn boundary_values_that_are_not_finite_are_refused_by_name() {
    for (condition, what) in [
        (BoundaryCondition::Dirichlet(f64::NAN), "Dirichlet value"),
        (
            BoundaryCondition::Neumann(f64::INFINITY),
            "Neumann gradient",
        ),
        (
            BoundaryCondition::Flux {
                flux: f64::NEG_INFINITY,
                diffusivity: 1.0,
            },
            "flux",
        ),
    ] {
        let error = TransportSolverBuilder::new(&channel(1))
            .equation(
                TransportEquation::new("T")
                    .diffusion(Diffusivity::Constant(1.0))
                    .boundary_conditions(
                        BoundaryConditions::all(BoundaryCondition::Neumann(0.0))
                            .with(Side::PLUS_X, condition),
                    ),
            )
            .build()
            .unwrap_err();
        let message = error.to_string();
        // The condition is a modifier of the graph: its set-up error
        // comes back through the graph, naming the equation's field.
        assert!(
            matches!(&error, SolverError::Graph(GraphError::Native(m)) if m.starts_with("equation 'T (STATE_NP1)'")),
            "{error:?}"
        );
        assert!(
            message.contains(&format!("the {what} on side +x is")) && message.contains("finite"),
            "{message}"
        );
    }
    let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3]).unwrap();
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let error = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(f64::INFINITY)),
        )
        .velocity_conditions(1, walls)
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("the Dirichlet value on side +y is inf"),
        "{message}"
    );
}
