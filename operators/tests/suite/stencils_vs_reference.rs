//! Every operator against a hand-written reference loop.
//!
//! Each test builds random data (seeded, so every case replays) on random
//! small odd-sized patches, some touching the `+`/`-` domain boundaries and
//! some not (so face fields with and without the extra boundary face both
//! appear), assigns an expression with the library, and compares every
//! point with a reference computed here by plain index arithmetic over
//! `FieldLayout::linear_index` — never through the library's evaluator.
//! Points outside the computed region must keep the target's sentinel.
//!
//! Covered: gradient, divergence and both interpolants along x, y and z (all
//! four locations as sources or targets), the Laplacian on cells and faces
//! in 3D and 2D, upwind and limited interpolation with every limiter and
//! random-sign velocities (zeros included), every pointwise operation,
//! stencils of composite arguments (masks, coordinates, `cond`), rows longer
//! than one evaluator tile, the regions `InteriorAndGhosts` and
//! `LargestComputable`, and the `MissingGhosts` error when there are no
//! ghost layers.

use crate::common;

use common::shift;
use common::*;
use watershed_fields::{
    CellCentre, GhostWidth, IndexBox, Location, LocationKind, Patch, SpatialField, XFace, YFace,
    ZFace,
};
use watershed_operators::*;

/// Random seeds per test: enough for every kind of patch to show up.
const CASES: u64 = 16;

/// A random value in `[-1, 1)`.
fn signed(rng: &mut Xorshift) -> f64 {
    rng.uniform(-1.0, 1.0)
}

/// A random velocity: either sign, exactly zero one time in eight (to pin
/// down the `>= 0` tie of the upwind choice).
fn velocity(rng: &mut Xorshift) -> f64 {
    if rng.chance(0.125) {
        0.0
    } else {
        rng.uniform(-1.0, 1.0)
    }
}

/// The whole allocated box of `field`, used as "every point" region.
fn everywhere<L: Location>(field: &SpatialField<L>) -> IndexBox {
    field.layout().allocated()
}

/// The patches a case runs on: one touching the `+x` boundary (x faces carry
/// the boundary face) and one not touching it.
fn patches(rng: &mut Xorshift, ghosts: GhostWidth) -> [Patch; 2] {
    [
        random_patch_with_plus_x(rng, ghosts, true),
        random_patch_with_plus_x(rng, ghosts, false),
    ]
}

// ---------------------------------------------------------------------------
// Cells to faces and back
// ---------------------------------------------------------------------------

/// Gradient and interpolation from random cells to `F` faces vs the reference
/// `(c[i] - c[i-1]) / h` and `(c[i-1] + c[i]) / 2`.
fn check_cell_to_face<F: FaceLocation>(patch: &Patch, rng: &mut Xorshift) {
    let axis = F::AXIS;
    let h = patch.grid().spacing()[axis];
    let cells = random_field::<CellCentre>("cells", patch, rng, signed);
    let mut target = sentinel_target::<F>("faces", patch);
    let interior = target.layout().interior();
    assert_eq!(
        interior.hi[axis] as usize,
        patch.cells()[axis] + usize::from(patch.plus_boundary()[axis]),
        "face fields carry the + boundary face exactly when the patch touches it"
    );

    target.assign(gradient::<F>(&cells)).unwrap();
    check_region(
        &format!("gradient to {}", F::KIND),
        &target,
        &interior,
        |i| {
            let (lower, upper) = (at(&cells, shift(i, axis, -1)), at(&cells, i));
            ((upper - lower) / h, (upper.abs() + lower.abs()) / h)
        },
    );

    target.fill(SENTINEL).unwrap();
    target.assign(interpolate_to_face::<F>(&cells)).unwrap();
    check_region(
        &format!("interpolation to {}", F::KIND),
        &target,
        &interior,
        |i| {
            let (lower, upper) = (at(&cells, shift(i, axis, -1)), at(&cells, i));
            ((lower + upper) / 2.0, lower.abs() + upper.abs())
        },
    );
}

/// Divergence and interpolation from random `F` faces to cells vs the
/// reference `(f[i+1] - f[i]) / h` and `(f[i] + f[i+1]) / 2`.
fn check_face_to_cell<F: FaceLocation>(patch: &Patch, rng: &mut Xorshift) {
    let axis = F::AXIS;
    let h = patch.grid().spacing()[axis];
    let faces = random_field::<F>("faces", patch, rng, signed);
    let mut target = sentinel_target::<CellCentre>("cells", patch);
    let interior = target.layout().interior();

    target.assign(divergence::<F>(&faces)).unwrap();
    check_region(
        &format!("divergence of {}", F::KIND),
        &target,
        &interior,
        |i| {
            let (lower, upper) = (at(&faces, i), at(&faces, shift(i, axis, 1)));
            ((upper - lower) / h, (upper.abs() + lower.abs()) / h)
        },
    );

    target.fill(SENTINEL).unwrap();
    target.assign(interpolate_to_cell::<F>(&faces)).unwrap();
    check_region(
        &format!("interpolation of {} to cells", F::KIND),
        &target,
        &interior,
        |i| {
            let (lower, upper) = (at(&faces, i), at(&faces, shift(i, axis, 1)));
            ((lower + upper) / 2.0, lower.abs() + upper.abs())
        },
    );
}

#[test]
fn gradient_and_interpolation_to_faces_match_the_reference() {
    for seed in 0..CASES {
        let mut rng = Xorshift::new(seed);
        for patch in patches(&mut rng, GhostWidth::uniform(2)) {
            check_cell_to_face::<XFace>(&patch, &mut rng);
            check_cell_to_face::<YFace>(&patch, &mut rng);
            check_cell_to_face::<ZFace>(&patch, &mut rng);
        }
    }
}

#[test]
fn divergence_and_interpolation_to_cells_match_the_reference() {
    for seed in 0..CASES {
        let mut rng = Xorshift::new(100 + seed);
        for patch in patches(&mut rng, GhostWidth::uniform(2)) {
            check_face_to_cell::<XFace>(&patch, &mut rng);
            check_face_to_cell::<YFace>(&patch, &mut rng);
            check_face_to_cell::<ZFace>(&patch, &mut rng);
        }
    }
}

// ---------------------------------------------------------------------------
// Laplacian
// ---------------------------------------------------------------------------

/// `sum_a (g[i+e_a] - 2 g[i] + g[i-e_a]) / h_a^2` over the active axes of
/// `patch`, with `g` any point function; returns (value, scale).
fn reference_laplacian(patch: &Patch, i: [isize; 3], g: impl Fn([isize; 3]) -> f64) -> (f64, f64) {
    let grid = patch.grid();
    let (mut value, mut scale) = (0.0, 0.0);
    for axis in (0..3).filter(|&a| grid.active_dimensions()[a]) {
        let h2 = grid.spacing()[axis] * grid.spacing()[axis];
        let (m, c, p) = (g(shift(i, axis, -1)), g(i), g(shift(i, axis, 1)));
        value += (m - 2.0 * c + p) / h2;
        scale += (m.abs() + 2.0 * c.abs() + p.abs()) / h2;
    }
    (value, scale)
}

/// The Laplacian of a random `L` field vs [`reference_laplacian`].
fn check_laplacian<L: Location>(patch: &Patch, rng: &mut Xorshift) {
    let source = random_field::<L>("source", patch, rng, signed);
    let mut target = sentinel_target::<L>("target", patch);
    target.assign(laplacian(&source)).unwrap();
    let interior = target.layout().interior();
    check_region(
        &format!("laplacian on {}", L::KIND),
        &target,
        &interior,
        |i| reference_laplacian(patch, i, |j| at(&source, j)),
    );
}

#[test]
fn laplacian_matches_the_reference_on_cells_and_faces() {
    for seed in 0..CASES {
        let mut rng = Xorshift::new(200 + seed);
        for patch in patches(&mut rng, GhostWidth::uniform(2)) {
            check_laplacian::<CellCentre>(&patch, &mut rng);
            check_laplacian::<XFace>(&patch, &mut rng);
            check_laplacian::<ZFace>(&patch, &mut rng);
        }
    }
}

#[test]
fn laplacian_uses_only_the_active_axes_in_2d() {
    for seed in 0..CASES {
        let mut rng = Xorshift::new(300 + seed);
        // nz = 1: z is inactive, has no ghosts, and must not be differenced.
        let patch = random_patch(&mut rng, GhostWidth::uniform(1), [false, false, true]);
        assert_eq!(patch.grid().dimensions(), 2);
        check_laplacian::<CellCentre>(&patch, &mut rng);
        check_laplacian::<YFace>(&patch, &mut rng);
        // A field that is constant in the active directions has a zero
        // Laplacian whatever the (huge) z spacing weight would be.
        let constant = field_from::<CellCentre>("constant", &patch, |_, _| 3.5);
        let mut target = sentinel_target::<CellCentre>("target", &patch);
        target.assign(laplacian(&constant)).unwrap();
        let interior = target.layout().interior();
        check_region("laplacian of a constant", &target, &interior, |_| {
            (0.0, 3.5)
        });
    }
}

// ---------------------------------------------------------------------------
// Upwind and limited interpolation
// ---------------------------------------------------------------------------

/// The limiter functions written out independently of the library.
fn reference_psi(limiter: Limiter, r: f64) -> f64 {
    match limiter {
        Limiter::Minmod => 0f64.max(1f64.min(r)),
        Limiter::VanLeer => (r + r.abs()) / (1.0 + r.abs()),
        Limiter::Superbee => 0f64.max((2.0 * r).min(1.0)).max(r.min(2.0)),
    }
}

/// The limited face value from far-upwind, upwind and downwind cell values:
/// `u + psi(r) (d - u) / 2`, `r = (u - uu) / (d - u)`, `u` where `d == u`.
fn reference_limited(limiter: Limiter, far_upwind: f64, upwind: f64, downwind: f64) -> f64 {
    if downwind == upwind {
        return upwind;
    }
    let r = (upwind - far_upwind) / (downwind - upwind);
    upwind + 0.5 * reference_psi(limiter, r) * (downwind - upwind)
}

#[test]
fn limiter_functions_have_their_textbook_values() {
    for limiter in [Limiter::Minmod, Limiter::VanLeer, Limiter::Superbee] {
        // TVD: no correction against the gradient, psi(1) = 1 (second order
        // on smooth data).
        for r in [-5.0, -1.0, -1e-3, 0.0] {
            assert_eq!(limiter.psi(r), 0.0, "{limiter:?} psi({r})");
        }
        assert_eq!(limiter.psi(1.0), 1.0, "{limiter:?} psi(1)");
        for r in [0.1, 0.5, 0.9, 1.5, 2.0, 3.0, 10.0] {
            assert!(
                close(limiter.psi(r), reference_psi(limiter, r), 1.0, 1e-15),
                "{limiter:?} psi({r})"
            );
        }
    }
    assert_eq!(Limiter::Minmod.psi(0.5), 0.5);
    assert_eq!(Limiter::Minmod.psi(3.0), 1.0);
    assert_eq!(Limiter::VanLeer.psi(3.0), 1.5);
    assert_eq!(Limiter::Superbee.psi(0.25), 0.5);
    assert_eq!(Limiter::Superbee.psi(0.75), 1.0);
    assert_eq!(Limiter::Superbee.psi(1.5), 1.5);
    assert_eq!(Limiter::Superbee.psi(5.0), 2.0);
}

/// Upwind and limited interpolation of random cells to `F` faces with a
/// random-sign face velocity.
fn check_advective<F: FaceLocation>(patch: &Patch, rng: &mut Xorshift) {
    let axis = F::AXIS;
    let cells = random_field::<CellCentre>("cells", patch, rng, signed);
    let v = random_field::<F>("v", patch, rng, velocity);
    let mut target = sentinel_target::<F>("faces", patch);
    let interior = target.layout().interior();

    target.assign(upwind::<F>(&v, &cells)).unwrap();
    check_region(&format!("upwind to {}", F::KIND), &target, &interior, |i| {
        let value = if at(&v, i) >= 0.0 {
            at(&cells, shift(i, axis, -1))
        } else {
            at(&cells, i)
        };
        (value, value.abs())
    });

    for limiter in [Limiter::Minmod, Limiter::VanLeer, Limiter::Superbee] {
        target.fill(SENTINEL).unwrap();
        target.assign(limited::<F>(limiter, &v, &cells)).unwrap();
        check_region(
            &format!("{limiter:?} to {}", F::KIND),
            &target,
            &interior,
            |i| {
                let c = |d: isize| at(&cells, shift(i, axis, d));
                let value = if at(&v, i) >= 0.0 {
                    reference_limited(limiter, c(-2), c(-1), c(0))
                } else {
                    reference_limited(limiter, c(1), c(0), c(-1))
                };
                (value, c(-2).abs() + c(-1).abs() + c(0).abs() + c(1).abs())
            },
        );
    }
}

#[test]
fn upwind_and_limited_match_the_reference() {
    for seed in 0..CASES {
        let mut rng = Xorshift::new(400 + seed);
        for patch in patches(&mut rng, GhostWidth::uniform(2)) {
            check_advective::<XFace>(&patch, &mut rng);
            check_advective::<YFace>(&patch, &mut rng);
            check_advective::<ZFace>(&patch, &mut rng);
        }
    }
}

#[test]
fn limited_interpolation_of_monotone_and_flat_data() {
    // Cells 0, 1, 2, ... (uniform gradient, r = 1): every limiter gives the
    // central value (c[i-1] + c[i]) / 2 for either velocity sign; flat data
    // gives the data.
    let patch = random_patch(&mut Xorshift::new(7), GhostWidth::uniform(2), [false; 3]);
    let ramp = field_from::<CellCentre>("ramp", &patch, |i, _| i[0] as f64);
    let flat = field_from::<CellCentre>("flat", &patch, |_, _| 0.25);
    for sign in [1.0, -1.0] {
        let v = field_from::<XFace>("v", &patch, |_, _| sign);
        for limiter in [Limiter::Minmod, Limiter::VanLeer, Limiter::Superbee] {
            let mut target = sentinel_target::<XFace>("faces", &patch);
            target.assign(limited::<XFace>(limiter, &v, &ramp)).unwrap();
            let interior = target.layout().interior();
            check_region("limited ramp", &target, &interior, |i| {
                (i[0] as f64 - 0.5, 1.0 + i[0].abs() as f64)
            });
            target.fill(SENTINEL).unwrap();
            target.assign(limited::<XFace>(limiter, &v, &flat)).unwrap();
            check_region("limited flat", &target, &interior, |_| (0.25, 0.25));
        }
    }
}

// ---------------------------------------------------------------------------
// Pointwise operations
// ---------------------------------------------------------------------------

/// A pointwise reference: value from (a, b, p).
type Pointwise = fn(f64, f64, f64) -> f64;

/// Every pointwise operation on random `L` fields `a`, `b` (|b| >= 0.25) and
/// `p > 0`, assigned over `region`, vs the same operation applied here.
fn check_pointwise<L: Location>(patch: &Patch, rng: &mut Xorshift, region: Region) {
    let a = random_field::<L>("a", patch, rng, |r| r.uniform(-2.0, 2.0));
    let b = random_field::<L>("b", patch, rng, |r| {
        let magnitude = r.uniform(0.25, 2.0);
        if r.chance(0.5) { magnitude } else { -magnitude }
    });
    let p = random_field::<L>("p", patch, rng, |r| r.uniform(0.1, 3.0));
    let cases: Vec<(&str, Expr<'_, L>, Pointwise)> = vec![
        ("a + b", field(&a) + &b, |a, b, _| a + b),
        ("a - b", field(&a) - &b, |a, b, _| a - b),
        ("a * b", field(&a) * &b, |a, b, _| a * b),
        ("a / b", field(&a) / &b, |a, b, _| a / b),
        ("-a", -field(&a), |a, _, _| -a),
        ("exp(a)", exp(&a), |a, _, _| a.exp()),
        ("log(p)", log(&p), |_, _, p| p.ln()),
        ("sqrt(p)", sqrt(&p), |_, _, p| p.sqrt()),
        ("sin(a)", sin(&a), |a, _, _| a.sin()),
        ("cos(a)", cos(&a), |a, _, _| a.cos()),
        ("tanh(a)", tanh(&a), |a, _, _| a.tanh()),
        ("abs(a)", abs(&a), |a, _, _| a.abs()),
        ("pow(p, b)", pow(&p, &b), |_, b, p| p.powf(b)),
        ("pow(p, 2.5)", pow(&p, 2.5), |_, _, p| p.powf(2.5)),
        ("min(a, b)", min(&a, &b), |a, b, _| a.min(b)),
        ("max(a, b)", max(&a, &b), |a, b, _| a.max(b)),
        ("min(a, 0.5)", min(&a, 0.5), |a, _, _| a.min(0.5)),
        ("a * a", field(&a) * &a, |a, _, _| a * a),
        ("a / 3", field(&a) / 3.0, |a, _, _| a / 3.0),
        ("1 - a * 0.5", 1.0 - field(&a) * 0.5, |a, _, _| {
            1.0 - a * 0.5
        }),
        ("2 exp(-a) + 1", 2.0 * exp(-field(&a)) + 1.0, |a, _, _| {
            2.0 * (-a).exp() + 1.0
        }),
        (
            "nested",
            sqrt(&p) * sin(field(&a) * &b) - log(&p) / &b + abs(-field(&a)),
            |a, b, p| p.sqrt() * (a * b).sin() - p.ln() / b + a.abs(),
        ),
    ];
    let mut target = sentinel_target::<L>("target", patch);
    let layout = target.layout().clone();
    let computed = match region {
        Region::Interior => layout.interior(),
        Region::InteriorAndGhosts(width) => layout.interior_with_ghosts(width),
        Region::LargestComputable => layout.allocated(),
        Region::Box(region) => region,
    };
    for (name, expr, reference) in cases {
        target.fill(SENTINEL).unwrap();
        target
            .assign_with(
                expr,
                AssignOptions {
                    region,
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("{name} on {} over {region:?}: {e}", L::KIND));
        check_region(
            &format!("{name} on {} over {region:?}", L::KIND),
            &target,
            &computed,
            |i| {
                let (a, b, p) = (at(&a, i), at(&b, i), at(&p, i));
                let want = reference(a, b, p);
                (want, 1.0 + a.abs() + b.abs() + p.abs() + want.abs())
            },
        );
    }
}

#[test]
fn pointwise_operations_match_the_reference_with_ghosts() {
    for seed in 0..CASES / 4 {
        let mut rng = Xorshift::new(500 + seed);
        for patch in patches(&mut rng, GhostWidth::uniform(2)) {
            for region in [
                Region::Interior,
                Region::InteriorAndGhosts(1),
                Region::LargestComputable,
            ] {
                check_pointwise::<CellCentre>(&patch, &mut rng, region);
                check_pointwise::<XFace>(&patch, &mut rng, region);
            }
            check_pointwise::<YFace>(&patch, &mut rng, Region::LargestComputable);
            check_pointwise::<ZFace>(&patch, &mut rng, Region::Interior);
        }
    }
}

#[test]
fn pointwise_operations_need_no_ghosts() {
    for seed in 0..CASES / 4 {
        let mut rng = Xorshift::new(600 + seed);
        for patch in patches(&mut rng, GhostWidth::none()) {
            check_pointwise::<CellCentre>(&patch, &mut rng, Region::Interior);
            check_pointwise::<XFace>(&patch, &mut rng, Region::Interior);
            // Without ghosts the largest computable region is the interior.
            check_pointwise::<ZFace>(&patch, &mut rng, Region::LargestComputable);
        }
    }
}

#[test]
fn interior_and_ghosts_covers_exactly_the_requested_layers() {
    let mut rng = Xorshift::new(650);
    let patch = random_patch(&mut rng, GhostWidth::uniform(3), [false; 3]);
    let a = random_field::<CellCentre>("a", &patch, &mut rng, signed);
    let mut target = sentinel_target::<CellCentre>("target", &patch);
    let interior = target.layout().interior();
    // 0..=3 layers, then more than the target has (clipped to its 3).
    for width in 0..=5 {
        target.fill(SENTINEL).unwrap();
        target
            .assign_with(
                exp(&a),
                AssignOptions {
                    region: Region::InteriorAndGhosts(width),
                    ..Default::default()
                },
            )
            .unwrap();
        let layers = width.min(3) as isize;
        let region = interior.grown([layers; 3]);
        check_region(
            &format!("exp over {width} ghost layers"),
            &target,
            &region,
            |i| {
                let want = at(&a, i).exp();
                (want, want)
            },
        );
    }
    assert_eq!(everywhere(&target), interior.grown([3; 3]));
}

// ---------------------------------------------------------------------------
// Regions for stencils
// ---------------------------------------------------------------------------

/// Every target point whose reads at `offsets` fall inside `source`'s
/// allocation: the expected `LargestComputable` region, by enumeration.
fn computable_points<S: Location, T: Location>(
    source: &SpatialField<S>,
    target: &SpatialField<T>,
    offsets: &[[isize; 3]],
) -> IndexBox {
    let allocated = source.layout().allocated();
    let mut lo = [isize::MAX; 3];
    let mut hi = [isize::MIN; 3];
    let mut count = 0;
    for i in target.layout().allocated() {
        if offsets
            .iter()
            .all(|o| allocated.contains([i[0] + o[0], i[1] + o[1], i[2] + o[2]]))
        {
            for a in 0..3 {
                lo[a] = lo[a].min(i[a]);
                hi[a] = hi[a].max(i[a] + 1);
            }
            count += 1;
        }
    }
    let region = IndexBox::new(lo, hi);
    assert_eq!(region.len(), count, "the computable points form a box");
    region
}

#[test]
fn stencils_over_largest_computable_and_interior_and_ghosts() {
    for seed in 0..CASES / 2 {
        let mut rng = Xorshift::new(700 + seed);
        for patch in patches(&mut rng, GhostWidth::uniform(2)) {
            let h = patch.grid().spacing()[0];
            let cells = random_field::<CellCentre>("cells", &patch, &mut rng, signed);

            // Gradient to x faces: reads cells -1 and 0 along x.
            let mut faces = sentinel_target::<XFace>("faces", &patch);
            faces
                .assign_with(
                    gradient::<XFace>(&cells),
                    AssignOptions {
                        region: Region::LargestComputable,
                        ..Default::default()
                    },
                )
                .unwrap();
            let region = computable_points(&cells, &faces, &[[-1, 0, 0], [0, 0, 0]]);
            assert!(region.len() > faces.layout().interior_len());
            let reference = |i: [isize; 3]| {
                let (lower, upper) = (at(&cells, shift(i, 0, -1)), at(&cells, i));
                ((upper - lower) / h, (upper.abs() + lower.abs()) / h)
            };
            check_region(
                "gradient over the largest region",
                &faces,
                &region,
                reference,
            );

            faces.fill(SENTINEL).unwrap();
            faces
                .assign_with(
                    gradient::<XFace>(&cells),
                    AssignOptions {
                        region: Region::InteriorAndGhosts(1),
                        ..Default::default()
                    },
                )
                .unwrap();
            let region = faces.layout().interior_with_ghosts(1);
            check_region("gradient over one ghost layer", &faces, &region, reference);

            // Laplacian on cells: reads +-1 along every axis.
            let mut target = sentinel_target::<CellCentre>("target", &patch);
            target
                .assign_with(
                    laplacian(&cells),
                    AssignOptions {
                        region: Region::LargestComputable,
                        ..Default::default()
                    },
                )
                .unwrap();
            let mut offsets = vec![[0; 3]];
            for axis in 0..3 {
                offsets.push(shift([0; 3], axis, -1));
                offsets.push(shift([0; 3], axis, 1));
            }
            let region = computable_points(&cells, &target, &offsets);
            assert_eq!(region, target.layout().allocated().grown([-1; 3]));
            check_region("laplacian over the largest region", &target, &region, |i| {
                reference_laplacian(&patch, i, |j| at(&cells, j))
            });
        }
    }
}

// ---------------------------------------------------------------------------
// Stencils of composite arguments, long rows
// ---------------------------------------------------------------------------

#[test]
fn stencils_of_composite_arguments_match_the_reference() {
    for seed in 0..CASES / 2 {
        let mut rng = Xorshift::new(800 + seed);
        for patch in patches(&mut rng, GhostWidth::uniform(2)) {
            let spacing = patch.grid().spacing();
            let a = random_field::<CellCentre>("a", &patch, &mut rng, signed);
            let b = random_field::<CellCentre>("b", &patch, &mut rng, signed);
            let w = random_field::<ZFace>("w", &patch, &mut rng, velocity);
            let u = random_field::<XFace>("u", &patch, &mut rng, velocity);
            let cell_layout = a.layout().clone();
            let mut cells = sentinel_target::<CellCentre>("cells", &patch);
            let interior = cells.layout().interior();

            // Laplacian of products of fields and coordinates (re-lowered
            // for the neighbouring rows).
            let (x, y, z) = (
                coordinate::<CellCentre>(0),
                coordinate::<CellCentre>(1),
                coordinate::<CellCentre>(2),
            );
            cells
                .assign(laplacian(
                    field(&a) * &b + x * z.clone() * z + y.clone() * y,
                ))
                .unwrap();
            check_region("laplacian(a*b + x*z*z + y*y)", &cells, &interior, |i| {
                reference_laplacian(&patch, i, |j| {
                    let [x, y, z] = cell_layout.coordinate(j);
                    at(&a, j) * at(&b, j) + x * z * z + y * y
                })
            });

            // Gradient along y of a masked selection.
            let allocated = cell_layout.allocated();
            let lo = [0, 1, 2].map(|d| rng.int(0, 3) as isize + allocated.lo[d]);
            let hi = [0, 1, 2].map(|d| lo[d] + rng.int(1, 4) as isize);
            let block = IndexBox::new(lo, hi);
            let mut faces = sentinel_target::<YFace>("faces", &patch);
            let face_interior = faces.layout().interior();
            faces
                .assign(gradient::<YFace>(
                    cond(on(&Mask::<CellCentre>::region(block)), &a).otherwise(exp(&b)),
                ))
                .unwrap();
            let g = |j: [isize; 3]| {
                if block.contains(j) {
                    at(&a, j)
                } else {
                    at(&b, j).exp()
                }
            };
            check_region(
                "grad_y(cond(region, a, exp b))",
                &faces,
                &face_interior,
                |i| {
                    let (lower, upper) = (g(shift(i, 1, -1)), g(i));
                    (
                        (upper - lower) / spacing[1],
                        (upper.abs() + lower.abs()) / spacing[1],
                    )
                },
            );

            // Gradient along x of a boundary mask selection: ghost cells are
            // never on the boundary.
            let mut xfaces = sentinel_target::<XFace>("xfaces", &patch);
            let xface_interior = xfaces.layout().interior();
            xfaces
                .assign(gradient::<XFace>(
                    cond(on(&Mask::<CellCentre>::boundary(Side::MINUS_X)), 1.0).otherwise(&a),
                ))
                .unwrap();
            let g = |j: [isize; 3]| {
                let on_boundary =
                    patch.minus_boundary()[0] && j[0] == 0 && cell_layout.interior().contains(j);
                if on_boundary { 1.0 } else { at(&a, j) }
            };
            check_region(
                "grad_x(cond(boundary -x, 1, a))",
                &xfaces,
                &xface_interior,
                |i| {
                    let (lower, upper) = (g(shift(i, 0, -1)), g(i));
                    (
                        (upper - lower) / spacing[0],
                        (upper.abs() + lower.abs()) / spacing[0],
                    )
                },
            );

            // Divergence of an upwinded convective flux along z.
            cells.fill(SENTINEL).unwrap();
            cells
                .assign(divergence::<ZFace>(upwind::<ZFace>(&w, &a) * &w))
                .unwrap();
            let flux = |j: [isize; 3]| {
                let upwinded = if at(&w, j) >= 0.0 {
                    at(&a, shift(j, 2, -1))
                } else {
                    at(&a, j)
                };
                upwinded * at(&w, j)
            };
            check_region("div_z(upwind(w, a) * w)", &cells, &interior, |i| {
                let (lower, upper) = (flux(i), flux(shift(i, 2, 1)));
                (
                    (upper - lower) / spacing[2],
                    (upper.abs() + lower.abs()) / spacing[2],
                )
            });

            // Limited face values interpolated back to cells.
            cells.fill(SENTINEL).unwrap();
            cells
                .assign(interpolate_to_cell::<XFace>(limited::<XFace>(
                    Limiter::VanLeer,
                    &u,
                    &a,
                )))
                .unwrap();
            let face = |j: [isize; 3]| {
                let c = |d: isize| at(&a, shift(j, 0, d));
                if at(&u, j) >= 0.0 {
                    reference_limited(Limiter::VanLeer, c(-2), c(-1), c(0))
                } else {
                    reference_limited(Limiter::VanLeer, c(1), c(0), c(-1))
                }
            };
            check_region("interp(vanleer(u, a))", &cells, &interior, |i| {
                let (lower, upper) = (face(i), face(shift(i, 0, 1)));
                ((lower + upper) / 2.0, 4.0)
            });
        }
    }
}

/// `div(interp(g) * grad(phi))` written out over the active axes.
fn reference_diffusion(
    patch: &Patch,
    g: &SpatialField<CellCentre>,
    phi: &SpatialField<CellCentre>,
    i: [isize; 3],
) -> (f64, f64) {
    let grid = patch.grid();
    let (mut value, mut scale) = (0.0, 0.0);
    for axis in (0..3).filter(|&a| grid.active_dimensions()[a]) {
        let h = grid.spacing()[axis];
        let flux = |f: [isize; 3]| {
            let below = shift(f, axis, -1);
            (at(g, below) + at(g, f)) / 2.0 * (at(phi, f) - at(phi, below)) / h
        };
        let (lower, upper) = (flux(i), flux(shift(i, axis, 1)));
        value += (upper - lower) / h;
        scale += (upper.abs() + lower.abs() + 4.0 / h) / h;
    }
    (value, scale)
}

#[test]
fn large_grids_split_into_tiles_and_blocks_match_the_reference() {
    // Rows longer than the evaluator's x tile (`vocabulary::TILE`, 512: 1030
    // and 600 points make several tiles per row) and planes of thousands of
    // points (several row blocks per plane), with a composite expression of
    // every kind of instruction. The last shape's planes (about 1.7 MB of
    // rows read along z) are beyond the evaluator's cache budget, so its
    // assignments visit the row groups in bands of every plane.
    let shapes = [
        ([1030, 3, 1], [2.0, 0.1, 1.0]),
        ([600, 13, 3], [1.0, 0.5, 0.2]),
        ([45, 101, 2], [0.3, 1.0, 0.1]),
        ([64, 400, 4], [0.5, 1.0, 0.3]),
    ];
    for (seed, (cells, lengths)) in shapes.into_iter().enumerate() {
        let mut rng = Xorshift::new(900 + seed as u64);
        let grid = watershed_fields::Grid::new(cells, lengths, [0.0; 3]).unwrap();
        let patch = grid.whole_domain(2);
        let spacing = grid.spacing();
        let g = random_field::<CellCentre>("g", &patch, &mut rng, |r| r.uniform(0.5, 1.5));
        let phi = random_field::<CellCentre>("phi", &patch, &mut rng, signed);
        let u = random_field::<XFace>("u", &patch, &mut rng, velocity);
        let layout = phi.layout().clone();
        let expr = div(interp(&g) * grad(&phi))
            + divergence::<XFace>(limited::<XFace>(Limiter::Minmod, &u, &phi) * &u) * 0.5
            + cond(on(&Mask::<CellCentre>::boundary(Side::MINUS_Y)), 1.0).otherwise(exp(&phi));
        let reference = |i: [isize; 3]| {
            let (diffusion, scale) = reference_diffusion(&patch, &g, &phi, i);
            let flux = |f: [isize; 3]| {
                let c = |d: isize| at(&phi, shift(f, 0, d));
                let face = if at(&u, f) >= 0.0 {
                    reference_limited(Limiter::Minmod, c(-2), c(-1), c(0))
                } else {
                    reference_limited(Limiter::Minmod, c(1), c(0), c(-1))
                };
                face * at(&u, f)
            };
            let advection = (flux(shift(i, 0, 1)) - flux(i)) / spacing[0] * 0.5;
            let boundary = patch.minus_boundary()[1] && i[1] == 0 && layout.interior().contains(i);
            let last = if boundary { 1.0 } else { at(&phi, i).exp() };
            (
                diffusion + advection + last,
                scale + 4.0 / spacing[0] + last.abs(),
            )
        };
        let mut serial = sentinel_target::<CellCentre>("serial", &patch);
        let interior = serial.layout().interior();
        serial
            .assign_with(
                &expr,
                AssignOptions {
                    parallelism: Parallelism::Serial,
                    ..Default::default()
                },
            )
            .unwrap();
        check_region(
            &format!("composite on {cells:?}"),
            &serial,
            &interior,
            reference,
        );
        for parallelism in [
            Parallelism::Threads(2),
            Parallelism::Threads(3),
            Parallelism::Rayon,
        ] {
            let mut target = sentinel_target::<CellCentre>("target", &patch);
            target
                .assign_with(
                    &expr,
                    AssignOptions {
                        parallelism,
                        ..Default::default()
                    },
                )
                .unwrap();
            let same = target
                .values()
                .unwrap()
                .iter()
                .zip(serial.values().unwrap())
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{parallelism:?} differs from Serial on {cells:?}");
        }
    }
}

#[test]
fn variable_coefficient_diffusion_matches_the_reference() {
    for seed in 0..CASES / 2 {
        let mut rng = Xorshift::new(950 + seed);
        for patch in patches(&mut rng, GhostWidth::uniform(1)) {
            let g = random_field::<CellCentre>("g", &patch, &mut rng, |r| r.uniform(0.5, 1.5));
            let phi = random_field::<CellCentre>("phi", &patch, &mut rng, signed);
            let mut target = sentinel_target::<CellCentre>("target", &patch);
            let interior = target.layout().interior();
            target.assign(-div(interp(&g) * grad(&phi))).unwrap();
            check_region("-div(interp(g) grad(phi))", &target, &interior, |i| {
                let (value, scale) = reference_diffusion(&patch, &g, &phi, i);
                (-value, scale)
            });
        }
    }
}

// ---------------------------------------------------------------------------
// No ghost layers
// ---------------------------------------------------------------------------

/// Asserts `result` is `MissingGhosts` for field `field` on `side` with the
/// counts given, with a message that says all of that.
#[track_caller]
fn expect_missing_ghosts(
    result: OperatorResult<()>,
    target: &str,
    field: &str,
    side: &str,
    needed: usize,
    available: usize,
) {
    let error = result.expect_err("a stencil over fields without ghosts must fail");
    let message = error.to_string();
    match &error {
        OperatorError::MissingGhosts {
            target: t,
            field: f,
            side: s,
            needed: n,
            available: a,
            ..
        } => {
            assert_eq!(
                (t.as_str(), f.as_str(), s.as_str(), *n, *a),
                (target, field, side, needed, available),
                "{message}"
            );
        }
        other => panic!("expected MissingGhosts, got {other:?}"),
    }
    for part in [
        format!("'{target}'"),
        format!("'{field}'"),
        format!("on the {side} side"),
        format!("{needed} point(s)"),
        format!("{available} ghost layer(s)"),
    ] {
        assert!(message.contains(&part), "message lacks {part:?}: {message}");
    }
}

/// Checks a failed assignment left `target` untouched.
#[track_caller]
fn untouched<L: Location>(target: &SpatialField<L>) {
    assert!(
        target
            .values()
            .unwrap()
            .iter()
            .all(|v| v.to_bits() == SENTINEL.to_bits()),
        "a failed assignment wrote into '{}'",
        target.name()
    );
}

/// Stencils from cells to `F` faces on ghost-less fields: every one reads
/// the cell below face 0 and must fail on the minus side of `F::AXIS`.
fn check_cell_stencils_without_ghosts<F: FaceLocation>(patch: &Patch, rng: &mut Xorshift) {
    let side = format!("-{}", ["x", "y", "z"][F::AXIS]);
    let cells = random_field::<CellCentre>("phi", patch, rng, signed);
    let v = random_field::<F>("vel", patch, rng, velocity);
    let mut faces = sentinel_target::<F>("flux", patch);
    expect_missing_ghosts(
        faces.assign(gradient::<F>(&cells)),
        "flux",
        "phi",
        &side,
        1,
        0,
    );
    expect_missing_ghosts(
        faces.assign(interpolate_to_face::<F>(&cells)),
        "flux",
        "phi",
        &side,
        1,
        0,
    );
    expect_missing_ghosts(
        faces.assign(upwind::<F>(&v, &cells)),
        "flux",
        "phi",
        &side,
        1,
        0,
    );
    expect_missing_ghosts(
        faces.assign(limited::<F>(Limiter::Superbee, &v, &cells)),
        "flux",
        "phi",
        &side,
        2,
        0,
    );
    untouched(&faces);
}

/// Stencils from `F` faces to cells on ghost-less fields: they read the face
/// above the last cell, which is the boundary face (interior) where the patch
/// touches the `+` boundary and a missing ghost elsewhere.
fn check_face_stencils_without_ghosts<F: FaceLocation>(patch: &Patch, rng: &mut Xorshift) {
    let axis = F::AXIS;
    let side = format!("+{}", ["x", "y", "z"][axis]);
    let faces = random_field::<F>("flux", patch, rng, signed);
    let mut cells = sentinel_target::<CellCentre>("rhs", patch);
    let h = patch.grid().spacing()[axis];
    let interior = cells.layout().interior();
    if patch.plus_boundary()[axis] {
        cells.assign(divergence::<F>(&faces)).unwrap();
        check_region("divergence without ghosts", &cells, &interior, |i| {
            let (lower, upper) = (at(&faces, i), at(&faces, shift(i, axis, 1)));
            ((upper - lower) / h, (upper.abs() + lower.abs()) / h)
        });
        cells.fill(SENTINEL).unwrap();
        cells.assign(interpolate_to_cell::<F>(&faces)).unwrap();
        check_region("interpolation without ghosts", &cells, &interior, |i| {
            let (lower, upper) = (at(&faces, i), at(&faces, shift(i, axis, 1)));
            ((lower + upper) / 2.0, lower.abs() + upper.abs())
        });
    } else {
        expect_missing_ghosts(
            cells.assign(divergence::<F>(&faces)),
            "rhs",
            "flux",
            &side,
            1,
            0,
        );
        expect_missing_ghosts(
            cells.assign(interpolate_to_cell::<F>(&faces)),
            "rhs",
            "flux",
            &side,
            1,
            0,
        );
        untouched(&cells);
    }
}

#[test]
fn stencils_without_ghosts_fail_with_missing_ghosts() {
    for seed in 0..CASES / 2 {
        let mut rng = Xorshift::new(1000 + seed);
        for patch in patches(&mut rng, GhostWidth::none()) {
            check_cell_stencils_without_ghosts::<XFace>(&patch, &mut rng);
            check_cell_stencils_without_ghosts::<YFace>(&patch, &mut rng);
            check_cell_stencils_without_ghosts::<ZFace>(&patch, &mut rng);
            check_face_stencils_without_ghosts::<XFace>(&patch, &mut rng);
            check_face_stencils_without_ghosts::<YFace>(&patch, &mut rng);
            check_face_stencils_without_ghosts::<ZFace>(&patch, &mut rng);

            let cells = random_field::<CellCentre>("phi", &patch, &mut rng, signed);
            let mut target = sentinel_target::<CellCentre>("lap", &patch);
            expect_missing_ghosts(target.assign(laplacian(&cells)), "lap", "phi", "-x", 1, 0);
            let xfaces = random_field::<XFace>("u", &patch, &mut rng, signed);
            let mut xtarget = sentinel_target::<XFace>("lap_u", &patch);
            expect_missing_ghosts(xtarget.assign(laplacian(&xfaces)), "lap_u", "u", "-x", 1, 0);
            untouched(&target);
            untouched(&xtarget);

            // The same fields in pointwise expressions are fine.
            target.assign(exp(&cells) * 2.0).unwrap();
            let interior = target.layout().interior();
            check_region("pointwise without ghosts", &target, &interior, |i| {
                let want = at(&cells, i).exp() * 2.0;
                (want, want)
            });
        }
    }
}

#[test]
fn location_kinds_of_the_typed_operators() {
    // The typed front end's result locations, as the IR reports them.
    let patch = random_patch(&mut Xorshift::new(1100), GhostWidth::uniform(1), [false; 3]);
    let c = SpatialField::<CellCentre>::new("c", &patch, watershed_fields::Device::Cpu).unwrap();
    let y = SpatialField::<YFace>::new("y", &patch, watershed_fields::Device::Cpu).unwrap();
    assert_eq!(
        gradient::<ZFace>(&c).node().location(),
        Some(LocationKind::ZFace)
    );
    assert_eq!(
        divergence::<YFace>(&y).node().location(),
        Some(LocationKind::CellCentre)
    );
    assert_eq!(laplacian(&y).node().location(), Some(LocationKind::YFace));
    assert_eq!(Expr::<XFace>::constant(1.0).node().location(), None);
}
