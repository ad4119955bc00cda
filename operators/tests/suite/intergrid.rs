//! Inter-grid operators (restriction and prolongation between a patch and
//! its coarsened patch) against reference loops written from coordinates:
//! restriction averages the fine cells whose centres lie inside a coarse
//! cell; prolongation interpolates linearly between the two coarse centres
//! nearest to a fine centre along each refined axis. Also: composition
//! with other operators, thread independence, and every error path.

use crate::common;

use common::*;
use watershed_fields::{CellCentre, Grid, IndexBox, Patch, SpatialField};
use watershed_operators::{
    Assign, AssignOptions, OperatorError, Parallelism, Region, field, interior_sum, laplacian,
    prolongate, restrict, update,
};

/// A fine grid and the grid coarsened by `ratio`, both with `ghosts`.
fn grids(cells: [usize; 3], ratio: [usize; 3], ghosts: usize) -> (Patch, Patch) {
    let spacing = [0.1, 0.07, 0.13];
    let origin = [-0.3, 0.2, 1.0];
    let fine = Grid::from_spacing(cells, spacing, origin).unwrap();
    let coarse = Grid::from_spacing(
        [0, 1, 2].map(|a| cells[a] / ratio[a]),
        [0, 1, 2].map(|a| spacing[a] * ratio[a] as f64),
        origin,
    )
    .unwrap();
    (fine.whole_domain(ghosts), coarse.whole_domain(ghosts))
}

/// Restriction from coordinates: the mean of the fine cells (interior or
/// ghost) whose centre lies inside coarse cell `index`.
fn restricted(fine: &SpatialField<CellCentre>, coarse_patch: &Patch, index: [isize; 3]) -> f64 {
    let coarse = watershed_fields::FieldLayout::new(
        coarse_patch,
        watershed_fields::LocationKind::CellCentre,
    );
    let centre = coarse.coordinate(index);
    let h = coarse_patch.grid().spacing();
    let layout = fine.layout();
    let (mut sum, mut count) = (0.0, 0);
    for i in layout.allocated() {
        let x = layout.coordinate(i);
        if (0..3).all(|a| (x[a] - centre[a]).abs() < 0.5 * h[a]) {
            sum += at(fine, i);
            count += 1;
        }
    }
    assert!(count > 0, "no fine cell inside coarse cell {index:?}");
    sum / count as f64
}

/// Prolongation from coordinates: per axis, linear interpolation between the
/// coarse centres nearest to the fine centre (weights `1 - distance / h`).
fn prolongated(coarse: &SpatialField<CellCentre>, fine_patch: &Patch, index: [isize; 3]) -> f64 {
    let fine =
        watershed_fields::FieldLayout::new(fine_patch, watershed_fields::LocationKind::CellCentre);
    let x = fine.coordinate(index);
    let layout = coarse.layout();
    let h = coarse.layout().patch().grid().spacing();
    let mut value = 0.0;
    for i in layout.allocated() {
        let c = layout.coordinate(i);
        let mut w = 1.0;
        for a in 0..3 {
            w *= (1.0 - (x[a] - c[a]).abs() / h[a]).max(0.0);
        }
        if w > 1e-12 {
            value += w * at(coarse, i);
        }
    }
    value
}

#[test]
fn restriction_averages_the_children_of_every_coarse_cell() {
    let mut rng = Xorshift::new(5);
    for (cells, ratio) in [
        ([8, 6, 4], [2, 2, 2]),
        ([8, 6, 1], [2, 2, 1]),
        ([8, 3, 5], [2, 1, 1]),
        ([4, 4, 6], [1, 2, 2]),
    ] {
        let (fine_patch, coarse_patch) = grids(cells, ratio, 1);
        let fine = random_field::<CellCentre>("r", &fine_patch, &mut rng, |r| r.uniform(-1.0, 1.0));
        for parallelism in [Parallelism::Serial, Parallelism::Rayon] {
            let mut coarse = sentinel_target::<CellCentre>("b", &coarse_patch);
            coarse
                .assign_with(
                    restrict(&fine, ratio),
                    AssignOptions {
                        parallelism,
                        ..AssignOptions::default()
                    },
                )
                .unwrap();
            let interior = coarse.layout().interior();
            check_region("restrict", &coarse, &interior, |i| {
                (restricted(&fine, &coarse_patch, i), 1.0)
            });
        }
    }
}

#[test]
fn prolongation_interpolates_linearly_from_the_coarse_centres() {
    let mut rng = Xorshift::new(6);
    for (cells, ratio) in [
        ([8, 6, 4], [2, 2, 2]),
        ([8, 6, 1], [2, 2, 1]),
        ([8, 3, 5], [2, 1, 1]),
    ] {
        let (fine_patch, coarse_patch) = grids(cells, ratio, 1);
        let coarse =
            random_field::<CellCentre>("x", &coarse_patch, &mut rng, |r| r.uniform(-1.0, 1.0));
        let mut fine = sentinel_target::<CellCentre>("e", &fine_patch);
        fine.assign(prolongate(&coarse, ratio)).unwrap();
        let interior = fine.layout().interior();
        check_region("prolongate", &fine, &interior, |i| {
            (prolongated(&coarse, &fine_patch, i), 1.0)
        });
        // The multigrid correction: x += P e, in place.
        let mut x =
            random_field::<CellCentre>("x_fine", &fine_patch, &mut rng, |r| r.uniform(-1.0, 1.0));
        let before = x.values().unwrap().to_vec();
        update(&mut x, |x| x + prolongate(&coarse, ratio)).unwrap();
        for i in interior {
            let want = before[x.layout().linear_index(i)] + prolongated(&coarse, &fine_patch, i);
            assert!(
                close(at(&x, i), want, 2.0, 1e-14),
                "{i:?}: {} vs {want}",
                at(&x, i)
            );
        }
    }
}

#[test]
fn inter_grid_operators_compose_with_stencils_and_pointwise_terms() {
    let mut rng = Xorshift::new(7);
    let ratio = [2, 2, 1];
    // Two coarse ghost layers let the fine result be computed one ghost
    // layer deep, which the Laplacian of the prolongation then reads.
    let (fine_patch, coarse_patch) = grids([8, 8, 1], ratio, 2);
    let coarse = random_field::<CellCentre>("c", &coarse_patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let other = random_field::<CellCentre>("o", &coarse_patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let fine = random_field::<CellCentre>("f", &fine_patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    // A restriction inside a pointwise expression.
    let mut b = sentinel_target::<CellCentre>("b", &coarse_patch);
    b.assign(2.0 * restrict(&fine, ratio) - field(&other))
        .unwrap();
    check_region("2 R f - o", &b, &b.layout().interior(), |i| {
        (
            2.0 * restricted(&fine, &coarse_patch, i) - at(&other, i),
            3.0,
        )
    });
    // A stencil of a prolongation reads it at neighbouring fine points,
    // rows above and below included.
    let mut direct = sentinel_target::<CellCentre>("direct", &fine_patch);
    direct
        .assign(laplacian(prolongate(&coarse, ratio)))
        .unwrap();
    let mut staged = sentinel_target::<CellCentre>("staged", &fine_patch);
    staged
        .assign_with(
            prolongate(&coarse, ratio),
            AssignOptions {
                region: Region::InteriorAndGhosts(1),
                ..AssignOptions::default()
            },
        )
        .unwrap();
    let mut reference = sentinel_target::<CellCentre>("reference", &fine_patch);
    reference.assign(laplacian(&staged)).unwrap();
    let interior = direct.layout().interior();
    for i in interior {
        let (got, want) = (at(&direct, i), at(&reference, i));
        assert!(close(got, want, 1e3, 1e-13), "{i:?}: {got} vs {want}");
    }
    // The largest computable region of a prolongation is what the coarse
    // ghosts allow: with 2 coarse ghost layers, 3 fine ones along refined
    // axes (all 2 the fine field has).
    let mut everywhere = sentinel_target::<CellCentre>("everywhere", &fine_patch);
    everywhere
        .assign_with(
            prolongate(&coarse, ratio),
            AssignOptions {
                region: Region::LargestComputable,
                ..AssignOptions::default()
            },
        )
        .unwrap();
    let layout = everywhere.layout().clone();
    let allocated = layout.allocated();
    let expected = IndexBox::new([-2, -2, 0], [10, 10, 1]);
    for i in allocated {
        if expected.contains(i) {
            let want = prolongated(&coarse, &fine_patch, i);
            assert!(close(at(&everywhere, i), want, 1.0, 1e-14), "{i:?}");
        } else {
            assert_eq!(
                at(&everywhere, i),
                SENTINEL,
                "{i:?} is outside what was asked"
            );
        }
    }
}

#[test]
fn thread_counts_give_bitwise_identical_transfers() {
    let mut rng = Xorshift::new(8);
    let ratio = [2, 2, 2];
    let (fine_patch, coarse_patch) = grids([16, 12, 10], ratio, 1);
    let fine = random_field::<CellCentre>("r", &fine_patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let coarse = random_field::<CellCentre>("x", &coarse_patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let run = |parallelism| {
        let options = AssignOptions {
            parallelism,
            ..AssignOptions::default()
        };
        let mut b = sentinel_target::<CellCentre>("b", &coarse_patch);
        b.assign_with(restrict(&fine, ratio), options).unwrap();
        let mut e = sentinel_target::<CellCentre>("e", &fine_patch);
        e.assign_with(prolongate(&coarse, ratio), options).unwrap();
        (b.values().unwrap().to_vec(), e.values().unwrap().to_vec())
    };
    let serial = run(Parallelism::Serial);
    let threaded = run(Parallelism::Rayon);
    assert!(
        serial
            .0
            .iter()
            .zip(&threaded.0)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    assert!(
        serial
            .1
            .iter()
            .zip(&threaded.1)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    // A reduction takes its grid from its first field, the fine one, which
    // a restriction cannot target.
    let total = interior_sum(restrict(&fine, ratio));
    assert!(
        total.is_err(),
        "a reduction has no coarse target to define the grid"
    );
}

fn inter_grid_error(result: Result<(), OperatorError>) -> (String, String) {
    match result {
        Err(OperatorError::InterGrid { field, reason }) => (field, reason),
        other => panic!("expected OperatorError::InterGrid, got {other:?}"),
    }
}

#[test]
fn bad_transfers_are_refused_naming_the_field() {
    let mut rng = Xorshift::new(9);
    let ratio = [2, 2, 1];
    let (fine_patch, coarse_patch) = grids([8, 8, 1], ratio, 1);
    let fine = random_field::<CellCentre>("residual", &fine_patch, &mut rng, |r| r.unit());
    let coarse_data =
        random_field::<CellCentre>("correction", &coarse_patch, &mut rng, |r| r.unit());
    let mut coarse = sentinel_target::<CellCentre>("b", &coarse_patch);

    // An expression, not a field.
    let (field_name, reason) = inter_grid_error(coarse.assign(restrict(2.0 * field(&fine), ratio)));
    assert!(field_name.contains("residual"), "{field_name}");
    assert!(reason.contains("must be a field"), "{reason}");

    // A ratio other than 1 or 2.
    let (field_name, reason) = inter_grid_error(coarse.assign(restrict(&fine, [3, 2, 1])));
    assert_eq!(field_name, "residual");
    assert!(reason.contains("ratio along x is 3"), "{reason}");

    // A ratio the grids do not have.
    let (field_name, reason) = inter_grid_error(coarse.assign(restrict(&fine, [2, 1, 1])));
    assert_eq!(field_name, "residual");
    assert!(
        reason.contains("refines the coarse one by [2, 1, 1]"),
        "{reason}"
    );

    // A field on a grid with another origin.
    let shifted = Grid::from_spacing([8, 8, 1], [0.1, 0.07, 0.13], [0.0, 0.2, 1.0]).unwrap();
    let elsewhere =
        random_field::<CellCentre>("elsewhere", &shifted.whole_domain(1), &mut rng, |r| {
            r.unit()
        });
    let (field_name, _) = inter_grid_error(coarse.assign(restrict(&elsewhere, ratio)));
    assert_eq!(field_name, "elsewhere");

    // One field read both directly and through an operator.
    let mut fine_target = sentinel_target::<CellCentre>("t", &fine_patch);
    let (field_name, reason) =
        inter_grid_error(fine_target.assign(field(&fine) + restrict(&fine, ratio)));
    assert_eq!(field_name, "residual");
    assert!(reason.contains("read both"), "{reason}");

    // A prolongation whose coarse field has no ghost layer to read.
    let no_ghosts = coarse_patch.grid().whole_domain(0);
    let bare = random_field::<CellCentre>("bare", &no_ghosts, &mut rng, |r| r.unit());
    match fine_target.assign(prolongate(&bare, ratio)) {
        Err(OperatorError::MissingGhosts {
            field,
            side,
            needed,
            available,
            ..
        }) => {
            assert_eq!(field, "bare");
            assert_eq!(side, "-x");
            assert_eq!((needed, available), (1, 0));
        }
        other => panic!("expected MissingGhosts, got {other:?}"),
    }
    // The correct call works.
    fine_target.assign(prolongate(&coarse_data, ratio)).unwrap();
}
