//! The Poisson problems `tests/patched_multigrid.rs` and
//! `examples/mpi_poisson.rs` solve on patches: grids, conditions,
//! right-hand sides, and the fields of a layout's patches.

#![allow(dead_code)]

use std::f64::consts::PI;
use watershed_fields::{CellCentre, Device, Grid, Patch, PatchLayout, SpatialField};
use watershed_operators::Side;
use watershed_solvers::{BoundaryCondition, BoundaryConditions, SpaceOrder};

/// One Poisson problem.
pub struct Problem {
    pub name: &'static str,
    pub grid: Grid,
    pub conditions: BoundaryConditions,
    pub rhs: fn([f64; 3]) -> f64,
    pub order: SpaceOrder,
    /// Patch counts to solve it on.
    pub layouts: Vec<[usize; 3]>,
}

fn wavy(p: [f64; 3]) -> f64 {
    let [x, y, z] = p;
    (2.0 * PI * x).sin() * (3.0 * PI * y).cos() + 0.5 * y * y + 0.25 * (2.0 * PI * z).cos()
}

fn vortex(p: [f64; 3]) -> f64 {
    let [x, y, z] = p;
    (2.0 * PI * x).cos() * (2.0 * PI * y).cos() * (4.0 * PI * z).cos() + 0.1 * (2.0 * PI * y).sin()
}

/// A periodic x, a Dirichlet bottom and a Neumann top: not singular, so
/// V-cycles on patches equal the whole domain's bit for bit.
pub fn channel() -> Problem {
    let grid = Grid::new([32, 32, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, false, false]);
    Problem {
        name: "channel 32x32 (periodic x, Dirichlet -y, Neumann +y)",
        grid,
        conditions: BoundaryConditions::new()
            .with(Side::MINUS_Y, BoundaryCondition::Dirichlet(0.5))
            .with(Side::PLUS_Y, BoundaryCondition::Neumann(-1.0)),
        rhs: wavy,
        order: SpaceOrder::Second,
        layouts: vec![[2, 2, 1], [4, 1, 1], [1, 4, 1], [4, 2, 1]],
    }
}

/// A closed box (Neumann on every side): singular, the cavity's projection.
pub fn closed_box() -> Problem {
    let grid = Grid::new([64, 64, 1], [1.0; 3], [0.0; 3]).unwrap();
    let mut conditions = BoundaryConditions::new();
    for side in [Side::MINUS_X, Side::PLUS_X, Side::MINUS_Y, Side::PLUS_Y] {
        conditions = conditions.with(side, BoundaryCondition::Neumann(0.0));
    }
    Problem {
        name: "closed box 64x64 (Neumann)",
        grid,
        conditions,
        rhs: wavy,
        order: SpaceOrder::Second,
        layouts: vec![[2, 2, 1], [4, 2, 1]],
    }
}

/// A triply periodic box: singular, the Taylor-Green vortex's projection.
pub fn periodic_box(order: SpaceOrder) -> Problem {
    let grid = Grid::new([16, 16, 16], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, true]);
    Problem {
        name: match order {
            SpaceOrder::Second => "periodic box 16^3",
            SpaceOrder::Fourth => "periodic box 16^3, fourth order",
        },
        grid,
        conditions: BoundaryConditions::new(),
        rhs: vortex,
        order,
        layouts: vec![[2, 1, 2], [2, 2, 1]],
    }
}

/// A 3D box with a Dirichlet floor and Neumann elsewhere: not singular.
pub fn floor_box() -> Problem {
    let grid = Grid::new([16, 16, 16], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([false, true, false]);
    let mut conditions =
        BoundaryConditions::new().with(Side::MINUS_Z, BoundaryCondition::Dirichlet(0.0));
    for side in [Side::MINUS_X, Side::PLUS_X, Side::PLUS_Z] {
        conditions = conditions.with(side, BoundaryCondition::Neumann(0.0));
    }
    Problem {
        name: "box 16^3 (Dirichlet floor, periodic y)",
        grid,
        conditions,
        rhs: vortex,
        order: SpaceOrder::Second,
        layouts: vec![[2, 1, 2], [1, 2, 2]],
    }
}

/// A cell field on `patch` with `f` at each interior cell (global
/// coordinates), zero in its ghosts.
pub fn cell_field(
    patch: &Patch,
    name: &str,
    f: impl Fn([f64; 3]) -> f64,
) -> SpatialField<CellCentre> {
    let mut field = SpatialField::<CellCentre>::new(name, patch, Device::Cpu).unwrap();
    let layout = field.layout().clone();
    let values = field.values_mut().unwrap();
    for index in layout.interior() {
        values[layout.linear_index(index)] = f(layout.coordinate(index));
    }
    field
}

/// The right-hand sides and zero guesses of `patches` of `layout`.
pub fn patch_fields(
    problem: &Problem,
    layout: &PatchLayout,
    patches: std::ops::Range<usize>,
) -> (Vec<SpatialField<CellCentre>>, Vec<SpatialField<CellCentre>>) {
    let mut rhs = Vec::new();
    let mut solution = Vec::new();
    for index in patches {
        let patch = layout.patch(index).unwrap();
        rhs.push(cell_field(&patch, "b", problem.rhs));
        solution.push(cell_field(&patch, "x", |_| 0.0));
    }
    (rhs, solution)
}

/// Whether every allocated point of `part` (a patch's field) holds the bits
/// `whole` (the whole domain's, or the same patch's) holds at the same
/// global point; the first difference, named, if not.
pub fn same_bits(
    whole: &SpatialField<CellCentre>,
    part: &SpatialField<CellCentre>,
    what: &str,
) -> Result<usize, String> {
    let (w, p) = (whole.layout(), part.layout());
    let shift = [0, 1, 2].map(|a| p.patch().offset()[a] as isize - w.patch().offset()[a] as isize);
    let (wv, pv) = (whole.values().unwrap(), part.values().unwrap());
    let mut compared = 0;
    for local in p.allocated().iter() {
        let at = [0, 1, 2].map(|a| local[a] + shift[a]);
        if !w.allocated().contains(at) {
            return Err(format!(
                "{what}: point {local:?} of the patch lies outside the reference"
            ));
        }
        let (a, b) = (wv[w.linear_index(at)], pv[p.linear_index(local)]);
        if a.to_bits() != b.to_bits() {
            return Err(format!(
                "{what}: at global point {at:?} the patch holds {b:e}, the reference {a:e}"
            ));
        }
        compared += 1;
    }
    Ok(compared)
}
