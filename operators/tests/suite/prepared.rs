//! `PreparedAssignment`: repeated runs compute what unprepared calls
//! compute, bit for bit, and notice everything that makes a preparation
//! stale (another layout, another field, a parameter value folded into an
//! interpreter kernel) instead of running a kernel checked for something
//! else.

use std::sync::Arc;
use watershed_fields::{CellCentre, Device, GhostWidth, Grid, IndexBox, Patch, SpatialField};
use watershed_operators::ir::Node;
use watershed_operators::{
    AssignOptions, Backend, Expr, OperatorError, Parameter, PreparedAssignment, Region,
    assign_node_then, field, laplacian,
};

fn patch(ghosts: usize) -> Patch {
    let grid = Grid::new([9, 7, 1], [1.0, 0.7, 1.0], [0.0; 3]).unwrap();
    Patch::new(&grid, [0; 3], [9, 7, 1], GhostWidth::uniform(ghosts)).unwrap()
}

/// A field whose every point (ghosts included) holds a different value.
fn ramp(name: &str, patch: &Patch, seed: f64) -> SpatialField<CellCentre> {
    let mut f = SpatialField::<CellCentre>::new(name, patch, Device::Cpu).unwrap();
    for (i, v) in f.values_mut().unwrap().iter_mut().enumerate() {
        *v = (seed + 0.37 * i as f64).sin();
    }
    f
}

fn bits(f: &SpatialField<CellCentre>) -> Vec<u64> {
    f.values().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// `t = x + w (b - lap x)` followed by a masked assignment that copies the
/// first interior column into the -x ghost column (reading the target).
fn smoother(
    x: &SpatialField<CellCentre>,
    b: &SpatialField<CellCentre>,
    w: &Parameter,
    t: &SpatialField<CellCentre>,
) -> (Arc<Node>, Vec<(IndexBox, Arc<Node>)>) {
    let root = (field(x) + w.expr() * (field(b) - laplacian(x)))
        .node()
        .clone();
    let own = t.id();
    let ghost = IndexBox::new([-1, 0, 0], [0, 7, 1]);
    let shifted = watershed_operators::shift(Expr::<CellCentre>::symbol(own, t.name()), [1, 0, 0]);
    (root, vec![(ghost, shifted.node().clone())])
}

#[test]
fn repeated_runs_match_unprepared_calls_bit_for_bit_on_both_back_ends() {
    for backend in [Backend::Interpreter, Backend::C] {
        let p = patch(1);
        let (mut x, b) = (ramp("x", &p, 0.1), ramp("b", &p, 0.2));
        let w = Parameter::new("w", 0.125);
        let mut prepared_target = ramp("t", &p, 0.3);
        let mut reference_target = ramp("t", &p, 0.3);
        let (root, then) = smoother(&x, &b, &w, &prepared_target);
        let options = AssignOptions {
            backend,
            ..AssignOptions::default()
        };
        let own = prepared_target.id();
        let mut step =
            PreparedAssignment::new(&prepared_target, own, &root, &[&x, &b], options, &then)
                .unwrap();
        for run in 0..4 {
            // New data and a new parameter value on every run.
            for (i, v) in x.values_mut().unwrap().iter_mut().enumerate() {
                *v = (run as f64 + 0.11 * i as f64).cos();
            }
            w.set(0.1 + 0.05 * run as f64);
            step.run(&mut prepared_target, &[&x, &b]).unwrap();
            // The reference target has its own id: its tree names it.
            let (r_root, r_then) = smoother(&x, &b, &w, &reference_target);
            let r_own = reference_target.id();
            assign_node_then(
                &mut reference_target,
                r_own,
                &r_root,
                &[&x, &b],
                options,
                &r_then,
            )
            .unwrap();
            assert_eq!(
                bits(&prepared_target),
                bits(&reference_target),
                "{backend:?}, run {run}"
            );
        }
        // The ghost column copies the first interior column.
        let layout = prepared_target.layout().clone();
        let values = prepared_target.values().unwrap();
        for j in 0..7 {
            assert_eq!(
                values[layout.linear_index([-1, j, 0])],
                values[layout.linear_index([0, j, 0])]
            );
        }
    }
}

#[test]
fn a_parameter_is_read_on_every_run_of_an_interpreted_assignment() {
    let p = patch(1);
    let x = ramp("x", &p, 0.4);
    let scale = Parameter::new("scale", 2.0);
    let mut t = SpatialField::<CellCentre>::new("t", &p, Device::Cpu).unwrap();
    let root = (scale.expr() * field(&x)).node().clone();
    let options = AssignOptions {
        backend: Backend::Interpreter,
        ..AssignOptions::default()
    };
    let mut step = PreparedAssignment::new(&t, t.id(), &root, &[&x], options, &[]).unwrap();
    let layout = t.layout().clone();
    let at = layout.linear_index([3, 2, 0]);
    let xv = x.values().unwrap()[at];
    for value in [2.0, -0.5, 7.25] {
        scale.set(value);
        step.run(&mut t, &[&x]).unwrap();
        assert_eq!(t.values().unwrap()[at], value * xv);
    }
}

#[test]
fn a_target_or_field_of_another_layout_is_checked_again_with_the_errors_of_a_fresh_call() {
    let (one, two) = (patch(1), patch(2));
    let x = ramp("x", &one, 0.5);
    let mut t = SpatialField::<CellCentre>::new("t", &one, Device::Cpu).unwrap();
    let root = laplacian(&x).node().clone();
    let mut step =
        PreparedAssignment::new(&t, t.id(), &root, &[&x], AssignOptions::default(), &[]).unwrap();
    step.run(&mut t, &[&x]).unwrap();

    // A wider target: prepared again, and the values are a fresh call's.
    let mut wide = SpatialField::<CellCentre>::new("wide", &two, Device::Cpu).unwrap();
    step.run(&mut wide, &[&x]).unwrap();
    let mut reference = SpatialField::<CellCentre>::new("reference", &two, Device::Cpu).unwrap();
    watershed_operators::assign_node(&mut reference, &root, &[&x], AssignOptions::default())
        .unwrap();
    assert_eq!(bits(&wide), bits(&reference));

    // The read field's id bound to a field of another name is not found:
    // the error a fresh call gives, naming the field.
    let stranger = ramp("stranger", &one, 0.6);
    match step.run(&mut t, &[&stranger]) {
        Err(OperatorError::UnboundField { name, .. }) => assert_eq!(name, "x"),
        other => panic!("expected UnboundField for x, got {other:?}"),
    }

    // A Laplacian over the interior and one ghost layer of a target with
    // two needs two ghost layers of x, which has one.
    let options = AssignOptions {
        region: Region::InteriorAndGhosts(1),
        ..AssignOptions::default()
    };
    let result = PreparedAssignment::new(&wide, wide.id(), &root, &[&x], options, &[])
        .and_then(|mut step| step.run(&mut wide, &[&x]));
    match result {
        Err(OperatorError::MissingGhosts { field, needed, .. }) => {
            assert_eq!(field, "x");
            assert_eq!(needed, 2);
        }
        other => panic!("expected MissingGhosts for x, got {other:?}"),
    }
}

/// Mirrors and shifts about a zero constant (`0 - t`, `t + 0`: the ghosts
/// of a zero Dirichlet or Neumann condition) give the bits of the kernels,
/// whose linear forms leave the zero out, when they run as ghost fills:
/// `0 - (+0)` is -0.0 there, and `(-0) + 0` is -0.0. The CPU and the GPU
/// (which runs every fill as a kernel) then agree in the sign of zeros.
#[test]
fn fills_about_a_zero_constant_give_the_kernels_bits() {
    let p = patch(1);
    let mut start = SpatialField::<CellCentre>::new("t", &p, Device::Cpu).unwrap();
    let layout = start.layout().clone();
    // Interior zeros of both signs next to each side.
    for (i, v) in start.values_mut().unwrap().iter_mut().enumerate() {
        *v = if i % 2 == 0 { 0.0 } else { -0.0 };
    }
    let id = start.id();
    let me = || Expr::<CellCentre>::symbol(id, "t");
    let mut minus_x = layout.allocated();
    minus_x.hi[0] = 0;
    let mut plus_x = layout.allocated();
    plus_x.lo[0] = layout.interior().hi[0];
    let mirror = (0.0 - watershed_operators::shift(me(), [1, 0, 0]))
        .node()
        .clone();
    let shifted = (watershed_operators::shift(me(), [-1, 0, 0]) + 0.0)
        .node()
        .clone();
    for (name, region, node) in [("0 - t", minus_x, mirror), ("t + 0", plus_x, shifted)] {
        // The masked assignment as a fill after an empty main assignment,
        // and as a main assignment of its own (a kernel), on each back end.
        for backend in [Backend::Interpreter, Backend::C] {
            let options = AssignOptions {
                backend,
                ..AssignOptions::default()
            };
            let copy = |start: &SpatialField<CellCentre>| {
                let mut f = SpatialField::<CellCentre>::new("t", &p, Device::Cpu).unwrap();
                f.values_mut()
                    .unwrap()
                    .copy_from_slice(start.values().unwrap());
                f
            };
            let mut filled = copy(&start);
            let empty = AssignOptions {
                region: Region::Box(IndexBox::new([1, 1, 0], [2, 2, 1])),
                ..options
            };
            let same = me().node().clone();
            assign_node_then(
                &mut filled,
                id,
                &same,
                &[],
                empty,
                &[(region, node.clone())],
            )
            .unwrap();
            let mut kernel = copy(&start);
            let main = AssignOptions {
                region: Region::Box(region),
                ..options
            };
            assign_node_then(&mut kernel, id, &node, &[], main, &[]).unwrap();
            assert_eq!(bits(&filled), bits(&kernel), "{name}, {backend:?}");
        }
    }
}
