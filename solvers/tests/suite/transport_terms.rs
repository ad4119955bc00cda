//! The transport builder's other terms against analytic solutions: many
//! equations in one graph, a field-valued diffusivity, density weighting, a
//! source given as a tag, and initial conditions from an expression.

use std::f64::consts::PI;
use watershed_exprgraph::{LanguageExpression, Tag};
use watershed_fields::{CellCentre, Grid, LocationKind, Patch, SpatialField};
use watershed_operators::{coordinate, sin};
use watershed_solvers::*;

fn line(n: usize) -> Patch {
    Grid::new([n, 1, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1)
}

fn max_error(u: &SpatialField<CellCentre>, exact: impl Fn(f64) -> f64) -> f64 {
    let layout = u.layout();
    let values = u.values().unwrap();
    layout
        .interior()
        .iter()
        .map(|i| (values[layout.linear_index(i)] - exact(layout.coordinate(i)[0])).abs())
        .fold(0.0, f64::max)
}

fn dirichlet() -> BoundaryConditions {
    BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))
}

#[test]
fn twenty_equations_in_one_graph_each_decay_at_their_own_rate() {
    let patch = line(64);
    let mut builder = TransportSolverBuilder::new(&patch);
    for i in 0..20 {
        builder = builder.equation(
            TransportEquation::new(&format!("T{i}"))
                .diffusion(Diffusivity::Constant(0.1 + 0.05 * i as f64))
                .boundary_conditions(dirichlet()),
        );
    }
    let mut solver = builder.build().unwrap();
    assert_eq!(
        solver.graph().node_count(),
        20,
        "one node per equation: fluxes, rhs and the boundary modifier fused into the update"
    );
    for i in 0..20 {
        solver
            .set_initial_condition(&format!("T{i}"), |[x, _, _]| (PI * x).sin())
            .unwrap();
    }
    let end = 0.05;
    solver
        .advance(
            end,
            TimeStep::Limited {
                cfl: 0.5,
                diffusion_number: 0.2,
            },
        )
        .unwrap();
    for i in 0..20 {
        let k = 0.1 + 0.05 * i as f64;
        let error = solver
            .with_solution(&format!("T{i}"), |u| {
                max_error(u, |x| (-PI * PI * k * end).exp() * (PI * x).sin())
            })
            .unwrap();
        assert!(error < 5e-4, "T{i}: error {error}");
    }
}

/// Solves dT/dt = div(k grad T) / rho on a line with the given options.
fn decay(diffusivity: Diffusivity, density: Option<f64>) -> f64 {
    let patch = line(64);
    let mut equation = TransportEquation::new("T")
        .diffusion(diffusivity.clone())
        .boundary_conditions(dirichlet());
    let rho = Tag::none("rho");
    if density.is_some() {
        equation = equation.density(rho.clone());
    }
    let mut builder = TransportSolverBuilder::new(&patch).equation(equation);
    if let Diffusivity::Field(tag) = &diffusivity {
        builder
            .factory_mut()
            .placeholder(tag.clone(), LocationKind::CellCentre)
            .unwrap();
    }
    if density.is_some() {
        builder
            .factory_mut()
            .placeholder(rho.clone(), LocationKind::CellCentre)
            .unwrap();
    }
    let mut solver = builder.build().unwrap();
    if let Diffusivity::Field(tag) = &diffusivity {
        solver
            .graph()
            .with_field_mut::<CellCentre, _>(tag, |k| k.fill(0.5))
            .unwrap()
            .unwrap();
    }
    if let Some(value) = density {
        solver
            .graph()
            .with_field_mut::<CellCentre, _>(&rho, |r| r.fill(value))
            .unwrap()
            .unwrap();
    }
    solver
        .set_initial_condition("T", |[x, _, _]| (PI * x).sin())
        .unwrap();
    let end = 0.05;
    solver.advance(end, TimeStep::Fixed(1e-5)).unwrap();
    solver
        .with_solution("T", |u| {
            // Effective rate from the amplitude at the centre.
            let layout = u.layout();
            let centre = u.values().unwrap()[layout.linear_index([32, 0, 0])];
            let x = layout.coordinate([32, 0, 0])[0];
            -(centre / (PI * x).sin()).ln() / (PI * PI * end)
        })
        .unwrap()
}

#[test]
fn a_field_diffusivity_and_a_density_set_the_decay_rate() {
    let constant = decay(Diffusivity::Constant(0.5), None);
    let field = decay(Diffusivity::Field(Tag::none("k")), None);
    let weighted = decay(Diffusivity::Constant(0.5), Some(2.0));
    // Rates include the O(h^2) discretisation error, the same in each case.
    assert!((constant - 0.5).abs() < 2e-3, "constant rate {constant}");
    assert!(
        (field - constant).abs() < 1e-12,
        "field {field} vs constant {constant}"
    );
    assert!(
        (weighted - constant / 2.0).abs() < 1e-12,
        "density-weighted {weighted} vs {constant}/2"
    );
}

#[test]
fn a_source_given_as_a_tag_adds_to_the_right_hand_side() {
    let patch = line(16);
    let source = Tag::none("heating");
    let equation = TransportEquation::new("T")
        .diffusion(Diffusivity::Constant(1.0))
        .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0)))
        .source(source.clone());
    let mut builder = TransportSolverBuilder::new(&patch).equation(equation);
    builder
        .factory_mut()
        .register(LanguageExpression::new::<CellCentre>(
            source.clone(),
            |_| watershed_operators::Expr::constant(3.0),
        ))
        .unwrap();
    let mut solver = builder
        .integrator(TimeIntegrator::ForwardEuler)
        .build()
        .unwrap();
    solver.set_initial_condition("T", |_| 1.0).unwrap();
    solver.advance(0.1, TimeStep::Fixed(1e-3)).unwrap();
    // Uniform field, insulated walls: T = 1 + 3 t.
    let error = solver
        .with_solution("T", |u| max_error(u, |_| 1.3))
        .unwrap();
    assert!(error < 1e-12, "error {error}");
}

#[test]
fn initial_conditions_from_an_expression_equal_those_from_a_closure() {
    let patch = line(32);
    let equation = || {
        TransportEquation::new("T")
            .diffusion(Diffusivity::Constant(1.0))
            .boundary_conditions(dirichlet())
    };
    let a = TransportSolverBuilder::new(&patch)
        .equation(equation())
        .build()
        .unwrap();
    let b = TransportSolverBuilder::new(&patch)
        .equation(equation())
        .build()
        .unwrap();
    a.set_initial_condition("T", |[x, _, _]| (PI * x).sin())
        .unwrap();
    b.set_initial_condition_expression("T", sin(PI * coordinate::<CellCentre>(0)))
        .unwrap();
    let va = a
        .with_solution("T", |u| u.values().unwrap().to_vec())
        .unwrap();
    let vb = b
        .with_solution("T", |u| u.values().unwrap().to_vec())
        .unwrap();
    for (x, y) in va.iter().zip(&vb) {
        assert!((x - y).abs() < 1e-15, "{x} vs {y}");
    }
    assert!(
        a.set_initial_condition("nope", |_| 0.0)
            .unwrap_err()
            .to_string()
            .contains("no such equation")
    );
}

#[test]
fn the_stable_time_step_reads_the_largest_diffusivity_and_speed_of_shared_fields() {
    // A 2D grid (h = 1/16), two equations sharing one diffusivity field and
    // one velocity; the largest magnitudes sit in single interior points.
    let patch = Grid::new([16, 16, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let k = Tag::none("k");
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let mut builder = TransportSolverBuilder::new(&patch);
    for name in ["A", "B"] {
        builder = builder.equation(
            TransportEquation::new(name)
                .diffusion(Diffusivity::Field(k.clone()))
                .convection(velocity.clone(), ConvectiveScheme::Upwind)
                .boundary_conditions(dirichlet()),
        );
    }
    let factory = builder.factory_mut();
    factory
        .placeholder(k.clone(), LocationKind::CellCentre)
        .unwrap();
    factory
        .placeholder(velocity[0].clone(), LocationKind::XFace)
        .unwrap();
    factory
        .placeholder(velocity[1].clone(), LocationKind::YFace)
        .unwrap();
    factory
        .placeholder(velocity[2].clone(), LocationKind::ZFace)
        .unwrap();
    let solver = builder.build().unwrap();
    let set = |speed_u: f64, speed_v: f64, largest_k: f64| {
        let graph = solver.graph();
        graph
            .with_field_mut::<CellCentre, _>(&k, |f| -> Result<(), watershed_fields::FieldError> {
                f.fill(0.1)?;
                let at = f.layout().linear_index([5, 7, 0]);
                f.values_mut()?[at] = largest_k;
                Ok(())
            })
            .unwrap()
            .unwrap();
        graph
            .with_field_mut::<watershed_fields::XFace, _>(&velocity[0], |f| {
                f.fill(0.0)?;
                let at = f.layout().linear_index([3, 2, 0]);
                f.values_mut()?[at] = speed_u;
                Ok::<(), watershed_fields::FieldError>(())
            })
            .unwrap()
            .unwrap();
        graph
            .with_field_mut::<watershed_fields::YFace, _>(&velocity[1], |f| {
                f.fill(speed_v)?;
                Ok::<(), watershed_fields::FieldError>(())
            })
            .unwrap()
            .unwrap();
    };
    let h = 1.0 / 16.0;
    // Diffusion limits: 0.25 h^2 / 2 = 4.9e-4 against 0.5 h / 1 = 0.031.
    set(-1.0, 0.5, -2.0);
    let dt = solver.stable_time_step(0.5, 0.25).unwrap();
    assert!((dt - 0.25 * h * h / 2.0).abs() <= 1e-15, "{dt}");
    // New values on the next call (the prepared maxima read the data
    // again): a speed of 40 limits, 0.5 h / 40 = 7.8e-4 < 0.25 h^2 / 0.1.
    set(0.2, -40.0, 0.1);
    let dt = solver.stable_time_step(0.5, 0.25).unwrap();
    assert!((dt - 0.5 * h / 40.0).abs() <= 1e-15, "{dt}");
}
