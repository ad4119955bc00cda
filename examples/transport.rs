//! A scalar transport equation with diffusion, convection and a source,
//! defined in a few lines and advanced with SSP-RK3 through the expression
//! graph. Prints a summary.
//!
//! Run: `cargo run --release --example transport`

use watershed::exprgraph::{ExecutionMode, Tag};
use watershed::fields::{CellCentre, Grid, LocationKind, XFace, YFace};
use watershed::operators::{Limiter, field, interior_max, interior_min, interior_sum};
use watershed::solvers::{
    BoundaryCondition, BoundaryConditions, ConvectiveScheme, Diffusivity, SolverSymbols, TimeStep,
    TransportEquation, TransportSolverBuilder,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A 2D box, periodic in x, walls in y.
    let grid =
        Grid::new([64, 64, 1], [1.0, 1.0, 1.0], [0.0; 3])?.with_periodic([true, false, false]);
    let patch = grid.whole_domain(2);
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];

    // d(Y)/dt = -div(u Y) + div(0.002 grad Y) + 0.5 Y (1 - Y)
    let equation = TransportEquation::new("Y")
        .diffusion(Diffusivity::Constant(2e-3))
        .convection(
            velocity.clone(),
            ConvectiveScheme::Limited(Limiter::VanLeer),
        )
        .source_expression(|s| {
            // The solution as a right-hand side reads it.
            let y = s.solution::<CellCentre>("Y");
            0.5 * y.clone() * (1.0 - y)
        })
        .boundary_conditions(
            BoundaryConditions::new()
                .with(
                    watershed::operators::Side::MINUS_Y,
                    BoundaryCondition::Dirichlet(0.0),
                )
                .with(
                    watershed::operators::Side::PLUS_Y,
                    BoundaryCondition::Neumann(0.0),
                ),
        );

    let mut builder = TransportSolverBuilder::new(&patch)
        .equation(equation)
        .mode(ExecutionMode::Threaded(2));
    builder
        .factory_mut()
        .placeholder(velocity[0].clone(), LocationKind::XFace)?;
    builder
        .factory_mut()
        .placeholder(velocity[1].clone(), LocationKind::YFace)?;
    let mut solver = builder.build()?;

    // A uniform wind along x, no vertical velocity; a Gaussian blob.
    solver.graph().fill_field::<XFace>(&velocity[0], 1.0)?;
    solver.graph().fill_field::<YFace>(&velocity[1], 0.0)?;
    solver.set_initial_condition("Y", |[x, y, _]| {
        (-((x - 0.3).powi(2) + (y - 0.5).powi(2)) / 0.01).exp()
    })?;

    let steps = solver.advance(
        0.5,
        TimeStep::Limited {
            cfl: 0.4,
            diffusion_number: 0.2,
        },
    )?;
    let (total, low, high) =
        solver.with_solution("Y", |y| -> Result<_, watershed::operators::OperatorError> {
            Ok((
                interior_sum(field(y))? / (64.0 * 64.0),
                interior_min(field(y))?,
                interior_max(field(y))?,
            ))
        })??;
    println!("t = {:.3} after {steps} steps", solver.time());
    println!("mean Y = {total:.5}, min = {low:.3e}, max = {high:.5}");
    println!(
        "graph: {} nodes after fusion, {} fused",
        solver.graph().node_count(),
        solver.graph().fusions()
    );
    println!("{}", solver.graph().timing_table());
    Ok(())
}
