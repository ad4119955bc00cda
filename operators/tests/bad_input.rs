//! Bad input gives a clear error, never a panic or a silent wrong answer.
//!
//! Each test asserts the `OperatorError` variant, its fields, the key words
//! of its message (the target, the field at fault, what is wrong), and that
//! a failed assignment left its target unchanged:
//!
//! * fields on different grids, or on different patches of one grid →
//!   `GridMismatch` (assignments and reductions);
//! * an expression reading memory the target also owns (two external
//!   fields over one buffer) → `Aliasing`;
//! * too few ghost layers for a stencil over the region → `MissingGhosts`
//!   with the needed and available counts;
//! * an IR tree of the wrong location, or with a field not bound →
//!   `LocationMismatch`, `UnboundField`;
//! * a reduction of an expression reading no field → `NoGrid`;
//! * a field whose CPU copy is not current → `Field` (only where a GPU
//!   exists: without one a CPU location cannot be made invalid).

mod common;

use common::*;
use std::ptr::NonNull;
use watershed_fields::{
    CellCentre, Device, ExternalBuffer, FieldError, FieldLayout, GhostWidth, Grid, LocationKind,
    Patch, SpatialField, XFace, YFace,
};
use watershed_operators::*;

/// A 9 x 7 x 5 grid of the unit cube.
fn grid() -> Grid {
    Grid::new([9, 7, 5], [1.0; 3], [0.0; 3]).unwrap()
}

/// Asserts `message` contains every one of `parts`.
#[track_caller]
fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "message lacks {part:?}: {message}");
    }
}

/// Checks `target` still holds [`SENTINEL`] everywhere.
#[track_caller]
fn assert_untouched<L: watershed_fields::Location>(target: &SpatialField<L>) {
    assert!(
        target
            .values()
            .unwrap()
            .iter()
            .all(|v| v.to_bits() == SENTINEL.to_bits()),
        "the failed assignment wrote into '{}'",
        target.name()
    );
}

/// Asserts `error` is `GridMismatch` for `target` and `field`, with both named
/// in the message.
#[track_caller]
fn assert_grid_mismatch(error: OperatorError, target: &str, field: &str) {
    let message = error.to_string();
    match &error {
        OperatorError::GridMismatch {
            target: t,
            field: f,
            ..
        } => {
            assert_eq!((t.as_str(), f.as_str()), (target, field), "{message}");
        }
        other => panic!("expected GridMismatch, got {other:?}"),
    }
    assert_mentions(
        &message,
        &[
            &format!("'{target}'"),
            &format!("'{field}'"),
            "different grid or patch",
        ],
    );
}

// ---------------------------------------------------------------------------
// Grids and patches
// ---------------------------------------------------------------------------

#[test]
fn fields_on_different_grids_are_refused() {
    let patch = grid().whole_domain(1);
    // Same cell counts, different extent: a different grid.
    let other = Grid::new([9, 7, 5], [2.0, 1.0, 1.0], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let phi = field_from::<CellCentre>("phi", &patch, |_, x| x[0]);
    let foreign = field_from::<CellCentre>("foreign", &other, |_, x| x[1]);
    let mut rhs = sentinel_target::<CellCentre>("rhs", &patch);

    let error = rhs.assign(field(&phi) + &foreign).unwrap_err();
    assert_grid_mismatch(error, "rhs", "foreign");
    let error = rhs.assign(laplacian(&foreign)).unwrap_err();
    assert_grid_mismatch(error, "rhs", "foreign");
    // The message says how the patches differ.
    let error = rhs.assign(laplacian(&foreign)).unwrap_err();
    assert_mentions(&error.to_string(), &["[9, 7, 5]"]);
    assert_untouched(&rhs);

    // Reductions check the same.
    let error = interior_sum(field(&phi) * &foreign).unwrap_err();
    assert!(
        matches!(error, OperatorError::GridMismatch { .. }),
        "{error:?}"
    );
    assert_mentions(&error.to_string(), &["reduction", "'foreign'"]);
}

#[test]
fn fields_on_different_patches_of_one_grid_are_refused() {
    let grid = grid();
    let left = Patch::new(&grid, [0, 0, 0], [4, 7, 5], GhostWidth::uniform(1)).unwrap();
    let right = Patch::new(&grid, [4, 0, 0], [4, 7, 5], GhostWidth::uniform(1)).unwrap();
    let wider = Patch::new(&grid, [0, 0, 0], [5, 7, 5], GhostWidth::uniform(1)).unwrap();
    let a = field_from::<CellCentre>("a", &left, |_, _| 1.0);
    let b = field_from::<CellCentre>("b", &right, |_, _| 2.0);
    let c = field_from::<CellCentre>("c", &wider, |_, _| 3.0);
    let mut target = sentinel_target::<CellCentre>("target", &left);

    let error = target.assign(field(&a) + &b).unwrap_err();
    assert_grid_mismatch(error, "target", "b");
    let error = target.assign(exp(&c)).unwrap_err();
    assert_grid_mismatch(error, "target", "c");
    // Face targets too: an x-face target on `left`, cells on `right`.
    let mut faces = sentinel_target::<XFace>("faces", &left);
    let error = faces.assign(gradient::<XFace>(&b)).unwrap_err();
    assert_grid_mismatch(error, "faces", "b");
    assert_untouched(&target);
    assert_untouched(&faces);

    // Different ghost widths on the same cells are the same patch.
    let thin = Patch::new(&grid, [0, 0, 0], [4, 7, 5], GhostWidth::none()).unwrap();
    let mut thin_target = sentinel_target::<CellCentre>("thin", &thin);
    thin_target.assign(laplacian(&a)).unwrap();
    let interior = thin_target.layout().interior();
    check_region("laplacian of a constant", &thin_target, &interior, |_| {
        (0.0, 1e4)
    });
}

// ---------------------------------------------------------------------------
// Aliasing
// ---------------------------------------------------------------------------

#[test]
fn reading_the_target_memory_is_refused() {
    let patch = grid().whole_domain(1);
    let len = FieldLayout::new(&patch, LocationKind::CellCentre).allocated_len();
    // One buffer, two fields over it (the second one also over half of it);
    // `storage` is declared first so it is dropped after every field.
    let mut storage: Vec<f64> = (0..2 * len).map(|i| (i as f64).sin()).collect();
    let base = NonNull::new(storage.as_mut_ptr()).unwrap();
    // SAFETY: `storage` holds 2 * len aligned f64 values and outlives every
    // field built here (declared before them, so dropped after them), and it
    // is not touched directly while they exist. The fields deliberately
    // share memory: that is the aliasing under test, which the assignment
    // must refuse before writing anything.
    let buffer = |offset: usize| unsafe {
        ExternalBuffer::from_raw_parts(NonNull::new(base.as_ptr().add(offset)).unwrap(), len)
    };
    let source = SpatialField::<CellCentre>::from_external("source", &patch, buffer(0)).unwrap();
    let mut same = SpatialField::<CellCentre>::from_external("same", &patch, buffer(0)).unwrap();
    let mut overlapping =
        SpatialField::<CellCentre>::from_external("overlapping", &patch, buffer(len / 2)).unwrap();
    let mut disjoint =
        SpatialField::<CellCentre>::from_external("disjoint", &patch, buffer(len)).unwrap();

    for target in [&mut same, &mut overlapping] {
        let before = target.values().unwrap().to_vec();
        let name = target.name().to_string();
        let error = target.assign(laplacian(&source) * 2.0).unwrap_err();
        let message = error.to_string();
        match &error {
            OperatorError::Aliasing { target: t, field } => {
                assert_eq!((t.as_str(), field.as_str()), (name.as_str(), "source"));
            }
            other => panic!("expected Aliasing, got {other:?}"),
        }
        assert_mentions(
            &message,
            &[&format!("'{name}'"), "'source'", "shares its memory"],
        );
        // A pointwise read of shared memory is refused as well.
        let error = target.assign(field(&source) + 1.0).unwrap_err();
        assert!(matches!(error, OperatorError::Aliasing { .. }), "{error:?}");
        let after = target.values().unwrap();
        assert!(
            before
                .iter()
                .zip(after)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "the refused assignment changed '{name}'"
        );
    }

    // Adjacent but disjoint memory is fine.
    disjoint.assign(field(&source) + 1.0).unwrap();
    let layout = disjoint.layout().clone();
    for index in layout.interior() {
        let expected = source.values().unwrap()[layout.linear_index(index)] + 1.0;
        assert_eq!(at(&disjoint, index), expected);
    }
    drop((source, same, overlapping, disjoint));
    drop(storage);
}

// ---------------------------------------------------------------------------
// Ghost layers
// ---------------------------------------------------------------------------

/// Unwraps a `MissingGhosts` error into (field, side, needed, available,
/// message).
#[track_caller]
fn missing_ghosts(error: OperatorError) -> (String, String, usize, usize, String) {
    let message = error.to_string();
    match error {
        OperatorError::MissingGhosts {
            field,
            side,
            needed,
            available,
            ..
        } => (field, side, needed, available, message),
        other => panic!("expected MissingGhosts, got {other:?}"),
    }
}

#[test]
fn a_gradient_of_a_field_without_ghosts_is_refused() {
    let grid = grid();
    let bare = grid.whole_domain(0);
    let phi = field_from::<CellCentre>("phi", &bare, |_, x| x[0]);
    let mut flux = sentinel_target::<YFace>("flux", &bare);
    let error = flux.assign(gradient::<YFace>(&phi)).unwrap_err();
    let (field, side, needed, available, message) = missing_ghosts(error);
    assert_eq!(
        (field.as_str(), side.as_str(), needed, available),
        ("phi", "-y", 1, 0)
    );
    assert_mentions(
        &message,
        &[
            "'flux'",
            "'phi'",
            "on the -y side",
            "1 point(s)",
            "0 ghost layer(s)",
            "the interior [0, 9) x [0, 8) x [0, 5)",
        ],
    );
    assert_untouched(&flux);
}

#[test]
fn a_limited_stencil_needs_two_ghost_layers() {
    let grid = grid();
    let one = grid.whole_domain(1);
    let cells = field_from::<CellCentre>("T", &one, |_, x| x[0] * x[0]);
    let u = field_from::<XFace>("u", &one, |_, _| 1.0);
    let mut face = sentinel_target::<XFace>("T_face", &one);
    let error = face
        .assign(limited::<XFace>(Limiter::VanLeer, &u, &cells))
        .unwrap_err();
    let (field, side, needed, available, message) = missing_ghosts(error);
    assert_eq!(
        (field.as_str(), side.as_str(), needed, available),
        ("T", "-x", 2, 1)
    );
    assert_mentions(
        &message,
        &[
            "'T_face'",
            "'T'",
            "2 point(s)",
            "1 ghost layer(s)",
            "at least 2",
        ],
    );
    assert_untouched(&face);
    // Upwinding needs only one.
    face.assign(upwind::<XFace>(&u, &cells)).unwrap();
}

#[test]
fn ghost_regions_need_ghosts_of_their_own() {
    let grid = grid();
    let one = grid.whole_domain(1);
    let phi = field_from::<CellCentre>("phi", &one, |_, x| x[2]);
    let mut target = sentinel_target::<CellCentre>("lap", &one);
    // The interior is fine; one ghost layer more needs two on the inputs.
    target.assign(laplacian(&phi)).unwrap();
    target.fill(SENTINEL).unwrap();
    let error = target
        .assign_with(
            laplacian(&phi),
            AssignOptions {
                region: Region::InteriorAndGhosts(1),
                ..Default::default()
            },
        )
        .unwrap_err();
    let (field, side, needed, available, message) = missing_ghosts(error);
    assert_eq!(
        (field.as_str(), side.as_str(), needed, available),
        ("phi", "-x", 2, 1)
    );
    assert_mentions(&message, &["the region [-1, 10) x [-1, 8) x [-1, 6)"]);
    assert_untouched(&target);

    // Ghosts on the minus sides only: a divergence on a patch that does not
    // reach +x reads a missing +x ghost face.
    let lopsided = GhostWidth {
        minus: [1; 3],
        plus: [0; 3],
    };
    let inner = Patch::new(&grid, [0, 0, 0], [5, 7, 5], lopsided).unwrap();
    let faces = field_from::<XFace>("F", &inner, |_, x| x[0]);
    let mut cells = sentinel_target::<CellCentre>("divF", &inner);
    let error = cells.assign(divergence::<XFace>(&faces)).unwrap_err();
    let (field, side, needed, available, message) = missing_ghosts(error);
    assert_eq!(
        (field.as_str(), side.as_str(), needed, available),
        ("F", "+x", 1, 0)
    );
    assert_mentions(&message, &["on the +x side"]);
    assert_untouched(&cells);
}

// ---------------------------------------------------------------------------
// IR-level misuse
// ---------------------------------------------------------------------------

#[test]
fn an_ir_tree_of_another_location_is_refused() {
    let patch = grid().whole_domain(1);
    let phi = field_from::<CellCentre>("phi", &patch, |_, _| 1.0);
    let expr = laplacian(&phi);
    let mut faces = sentinel_target::<XFace>("faces", &patch);
    let error = assign_node(
        &mut faces,
        expr.node(),
        expr.fields(),
        AssignOptions::default(),
    )
    .unwrap_err();
    match &error {
        OperatorError::LocationMismatch {
            target,
            expected,
            found,
        } => {
            assert_eq!(target, "faces");
            assert_eq!(
                (*expected, *found),
                (LocationKind::XFace, LocationKind::CellCentre)
            );
        }
        other => panic!("expected LocationMismatch, got {other:?}"),
    }
    assert_mentions(
        &error.to_string(),
        &["CellCentre expression", "'faces'", "XFace field"],
    );
    assert_untouched(&faces);
}

#[test]
fn a_field_not_bound_for_evaluation_is_refused() {
    let patch = grid().whole_domain(1);
    let phi = field_from::<CellCentre>("phi", &patch, |_, _| 1.0);
    let psi = field_from::<CellCentre>("psi", &patch, |_, _| 2.0);
    let expr = field(&phi) * &psi;
    let mut target = sentinel_target::<CellCentre>("target", &patch);
    // Only phi is supplied.
    let error = assign_node(
        &mut target,
        expr.node(),
        &expr.fields()[..1],
        AssignOptions::default(),
    )
    .unwrap_err();
    match &error {
        OperatorError::UnboundField { id, name } => {
            assert_eq!((*id, name.as_str()), (psi.id(), "psi"));
        }
        other => panic!("expected UnboundField, got {other:?}"),
    }
    assert_mentions(&error.to_string(), &["'psi'", "not bound"]);
    assert_untouched(&target);
}

// ---------------------------------------------------------------------------
// Expressions without fields
// ---------------------------------------------------------------------------

#[test]
fn reducing_an_expression_without_fields_has_no_grid() {
    for (error, what) in [
        (
            interior_sum(Expr::<CellCentre>::constant(2.0)).unwrap_err(),
            "Sum",
        ),
        (
            norm_l2(coordinate::<XFace>(0) * 2.0).unwrap_err(),
            "SumOfSquares",
        ),
        (
            reduce(
                Expr::<YFace>::constant(1.0),
                Reduction::Max,
                ReduceRegion::Interior,
                Parallelism::Serial,
            )
            .unwrap_err(),
            "Max",
        ),
    ] {
        let message = error.to_string();
        match &error {
            OperatorError::NoGrid { what: w } => assert!(w.contains(what), "{w}"),
            other => panic!("expected NoGrid, got {other:?}"),
        }
        assert_mentions(&message, &[what, "reads no field", "no grid"]);
    }
}

#[test]
fn assigning_an_expression_without_fields_uses_the_target_grid() {
    // Not an error: the target supplies the grid.
    let patch = grid().whole_domain(1);
    let mut target = sentinel_target::<XFace>("x", &patch);
    target.assign(coordinate::<XFace>(0) * 2.0 + 1.0).unwrap();
    let layout = target.layout().clone();
    let interior = layout.interior();
    check_region("2 x + 1 on x faces", &target, &interior, |i| {
        (2.0 * layout.coordinate(i)[0] + 1.0, 3.0)
    });
    target.fill(SENTINEL).unwrap();
    target.assign(3.0).unwrap();
    check_region("a constant", &target, &interior, |_| (3.0, 3.0));
}

// ---------------------------------------------------------------------------
// Invalid CPU copies (needs a GPU)
// ---------------------------------------------------------------------------

#[test]
fn a_field_without_a_current_cpu_copy_is_a_field_error() {
    let Some(ordinal) =
        watershed_fields::gpu::gpu_for_tests("a_field_without_a_current_cpu_copy_is_a_field_error")
    else {
        return;
    };
    let gpu = Device::Gpu(ordinal);
    let patch = grid().whole_domain(1);
    // phi's current data is on the GPU only: its CPU location is invalid.
    let mut phi = field_from::<CellCentre>("phi", &patch, |_, _| 1.0);
    phi.validate_on(gpu).unwrap();
    phi.set_active(gpu).unwrap();
    phi.gpu_buffer_mut(gpu).unwrap();
    assert!(!phi.is_valid_on(Device::Cpu));
    let mut target = sentinel_target::<CellCentre>("target", &patch);
    let error = target.assign(laplacian(&phi)).unwrap_err();
    match &error {
        OperatorError::Field(FieldError::NotValid { field, .. }) => assert_eq!(field, "phi"),
        other => panic!("expected Field(NotValid), got {other:?}"),
    }
    assert_mentions(&error.to_string(), &["'phi'", "does not hold current data"]);
    assert_untouched(&target);

    // A target whose CPU location is not the active one cannot be written.
    let psi = field_from::<CellCentre>("psi", &patch, |_, _| 1.0);
    target.validate_on(gpu).unwrap();
    target.set_active(gpu).unwrap();
    let error = target.assign(exp(&psi)).unwrap_err();
    match &error {
        OperatorError::Field(FieldError::NotActive { field, .. }) => assert_eq!(field, "target"),
        other => panic!("expected Field(NotActive), got {other:?}"),
    }
}
