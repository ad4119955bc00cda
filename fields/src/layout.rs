//! The memory layout of one field on one patch, and index boxes to loop over it.
//!
//! Indices follow AMReX's convention: interior points are `0..n` on each axis
//! and ghost points carry the same `(i, j, k)` numbering, so the first minus-side
//! ghost is `-1`. Storage is x-fastest (`i + nx * (j + ny * k)` over the
//! allocated box), the order CUDA kernels and XDMF readers expect.
//!
//! The *interior* (AMReX's valid region) is what the patch owns; the
//! *allocated* box (region of definition) adds the ghost layers. Face fields
//! normal to an axis on which the patch touches a physical `+` boundary have
//! one more interior point there: the boundary face.

use crate::grid::{GhostWidth, Patch};
use crate::location::LocationKind;

/// A half-open box of signed indices `lo..hi` on each axis.
///
/// ```
/// use watershed_fields::IndexBox;
/// let b = IndexBox::new([-1, 0, 0], [2, 2, 1]);
/// assert_eq!(b.len(), 6);
/// assert_eq!(b.iter().next(), Some([-1, 0, 0]));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexBox {
    /// Lowest index on each axis (inclusive).
    pub lo: [isize; 3],
    /// One past the highest index on each axis (exclusive).
    pub hi: [isize; 3],
}

impl IndexBox {
    /// The box `lo..hi`; an axis with `hi <= lo` makes it empty.
    #[inline]
    pub fn new(lo: [isize; 3], hi: [isize; 3]) -> Self {
        IndexBox { lo, hi }
    }

    /// Points along each axis (0 where empty).
    #[inline]
    pub fn extent(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| (self.hi[a] - self.lo[a]).max(0) as usize)
    }

    /// Number of points.
    #[inline]
    pub fn len(&self) -> usize {
        self.extent().iter().product()
    }

    /// True when the box holds no point.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when `index` lies inside the box.
    #[inline]
    pub fn contains(&self, index: [isize; 3]) -> bool {
        (0..3).all(|a| index[a] >= self.lo[a] && index[a] < self.hi[a])
    }

    /// The intersection of two boxes (possibly empty).
    #[inline]
    pub fn intersect(&self, other: &IndexBox) -> IndexBox {
        IndexBox {
            lo: [0, 1, 2].map(|a| self.lo[a].max(other.lo[a])),
            hi: [0, 1, 2].map(|a| self.hi[a].min(other.hi[a])),
        }
    }

    /// The box grown by `width` (shrunk where negative) on both sides of every axis.
    pub fn grown(&self, width: [isize; 3]) -> IndexBox {
        IndexBox {
            lo: [0, 1, 2].map(|a| self.lo[a] - width[a]),
            hi: [0, 1, 2].map(|a| self.hi[a] + width[a]),
        }
    }

    /// All points, x fastest.
    pub fn iter(&self) -> IndexBoxIter {
        IndexBoxIter {
            bounds: *self,
            next: if self.is_empty() { None } else { Some(self.lo) },
        }
    }
}

impl IntoIterator for IndexBox {
    type Item = [isize; 3];
    type IntoIter = IndexBoxIter;
    fn into_iter(self) -> IndexBoxIter {
        self.iter()
    }
}

/// Iterator over the points of an [`IndexBox`], x fastest.
#[derive(Debug, Clone)]
pub struct IndexBoxIter {
    bounds: IndexBox,
    next: Option<[isize; 3]>,
}

impl Iterator for IndexBoxIter {
    type Item = [isize; 3];
    fn next(&mut self) -> Option<[isize; 3]> {
        let current = self.next?;
        let mut following = current;
        self.next = None;
        for axis in 0..3 {
            following[axis] += 1;
            if following[axis] < self.bounds.hi[axis] {
                self.next = Some(following);
                break;
            }
            following[axis] = self.bounds.lo[axis];
        }
        Some(current)
    }
}

/// Sizes, ghost widths and coordinates of one location's field on one patch.
///
/// ```
/// use watershed_fields::{FieldLayout, Grid, LocationKind};
/// let grid = Grid::new([4, 3, 1], [1.0; 3], [0.0; 3]).unwrap();
/// let patch = grid.whole_domain(1);
/// let cells = FieldLayout::new(&patch, LocationKind::CellCentre);
/// let xfaces = FieldLayout::new(&patch, LocationKind::XFace);
/// assert_eq!(cells.interior_extent(), [4, 3, 1]);
/// assert_eq!(xfaces.interior_extent(), [5, 3, 1]); // boundary face on +x
/// assert_eq!(cells.allocated_extent(), [6, 5, 1]); // no ghosts on inactive z
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FieldLayout {
    kind: LocationKind,
    interior: [usize; 3],
    ghosts: GhostWidth,
    patch: Patch,
}

impl FieldLayout {
    /// The layout of a `kind` field on `patch`.
    pub fn new(patch: &Patch, kind: LocationKind) -> Self {
        let mut interior = patch.cells();
        if let Some(axis) = kind.face_axis()
            && patch.plus_boundary()[axis]
        {
            interior[axis] += 1;
        }
        FieldLayout {
            kind,
            interior,
            ghosts: patch.ghosts(),
            patch: patch.clone(),
        }
    }

    /// The location this layout is for.
    pub fn kind(&self) -> LocationKind {
        self.kind
    }

    /// The patch this layout is for.
    pub fn patch(&self) -> &Patch {
        &self.patch
    }

    /// Ghost layers per side.
    pub fn ghosts(&self) -> GhostWidth {
        self.ghosts
    }

    /// Interior points per axis (including the `+` boundary face of face fields).
    pub fn interior_extent(&self) -> [usize; 3] {
        self.interior
    }

    /// Allocated points per axis: interior plus ghosts.
    pub fn allocated_extent(&self) -> [usize; 3] {
        // Saturating: a layout too large to address is refused by
        // `checked_allocated_len` before anything is allocated.
        [0, 1, 2].map(|a| {
            self.ghosts.minus[a]
                .saturating_add(self.interior[a])
                .saturating_add(self.ghosts.plus[a])
        })
    }

    /// The number of allocated points, or `None` when that many points of
    /// `element_bytes` bytes each could not be addressed (more than
    /// `isize::MAX / 2` bytes, leaving room for the pools' size classes).
    pub fn checked_allocated_len(&self, element_bytes: usize) -> Option<usize> {
        let mut points: usize = 1;
        for a in 0..3 {
            let extent = self.ghosts.minus[a]
                .checked_add(self.interior[a])?
                .checked_add(self.ghosts.plus[a])?;
            points = points.checked_mul(extent)?;
        }
        let bytes = points.checked_mul(element_bytes.max(1))?;
        (bytes <= isize::MAX as usize / 2).then_some(points)
    }

    /// Number of allocated points (the length of the storage).
    pub fn allocated_len(&self) -> usize {
        self.allocated_extent()
            .iter()
            .fold(1usize, |p, &e| p.saturating_mul(e))
    }

    /// Number of interior points.
    pub fn interior_len(&self) -> usize {
        self.interior.iter().product()
    }

    /// The interior box `0..n`.
    pub fn interior(&self) -> IndexBox {
        IndexBox::new([0; 3], self.interior.map(|n| n as isize))
    }

    /// The allocated box, ghosts included (negative indices on the minus side).
    pub fn allocated(&self) -> IndexBox {
        let signed = |v: usize| isize::try_from(v).unwrap_or(isize::MAX);
        IndexBox::new(
            self.ghosts.minus.map(|g| -signed(g)),
            [0, 1, 2].map(|a| signed(self.interior[a].saturating_add(self.ghosts.plus[a]))),
        )
    }

    /// The interior grown by up to `width` ghost layers per side, clipped to
    /// what is allocated.
    pub fn interior_with_ghosts(&self, width: usize) -> IndexBox {
        self.interior()
            .grown([width as isize; 3])
            .intersect(&self.allocated())
    }

    /// Disjoint boxes that together cover exactly the ghost points: the x
    /// slabs over the whole allocated y-z extent, then the y slabs over the
    /// interior x, then the z slabs over the interior x and y.
    pub fn ghost_regions(&self) -> Vec<IndexBox> {
        let allocated = self.allocated();
        let interior = self.interior();
        let mut regions = Vec::with_capacity(6);
        let mut remaining = allocated;
        for axis in 0..3 {
            let mut minus = remaining;
            minus.hi[axis] = interior.lo[axis];
            let mut plus = remaining;
            plus.lo[axis] = interior.hi[axis];
            for slab in [minus, plus] {
                if !slab.is_empty() {
                    regions.push(slab);
                }
            }
            remaining.lo[axis] = interior.lo[axis];
            remaining.hi[axis] = interior.hi[axis];
        }
        regions
    }

    /// Position in storage of the point `index` (which must lie in the
    /// allocated box).
    ///
    /// # Panics
    /// In debug builds, when `index` is outside the allocated box.
    #[inline]
    #[track_caller]
    pub fn linear_index(&self, index: [isize; 3]) -> usize {
        debug_assert!(
            self.allocated().contains(index),
            "index {index:?} outside the allocated box {:?}",
            self.allocated()
        );
        let extent = self.allocated_extent();
        let i = (index[0] + self.ghosts.minus[0] as isize) as usize;
        let j = (index[1] + self.ghosts.minus[1] as isize) as usize;
        let k = (index[2] + self.ghosts.minus[2] as isize) as usize;
        i + extent[0] * (j + extent[1] * k)
    }

    /// Distance in storage between neighbours along each axis.
    pub fn strides(&self) -> [usize; 3] {
        let extent = self.allocated_extent();
        [1, extent[0], extent[0] * extent[1]]
    }

    /// Physical coordinates of the point `index` (ghosts included).
    pub fn coordinate(&self, index: [isize; 3]) -> [f64; 3] {
        let grid = self.patch.grid();
        let stagger = self.kind.stagger();
        [0, 1, 2].map(|a| {
            grid.origin()[a]
                + (self.patch.offset()[a] as f64 + index[a] as f64 + stagger[a]) * grid.spacing()[a]
        })
    }
}
