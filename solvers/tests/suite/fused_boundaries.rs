//! Boundary conditions fused into the assignment that produces their field
//! (`assign_node_then`): the ghost layers normal to x run as row epilogues.
//! The reference is the same work done the plain way: the assignment, then
//! each masked assignment as a pass of its own. Results must be identical
//! bit for bit, serial and threaded, for every kind of condition, and the
//! periodic images must be the interior values a hand-written loop picks.

use watershed_fields::{CellCentre, Device, Grid, IndexBox, Location, SpatialField, XFace};
use watershed_operators::{
    AssignOptions, Expr, Parallelism, Region, Side, assign_node, assign_node_reading_target,
    assign_node_then, coordinate, field, row_epilogue_count, sin,
};
use watershed_solvers::{BoundaryCondition, BoundaryConditions, SolverError};

fn options(parallelism: Parallelism) -> AssignOptions {
    AssignOptions {
        region: Region::Interior,
        parallelism,
        check_finite: false,
        ..Default::default()
    }
}

/// The target after `target = sin(3 x + 2 y + z) * source` and the
/// conditions, fused (`fused = true`) or as separate passes.
fn run<L: Location>(
    grid: &Grid,
    ghosts: usize,
    conditions: &BoundaryConditions,
    parallelism: Parallelism,
    fused: bool,
) -> Vec<f64> {
    let patch = grid.whole_domain(ghosts);
    let mut source = SpatialField::<L>::new("source", &patch, Device::Cpu).unwrap();
    let layout = source.layout().clone();
    {
        let values = source.values_mut().unwrap();
        for index in layout.allocated() {
            let [x, y, z] = layout.coordinate(index);
            values[layout.linear_index(index)] = 1.0 + 0.5 * (x * y + z).cos();
        }
    }
    let mut target = SpatialField::<L>::new("target", &patch, Device::Cpu).unwrap();
    target.fill(-7.0).unwrap();
    let leaf = target.id();
    let value: Expr<'_, L> =
        sin(3.0 * coordinate::<L>(0) + 2.0 * coordinate::<L>(1) + coordinate::<L>(2))
            * field(&source);
    let root = value.node().clone();
    let masked = conditions
        .assignments::<L>(&layout, leaf, "target")
        .unwrap();
    if fused {
        assign_node_then(
            &mut target,
            leaf,
            &root,
            &[&source],
            options(parallelism),
            &masked,
        )
        .unwrap();
    } else {
        assign_node(&mut target, &root, &[&source], options(parallelism)).unwrap();
        for (region, node) in &masked {
            let each = AssignOptions {
                region: Region::Box(*region),
                ..options(parallelism)
            };
            assign_node_reading_target(&mut target, leaf, node, &[], each).unwrap();
        }
    }
    target.values().unwrap().to_vec()
}

fn bitwise_equal(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn fused_conditions_equal_separate_passes_bit_for_bit() {
    let periodic = Grid::new([40, 24, 6], [0.1, 0.2, 0.3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let walls = Grid::new([40, 24, 6], [0.1, 0.2, 0.3], [0.0; 3]).unwrap();
    let mixed = BoundaryConditions::all(BoundaryCondition::Dirichlet(1.5))
        .with(Side::PLUS_X, BoundaryCondition::Neumann(-0.25))
        .with(
            Side::MINUS_Y,
            BoundaryCondition::Flux {
                flux: 2.0,
                diffusivity: 0.5,
            },
        );
    for ghosts in [1, 2] {
        for parallelism in [Parallelism::Serial, Parallelism::Threads(2)] {
            let cases: [(&Grid, BoundaryConditions); 2] = [
                (
                    &periodic,
                    BoundaryConditions::all(BoundaryCondition::Periodic),
                ),
                (&walls, mixed.clone()),
            ];
            for (grid, conditions) in cases {
                let fused = run::<CellCentre>(grid, ghosts, &conditions, parallelism, true);
                let plain = run::<CellCentre>(grid, ghosts, &conditions, parallelism, false);
                assert!(
                    bitwise_equal(&fused, &plain),
                    "cells, {ghosts} ghosts, {parallelism:?}, {conditions:?}"
                );
                // A face field normal to x: the Dirichlet boundary face is a
                // masked assignment inside the rows, fused too.
                let fused = run::<XFace>(grid, ghosts, &conditions, parallelism, true);
                let plain = run::<XFace>(grid, ghosts, &conditions, parallelism, false);
                assert!(
                    bitwise_equal(&fused, &plain),
                    "x faces, {ghosts} ghosts, {parallelism:?}, {conditions:?}"
                );
            }
        }
    }
}

#[test]
fn periodic_ghosts_written_as_epilogues_are_the_images_a_loop_picks() {
    let grid = Grid::new([37, 5, 3], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let conditions = BoundaryConditions::all(BoundaryCondition::Periodic);
    let values = run::<CellCentre>(&grid, 2, &conditions, Parallelism::Threads(2), true);
    let patch = grid.whole_domain(2);
    let layout =
        watershed_fields::FieldLayout::new(&patch, watershed_fields::LocationKind::CellCentre);
    let n = [37isize, 5, 3];
    for index in layout.allocated() {
        let image = [0, 1, 2].map(|a| index[a].rem_euclid(n[a]));
        assert_eq!(
            values[layout.linear_index(index)],
            values[layout.linear_index(image)],
            "ghost {index:?} must hold the value of {image:?}"
        );
    }
}

#[test]
fn only_row_local_conditions_become_epilogues() {
    let grid = Grid::new([16, 16, 16], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let patch = grid.whole_domain(2);
    let layout =
        watershed_fields::FieldLayout::new(&patch, watershed_fields::LocationKind::CellCentre);
    let periodic = BoundaryConditions::all(BoundaryCondition::Periodic)
        .assignments::<CellCentre>(&layout, 9, "u")
        .unwrap();
    // Two ghost layers on each x side fuse; the first y layer stops the run.
    assert_eq!(
        row_epilogue_count(&layout, &layout.interior(), 9, &periodic).unwrap(),
        4
    );
    // A box that reads another row (the y layers first) fuses nothing.
    let y_first: Vec<_> = periodic[4..]
        .iter()
        .chain(&periodic[..4])
        .cloned()
        .collect();
    assert_eq!(
        row_epilogue_count(&layout, &layout.interior(), 9, &y_first).unwrap(),
        0
    );
    // Nor does anything when the main assignment is not over the rows the
    // ghosts read (an empty main region).
    let empty = IndexBox::new([0; 3], [0; 3]);
    assert_eq!(
        row_epilogue_count(&layout, &empty, 9, &periodic).unwrap(),
        0
    );
}

#[test]
fn a_bad_masked_assignment_is_refused_before_anything_is_written() {
    let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let mut target = SpatialField::<CellCentre>::new("T", &patch, Device::Cpu).unwrap();
    target.fill(3.0).unwrap();
    let leaf = target.id();
    let mut outside = target.layout().allocated();
    outside.hi[0] += 1;
    let masked = vec![(outside, Expr::<CellCentre>::constant(1.0).node().clone())];
    let root = Expr::<CellCentre>::constant(5.0).node().clone();
    let error = assign_node_then(
        &mut target,
        leaf,
        &root,
        &[],
        options(Parallelism::Serial),
        &masked,
    )
    .unwrap_err();
    assert!(
        matches!(&error, watershed_operators::OperatorError::RegionOutsideTarget { target, .. } if target == "T"),
        "{error}"
    );
    assert!(target.values().unwrap().iter().all(|&v| v == 3.0));
    // And the conditions' own checks still name the equation.
    let two_cells = Grid::new([2, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(3);
    let mut thin = SpatialField::<CellCentre>::new("thin", &two_cells, Device::Cpu).unwrap();
    let error = BoundaryConditions::all(BoundaryCondition::Neumann(0.0))
        .apply(&mut thin)
        .unwrap_err();
    assert!(
        matches!(&error, SolverError::Setup { equation, reason } if equation == "thin" && reason.contains("mirrors 3 ghost layers")),
        "{error}"
    );
}
