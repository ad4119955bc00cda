//! `PreparedReduction`: repeated runs give the sums and extrema of
//! hand-written loops over new data each run, a field of another layout
//! (under the same id) is checked again, and a missing or too narrow field
//! gives the errors of a fresh `reduce`.

use watershed_fields::{
    CellCentre, Device, FieldLayout, FieldResult, GhostWidth, Grid, Patch, SpatialField,
};
use watershed_operators::fields::GpuBuffer;
use watershed_operators::{
    BoundField, OperatorError, Parallelism, PreparedReduction, ReduceRegion, Reduction, field,
    laplacian,
};

fn patch(ghosts: usize) -> Patch {
    let grid = Grid::new([9, 7, 1], [1.0, 0.7, 1.0], [0.0; 3]).unwrap();
    Patch::new(&grid, [0; 3], [9, 7, 1], GhostWidth::uniform(ghosts)).unwrap()
}

fn fill(f: &mut SpatialField<CellCentre>, seed: f64) {
    for (i, v) in f.values_mut().unwrap().iter_mut().enumerate() {
        *v = (seed + 0.37 * i as f64).sin();
    }
}

/// The values `value(i, j)` over the interior, combined in storage order
/// from `identity` with `combine`.
fn by_rows(
    layout: &FieldLayout,
    identity: f64,
    combine: impl Fn(f64, f64) -> f64,
    value: impl Fn(isize, isize) -> f64,
) -> f64 {
    let [nx, ny, _] = layout.interior_extent();
    let mut total = identity;
    for j in 0..ny as isize {
        for i in 0..nx as isize {
            total = combine(total, value(i, j));
        }
    }
    total
}

#[test]
fn repeated_runs_match_hand_written_loops_over_new_data() {
    let p = patch(1);
    let mut a = SpatialField::<CellCentre>::new("a", &p, Device::Cpu).unwrap();
    let mut b = SpatialField::<CellCentre>::new("b", &p, Device::Cpu).unwrap();
    let mut dot = PreparedReduction::new(
        field(&a) * field(&b),
        Reduction::Sum,
        ReduceRegion::Interior,
        Parallelism::Serial,
    )
    .unwrap();
    let mut largest = PreparedReduction::new(
        laplacian(&a),
        Reduction::Max,
        ReduceRegion::Interior,
        Parallelism::Serial,
    )
    .unwrap();
    let layout = a.layout().clone();
    let (dx, dy) = (1.0 / 9.0, 0.7 / 7.0);
    let at = |v: &[f64], i: isize, j: isize| v[layout.linear_index([i, j, 0])];
    for run in 0..4 {
        fill(&mut a, 0.1 * run as f64);
        fill(&mut b, 1.0 + 0.3 * run as f64);
        let (va, vb) = (a.values().unwrap(), b.values().unwrap());
        // The evaluator adds in its own order (interleaved accumulators),
        // so a sum of rounded products agrees to rounding.
        let product = |i, j| at(va, i, j) * at(vb, i, j);
        let expected_dot = by_rows(&layout, 0.0, |s, v| s + v, product);
        let scale = by_rows(&layout, 0.0, |s, v| s + v.abs(), product);
        let got = dot.run(&[&a, &b]).unwrap();
        assert!(
            (got - expected_dot).abs() <= 1e-14 * scale,
            "run {run}: {got} against {expected_dot}"
        );
        let lap = |i: isize, j: isize| {
            (at(va, i + 1, j) - 2.0 * at(va, i, j) + at(va, i - 1, j)) / (dx * dx)
                + (at(va, i, j + 1) - 2.0 * at(va, i, j) + at(va, i, j - 1)) / (dy * dy)
        };
        let expected_max = by_rows(&layout, f64::NEG_INFINITY, f64::max, lap);
        let got = largest.run(&[&a]).unwrap();
        assert!(
            (got - expected_max).abs() <= 1e-12 * expected_max.abs(),
            "run {run}: {got} against {expected_max}"
        );
    }
    // Products of small integers add up exactly in any order: the sum is
    // the hand loop's to the bit.
    for (f, seed) in [(&mut a, 3), (&mut b, 8)] {
        for (k, v) in f.values_mut().unwrap().iter_mut().enumerate() {
            *v = ((k * 7 + seed) % 11) as f64 - 5.0;
        }
    }
    let (va, vb) = (a.values().unwrap(), b.values().unwrap());
    let exact = by_rows(
        &layout,
        0.0,
        |s, v| s + v,
        |i, j| at(va, i, j) * at(vb, i, j),
    );
    assert_eq!(dot.run(&[&a, &b]).unwrap().to_bits(), exact.to_bits());
}

/// A field that answers with another field's id: a field of another layout
/// standing for the same tree leaf, as a graph binds one tag to fields of
/// different patches.
struct Alias<'a> {
    id: u64,
    field: &'a SpatialField<CellCentre>,
}

impl BoundField for Alias<'_> {
    fn id(&self) -> u64 {
        self.id
    }
    fn name(&self) -> &str {
        self.field.name()
    }
    fn layout(&self) -> &FieldLayout {
        self.field.layout()
    }
    fn cpu_values(&self) -> FieldResult<&[f64]> {
        self.field.values()
    }
    fn gpu_buffer(&self, device: Device) -> FieldResult<GpuBuffer> {
        BoundField::gpu_buffer(self.field, device)
    }
}

#[test]
fn a_field_of_another_layout_is_checked_again_and_missing_fields_are_named() {
    let (one, two) = (patch(1), patch(2));
    let mut a = SpatialField::<CellCentre>::new("a", &one, Device::Cpu).unwrap();
    a.fill(2.0).unwrap();
    let mut total = PreparedReduction::new(
        field(&a),
        Reduction::Sum,
        ReduceRegion::Computable,
        Parallelism::Serial,
    )
    .unwrap();
    // Computable for a plain field: ghosts included, 11 x 9 points.
    assert_eq!(total.run(&[&a]).unwrap(), 2.0 * 99.0);
    // The same id on a patch with two ghost layers: 13 x 11 points.
    let mut wide = SpatialField::<CellCentre>::new("wide", &two, Device::Cpu).unwrap();
    wide.fill(1.0).unwrap();
    let alias = Alias {
        id: a.id(),
        field: &wide,
    };
    assert_eq!(total.run(&[&alias]).unwrap(), 143.0);
    assert_eq!(total.run(&[&a]).unwrap(), 2.0 * 99.0);

    // Another field under another id: the leaf is not bound.
    let stranger = SpatialField::<CellCentre>::new("stranger", &one, Device::Cpu).unwrap();
    match total.run(&[&stranger]) {
        Err(OperatorError::UnboundField { name, .. }) => assert_eq!(name, "a"),
        other => panic!("expected UnboundField for a, got {other:?}"),
    }

    // A Laplacian over the interior needs one ghost layer; a field without
    // ghosts under a's id is refused, naming it.
    let grid = Grid::new([9, 7, 1], [1.0, 0.7, 1.0], [0.0; 3]).unwrap();
    let bare_patch = Patch::new(&grid, [0; 3], [9, 7, 1], GhostWidth::uniform(0)).unwrap();
    let bare = SpatialField::<CellCentre>::new("bare", &bare_patch, Device::Cpu).unwrap();
    let mut lap = PreparedReduction::new(
        laplacian(&a),
        Reduction::Max,
        ReduceRegion::Interior,
        Parallelism::Serial,
    )
    .unwrap();
    let alias = Alias {
        id: a.id(),
        field: &bare,
    };
    match lap.run(&[&alias]) {
        Err(OperatorError::MissingGhosts { field, needed, .. }) => {
            assert_eq!(field, "bare");
            assert_eq!(needed, 1);
        }
        other => panic!("expected MissingGhosts for bare, got {other:?}"),
    }
}

/// The kernel cache shares one kernel between trees of the same structure;
/// an unbound field is still named by the tree being run, not by the tree
/// the shared kernel was first lowered from.
#[test]
fn an_unbound_field_is_named_by_its_own_tree_when_the_kernel_came_from_the_cache() {
    let one = patch(1);
    let mut first =
        SpatialField::<CellCentre>::new("first_of_its_shape", &one, Device::Cpu).unwrap();
    first.fill(1.0).unwrap();
    let shape = |f: &SpatialField<CellCentre>| {
        PreparedReduction::new(
            field(f) * 3.0 + laplacian(f),
            Reduction::Max,
            ReduceRegion::Interior,
            Parallelism::Serial,
        )
        .unwrap()
    };
    let mut lowered_first = shape(&first);
    lowered_first.run(&[&first]).unwrap();
    let second = SpatialField::<CellCentre>::new("second_of_its_shape", &one, Device::Cpu).unwrap();
    let mut from_cache = shape(&second);
    let stranger = SpatialField::<CellCentre>::new("stranger", &one, Device::Cpu).unwrap();
    match from_cache.run(&[&stranger]) {
        Err(OperatorError::UnboundField { name, .. }) => assert_eq!(name, "second_of_its_shape"),
        other => panic!("expected UnboundField naming second_of_its_shape, got {other:?}"),
    }
}
