//! The right-hand side of the heat equation with a variable conductivity,
//! `dT/dt = div(k grad T)`, written in the field-expression language and
//! checked against its analytic value on three grids.
//!
//! Run: `cargo run --release --example heat_rhs`

use std::f64::consts::PI;
use watershed::fields::{CellCentre, Device, Grid, SpatialField};
use watershed::operators::{
    Assign, AssignOptions, Expr, Region, abs, coordinate, cos, div, field, grad, interior_max,
    interp, sin,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut previous: Option<f64> = None;
    for n in [16, 32, 64] {
        let grid = Grid::new([n, n, n], [1.0; 3], [0.0; 3])?;
        let patch = grid.whole_domain(1);
        let (x, y, z) = (coordinate::<CellCentre>(0), coordinate(1), coordinate(2));
        let with_ghosts = AssignOptions {
            region: Region::InteriorAndGhosts(1),
            ..Default::default()
        };

        // Temperature and conductivity, ghosts included, from their formulas.
        let mut temperature = SpatialField::<CellCentre>::new("T", &patch, Device::Cpu)?;
        let mut conductivity = SpatialField::<CellCentre>::new("k", &patch, Device::Cpu)?;
        let sines: Expr<CellCentre> =
            sin(PI * x.clone()) * sin(PI * y.clone()) * sin(PI * z.clone());
        temperature.assign_with(sines.clone(), with_ghosts)?;
        conductivity.assign_with(1.0 + 0.5 * x.clone(), with_ghosts)?;

        // The right-hand side, as one fused pass.
        let mut rhs = SpatialField::<CellCentre>::new("rhs", &patch, Device::Cpu)?;
        rhs.assign(div(interp(&conductivity) * grad(&temperature)))?;

        // div(k grad T) = k lap T + grad k . grad T
        let exact = -3.0 * PI * PI * field(&conductivity) * sines
            + 0.5 * PI * cos(PI * x) * sin(PI * y) * sin(PI * z);
        let error = interior_max(abs(field(&rhs) - exact))?;
        let order = previous.map(|e| format!("   observed order {:.2}", (e / error).log2()));
        println!(
            "{n:>3}^3: max-norm error {error:.3e}{}",
            order.unwrap_or_default()
        );
        previous = Some(error);
    }
    Ok(())
}
