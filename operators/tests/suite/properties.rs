//! Property tests (proptest) of assignment and reduction semantics:
//!
//! * (a) the thread count never changes a result: the same assignment or
//!   reduction with `Serial`, `Threads(2)`, `Threads(3)` and `Rayon` gives
//!   bitwise identical values;
//! * (b) `cond` chains take the value of the FIRST condition that holds, with
//!   comparisons, masks (`boundary`, `points`, `region`) and `&`, `|`, `!`,
//!   checked point by point against a hand-written if/else chain;
//! * (c) reductions (`sum`, `interior_sum`, min, max, L2 norms, the generic
//!   `reduce`) equal a serial reference loop, for plain fields and for
//!   stencil expressions.

use crate::common;

use common::shift;
use common::*;
use proptest::prelude::*;
use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, IndexBox, Location, Patch, SpatialField, XFace, YFace,
};
use watershed_operators::*;

/// Every way of running an evaluation.
const PARALLELISMS: [Parallelism; 4] = [
    Parallelism::Serial,
    Parallelism::Threads(2),
    Parallelism::Threads(3),
    Parallelism::Rayon,
];

/// Proptest strategy: a random patch (odd cell counts 3..=9, or nz = 1 for a
/// 2D grid; 0..=2 grid cells beyond it on each side; `ghosts` layers).
fn patches(ghosts: usize) -> impl Strategy<Value = Patch> {
    (
        proptest::array::uniform3(1usize..=4),
        proptest::array::uniform3(0usize..=2),
        proptest::array::uniform3(0usize..=2),
        any::<bool>(),
        proptest::array::uniform3(0.5f64..2.0),
    )
        .prop_map(move |(half, before, after, two_d, lengths)| {
            let mut cells = half.map(|h| 2 * h + 1);
            let mut before = before;
            let mut after = after;
            if two_d {
                cells[2] = 1;
                before[2] = 0;
                after[2] = 0;
            }
            let grid_cells = [0, 1, 2].map(|a| before[a] + cells[a] + after[a]);
            let grid = Grid::new(grid_cells, lengths, [0.0; 3]).unwrap();
            Patch::new(&grid, before, cells, GhostWidth::uniform(ghosts)).unwrap()
        })
}

/// Bit patterns of a field's values, ghosts included.
fn bits<L: Location>(field: &SpatialField<L>) -> Vec<u64> {
    field
        .values()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// A value from a small set, so that comparisons tie often.
fn discrete(rng: &mut Xorshift) -> f64 {
    [-1.0, -0.5, 0.0, 0.5, 1.0][rng.int(0, 4)]
}

/// True when `index` of a `kind` layout is on the physical boundary `side`,
/// as `PointSet::Boundary` documents it: the first (minus) or last (plus)
/// interior index along the side's axis, where the patch touches that
/// domain boundary.
fn on_boundary(layout: &watershed_fields::FieldLayout, side: Side, index: [isize; 3]) -> bool {
    let patch = layout.patch();
    let touches = if side.plus {
        patch.plus_boundary()[side.axis]
    } else {
        patch.minus_boundary()[side.axis]
    };
    let at = if side.plus {
        layout.interior_extent()[side.axis] as isize - 1
    } else {
        0
    };
    touches && index[side.axis] == at && layout.interior().contains(index)
}

// ---------------------------------------------------------------------------
// (a) Thread count does not change results
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn assignments_are_bitwise_identical_for_any_thread_count(
        patch in patches(2),
        seed in any::<u64>(),
        largest in any::<bool>(),
    ) {
        let mut rng = Xorshift::new(seed);
        let g = random_field::<CellCentre>("g", &patch, &mut rng, |r| r.uniform(0.5, 2.0));
        let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
        let src = random_field::<CellCentre>("src", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
        let u = random_field::<XFace>("u", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
        let expr = div(interp(&g) * grad(&phi)) + exp(-field(&phi)) * &src
            - divergence::<XFace>(limited::<XFace>(Limiter::Superbee, &u, &phi) * &u)
            + laplacian(sin(&phi) * &g);
        let region = if largest { Region::LargestComputable } else { Region::Interior };
        let mut results = Vec::new();
        for parallelism in PARALLELISMS {
            let mut target = sentinel_target::<CellCentre>("target", &patch);
            target.assign_with(&expr, AssignOptions { region, parallelism, ..AssignOptions::default() }).unwrap();
            results.push(bits(&target));
        }
        // The result is not trivially the sentinel everywhere.
        prop_assert!(results[0].iter().any(|&b| b != SENTINEL.to_bits()));
        for (parallelism, result) in PARALLELISMS.iter().zip(&results).skip(1) {
            prop_assert!(result == &results[0], "{parallelism:?} differs from Serial");
        }
    }

    #[test]
    fn reductions_are_bitwise_identical_for_any_thread_count(
        patch in patches(1),
        seed in any::<u64>(),
    ) {
        let mut rng = Xorshift::new(seed);
        let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
        let g = random_field::<CellCentre>("g", &patch, &mut rng, |r| r.uniform(0.5, 2.0));
        let expressions: [(&str, Expr<'_, CellCentre>); 3] = [
            ("phi", field(&phi)),
            ("phi * g + 0.1", field(&phi) * &g + 0.1),
            ("div(interp(g) grad(phi))", div(interp(&g) * grad(&phi))),
        ];
        for (name, expr) in &expressions {
            for reduction in [Reduction::Sum, Reduction::SumOfSquares, Reduction::Min, Reduction::Max] {
                for region in [ReduceRegion::Interior, ReduceRegion::Computable] {
                    let serial = reduce(expr, reduction, region, Parallelism::Serial).unwrap();
                    prop_assert!(serial.is_finite());
                    for parallelism in PARALLELISMS {
                        let other = reduce(expr, reduction, region, parallelism).unwrap();
                        prop_assert_eq!(
                            other.to_bits(),
                            serial.to_bits(),
                            "{:?} {:?} of {} over {:?}: {} vs serial {}",
                            parallelism, reduction, name, region, other, serial
                        );
                    }
                }
            }
        }
        // The named functions agree with the generic reduce.
        prop_assert_eq!(
            sum(&phi).unwrap().to_bits(),
            reduce(&phi, Reduction::Sum, ReduceRegion::Computable, Parallelism::Serial).unwrap().to_bits()
        );
        prop_assert_eq!(
            interior_norm_l2(&phi).unwrap().to_bits(),
            reduce(&phi, Reduction::SumOfSquares, ReduceRegion::Interior, Parallelism::Serial)
                .unwrap()
                .sqrt()
                .to_bits()
        );
    }
}

// ---------------------------------------------------------------------------
// (b) cond chains pick the first true branch
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn cond_chains_of_comparisons_take_the_first_true_branch(
        patch in patches(1),
        seed in any::<u64>(),
    ) {
        let mut rng = Xorshift::new(seed);
        let a = random_field::<CellCentre>("a", &patch, &mut rng, discrete);
        let b = random_field::<CellCentre>("b", &patch, &mut rng, discrete);
        let c = random_field::<CellCentre>("c", &patch, &mut rng, discrete);
        // Every comparison is tied somewhere (the values are discrete), and
        // the branches overlap, so the order of the tests matters.
        let expr = cond(field(&a).lt(&b), 2.0 * field(&a))
            .cond(field(&a).le(&c) & field(&b).not_equals(0.0), exp(&b))
            .cond(field(&b).ge(&c), 7.0)
            .cond(field(&a).equals(&c) | field(&b).gt(&a), field(&c) - &b)
            .otherwise(&c);
        let mut target = sentinel_target::<CellCentre>("target", &patch);
        target
            .assign_with(&expr, AssignOptions { region: Region::LargestComputable, ..Default::default() })
            .unwrap();
        let layout = target.layout().clone();
        let mut taken = [0usize; 5];
        for i in layout.allocated() {
            let (a, b, c) = (at(&a, i), at(&b, i), at(&c, i));
            let (branch, want) = if a < b {
                (0, 2.0 * a)
            } else if a <= c && b != 0.0 {
                (1, watershed_operators::vmath::exp(b))
            } else if b >= c {
                (2, 7.0)
            } else if a == c || b > a {
                (3, c - b)
            } else {
                (4, c)
            };
            taken[branch] += 1;
            let got = at(&target, i);
            prop_assert_eq!(got.to_bits(), want.to_bits(), "at {:?}: a={} b={} c={}", i, a, b, c);
        }
        prop_assert_eq!(taken.iter().sum::<usize>(), layout.allocated_len());
    }

    #[test]
    fn cond_chains_with_masks_take_the_first_true_branch(
        patch in patches(2),
        seed in any::<u64>(),
        side in 0usize..6,
    ) {
        check_masked_chain::<CellCentre>(&patch, seed, Side::ALL[side])?;
        check_masked_chain::<XFace>(&patch, seed, Side::ALL[side])?;
        check_masked_chain::<YFace>(&patch, seed, Side::ALL[(side + 1) % 6])?;
    }
}

/// A `cond` chain mixing a boundary mask on `side`, a point list, a region
/// and comparisons with `&`, `|`, `!`, evaluated over every allocated point
/// of an `L` field, vs a hand-written if/else chain.
fn check_masked_chain<L: Location>(
    patch: &Patch,
    seed: u64,
    side: Side,
) -> Result<(), TestCaseError> {
    let mut rng = Xorshift::new(seed);
    let a = random_field::<L>("a", patch, &mut rng, discrete);
    let b = random_field::<L>("b", patch, &mut rng, discrete);
    let mut target = sentinel_target::<L>("target", patch);
    let layout = target.layout().clone();
    let allocated = layout.allocated();
    // Points of the allocation and of the layer just outside it.
    let random_point = |rng: &mut Xorshift| {
        [0, 1, 2].map(|d| allocated.lo[d] - 1 + rng.int(0, allocated.extent()[d] + 1) as isize)
    };
    let points: Vec<[isize; 3]> = (0..12).map(|_| random_point(&mut rng)).collect();
    let corner = random_point(&mut rng);
    let block = IndexBox::new(
        corner,
        [0, 1, 2].map(|d| corner[d] + rng.int(1, 3) as isize),
    );
    let boundary = Mask::<L>::boundary(side);
    let listed = Mask::<L>::points(points.iter().copied());
    let region = Mask::<L>::region(block);
    let expr = cond(on(&boundary) & field(&a).ge(0.0), 10.0)
        .cond(on(&listed) & !field(&a).gt(0.0), 20.0)
        .cond(on(&region) | field(&b).lt(&a), field(&a) * 3.0)
        .cond(!on(&boundary), -field(&b))
        .otherwise(99.0);
    target
        .assign_with(
            &expr,
            AssignOptions {
                region: Region::LargestComputable,
                ..Default::default()
            },
        )
        .unwrap();
    for i in allocated {
        let (a, b) = (at(&a, i), at(&b, i));
        let want = if on_boundary(&layout, side, i) && a >= 0.0 {
            10.0
        } else if points.contains(&i) && a <= 0.0 {
            20.0
        } else if block.contains(i) || b < a {
            a * 3.0
        } else if !on_boundary(&layout, side, i) {
            -b
        } else {
            99.0
        };
        let got = at(&target, i);
        prop_assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{} at {:?} (side {}): a={} b={}",
            L::KIND,
            i,
            side.name(),
            a,
            b
        );
    }
    Ok(())
}

#[test]
fn the_first_true_branch_wins_where_all_hold() {
    let grid = Grid::new([5, 3, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let a = field_from::<CellCentre>("a", &patch, |i, _| i[0] as f64);
    let mut target = sentinel_target::<CellCentre>("target", &patch);
    target
        .assign(
            cond(field(&a).ge(-10.0), 1.0)
                .cond(field(&a).le(10.0), 2.0)
                .cond(field(&a).equals(&a), 3.0)
                .otherwise(4.0),
        )
        .unwrap();
    let interior = target.layout().interior();
    check_region("all conditions true", &target, &interior, |_| (1.0, 1.0));
    target.fill(SENTINEL).unwrap();
    // None true: the default; the middle branch true only at i = 2.
    target
        .assign(
            cond(field(&a).lt(-10.0), 1.0)
                .cond(field(&a).equals(2.0), 2.0)
                .otherwise(4.0),
        )
        .unwrap();
    check_region("middle branch", &target, &interior, |i| {
        (if i[0] == 2 { 2.0 } else { 4.0 }, 4.0)
    });
}

#[test]
fn constant_conditions_select_statically() {
    let grid = Grid::new([5, 3, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let a = field_from::<CellCentre>("a", &patch, |i, _| i[0] as f64);
    let b = field_from::<CellCentre>("b", &patch, |i, _| -(i[1] as f64));
    let mut target = sentinel_target::<CellCentre>("target", &patch);
    let interior = target.layout().interior();
    target
        .assign(cond(Expr::constant(1.0).lt(2.0), &a).otherwise(&b))
        .unwrap();
    check_region("true constant condition", &target, &interior, |i| {
        (i[0] as f64, 1.0)
    });
    target
        .assign(
            cond(Expr::constant(3.0).lt(2.0), &a)
                .cond(!Expr::constant(0.0).equals(0.0), 5.0)
                .otherwise(&b),
        )
        .unwrap();
    check_region("false constant conditions", &target, &interior, |i| {
        (-(i[1] as f64), 1.0)
    });
}

#[test]
fn boundary_masks_select_exactly_the_boundary_points() {
    // 5 x 3 x 1 cells: x faces 0..=5 on the whole domain.
    let grid = Grid::new([5, 3, 1], [1.0; 3], [0.0; 3]).unwrap();
    let whole = grid.whole_domain(1);
    let count = |patch: &Patch, side: Side| -> (Vec<[isize; 3]>, Vec<[isize; 3]>) {
        let mut cells = sentinel_target::<CellCentre>("c", patch);
        cells
            .assign_with(
                cond(on(&Mask::<CellCentre>::boundary(side)), 1.0).otherwise(0.0),
                AssignOptions {
                    region: Region::LargestComputable,
                    ..Default::default()
                },
            )
            .unwrap();
        let mut faces = sentinel_target::<XFace>("f", patch);
        faces
            .assign_with(
                cond(on(&Mask::<XFace>::boundary(side)), 1.0).otherwise(0.0),
                AssignOptions {
                    region: Region::LargestComputable,
                    ..Default::default()
                },
            )
            .unwrap();
        let selected = |layout: &watershed_fields::FieldLayout, values: &[f64]| {
            layout
                .allocated()
                .iter()
                .filter(|&i| values[layout.linear_index(i)] == 1.0)
                .collect::<Vec<_>>()
        };
        (
            selected(cells.layout(), cells.values().unwrap()),
            selected(faces.layout(), faces.values().unwrap()),
        )
    };
    let (cells, faces) = count(&whole, Side::PLUS_X);
    assert_eq!(cells, vec![[4, 0, 0], [4, 1, 0], [4, 2, 0]]);
    assert_eq!(faces, vec![[5, 0, 0], [5, 1, 0], [5, 2, 0]]);
    let (cells, faces) = count(&whole, Side::MINUS_Y);
    assert_eq!(cells, (0..5).map(|i| [i, 0, 0]).collect::<Vec<_>>());
    assert_eq!(faces, (0..6).map(|i| [i, 0, 0]).collect::<Vec<_>>());
    // z is inactive: no boundary there.
    let (cells, faces) = count(&whole, Side::PLUS_Z);
    assert!(cells.is_empty() && faces.is_empty());
    // A patch not touching +x has no +x boundary points but keeps -x.
    let left = Patch::new(&grid, [0, 0, 0], [3, 3, 1], GhostWidth::uniform(1)).unwrap();
    let (cells, faces) = count(&left, Side::PLUS_X);
    assert!(cells.is_empty() && faces.is_empty());
    let (cells, faces) = count(&left, Side::MINUS_X);
    assert_eq!(cells, vec![[0, 0, 0], [0, 1, 0], [0, 2, 0]]);
    assert_eq!(faces, cells);
    // Periodic axes have no boundary.
    let periodic = grid
        .clone()
        .with_periodic([true, false, false])
        .whole_domain(1);
    let (cells, faces) = count(&periodic, Side::MINUS_X);
    assert!(cells.is_empty() && faces.is_empty());
}

// ---------------------------------------------------------------------------
// (c) Reductions equal a serial reference loop
// ---------------------------------------------------------------------------

/// The reference reductions of `values` (sum, min, max, L2 norm, sum of
/// absolute values for the tolerance, count).
struct Reference {
    sum: f64,
    min: f64,
    max: f64,
    norm: f64,
    sum_abs: f64,
    count: usize,
}

impl Reference {
    /// Reduces `value(i)` over the points of `region`, serially in index order.
    fn over(region: IndexBox, value: impl Fn([isize; 3]) -> f64) -> Self {
        let mut r = Reference {
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            norm: 0.0,
            sum_abs: 0.0,
            count: 0,
        };
        for i in region {
            let v = value(i);
            r.sum += v;
            r.min = r.min.min(v);
            r.max = r.max.max(v);
            r.norm += v * v;
            r.sum_abs += v.abs();
            r.count += 1;
        }
        r.norm = r.norm.sqrt();
        r
    }

    /// Tolerance for a sum of these values in another order: each order is
    /// within (n - 1) u sum|v| of the exact sum (u = 2^-53), so the two
    /// within 2 (n - 1) u sum|v|; 1e-15 n sum|v| bounds that.
    fn sum_tolerance(&self) -> f64 {
        1e-15 * self.count as f64 * self.sum_abs.max(1e-300)
    }

    /// Checks library results against this reference. Min and max of a
    /// plain field must be exact (`extrema` = 0); those of a stencil
    /// expression may differ by the rounding of the folded weights, up to
    /// `extrema` relative to the largest magnitude.
    fn check(
        &self,
        what: &str,
        (sum, min, max, norm): (f64, f64, f64, f64),
        extrema: f64,
    ) -> Result<(), TestCaseError> {
        prop_assert!(self.count > 0, "{what}: empty region");
        let magnitude = self.min.abs().max(self.max.abs());
        // Each value may be off by `extrema * magnitude` before summing.
        let per_value = extrema * magnitude * self.count as f64;
        prop_assert!(
            (sum - self.sum).abs() <= self.sum_tolerance() + per_value,
            "{what}: sum {sum} vs reference {}",
            self.sum
        );
        prop_assert!(
            (min - self.min).abs() <= extrema * magnitude,
            "{what}: min {min} vs reference {}",
            self.min
        );
        prop_assert!(
            (max - self.max).abs() <= extrema * magnitude,
            "{what}: max {max} vs reference {}",
            self.max
        );
        prop_assert!(
            (norm - self.norm).abs() <= 1e-15 * self.count as f64 * self.norm + per_value,
            "{what}: norm {norm} vs reference {}",
            self.norm
        );
        Ok(())
    }
}

/// Relative tolerance on the values of a stencil expression (its weights are
/// folded, e.g. `x / h^2` computed as `x * (1 / h^2)`).
const STENCIL_EXTREMA: f64 = 1e-13;

/// (sum, min, max, L2 norm) of `expr()` over the interior, by the named
/// reduction functions.
fn interior_reductions<'a, L: Location>(expr: impl Fn() -> Expr<'a, L>) -> (f64, f64, f64, f64) {
    (
        interior_sum(expr()).unwrap(),
        interior_min(expr()).unwrap(),
        interior_max(expr()).unwrap(),
        interior_norm_l2(expr()).unwrap(),
    )
}

/// (sum, min, max, L2 norm) of `expr()` over every computable point.
fn all_reductions<'a, L: Location>(expr: impl Fn() -> Expr<'a, L>) -> (f64, f64, f64, f64) {
    (
        sum(expr()).unwrap(),
        field_min(expr()).unwrap(),
        field_max(expr()).unwrap(),
        norm_l2(expr()).unwrap(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn reductions_of_fields_equal_a_reference_loop(
        patch in patches(2),
        seed in any::<u64>(),
        offset in -10.0f64..10.0,
    ) {
        let mut rng = Xorshift::new(seed);
        let f = random_field::<CellCentre>("f", &patch, &mut rng, |r| r.uniform(-1.0, 1.0) + offset);
        let y = random_field::<YFace>("y", &patch, &mut rng, |r| r.uniform(-3.0, 1.0));

        let layout = f.layout();
        let interior = Reference::over(layout.interior(), |i| at(&f, i));
        interior.check("interior of f", interior_reductions(|| field(&f)), 0.0)?;
        // A plain field reduces over every allocated point, ghosts included.
        let everything = Reference::over(layout.allocated(), |i| at(&f, i));
        everything.check("all of f", all_reductions(|| field(&f)), 0.0)?;
        // Also with a face field, whose interior may carry the boundary face.
        let faces = Reference::over(y.layout().interior(), |i| at(&y, i));
        faces.check("interior of y", interior_reductions(|| field(&y)), 0.0)?;
        // Pointwise expression over all points.
        let squared = Reference::over(layout.allocated(), |i| at(&f, i) * at(&f, i) - 1.0);
        squared.check("f*f - 1", all_reductions(|| field(&f) * &f - 1.0), 0.0)?;
    }

    #[test]
    fn reductions_of_stencil_expressions_equal_a_reference_loop(
        patch in patches(1),
        seed in any::<u64>(),
    ) {
        let mut rng = Xorshift::new(seed);
        let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
        let grid = patch.grid();
        let active = grid.active_dimensions();
        let lap = |i: [isize; 3]| {
            let mut value = 0.0;
            for axis in (0..3).filter(|&a| active[a]) {
                let h2 = grid.spacing()[axis].powi(2);
                value += (at(&phi, shift(i, axis, -1)) - 2.0 * at(&phi, i)
                    + at(&phi, shift(i, axis, 1)))
                    / h2;
            }
            value
        };
        let layout = phi.layout();
        let interior = Reference::over(layout.interior(), lap);
        interior.check("interior laplacian", interior_reductions(|| laplacian(&phi)), STENCIL_EXTREMA)?;
        // Over every computable point: the allocation less one layer on
        // each active axis.
        let computable = layout
            .allocated()
            .grown(active.map(|a| -isize::from(a)));
        let all = Reference::over(computable, lap);
        all.check("computable laplacian", all_reductions(|| laplacian(&phi)), STENCIL_EXTREMA)?;
        // A face expression: |grad_y phi| over the y-face interior.
        let h = grid.spacing()[1];
        let y_layout = watershed_fields::FieldLayout::new(&patch, watershed_fields::LocationKind::YFace);
        let gradient_y = Reference::over(y_layout.interior(), |i| {
            ((at(&phi, i) - at(&phi, shift(i, 1, -1))) / h).abs()
        });
        let expr = || abs(gradient::<YFace>(&phi));
        // Scaling by 1/h in the library (x * (1/h)) rounds differently from
        // x / h: allow that relative error on min and max.
        let min = interior_min(expr()).unwrap();
        let max = interior_max(expr()).unwrap();
        prop_assert!((min - gradient_y.min).abs() <= 1e-14 * gradient_y.max);
        prop_assert!((max - gradient_y.max).abs() <= 1e-14 * gradient_y.max);
        let total = interior_sum(expr()).unwrap();
        prop_assert!((total - gradient_y.sum).abs() <= 1e-14 * gradient_y.count as f64 * gradient_y.sum_abs);
    }
}

#[test]
fn reductions_propagate_nan() {
    let grid = Grid::new([5, 3, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let mut f = field_from::<CellCentre>("f", &patch, |i, _| i[0] as f64 + 10.0 * i[1] as f64);
    assert_eq!(interior_min(&f).unwrap(), 0.0);
    assert_eq!(interior_max(&f).unwrap(), 24.0);
    assert_eq!(field_min(&f).unwrap(), -11.0);
    assert_eq!(field_max(&f).unwrap(), 35.0);
    let at_index = f.layout().linear_index([2, 1, 0]);
    f.values_mut().unwrap()[at_index] = f64::NAN;
    for parallelism in PARALLELISMS {
        for reduction in [Reduction::Min, Reduction::Max, Reduction::Sum] {
            let value = reduce(&f, reduction, ReduceRegion::Interior, parallelism).unwrap();
            assert!(
                value.is_nan(),
                "{reduction:?} with {parallelism:?}: {value}"
            );
        }
    }
    // A NaN only in a ghost point does not reach the interior reductions.
    let mut g = field_from::<CellCentre>("g", &patch, |i, _| i[0] as f64);
    let ghost = g.layout().linear_index([-1, 0, 0]);
    g.values_mut().unwrap()[ghost] = f64::NAN;
    assert_eq!(interior_min(&g).unwrap(), 0.0);
    assert_eq!(interior_max(&g).unwrap(), 4.0);
    assert!(field_min(&g).unwrap().is_nan());
    assert!(field_max(&g).unwrap().is_nan());
}

#[test]
fn plain_field_sums_cover_exactly_their_own_ghosts() {
    // 4 x 4 cells in 2D: 16 interior points, 64 with two ghost layers.
    let grid = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3]).unwrap();
    let mut none =
        SpatialField::<CellCentre>::new("none", &grid.whole_domain(0), Device::Cpu).unwrap();
    none.fill(1.0).unwrap();
    assert_eq!(sum(&none).unwrap(), 16.0);
    assert_eq!(interior_sum(&none).unwrap(), 16.0);
    let mut two =
        SpatialField::<CellCentre>::new("two", &grid.whole_domain(2), Device::Cpu).unwrap();
    two.fill(1.0).unwrap();
    assert_eq!(sum(&two).unwrap(), 64.0);
    assert_eq!(interior_sum(&two).unwrap(), 16.0);
}

#[test]
fn reductions_of_large_grids_are_bitwise_identical_for_any_thread_count() {
    // Rows longer than one x tile and planes of several row blocks.
    let grid = Grid::new([600, 13, 3], [1.0, 0.5, 0.2], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let mut rng = Xorshift::new(77);
    let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let expressions = [field(&phi), laplacian(&phi) * &phi];
    for expr in &expressions {
        for reduction in [
            Reduction::Sum,
            Reduction::SumOfSquares,
            Reduction::Min,
            Reduction::Max,
        ] {
            for region in [ReduceRegion::Interior, ReduceRegion::Computable] {
                let serial = reduce(expr, reduction, region, Parallelism::Serial).unwrap();
                for parallelism in PARALLELISMS {
                    let other = reduce(expr, reduction, region, parallelism).unwrap();
                    assert_eq!(
                        other.to_bits(),
                        serial.to_bits(),
                        "{parallelism:?} {reduction:?} of {expr} over {region:?}"
                    );
                }
            }
        }
    }
    let reference = Reference::over(phi.layout().interior(), |i| at(&phi, i));
    let total = interior_sum(&phi).unwrap();
    assert!((total - reference.sum).abs() <= reference.sum_tolerance());
}
