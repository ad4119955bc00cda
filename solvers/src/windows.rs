//! Copying boxes of points between the fields of a patch and of the whole
//! domain, row by row: the windows a decomposed solver takes from whole
//! fields and the interiors it gathers into them (`crate::flow_patches`,
//! `crate::multigrid_patches`).

use crate::error::{SolverError, SolverResult};
use watershed_fields::{FieldError, FieldLayout, IndexBox, Location, SpatialField};

/// Calls `copy(to, from, len)` for each row along x of `region` (in the
/// indices of `from_layout`): `from` its start in `from_layout`'s storage,
/// `to` the start of the same points shifted by `offset` in
/// `to_layout`'s. Returns whether every shifted point lies in
/// `to_layout`'s allocated box.
pub(crate) fn for_rows(
    region: IndexBox,
    offset: [isize; 3],
    to_layout: &FieldLayout,
    from_layout: &FieldLayout,
    mut copy: impl FnMut(usize, usize, usize),
) -> bool {
    let target = to_layout.allocated();
    let shifted = |p: [isize; 3]| [0, 1, 2].map(|a| p[a] + offset[a]);
    let corners = [region.lo, [0, 1, 2].map(|a| region.hi[a] - 1)];
    if region.is_empty() {
        return true;
    }
    if corners.iter().any(|&c| !target.contains(shifted(c))) {
        return false;
    }
    let len = (region.hi[0] - region.lo[0]) as usize;
    for k in region.lo[2]..region.hi[2] {
        for j in region.lo[1]..region.hi[1] {
            let first = [region.lo[0], j, k];
            copy(
                to_layout.linear_index(shifted(first)),
                from_layout.linear_index(first),
                len,
            );
        }
    }
    true
}

/// An error naming `layout` when a window did not fit in it.
pub(crate) fn check_within(fits: bool, layout: &FieldLayout) -> SolverResult<()> {
    if fits {
        return Ok(());
    }
    Err(SolverError::Field(FieldError::InvalidLayout {
        reason: format!(
            "a patch's window reaches outside the whole domain's {:?} field of {:?} interior points with {:?} ghosts",
            layout.kind(),
            layout.interior_extent(),
            layout.ghosts()
        ),
    }))
}

/// Copies the patch field `to`'s allocated box (with `ghosts`) or its
/// interior from the same points of the whole domain's `from` (`offset`:
/// the patch's offset in the whole).
pub(crate) fn take_window<L: Location>(
    from: &SpatialField<L>,
    to: &mut SpatialField<L>,
    offset: [isize; 3],
    ghosts: bool,
) -> SolverResult<()> {
    let source = from.values()?;
    let from_layout = from.layout();
    let to_layout = to.layout().clone();
    let region = if ghosts {
        to_layout.allocated()
    } else {
        to_layout.interior()
    };
    let values = to.values_mut()?;
    let fits = for_rows(
        region,
        offset,
        from_layout,
        &to_layout,
        |whole_at, part_at, len| {
            values[part_at..part_at + len].copy_from_slice(&source[whole_at..whole_at + len]);
        },
    );
    check_within(fits, from_layout)
}

/// Appends the interior of `field` to `out`, row by row (what a gather
/// sends of a patch).
pub(crate) fn append_interior<L: Location>(
    field: &SpatialField<L>,
    out: &mut Vec<f64>,
) -> SolverResult<()> {
    let layout = field.layout();
    let values = field.values()?;
    for_rows(layout.interior(), [0; 3], layout, layout, |_, from, len| {
        out.extend_from_slice(&values[from..from + len]);
    });
    Ok(())
}

/// Writes the interior of a patch with layout `part` at `offset` into the
/// whole domain's `whole` from `gathered`, starting at `at` (rows in the
/// order [`append_interior`] gives them); returns where the next patch's
/// values start.
pub(crate) fn place_interior<L: Location>(
    gathered: &[f64],
    at: usize,
    part: &FieldLayout,
    offset: [isize; 3],
    whole: &mut SpatialField<L>,
) -> SolverResult<usize> {
    let to = whole.layout().clone();
    let values = whole.values_mut()?;
    let mut cursor = at;
    let fits = for_rows(part.interior(), offset, &to, part, |to, _, len| {
        values[to..to + len].copy_from_slice(&gathered[cursor..cursor + len]);
        cursor += len;
    });
    check_within(fits, &to)?;
    Ok(cursor)
}
