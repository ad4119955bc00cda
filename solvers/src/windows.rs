//! Copying boxes of points between the fields of a patch and of the whole
//! domain, row by row: the windows a decomposed solver takes from whole
//! fields and the interiors it gathers into them (`crate::flow_patches`,
//! `crate::multigrid_patches`).

use crate::error::{SolverError, SolverResult};
use watershed_fields::{FieldError, FieldLayout, IndexBox};

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
