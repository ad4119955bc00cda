//! The flows that `tests/patched_flow.rs` and `examples/mpi_flow.rs` run
//! on the whole domain and on patches, and the comparison of two runs:
//! bit for bit, or to a relative tolerance.

#![allow(dead_code)]

use watershed_fields::{Grid, Location, Patch, SpatialField, XFace, YFace, ZFace};
use watershed_operators::Side;
use watershed_solvers::{
    Body, BoundaryCondition, BoundaryConditions, BoundaryExpression, IncompressibleFlow,
    IncompressibleFlowBuilder, Outflow, Shape, SpaceOrder,
};

/// A 24 x 16 cavity whose lid speeds up in time (`1 + t/2`: the
/// conditions are evaluated at every stage's own time).
pub fn cavity_grid() -> Grid {
    Grid::new([24, 16, 1], [1.5, 1.0, 1.0], [0.0; 3]).unwrap()
}

/// The cavity of [`cavity_grid`] on `patch`.
pub fn cavity(patch: &Patch) -> IncompressibleFlowBuilder {
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let lid = BoundaryExpression::new("lid", |p| 1.0 + 0.5 * p.t.clone());
    IncompressibleFlowBuilder::new(patch, 0.01)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::PLUS_Y, BoundaryCondition::DirichletExpression(lid)),
        )
        .velocity_conditions(1, walls)
}

/// A 32 x 16 channel, 2 x 1.
pub fn disc_channel_grid() -> Grid {
    Grid::new([32, 16, 1], [2.0, 1.0, 1.0], [0.0; 3]).unwrap()
}

/// The channel of [`disc_channel_grid`] on `patch`, from a uniform inflow
/// to a convective outflow, past a disc of radius 0.1 at (0.6, 0.52)
/// (an immersed body named "disc" whose force band ends 3 cells out).
pub fn past_a_disc(patch: &Patch) -> IncompressibleFlowBuilder {
    let h = 1.0 / 16.0;
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let disc = Body::fixed("disc", Shape::circle([0.6, 0.52, 0.0], 0.1)).force_band(h, 3.0 * h);
    IncompressibleFlowBuilder::new(patch, 0.02)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::MINUS_X, BoundaryCondition::Dirichlet(1.0)),
        )
        .velocity_conditions(1, walls)
        .outflow_of(Side::PLUS_X, Outflow::Convective)
        .body(disc)
}

/// The cavity of [`cavity_grid`] on `patch` with a disc "disc" of radius
/// 0.2 at (0.75, 0.5): a closed flow with an immersed body (the
/// projection's null space a constant on the fluid).
pub fn cavity_with_disc(patch: &Patch) -> IncompressibleFlowBuilder {
    cavity(patch).body(Body::fixed("disc", Shape::circle([0.75, 0.5, 0.0], 0.2)))
}

/// A periodic box of 16^3 cells, 2 pi wide.
pub fn taylor_green_grid() -> Grid {
    let side = 2.0 * std::f64::consts::PI;
    Grid::new([16; 3], [side; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3])
}

/// The Taylor-Green vortex at Re = 100 on `patch`, at space order
/// `order`, tracking the enstrophy.
pub fn taylor_green(patch: &Patch, order: SpaceOrder) -> IncompressibleFlowBuilder {
    IncompressibleFlowBuilder::new(patch, 0.01)
        .space_order(order)
        .track_enstrophy()
}

/// Sets the Taylor-Green velocity (with a small asymmetric part, so that
/// no symmetry hides a wrong window).
pub fn set_taylor_green(flow: &IncompressibleFlow) {
    flow.set_velocity::<XFace>(|[x, y, z]| x.sin() * y.cos() * z.cos() + 0.05 * (2.0 * y).sin())
        .unwrap();
    flow.set_velocity::<YFace>(|[x, y, z]| -x.cos() * y.sin() * z.cos() + 0.03 * z.cos())
        .unwrap();
    flow.set_velocity::<ZFace>(|[x, _, _]| 0.02 * (3.0 * x).sin())
        .unwrap();
}

/// How closely two runs must agree.
#[derive(Debug, Clone, Copy)]
pub enum Match {
    /// Bit for bit, time steps included.
    Bits,
    /// Within this fraction of the field's largest magnitude (of the
    /// quantity, for a number); the second run takes the first's `dt`.
    Within(f64),
}

impl Match {
    fn agree(self, a: f64, b: f64, scale: f64) -> bool {
        match self {
            Match::Bits => a.to_bits() == b.to_bits(),
            Match::Within(tolerance) => (a - b).abs() <= tolerance * scale,
        }
    }
}

/// Whether two fields agree at every allocated point; the first
/// difference otherwise.
fn same_bits<L: Location>(
    a: &SpatialField<L>,
    b: &SpatialField<L>,
    what: &str,
    how: Match,
) -> Result<usize, String> {
    same_values(a.values().unwrap(), b, what, how)
}

/// Whether `b` agrees with `x` at every allocated point.
fn same_values<L: Location>(
    x: &[f64],
    b: &SpatialField<L>,
    what: &str,
    how: Match,
) -> Result<usize, String> {
    let y = b.values().unwrap();
    if x.len() != y.len() {
        return Err(format!("{what}: {} and {} points", x.len(), y.len()));
    }
    let scale = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    match x.iter().zip(y).position(|(p, q)| !how.agree(*p, *q, scale)) {
        None => Ok(x.len()),
        Some(i) => {
            let point = b.layout().allocated().iter().nth(i).unwrap_or_default();
            Err(format!(
                "{what}: point {point:?} holds {:e} on patches, {:e} on the whole domain",
                y[i], x[i]
            ))
        }
    }
}

/// Compares every field of the state (velocity, pressure, projection
/// potential) and the reduced quantities; returns the points compared.
pub fn compare(
    whole: &IncompressibleFlow,
    parts: &IncompressibleFlow,
    what: &str,
    how: Match,
) -> Result<usize, String> {
    let mut compared = 0;
    for &axis in whole.active_axes() {
        let name = format!("{what}, {}", ["u", "v", "w"][axis]);
        compared += match axis {
            0 => whole.with_velocity::<XFace, _>(|a| {
                parts.with_velocity::<XFace, _>(|b| same_bits(a, b, &name, how))
            }),
            1 => whole.with_velocity::<YFace, _>(|a| {
                parts.with_velocity::<YFace, _>(|b| same_bits(a, b, &name, how))
            }),
            _ => whole.with_velocity::<ZFace, _>(|a| {
                parts.with_velocity::<ZFace, _>(|b| same_bits(a, b, &name, how))
            }),
        }
        .unwrap()
        .unwrap()?;
    }
    let pressure = whole
        .with_pressure(|p| p.values().unwrap().to_vec())
        .unwrap();
    compared += parts
        .with_pressure(|p| same_values(&pressure, p, &format!("{what}, p"), how))
        .unwrap()?;
    let psi = whole
        .with_projection_potential(|p| p.values().unwrap().to_vec())
        .unwrap();
    compared += parts
        .with_projection_potential(|p| same_values(&psi, p, &format!("{what}, psi"), how))
        .unwrap()?;
    let pairs = [
        (
            "kinetic energy",
            whole.kinetic_energy().unwrap(),
            parts.kinetic_energy().unwrap(),
        ),
        (
            "enstrophy",
            whole.enstrophy().unwrap().unwrap_or(0.0),
            parts.enstrophy().unwrap().unwrap_or(0.0),
        ),
        (
            "divergence after",
            whole.last_projection().divergence_after,
            parts.last_projection().divergence_after,
        ),
    ];
    for (name, a, b) in pairs {
        // The divergence after a projection is the solver's residual, not
        // the flow: only its bits are compared.
        let how = match (how, name) {
            (Match::Within(_), "divergence after") => continue,
            _ => how,
        };
        if !how.agree(a, b, a.abs()) {
            return Err(format!(
                "{what}: {name} {b:e} on patches, {a:e} on the whole domain"
            ));
        }
    }
    Ok(compared)
}

/// Steps both flows `steps` times with the whole flow's stable `dt`,
/// comparing the time steps and then every field after each step.
pub fn run_and_compare(
    whole: &mut IncompressibleFlow,
    parts: &mut IncompressibleFlow,
    steps: usize,
    what: &str,
    how: Match,
) -> Result<usize, String> {
    let mut compared = 0;
    for step in 0..steps {
        let dt = whole
            .stable_time_step(0.5, 0.2)
            .map_err(|e| e.to_string())?;
        let parts_dt = parts
            .stable_time_step(0.5, 0.2)
            .map_err(|e| e.to_string())?;
        if matches!(how, Match::Bits) && dt.to_bits() != parts_dt.to_bits() {
            return Err(format!(
                "{what}, step {step}: dt {parts_dt:e} on patches, {dt:e} on the whole domain"
            ));
        }
        whole.step(dt).map_err(|e| e.to_string())?;
        parts.step(dt).map_err(|e| e.to_string())?;
        compared += compare(whole, parts, &format!("{what}, step {step}"), how)?;
    }
    Ok(compared)
}
