//! The decomposed transport case of `tests/patched.rs` and
//! `examples/mpi_transport.rs`: its recipe per patch, its initial value,
//! and the bitwise comparison of a patch with the whole domain.

use watershed_exprgraph::Tag;
use watershed_fields::{CellCentre, Grid, LocationKind, Patch, SpatialField, XFace, YFace};
use watershed_operators::{Limiter, Side, sin};
use watershed_solvers::*;

/// 24 x 18 cells over 1 x 0.75, periodic along x.
pub fn grid() -> Grid {
    Grid::new([24, 18, 1], [1.0, 0.75, 1.0], [0.0; 3])
        .unwrap()
        .with_periodic([true, false, false])
}

/// The case's solver on `patch`: its inputs set from functions of the
/// global coordinates.
pub fn recipe(patch: &Patch) -> SolverResult<TransportSolver> {
    recipe_with(patch, watershed_exprgraph::GraphOptions::default())
}

/// [`recipe`] with the graph built under `options` (a placement on a GPU).
pub fn recipe_with(
    patch: &Patch,
    options: watershed_exprgraph::GraphOptions,
) -> SolverResult<TransportSolver> {
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let k = Tag::none("k");
    let conditions = BoundaryConditions::new()
        .with(
            Side::MINUS_Y,
            BoundaryCondition::DirichletExpression(BoundaryExpression::new("inflow", |p| {
                sin(6.0 * p.x.clone() + 3.0 * p.t.clone()) * 0.5
            })),
        )
        .with(Side::PLUS_Y, BoundaryCondition::Neumann(0.5));
    let mut builder = TransportSolverBuilder::new(patch)
        .equation(
            TransportEquation::new("c")
                .diffusion(Diffusivity::Field(k.clone()))
                .convection(
                    velocity.clone(),
                    ConvectiveScheme::Limited(Limiter::VanLeer),
                )
                .boundary_conditions(conditions),
        )
        // A second equation, exchanged with the first in one message: diffused
        // with a constant coefficient, insulated in y, fed by the first.
        .equation(
            TransportEquation::new("d")
                .diffusion(Diffusivity::Constant(0.015))
                .source_expression(|s| 0.5 * s.solution::<CellCentre>("c"))
                .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0))),
        );
    builder
        .factory_mut()
        .placeholder(velocity[0].clone(), LocationKind::XFace)?;
    builder
        .factory_mut()
        .placeholder(velocity[1].clone(), LocationKind::YFace)?;
    builder
        .factory_mut()
        .placeholder(k.clone(), LocationKind::CellCentre)?;
    let solver = builder
        .integrator(TimeIntegrator::SspRk3)
        .graph_options(options)
        .build()?;
    let tau = std::f64::consts::TAU;
    solver
        .graph()
        .set_field::<XFace>(&velocity[0], |[x, y, _]| 0.8 + 0.3 * (tau * (x + y)).sin())?;
    solver
        .graph()
        .set_field::<YFace>(&velocity[1], |[x, y, _]| 0.4 * (tau * x).cos() * y)?;
    solver
        .graph()
        .set_field::<CellCentre>(&k, |[x, y, _]| 0.01 + 0.005 * (tau * x).cos() * (y + 1.0))?;
    Ok(solver)
}

/// A function of the position.
pub type Profile = fn([f64; 3]) -> f64;

/// The equations, each with its initial value.
pub const EQUATIONS: [(&str, Profile); 2] = [("c", initial), ("d", initial_d)];

/// The second equation's initial value, smooth and periodic along x.
pub fn initial_d([x, y, _]: [f64; 3]) -> f64 {
    (std::f64::consts::TAU * x).cos() * y * y
}

/// The initial value, smooth and periodic along x.
pub fn initial([x, y, _]: [f64; 3]) -> f64 {
    let tau = std::f64::consts::TAU;
    (tau * x).sin() * (3.0 * y).cos() + 0.25 * (2.0 * tau * x + 1.0).cos()
}

/// Every allocated point of `part` (a patch's solution) against `whole`
/// at the same global index; the number compared.
pub fn assert_bitwise_equal(
    whole: &SpatialField<CellCentre>,
    part: &SpatialField<CellCentre>,
    what: &str,
) -> usize {
    let (wl, pl) = (whole.layout(), part.layout());
    let offset = pl.patch().offset();
    let (w, p) = (whole.values().unwrap(), part.values().unwrap());
    let mut compared = 0;
    for local in pl.allocated().iter() {
        let global = [0, 1, 2].map(|a| local[a] + offset[a] as isize);
        let (a, b) = (p[pl.linear_index(local)], w[wl.linear_index(global)]);
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{what}: patch at {offset:?}, local point {local:?} (global {global:?}) holds {a:e}, the whole domain {b:e}"
        );
        compared += 1;
    }
    compared
}

/// The sum of the solution over `solver`'s interior.
pub fn mass(solver: &TransportSolver) -> SolverResult<f64> {
    solver.with_solution("c", |field| {
        let layout = field.layout();
        let values = field.values().unwrap();
        layout
            .interior()
            .iter()
            .map(|i| values[layout.linear_index(i)])
            .sum::<f64>()
    })
}
