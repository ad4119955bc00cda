//! The structured grid and the patch (window) of it that one process works on.
//!
//! A [`Grid`] is the whole domain: global cell counts, spacing, origin and
//! periodicity. A [`Patch`] is a box of those cells owned by one process or
//! graph, with a configurable number of ghost layers per side ([`GhostWidth`]).
//! Where a patch side lies on a non-periodic domain boundary it is a *physical
//! boundary*; face fields get one extra point there (the face on the boundary
//! itself), as SpatialOps does. 1D and 2D problems use `ny = nz = 1` or `nz = 1`;
//! a dimension with one cell is *inactive* and never has ghosts or extra faces.

use crate::error::{FieldError, FieldResult};

/// Number of ghost layers on the minus and plus side of each axis.
///
/// ```
/// use watershed_fields::GhostWidth;
/// let g = GhostWidth::uniform(2);
/// assert_eq!(g.minus, [2, 2, 2]);
/// assert_eq!(g.plus, [2, 2, 2]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GhostWidth {
    /// Layers below index 0 on x, y, z.
    pub minus: [usize; 3],
    /// Layers above the last interior index on x, y, z.
    pub plus: [usize; 3],
}

impl GhostWidth {
    /// The same number of layers on all six sides.
    pub fn uniform(layers: usize) -> Self {
        GhostWidth {
            minus: [layers; 3],
            plus: [layers; 3],
        }
    }

    /// No ghost layers.
    pub fn none() -> Self {
        GhostWidth::default()
    }

    /// The largest width on any side.
    pub fn max(&self) -> usize {
        self.minus
            .iter()
            .chain(self.plus.iter())
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// This width with the layers of inactive dimensions set to zero.
    pub fn restricted_to(mut self, active: [bool; 3]) -> Self {
        for (axis, _) in active.iter().enumerate().filter(|(_, active)| !**active) {
            self.minus[axis] = 0;
            self.plus[axis] = 0;
        }
        self
    }
}

/// The whole computational domain: a uniform structured grid.
///
/// ```
/// use watershed_fields::Grid;
/// let grid = Grid::new([32, 16, 1], [1.0, 0.5, 1.0], [0.0; 3]).unwrap();
/// assert_eq!(grid.spacing(), [1.0 / 32.0, 0.5 / 16.0, 1.0]);
/// assert_eq!(grid.dimensions(), 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    cells: [usize; 3],
    spacing: [f64; 3],
    origin: [f64; 3],
    periodic: [bool; 3],
}

impl Grid {
    /// A grid of `cells` over a box of side `lengths` whose lower corner is `origin`.
    ///
    /// Errors when a cell count is zero or a length is not finite and positive.
    pub fn new(cells: [usize; 3], lengths: [f64; 3], origin: [f64; 3]) -> FieldResult<Self> {
        let mut spacing = [0.0; 3];
        for axis in 0..3 {
            if cells[axis] == 0 {
                return Err(FieldError::InvalidGrid {
                    reason: format!(
                        "the cell count on axis {} is 0; use 1 for an unused dimension",
                        axis_name(axis)
                    ),
                });
            }
            if !(lengths[axis].is_finite() && lengths[axis] > 0.0) {
                return Err(FieldError::InvalidGrid {
                    reason: format!(
                        "the domain length on axis {} is {}; it must be finite and positive",
                        axis_name(axis),
                        lengths[axis]
                    ),
                });
            }
            if !origin[axis].is_finite() {
                return Err(FieldError::InvalidGrid {
                    reason: format!("the origin on axis {} is not finite", axis_name(axis)),
                });
            }
            spacing[axis] = lengths[axis] / cells[axis] as f64;
        }
        check_spacing(&spacing)?;
        if cells
            .iter()
            .try_fold(1usize, |p, &n| p.checked_mul(n))
            .and_then(|n| n.checked_mul(std::mem::size_of::<f64>()))
            .is_none_or(|bytes| bytes > isize::MAX as usize / 2)
        {
            return Err(FieldError::InvalidGrid {
                reason: format!(
                    "{cells:?} cells are more than this machine can address in one field"
                ),
            });
        }
        Ok(Grid {
            cells,
            spacing,
            origin,
            periodic: [false; 3],
        })
    }

    /// A grid of `cells` of size `spacing` whose lower corner is `origin`
    /// (keeps `spacing` bit for bit, e.g. when rebuilding a grid from a file).
    pub fn from_spacing(
        cells: [usize; 3],
        spacing: [f64; 3],
        origin: [f64; 3],
    ) -> FieldResult<Self> {
        check_spacing(&spacing)?;
        let lengths = [0, 1, 2].map(|a| spacing[a] * cells[a] as f64);
        let mut grid = Grid::new(cells, lengths, origin)?;
        grid.spacing = spacing;
        Ok(grid)
    }

    /// The same grid with the given axes periodic.
    pub fn with_periodic(mut self, periodic: [bool; 3]) -> Self {
        self.periodic = periodic;
        self
    }

    /// Global cell counts (nx, ny, nz).
    pub fn cells(&self) -> [usize; 3] {
        self.cells
    }

    /// Cell sizes (dx, dy, dz).
    pub fn spacing(&self) -> [f64; 3] {
        self.spacing
    }

    /// Coordinates of the domain's lower corner.
    pub fn origin(&self) -> [f64; 3] {
        self.origin
    }

    /// Domain side lengths.
    pub fn lengths(&self) -> [f64; 3] {
        [0, 1, 2].map(|a| self.spacing[a] * self.cells[a] as f64)
    }

    /// Which axes are periodic.
    pub fn periodic(&self) -> [bool; 3] {
        self.periodic
    }

    /// Which axes have more than one cell.
    pub fn active_dimensions(&self) -> [bool; 3] {
        self.cells.map(|n| n > 1)
    }

    /// Number of active dimensions (1, 2 or 3; 0 for a single cell).
    pub fn dimensions(&self) -> usize {
        self.active_dimensions().iter().filter(|&&a| a).count()
    }

    /// Total number of cells.
    pub fn total_cells(&self) -> usize {
        self.cells.iter().product()
    }

    /// The patch covering the whole domain with `ghost_layers` on every side of
    /// each active dimension.
    pub fn whole_domain(&self, ghost_layers: usize) -> Patch {
        Patch::new(self, [0; 3], self.cells, GhostWidth::uniform(ghost_layers))
            .expect("the whole domain is always a valid patch")
    }
}

/// A box of grid cells with ghost layers: the window one graph computes on.
///
/// ```
/// use watershed_fields::{Grid, GhostWidth, Patch};
/// let grid = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3]).unwrap();
/// let patch = Patch::new(&grid, [0, 4, 0], [8, 4, 8], GhostWidth::uniform(1)).unwrap();
/// // The patch reaches the +y domain boundary but not the -y one.
/// assert_eq!(patch.plus_boundary(), [true, true, true]);
/// assert_eq!(patch.minus_boundary(), [true, false, true]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Patch {
    grid: Grid,
    offset: [usize; 3],
    cells: [usize; 3],
    ghosts: GhostWidth,
}

impl Patch {
    /// The patch of `cells` starting at global cell `offset`, with `ghosts`
    /// layers (ignored, i.e. zero, in inactive dimensions).
    pub fn new(
        grid: &Grid,
        offset: [usize; 3],
        cells: [usize; 3],
        ghosts: GhostWidth,
    ) -> FieldResult<Self> {
        for axis in 0..3 {
            let end = offset[axis].checked_add(cells[axis]);
            if cells[axis] == 0 || end.is_none_or(|end| end > grid.cells[axis]) {
                return Err(FieldError::InvalidGrid {
                    reason: format!(
                        "patch cells {}..{} on axis {} do not lie inside the grid's {} cells",
                        offset[axis],
                        offset[axis] as u128 + cells[axis] as u128,
                        axis_name(axis),
                        grid.cells[axis]
                    ),
                });
            }
        }
        Ok(Patch {
            grid: grid.clone(),
            offset,
            cells,
            ghosts: ghosts.restricted_to(grid.active_dimensions()),
        })
    }

    /// The grid this patch is part of.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// Global index of the patch's first interior cell.
    pub fn offset(&self) -> [usize; 3] {
        self.offset
    }

    /// Interior cell counts of the patch.
    pub fn cells(&self) -> [usize; 3] {
        self.cells
    }

    /// Ghost layers per side (zero in inactive dimensions).
    pub fn ghosts(&self) -> GhostWidth {
        self.ghosts
    }

    /// Sides where the patch touches a non-periodic domain boundary, minus side.
    pub fn minus_boundary(&self) -> [bool; 3] {
        [0, 1, 2].map(|a| {
            self.grid.active_dimensions()[a] && !self.grid.periodic[a] && self.offset[a] == 0
        })
    }

    /// Sides where the patch touches a non-periodic domain boundary, plus side.
    /// Face fields normal to such a side carry one extra interior point.
    pub fn plus_boundary(&self) -> [bool; 3] {
        [0, 1, 2].map(|a| {
            self.grid.active_dimensions()[a]
                && !self.grid.periodic[a]
                && self.offset[a] + self.cells[a] == self.grid.cells[a]
        })
    }
}

/// Refuses spacings with which the stencils' weights (1/h, 1/h^2) would
/// not be finite.
fn check_spacing(spacing: &[f64; 3]) -> FieldResult<()> {
    for (axis, &h) in spacing.iter().enumerate() {
        if !(h.is_finite() && h > 0.0 && (1.0 / (h * h)).is_finite()) {
            return Err(FieldError::InvalidGrid {
                reason: format!(
                    "the spacing {h:e} on axis {} makes 1/h^2 overflow or is not a finite positive number; use a larger domain or fewer cells",
                    axis_name(axis)
                ),
            });
        }
    }
    Ok(())
}

/// "x", "y" or "z".
pub(crate) fn axis_name(axis: usize) -> &'static str {
    ["x", "y", "z"][axis.min(2)]
}
