//! Copying boxes of points between the fields of a patch and of the whole
//! domain, row by row: the windows a decomposed solver takes from whole
//! fields and the interiors it gathers into them (`crate::flow_patches`,
//! `crate::multigrid_patches`), and the patches of a whole field that a
//! rank writes and reads back when every rank holds the whole domain (a
//! decomposed flow's files per rank: [`cut_window`], [`paste_window`]),
//! and a field copied whole between two graphs of one patch.

use crate::error::{SolverError, SolverResult};
use watershed_exprgraph::{ExpressionGraph, GraphError, GraphLocation, Tag};
use watershed_fields::{Device, FieldError, FieldLayout, IndexBox, Location, Patch, SpatialField};

/// A new CPU field on the patch of `cells` cells from global cell
/// `offset`, with `whole`'s ghost layers, holding `whole`'s values at the
/// same points, ghosts included: the part of a field over the whole
/// domain that one patch covers. A face field's patch holds the face
/// after its last cell only where the patch ends on a wall (see
/// `watershed_fields::FieldLayout`), so the interiors of a layout's
/// patches never overlap.
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_solvers::windows::{cut_window, paste_window};
/// let grid = Grid::new([8, 4, 1], [1.0; 3], [0.0; 3])?;
/// let mut whole = SpatialField::<CellCentre>::new("T", &grid.whole_domain(1), Device::Cpu)?;
/// let layout = whole.layout().clone();
/// let values = whole.values_mut()?;
/// for point in layout.allocated().iter() {
///     values[layout.linear_index(point)] = (10 * point[0] + point[1]) as f64;
/// }
/// let part = cut_window(&whole, [4, 0, 0], [4, 4, 1])?;
/// // Its first interior cell is the whole field's cell (4, 0), its
/// // ghosts the whole field's neighbours.
/// let at = |p| part.values().unwrap()[part.layout().linear_index(p)];
/// assert_eq!(at([0, 0, 0]), 40.0);
/// assert_eq!(at([-1, 0, 0]), 30.0);
/// assert_eq!(at([4, -1, 0]), 79.0);
/// let mut copy = SpatialField::<CellCentre>::new("T", &grid.whole_domain(1), Device::Cpu)?;
/// paste_window(&part, &mut copy)?;
/// assert_eq!(copy.values()?[layout.linear_index([5, 2, 0])], 52.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn cut_window<L: Location>(
    whole: &SpatialField<L>,
    offset: [usize; 3],
    cells: [usize; 3],
) -> SolverResult<SpatialField<L>> {
    let from = whole.layout();
    let patch = Patch::new(from.patch().grid(), offset, cells, from.ghosts())?;
    let mut part = SpatialField::<L>::new(whole.name(), &patch, Device::Cpu)?;
    let shift = [0, 1, 2].map(|a| from.patch().offset()[a] as isize);
    let within = [0, 1, 2].map(|a| offset[a] as isize - shift[a]);
    take_window(whole, &mut part, within, true)?;
    Ok(part)
}

/// Copies every point `part` holds, ghosts included, into the same points
/// of `whole`: a patch written by [`cut_window`] put back. Errors, naming
/// both grids, when `part` lies on another grid, and when its points reach
/// beyond what `whole` holds.
pub fn paste_window<L: Location>(
    part: &SpatialField<L>,
    whole: &mut SpatialField<L>,
) -> SolverResult<()> {
    let (from, to) = (part.layout().clone(), whole.layout().clone());
    let (grid, whole_grid) = (from.patch().grid(), to.patch().grid());
    if grid != whole_grid {
        return Err(SolverError::Field(FieldError::InvalidLayout {
            reason: format!(
                "`{}` lies on a grid of {:?} cells from {:?} with spacing {:?} (periodic {:?}), not the whole field's {:?} cells from {:?} with spacing {:?} (periodic {:?}): it was written for another grid",
                part.name(),
                grid.cells(),
                grid.origin(),
                grid.spacing(),
                grid.periodic(),
                whole_grid.cells(),
                whole_grid.origin(),
                whole_grid.spacing(),
                whole_grid.periodic()
            ),
        }));
    }
    let offset =
        [0, 1, 2].map(|a| from.patch().offset()[a] as isize - to.patch().offset()[a] as isize);
    let source = part.values()?;
    let values = whole.values_mut()?;
    let fits = for_rows(
        from.allocated(),
        offset,
        &to,
        &from,
        |to_at, from_at, len| {
            values[to_at..to_at + len].copy_from_slice(&source[from_at..from_at + len]);
        },
    );
    check_within(fits, &to)
}

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
    append_interior_of(field.layout(), field.values()?, out);
    Ok(())
}

/// [`append_interior`] of the values of a field with `layout` (every
/// allocated point, x fastest), e.g. a copy brought from a GPU.
pub(crate) fn append_interior_of(layout: &FieldLayout, values: &[f64], out: &mut Vec<f64>) {
    for_rows(layout.interior(), [0; 3], layout, layout, |_, from, len| {
        out.extend_from_slice(&values[from..from + len]);
    });
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

/// Copies every allocated value of `from`'s field `tag` into `to`'s field
/// `into`: two graphs on one patch, at location `F`, the copy made where
/// the field is current (on a GPU when it lives there:
/// [`ExpressionGraph::copy_field_from`]). An error naming both when
/// their layouts differ.
pub(crate) fn copy_field<F: GraphLocation>(
    from: &ExpressionGraph,
    tag: &Tag,
    to: &ExpressionGraph,
    into: &Tag,
) -> Result<(), GraphError> {
    to.copy_field_from::<F>(into, from, tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use watershed_fields::{Grid, XFace};

    fn numbered(grid: &Grid) -> SpatialField<XFace> {
        let mut whole =
            SpatialField::<XFace>::new("u", &grid.whole_domain(2), Device::Cpu).unwrap();
        let layout = whole.layout().clone();
        let values = whole.values_mut().unwrap();
        for point in layout.allocated().iter() {
            values[layout.linear_index(point)] = (100 * point[0] + point[1]) as f64;
        }
        whole
    }

    /// The windows of a face field's patches hold their pieces (one more
    /// face where a patch ends on the +x wall), and put back together,
    /// ghosts included, they give every point of the whole field.
    #[test]
    fn face_windows_tile_the_whole_field_and_come_back_whole() {
        let grid = Grid::new([8, 6, 1], [1.0; 3], [0.0; 3]).unwrap();
        let whole = numbered(&grid);
        let mut rebuilt =
            SpatialField::<XFace>::new("u", &grid.whole_domain(2), Device::Cpu).unwrap();
        rebuilt.fill(f64::NAN).unwrap();
        for (offset, cells, faces) in [
            ([0, 0, 0], [5, 3, 1], 5),
            ([5, 0, 0], [3, 3, 1], 4),
            ([0, 3, 0], [5, 3, 1], 5),
            ([5, 3, 0], [3, 3, 1], 4),
        ] {
            let part = cut_window(&whole, offset, cells).unwrap();
            assert_eq!(part.layout().interior_extent(), [faces, 3, 1]);
            let at = |p| part.values().unwrap()[part.layout().linear_index(p)];
            let global = |i: isize, j: isize| {
                (100 * (offset[0] as isize + i) + offset[1] as isize + j) as f64
            };
            assert_eq!(at([0, 0, 0]), global(0, 0));
            assert_eq!(at([-2, -1, 0]), global(-2, -1));
            paste_window(&part, &mut rebuilt).unwrap();
        }
        let bits = |f: &SpatialField<XFace>| -> Vec<u64> {
            f.values().unwrap().iter().map(|v| v.to_bits()).collect()
        };
        assert_eq!(bits(&rebuilt), bits(&whole));
    }

    #[test]
    fn a_window_of_another_grid_is_refused_naming_both() {
        let grid = Grid::new([8, 6, 1], [1.0; 3], [0.0; 3]).unwrap();
        let other = Grid::new([8, 6, 1], [1.0; 3], [0.0; 3])
            .unwrap()
            .with_periodic([true, false, false]);
        let part = cut_window(&numbered(&other), [0, 0, 0], [4, 3, 1]).unwrap();
        let mut whole = numbered(&grid);
        let error = paste_window(&part, &mut whole).unwrap_err();
        assert!(
            matches!(&error, SolverError::Field(FieldError::InvalidLayout { reason })
                if reason.contains("`u` lies on a grid of [8, 6, 1] cells")
                    && reason.contains("periodic [true, false, false]")
                    && reason.contains("not the whole field's")),
            "{error}"
        );
    }
}
