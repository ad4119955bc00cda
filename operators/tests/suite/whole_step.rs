//! What a whole time step needs from the language, against hand-written
//! reference loops: scalar parameters (values change without lowering
//! again), in-place pointwise updates and their aliasing rule, fixed-offset
//! shifts, assignments that read their own target outside the box they
//! write (boundary modifiers), and the lowering cache mapping a shared
//! kernel to another tree's fields.

use crate::common;

use common::*;
use watershed_fields::{CellCentre, GhostWidth, IndexBox, Location, SpatialField, XFace};
use watershed_operators::codegen::Backend;
use watershed_operators::{
    Assign, AssignOptions, Expr, OperatorError, Parallelism, Parameter, Region,
    assign_node_reading_target, cache_statistics, field, interior_sum, laplacian, lower_cached,
    shift, update,
};

fn every_point<L: Location>(field: &SpatialField<L>, region: IndexBox, f: impl Fn([isize; 3])) {
    let _ = field;
    for index in region {
        f(index);
    }
}

#[test]
fn a_parameter_is_read_at_evaluation_without_rebuilding_anything() {
    let mut rng = Xorshift::new(11);
    let patch = random_patch(&mut rng, GhostWidth::uniform(1), [false; 3]);
    let u = random_field::<CellCentre>("u", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let mut out = sentinel_target::<CellCentre>("out", &patch);
    let dt = Parameter::new("dt", 0.25);
    let expression: Expr<'_, CellCentre> = field(&u) + dt.expr() * laplacian(&u);
    out.assign(&expression).unwrap();
    let first = lower_cached(expression.node(), &patch, true).unwrap();
    for value in [0.5, -2.0, 1e-3] {
        dt.set(value);
        out.assign(&expression).unwrap();
        let h = patch.grid().spacing();
        every_point(&out, out.layout().interior(), |i| {
            let mut lap = 0.0;
            for (axis, h) in h.iter().enumerate() {
                lap += (at(&u, common::shift(i, axis, 1)) - 2.0 * at(&u, i)
                    + at(&u, common::shift(i, axis, -1)))
                    / (h * h);
            }
            let want = at(&u, i) + value * lap;
            assert!(
                close(at(&out, i), want, lap.abs() * value.abs() + 1.0, 1e-12),
                "dt = {value} at {i:?}: {} vs {want}",
                at(&out, i)
            );
        });
    }
    // Setting a value never lowers the expression again: the kernel holds
    // the parameter's slot, not its value.
    let again = lower_cached(expression.node(), &patch, true).unwrap();
    assert!(std::sync::Arc::ptr_eq(&first.kernel, &again.kernel));
    assert_eq!(again.parameter_values().as_slice(), &[1e-3]);
    assert_eq!(expression.node().parameters().len(), 1);
    // The interpreter runs that kernel too (no value folded in): with a
    // parameter in a product, the compiled C and the interpreter give the
    // same bits. Folding dt into the stencil's weights did not.
    let b = Parameter::new("b", 0.75);
    let stage: Expr<'_, CellCentre> = b.expr() * (field(&u) + dt.expr() * laplacian(&u));
    let mut results = Vec::new();
    for backend in [Backend::Interpreter, Backend::C] {
        let mut out = sentinel_target::<CellCentre>("out", &patch);
        let options = AssignOptions {
            backend,
            ..AssignOptions::default()
        };
        out.assign_with(&stage, options).unwrap();
        results.push(
            out.values()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
        );
    }
    assert!(results[0] == results[1], "the interpreter and C differ");
    let text = expression.to_string();
    assert!(text.contains("dt"), "{text}");
}

#[test]
fn an_in_place_update_matches_the_reference_on_any_thread_count() {
    let mut rng = Xorshift::new(12);
    let patch = random_patch(&mut rng, GhostWidth::uniform(1), [false; 3]);
    let rhs = random_field::<CellCentre>("rhs", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let start = random_field::<CellCentre>("u0", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let (a, b, dt) = (
        Parameter::new("a", 0.75),
        Parameter::new("b", 0.25),
        Parameter::new("dt", 0.1),
    );
    let mut results = Vec::new();
    for threads in [1, 2, 3] {
        let mut u = random_field::<CellCentre>("u", &patch, &mut Xorshift::new(99), |r| {
            r.uniform(-1.0, 1.0)
        });
        let before = u.values().unwrap().to_vec();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            update(&mut u, |u| {
                a.expr() * field(&start) + b.expr() * (u + dt.expr() * field(&rhs))
            })
        })
        .unwrap();
        let layout = u.layout().clone();
        for index in layout.allocated() {
            let k = layout.linear_index(index);
            let want = if layout.interior().contains(index) {
                0.75 * at(&start, index) + 0.25 * (before[k] + 0.1 * at(&rhs, index))
            } else {
                before[k] // ghosts untouched
            };
            assert!(close(u.values().unwrap()[k], want, 2.0, 1e-14), "{index:?}");
        }
        results.push(u.values().unwrap().to_vec());
    }
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "bitwise identical for 1, 2, 3 threads"
    );
}

#[test]
fn an_in_place_update_that_reads_its_target_through_a_stencil_is_refused() {
    let mut rng = Xorshift::new(13);
    let patch = random_patch(&mut rng, GhostWidth::uniform(1), [false; 3]);
    let mut u = random_field::<CellCentre>("u_in_place", &patch, &mut rng, |r| r.unit());
    let before = u.values().unwrap().to_vec();
    let error = update(&mut u, laplacian).unwrap_err();
    match &error {
        OperatorError::SelfOverlap { target, .. } => assert_eq!(target, "u_in_place"),
        other => panic!("expected SelfOverlap, got {other:?}"),
    }
    assert!(error.to_string().contains("offset 0"), "{error}");
    assert_eq!(u.values().unwrap(), before.as_slice(), "target unchanged");
}

#[test]
fn a_shift_reads_at_its_offset_and_names_missing_ghosts() {
    let mut rng = Xorshift::new(14);
    let patch = random_patch(&mut rng, GhostWidth::uniform(2), [false; 3]);
    let u = random_field::<XFace>("u", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let mut out = sentinel_target::<XFace>("out", &patch);
    out.assign(shift(&u, [2, -1, 1]) * 3.0).unwrap();
    for index in out.layout().interior() {
        let want = 3.0 * at(&u, [index[0] + 2, index[1] - 1, index[2] + 1]);
        assert_eq!(at(&out, index), want, "{index:?}");
    }
    let error = out.assign(shift(&u, [3, 0, 0])).unwrap_err();
    match error {
        OperatorError::MissingGhosts {
            field,
            side,
            needed,
            ..
        } => {
            assert_eq!(field, "u");
            assert_eq!(side, "+x");
            assert!(needed >= 3);
        }
        other => panic!("expected MissingGhosts, got {other:?}"),
    }
    let error = out.assign(shift(&u, [0, isize::MAX / 2, 0])).unwrap_err();
    assert!(
        matches!(error, OperatorError::InvalidOffset { .. }),
        "{error:?}"
    );
}

/// A ghost slab written from the interior mirror partners of the same field.
#[test]
fn a_modifier_reads_its_target_outside_the_box_it_writes() {
    let mut rng = Xorshift::new(15);
    let patch = random_patch(&mut rng, GhostWidth::uniform(2), [false; 3]);
    let mut u = random_field::<CellCentre>("u", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let before = u.clone_values();
    let id = u.id();
    let target: Expr<'static, CellCentre> = Expr::symbol(id, "u");
    let layout = u.layout().clone();
    let mut ghost = layout.allocated();
    ghost.lo[1] = -2;
    ghost.hi[1] = -1;
    // Ghost layer -2 along y = 2 v - its mirror partner (y = 1).
    let value = Expr::<CellCentre>::constant(2.0 * 0.5) - shift(target.clone(), [0, 3, 0]);
    let options = AssignOptions {
        region: Region::Box(ghost),
        parallelism: Parallelism::Threads(2),
        ..AssignOptions::default()
    };
    assign_node_reading_target(&mut u, id, value.node(), &[], options).unwrap();
    for index in layout.allocated() {
        let k = layout.linear_index(index);
        let want = if ghost.contains(index) {
            1.0 - before[layout.linear_index([index[0], 1, index[2]])]
        } else {
            before[k]
        };
        assert_eq!(u.values().unwrap()[k], want, "{index:?}");
    }
    // Reading a point the same box writes is refused.
    let overlapping = shift(target, [1, 0, 0]);
    let mut narrow = ghost;
    narrow.lo[0] = 0;
    narrow.hi[0] = 2;
    let options = AssignOptions {
        region: Region::Box(narrow),
        ..options
    };
    let error =
        assign_node_reading_target(&mut u, id, overlapping.node(), &[], options).unwrap_err();
    assert!(
        matches!(&error, OperatorError::SelfOverlap { target, .. } if target == "u"),
        "{error:?}"
    );
}

/// Two trees of one structure share a kernel; each must still read its
/// own fields, also when the repeated field comes second.
#[test]
fn a_shared_kernel_reads_each_trees_own_fields() {
    let mut rng = Xorshift::new(16);
    let patch = random_patch(&mut rng, GhostWidth::uniform(1), [false; 3]);
    let fields: Vec<SpatialField<CellCentre>> = (0..4)
        .map(|i| random_field(&format!("f{i}"), &patch, &mut rng, |r| r.uniform(-1.0, 1.0)))
        .collect();
    let mut out = sentinel_target::<CellCentre>("out", &patch);
    for (a, b) in [(0, 1), (2, 3), (1, 0), (3, 3)] {
        let (fa, fb) = (&fields[a], &fields[b]);
        out.assign(field(fa) * laplacian(fb) + field(fa)).unwrap();
        let h = patch.grid().spacing();
        for i in out.layout().interior() {
            let mut lap = 0.0;
            for (axis, h) in h.iter().enumerate() {
                lap += (at(fb, common::shift(i, axis, 1)) - 2.0 * at(fb, i)
                    + at(fb, common::shift(i, axis, -1)))
                    / (h * h);
            }
            let want = at(fa, i) * lap + at(fa, i);
            assert!(
                close(at(&out, i), want, lap.abs() + 1.0, 1e-12),
                "({a}, {b}) at {i:?}"
            );
        }
    }
    // The same structure over other fields is found, not lowered again,
    // and bound to the new tree's fields.
    fn tree<'a>(
        a: &'a SpatialField<CellCentre>,
        b: &'a SpatialField<CellCentre>,
    ) -> Expr<'a, CellCentre> {
        field(a) * field(b) * 7.5
    }
    let (t1, t2) = (tree(&fields[0], &fields[1]), tree(&fields[2], &fields[3]));
    let k1 = lower_cached(t1.node(), &patch, false).unwrap();
    let k2 = lower_cached(t2.node(), &patch, false).unwrap();
    assert!(std::sync::Arc::ptr_eq(&k1.kernel, &k2.kernel));
    assert_eq!(k1.field_ids, vec![fields[0].id(), fields[1].id()]);
    assert_eq!(k2.field_ids, vec![fields[2].id(), fields[3].id()]);
    let before = cache_statistics();
    let x = interior_sum(t1).unwrap();
    let y = interior_sum(t2).unwrap();
    assert!(cache_statistics().lookups >= before.lookups + 2);
    let reference = |a: &SpatialField<CellCentre>, b: &SpatialField<CellCentre>| {
        a.layout()
            .interior()
            .iter()
            .map(|i| at(a, i) * at(b, i) * 7.5)
            .sum::<f64>()
    };
    assert!(close(x, reference(&fields[0], &fields[1]), 100.0, 1e-12));
    assert!(close(y, reference(&fields[2], &fields[3]), 100.0, 1e-12));
}

trait CloneValues {
    fn clone_values(&self) -> Vec<f64>;
}

impl<L: Location> CloneValues for SpatialField<L> {
    fn clone_values(&self) -> Vec<f64> {
        self.values().unwrap().to_vec()
    }
}

#[test]
fn a_checked_assignment_names_the_first_point_that_is_not_finite() {
    use watershed_operators::{log, update_with};
    let mut rng = Xorshift::new(31);
    let patch = random_patch(&mut rng, GhostWidth::uniform(1), [false; 3]);
    let layout =
        watershed_fields::FieldLayout::new(&patch, watershed_fields::LocationKind::CellCentre);
    let interior = layout.interior();
    // Two bad points; the first in storage order (z, then y, then x) is named.
    let late = [interior.hi[0] - 1, interior.hi[1] - 1, interior.hi[2] - 1];
    let early = [
        interior.hi[0] - 1,
        interior.lo[1],
        interior.lo[2] + (interior.hi[2] - interior.lo[2]) / 2,
    ];
    let u = field_from::<CellCentre>("u", &patch, |i, _| {
        if i == late || i == early { -1.0 } else { 2.0 }
    });
    for parallelism in [Parallelism::Serial, Parallelism::Threads(2)] {
        let options = AssignOptions {
            parallelism,
            check_finite: true,
            ..AssignOptions::default()
        };
        let mut out = sentinel_target::<CellCentre>("out", &patch);
        match out.assign_with(log(&u), options) {
            Err(OperatorError::NotFinite {
                target,
                point,
                value,
            }) => {
                assert_eq!(target, "out");
                assert_eq!(point, early, "{parallelism:?}");
                assert!(value.is_nan());
            }
            other => panic!("expected NotFinite, got {other:?}"),
        }
        // Without the check the same assignment succeeds and writes NaN.
        out.assign_with(
            log(&u),
            AssignOptions {
                parallelism,
                ..AssignOptions::default()
            },
        )
        .unwrap();
        assert!(at(&out, late).is_nan());
        // In-place updates check too; finite results pass.
        let mut v = field_from::<CellCentre>("v", &patch, |_, _| 1.0);
        update_with(&mut v, options, |v| v * 2.0).unwrap();
        match update_with(&mut v, options, |v| v / 0.0) {
            Err(OperatorError::NotFinite {
                target,
                point,
                value,
            }) => {
                assert_eq!(target, "v");
                assert_eq!(point, interior.lo);
                assert_eq!(value, f64::INFINITY);
            }
            other => panic!("expected NotFinite, got {other:?}"),
        }
    }
}
