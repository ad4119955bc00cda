//! A grid decomposed into a fixed layout of patches, as Uintah decomposes
//! Wasatch's domains: `counts = [px, py, pz]` boxes of equal size, numbered
//! with x fastest, each with the same ghost width. The layout, not the
//! number of processes, defines the arithmetic: processes (ranks) own
//! contiguous runs of patches ([`PatchLayout::owned_by`]), several each if
//! there are more patches than ranks, so that 1, 2 or 4 ranks over one
//! layout compute the same patches.
//!
//! A layout is refused, with the axis and the numbers, when a count is 0,
//! does not divide the grid's cells on its axis, splits an axis the grid
//! does not use, or leaves patches thinner than their ghost layers (a
//! ghost layer would then need cells beyond the neighbouring patch). Across
//! a periodic axis the first and last patches are neighbours; across a
//! non-periodic one a patch side on the domain boundary has none (its
//! ghosts are a boundary condition's, see [`Patch::minus_boundary`]).

use crate::device::Device;
use crate::error::{FieldError, FieldResult};
use crate::field::SpatialField;
use crate::grid::{GhostWidth, Grid, Patch, axis_name};
use crate::layout::FieldLayout;
use crate::location::Location;
use crate::side::Side;
use std::ops::Range;

/// A grid's fixed decomposition into patches (see the module docs).
///
/// ```
/// use watershed_fields::{GhostWidth, Grid, PatchLayout, Side};
/// let grid = Grid::new([32, 16, 1], [1.0; 3], [0.0; 3])?.with_periodic([true, false, false]);
/// let layout = PatchLayout::new(&grid, [4, 2, 1], GhostWidth::uniform(1))?;
/// assert_eq!(layout.len(), 8);
/// let patch = layout.patch(5)?; // x = 1, y = 1
/// assert_eq!((patch.offset(), patch.cells()), ([8, 8, 0], [8, 8, 1]));
/// // x is periodic: patch 4 (x = 0) has patch 7 on its minus side.
/// assert_eq!(layout.neighbour(4, Side { axis: 0, plus: false }), Some(7));
/// // y is not: the top row has no neighbour above it.
/// assert_eq!(layout.neighbour(5, Side { axis: 1, plus: true }), None);
/// // Three ranks own 3, 3 and 2 patches, in order.
/// assert_eq!(layout.owned_by(0, 3)?, 0..3);
/// assert_eq!(layout.owner(7, 3)?, 2);
/// # Ok::<(), watershed_fields::FieldError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PatchLayout {
    grid: Grid,
    counts: [usize; 3],
    patch_cells: [usize; 3],
    ghosts: GhostWidth,
}

impl PatchLayout {
    /// `counts[axis]` patches along each axis of `grid`, each with
    /// `ghosts` layers (zero on axes the grid does not use).
    pub fn new(grid: &Grid, counts: [usize; 3], ghosts: GhostWidth) -> FieldResult<Self> {
        let cells = grid.cells();
        let active = grid.active_dimensions();
        let ghosts = ghosts.restricted_to(active);
        let invalid = |reason: String| FieldError::InvalidLayout { reason };
        let mut patch_cells = [1; 3];
        for axis in 0..3 {
            let (count, n, name) = (counts[axis], cells[axis], axis_name(axis));
            if count == 0 {
                return Err(invalid(format!("0 patches along {name}; give at least 1")));
            }
            if !active[axis] && count > 1 {
                return Err(invalid(format!(
                    "{count} patches along {name}, but the grid has 1 cell there; give 1"
                )));
            }
            if n % count != 0 {
                return Err(invalid(format!(
                    "{count} patches along {name} do not divide its {n} cells; use a divisor of {n} ({})",
                    divisors(n)
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            patch_cells[axis] = n / count;
            let needed = ghosts.minus[axis].max(ghosts.plus[axis]);
            if count > 1 && patch_cells[axis] < needed {
                return Err(invalid(format!(
                    "{count} patches along {name} are {} cell(s) thick, fewer than their {needed} ghost layer(s): a ghost layer would reach beyond the neighbouring patch; use at most {} patches along {name}",
                    patch_cells[axis],
                    n / needed
                )));
            }
        }
        Ok(PatchLayout {
            grid: grid.clone(),
            counts,
            patch_cells,
            ghosts,
        })
    }

    /// A layout of exactly `patches` patches chosen for `grid`: of the
    /// counts whose product is `patches`, each dividing the cells along
    /// its axis (1 on axes the grid does not use) and leaving patches at
    /// least as thick as their ghosts, the one whose patches have the
    /// fewest ghost points in all (the least to exchange); on a tie the
    /// one with the fewest patches along x, then y (cuts across the slow
    /// axes keep a patch's rows whole). An error when no such counts exist.
    ///
    /// ```
    /// use watershed_fields::{GhostWidth, Grid, PatchLayout};
    /// let grid = Grid::new([64, 32, 1], [1.0; 3], [0.0; 3])?;
    /// let layout = PatchLayout::automatic(&grid, 4, GhostWidth::uniform(1))?;
    /// assert_eq!(layout.counts(), [2, 2, 1]);
    /// # Ok::<(), watershed_fields::FieldError>(())
    /// ```
    pub fn automatic(grid: &Grid, patches: usize, ghosts: GhostWidth) -> FieldResult<Self> {
        let cells = grid.cells();
        let mut best: Option<(usize, PatchLayout)> = None;
        for px in divisors(patches) {
            for py in divisors(patches / px) {
                let pz = patches / px / py;
                let Ok(layout) = PatchLayout::new(grid, [px, py, pz], ghosts) else {
                    continue;
                };
                // Ghost points per patch (allocated minus interior), over
                // all patches: what the exchange moves.
                let g = layout.ghosts;
                let n = layout.patch_cells;
                let allocated: usize = (0..3).map(|a| n[a] + g.minus[a] + g.plus[a]).product();
                let interior: usize = n.iter().product();
                let cost = (allocated - interior) * patches;
                if best.as_ref().is_none_or(|(c, _)| cost < *c) {
                    best = Some((cost, layout));
                }
            }
        }
        best.map(|(_, layout)| layout)
            .ok_or_else(|| FieldError::InvalidLayout {
                reason: format!(
                    "no layout of {patches} patches fits the grid's {cells:?} cells with {:?} ghost layers: every way of writing {patches} as px x py x pz leaves a count that does not divide its axis or patches thinner than their ghosts; use another number of ranks or patches, or give patches = [px, py, pz]",
                    ghosts.restricted_to(grid.active_dimensions()).minus
                ),
            })
    }

    /// The grid decomposed.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// Patches along each axis.
    pub fn counts(&self) -> [usize; 3] {
        self.counts
    }

    /// Cells of every patch along each axis.
    pub fn patch_cells(&self) -> [usize; 3] {
        self.patch_cells
    }

    /// How many patches.
    pub fn len(&self) -> usize {
        self.counts.iter().product()
    }

    /// Always false: a layout has at least one patch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The position `[i, j, k]` of patch `index` in the layout.
    pub fn position(&self, index: usize) -> [usize; 3] {
        let [px, py, _] = self.counts;
        [index % px, (index / px) % py, index / (px * py)]
    }

    /// The index of the patch at `position` (x fastest).
    pub fn index(&self, position: [usize; 3]) -> usize {
        let [px, py, _] = self.counts;
        position[0] + px * (position[1] + py * position[2])
    }

    /// Patch `index`, with the layout's ghost layers. An error naming the
    /// index when there is no such patch.
    pub fn patch(&self, index: usize) -> FieldResult<Patch> {
        self.check_index(index)?;
        let position = self.position(index);
        let offset = [0, 1, 2].map(|a| position[a] * self.patch_cells[a]);
        Patch::new(&self.grid, offset, self.patch_cells, self.ghosts)
    }

    /// The patch across `side` of patch `index`: the next one along the
    /// axis, wrapping around a periodic axis; `None` where the side lies on
    /// a non-periodic domain boundary (or `index` is not a patch).
    pub fn neighbour(&self, index: usize, side: Side) -> Option<usize> {
        if index >= self.len() || side.axis > 2 {
            return None;
        }
        let axis = side.axis;
        let count = self.counts[axis];
        let mut position = self.position(index);
        let at = position[axis];
        let periodic = self.grid.periodic()[axis] && self.grid.active_dimensions()[axis];
        position[axis] = match (side.plus, at) {
            (true, at) if at + 1 < count => at + 1,
            (true, _) if periodic => 0,
            (false, at) if at > 0 => at - 1,
            (false, _) if periodic => count - 1,
            _ => return None,
        };
        Some(self.index(position))
    }

    /// The patches rank `rank` of `ranks` owns: a contiguous run, the first
    /// `len % ranks` ranks one patch more than the others. Refuses no
    /// ranks, more ranks than patches (a rank would own nothing) and a rank
    /// outside `0..ranks`.
    pub fn owned_by(&self, rank: usize, ranks: usize) -> FieldResult<Range<usize>> {
        self.check_ranks(ranks)?;
        if rank >= ranks {
            return Err(FieldError::InvalidLayout {
                reason: format!(
                    "rank {rank} is not one of the {ranks} ranks (0 to {})",
                    ranks - 1
                ),
            });
        }
        let (base, extra) = (self.len() / ranks, self.len() % ranks);
        let start = rank * base + rank.min(extra);
        let end = start + base + usize::from(rank < extra);
        Ok(start..end)
    }

    /// The whole domain's `L` field named `name`, with the layout's ghost
    /// layers, from `all`: every patch's allocated values, ghosts included,
    /// in patch order (what a gather of every patch's field gives). Each
    /// point of the domain takes the value of the patch whose interior
    /// holds it, whatever the other patches' ghosts hold there (they may
    /// be stale: a field written since its last exchange); each ghost
    /// point of the whole domain, the value of a patch whose ghost layers
    /// reach it. An error, naming the field, when `all` does not hold
    /// every patch's points.
    ///
    /// ```
    /// use watershed_fields::{CellCentre, GhostWidth, Grid, PatchLayout};
    /// let grid = Grid::new([4, 2, 1], [1.0; 3], [0.0; 3])?;
    /// let layout = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1))?;
    /// // Each patch holds (2 + 2) x (2 + 2) points (z has no ghosts in 2D):
    /// // 1 on the first, 2 on the second, ghosts included.
    /// let all: Vec<f64> = [1.0, 2.0].iter().flat_map(|&v| vec![v; 16]).collect();
    /// let whole = layout.assemble::<CellCentre>("T", &all)?;
    /// let at = |p| whole.values().unwrap()[whole.layout().linear_index(p)];
    /// // Each cell has its own patch's value, not the other's ghost.
    /// assert_eq!((at([1, 0, 0]), at([2, 0, 0])), (1.0, 2.0));
    /// // The whole domain's ghosts: the patch that reaches them.
    /// assert_eq!((at([-1, 0, 0]), at([4, 0, 0])), (1.0, 2.0));
    /// # Ok::<(), watershed_fields::FieldError>(())
    /// ```
    pub fn assemble<L: Location>(&self, name: &str, all: &[f64]) -> FieldResult<SpatialField<L>> {
        let whole_patch = Patch::new(&self.grid, [0; 3], self.grid.cells(), self.ghosts)?;
        let mut whole = SpatialField::<L>::new(name, &whole_patch, Device::Cpu)?;
        let to = whole.layout().clone();
        let parts = (0..self.len())
            .map(|index| Ok(FieldLayout::new(&self.patch(index)?, L::KIND)))
            .collect::<FieldResult<Vec<_>>>()?;
        let expected: usize = parts.iter().map(FieldLayout::allocated_len).sum();
        if all.len() != expected {
            return Err(FieldError::InvalidLayout {
                reason: format!(
                    "field {name}: {} values to put together, but the {} patches of the layout {:?} hold {expected} points of {:?}",
                    all.len(),
                    self.len(),
                    self.counts,
                    L::KIND
                ),
            });
        }
        let values = whole.values_mut()?;
        // The ghosts first, then every interior over them.
        for interiors in [false, true] {
            let mut start = 0;
            for from in &parts {
                let part = &all[start..start + from.allocated_len()];
                start += from.allocated_len();
                let offset = from.patch().offset().map(|o| o as isize);
                let points = if interiors {
                    from.interior()
                } else {
                    from.allocated()
                };
                for local in points.iter() {
                    let global = [0, 1, 2].map(|a| local[a] + offset[a]);
                    values[to.linear_index(global)] = part[from.linear_index(local)];
                }
            }
        }
        Ok(whole)
    }

    /// The rank of `ranks` that owns patch `index` (see [`Self::owned_by`]).
    pub fn owner(&self, index: usize, ranks: usize) -> FieldResult<usize> {
        self.check_ranks(ranks)?;
        self.check_index(index)?;
        let (base, extra) = (self.len() / ranks, self.len() % ranks);
        // The first `extra` ranks own `base + 1` patches each.
        let long = extra * (base + 1);
        Ok(if index < long {
            index / (base + 1)
        } else {
            extra + (index - long) / base
        })
    }

    fn check_index(&self, index: usize) -> FieldResult<()> {
        if index < self.len() {
            Ok(())
        } else {
            Err(FieldError::InvalidLayout {
                reason: format!(
                    "patch {index} does not exist: the layout {:?} has {} patches",
                    self.counts,
                    self.len()
                ),
            })
        }
    }

    fn check_ranks(&self, ranks: usize) -> FieldResult<()> {
        if ranks == 0 || ranks > self.len() {
            return Err(FieldError::InvalidLayout {
                reason: format!(
                    "{ranks} rank(s) for the {} patches of layout {:?}: every rank must own at least one patch; use 1 to {} ranks or more patches",
                    self.len(),
                    self.counts,
                    self.len()
                ),
            });
        }
        Ok(())
    }
}

/// The divisors of `n`, ascending.
fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|&d| n.is_multiple_of(d)).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn grid(cells: [usize; 3], periodic: [bool; 3]) -> Grid {
        Grid::new(cells, [1.0; 3], [0.0; 3])
            .unwrap()
            .with_periodic(periodic)
    }

    #[test]
    fn an_automatic_layout_has_the_fewest_ghost_points_or_none_fits() {
        let cube = grid([24, 24, 24], [true; 3]);
        let ghosts = GhostWidth::uniform(1);
        assert_eq!(
            PatchLayout::automatic(&cube, 8, ghosts).unwrap().counts(),
            [2, 2, 2]
        );
        assert_eq!(
            PatchLayout::automatic(&cube, 3, ghosts).unwrap().counts(),
            [1, 1, 3]
        );
        let slab = grid([64, 8, 1], [false; 3]);
        assert_eq!(
            PatchLayout::automatic(&slab, 4, ghosts).unwrap().counts(),
            [4, 1, 1]
        );
        // 7 divides no axis of 24 x 24 x 24.
        let error = PatchLayout::automatic(&cube, 7, ghosts).unwrap_err();
        assert!(
            matches!(error, FieldError::InvalidLayout { ref reason } if reason.contains("no layout of 7 patches"))
        );
        // A layout's ghost points against every other valid layout's.
        let ghost_points = |l: &PatchLayout| {
            let n = l.patch_cells();
            let all: usize = (0..3)
                .map(|a| {
                    n[a] + if l.grid().active_dimensions()[a] {
                        2
                    } else {
                        0
                    }
                })
                .product();
            (all - n.iter().product::<usize>()) * l.len()
        };
        let chosen = PatchLayout::automatic(&cube, 12, ghosts).unwrap();
        for px in 1..=12 {
            for py in 1..=12 {
                if 12 % (px * py) == 0 {
                    if let Ok(other) = PatchLayout::new(&cube, [px, py, 12 / (px * py)], ghosts) {
                        assert!(
                            ghost_points(&chosen) <= ghost_points(&other),
                            "{:?} beats {:?}",
                            other.counts(),
                            chosen.counts()
                        );
                    }
                }
            }
        }
        assert_eq!(chosen.len(), 12);
    }

    fn reason(error: FieldError) -> String {
        match error {
            FieldError::InvalidLayout { reason } => reason,
            other => panic!("expected InvalidLayout, got {other:?}"),
        }
    }

    #[test]
    fn layouts_that_cannot_be_used_are_refused_naming_the_axis() {
        let g = grid([12, 10, 1], [false; 3]);
        let one = GhostWidth::uniform(1);
        let why = reason(PatchLayout::new(&g, [5, 1, 1], one).unwrap_err());
        assert!(
            why.contains("along x") && why.contains("1, 2, 3, 4, 6, 12"),
            "{why}"
        );
        let why = reason(PatchLayout::new(&g, [1, 0, 1], one).unwrap_err());
        assert!(why.contains("0 patches along y"), "{why}");
        let why = reason(PatchLayout::new(&g, [1, 1, 2], one).unwrap_err());
        assert!(why.contains("along z") && why.contains("1 cell"), "{why}");
        // 12 cells in 6 patches of 2 cells cannot carry 3 ghost layers.
        let why = reason(PatchLayout::new(&g, [6, 1, 1], GhostWidth::uniform(3)).unwrap_err());
        assert!(
            why.contains("2 cell(s) thick") && why.contains("at most 4 patches"),
            "{why}"
        );
        // One patch along an axis needs no neighbour there.
        assert!(PatchLayout::new(&grid([2, 10, 1], [false; 3]), [1, 5, 1], one).is_ok());
    }

    #[test]
    fn ranks_and_indices_outside_the_layout_are_refused() {
        let layout = PatchLayout::new(
            &grid([8, 8, 1], [false; 3]),
            [2, 2, 1],
            GhostWidth::uniform(1),
        )
        .unwrap();
        assert!(reason(layout.owned_by(0, 0).unwrap_err()).contains("0 rank(s)"));
        assert!(reason(layout.owner(0, 5).unwrap_err()).contains("use 1 to 4 ranks"));
        assert!(reason(layout.owned_by(3, 3).unwrap_err()).contains("rank 3 is not one of the 3"));
        assert!(reason(layout.patch(4).unwrap_err()).contains("patch 4 does not exist"));
        assert_eq!(
            layout.neighbour(
                4,
                Side {
                    axis: 0,
                    plus: true
                }
            ),
            None
        );
    }

    /// The largest divisor of `n` that is at most `limit` (a patch count
    /// the tests' random grids accept).
    pub(crate) fn divisor_at_most(n: usize, limit: usize) -> usize {
        divisors(n).into_iter().rfind(|&d| d <= limit).unwrap_or(1)
    }

    proptest! {
        /// Every cell of the grid lies in exactly one patch; patches tile
        /// the grid in index order; neighbours are symmetric and wrap only
        /// across periodic axes; owners are contiguous, every rank owns at
        /// least one patch and owner and owned_by agree.
        #[test]
        fn layouts_tile_the_grid_and_ranks_own_contiguous_runs(
            cells in prop::array::uniform3(1usize..13),
            wanted in prop::array::uniform3(1usize..5),
            periodic in prop::array::uniform3(any::<bool>()),
            ranks_wanted in 1usize..9,
        ) {
            let g = grid(cells, periodic);
            let counts = [0, 1, 2].map(|a| divisor_at_most(cells[a], wanted[a]));
            let layout = PatchLayout::new(&g, counts, GhostWidth::none()).unwrap();
            let mut cover = vec![0u8; cells.iter().product()];
            for index in 0..layout.len() {
                prop_assert_eq!(layout.index(layout.position(index)), index);
                let patch = layout.patch(index).unwrap();
                let (offset, size) = (patch.offset(), patch.cells());
                for k in offset[2]..offset[2] + size[2] {
                    for j in offset[1]..offset[1] + size[1] {
                        for i in offset[0]..offset[0] + size[0] {
                            cover[i + cells[0] * (j + cells[1] * k)] += 1;
                        }
                    }
                }
                for axis in 0..3 {
                    for plus in [false, true] {
                        let side = Side { axis, plus };
                        let across = layout.neighbour(index, side);
                        let back = across.and_then(|n| layout.neighbour(n, Side { axis, plus: !plus }));
                        if let Some(n) = across {
                            prop_assert_eq!(back, Some(index));
                            let (mine, theirs) = (layout.position(index), layout.position(n));
                            let wraps = mine[axis].abs_diff(theirs[axis]) != 1;
                            prop_assert!(!wraps || periodic[axis] || counts[axis] == 1);
                        } else {
                            // Only a non-periodic domain boundary has no neighbour.
                            let on_boundary = if plus { patch.plus_boundary() } else { patch.minus_boundary() };
                            let inactive = !g.active_dimensions()[axis];
                            prop_assert!(on_boundary[axis] || inactive);
                        }
                    }
                }
            }
            prop_assert!(cover.iter().all(|&c| c == 1));
            let ranks = ranks_wanted.min(layout.len());
            let mut next = 0;
            for rank in 0..ranks {
                let run = layout.owned_by(rank, ranks).unwrap();
                prop_assert_eq!(run.start, next);
                prop_assert!(!run.is_empty());
                for index in run.clone() {
                    prop_assert_eq!(layout.owner(index, ranks).unwrap(), rank);
                }
                next = run.end;
            }
            prop_assert_eq!(next, layout.len());
        }
    }
}
