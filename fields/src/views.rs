//! ndarray views over a field's CPU data, for interop and hand-written loops.
//!
//! Views are indexed `[i, j, k]` with x fastest in memory. The ghost-inclusive
//! views start at the first ghost point, so view index `i` is layout index
//! `i - ghosts.minus[0]`; the interior views start at the first interior point.

use crate::error::FieldResult;
use crate::field::SpatialField;
use crate::location::Location;
use crate::scalar::FieldScalar;
use ndarray::{ArrayView3, ArrayViewMut3, ShapeBuilder, s};

fn shape(extent: [usize; 3]) -> ndarray::StrideShape<ndarray::Ix3> {
    (extent[0], extent[1], extent[2]).f().into()
}

impl<L: Location, T: FieldScalar> SpatialField<L, T> {
    /// The CPU data with ghosts. Needs a valid CPU location.
    ///
    /// ```
    /// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
    /// let grid = Grid::new([4, 3, 2], [1.0; 3], [0.0; 3])?;
    /// let field = SpatialField::<CellCentre>::new("f", &grid.whole_domain(1), Device::Cpu)?;
    /// assert_eq!(field.view()?.dim(), (6, 5, 4));
    /// assert_eq!(field.interior_view()?.dim(), (4, 3, 2));
    /// # Ok::<(), watershed_fields::FieldError>(())
    /// ```
    pub fn view(&self) -> FieldResult<ArrayView3<'_, T>> {
        let extent = self.layout().allocated_extent();
        let values = self.values()?;
        Ok(ArrayView3::from_shape(shape(extent), values)
            .expect("the storage length equals the allocated extent"))
    }

    /// The CPU data with ghosts, for writing. Needs the CPU location active;
    /// invalidates the others.
    pub fn view_mut(&mut self) -> FieldResult<ArrayViewMut3<'_, T>> {
        let extent = self.layout().allocated_extent();
        let values = self.values_mut()?;
        Ok(ArrayViewMut3::from_shape(shape(extent), values)
            .expect("the storage length equals the allocated extent"))
    }

    /// The interior points only (no ghosts).
    pub fn interior_view(&self) -> FieldResult<ArrayView3<'_, T>> {
        let (lo, hi) = self.interior_range();
        Ok(self
            .view()?
            .slice_move(s![lo[0]..hi[0], lo[1]..hi[1], lo[2]..hi[2]]))
    }

    /// The interior points only, for writing (invalidates other locations).
    pub fn interior_view_mut(&mut self) -> FieldResult<ArrayViewMut3<'_, T>> {
        let (lo, hi) = self.interior_range();
        Ok(self
            .view_mut()?
            .slice_move(s![lo[0]..hi[0], lo[1]..hi[1], lo[2]..hi[2]]))
    }

    fn interior_range(&self) -> ([usize; 3], [usize; 3]) {
        let layout = self.layout();
        let lo = layout.ghosts().minus;
        let n = layout.interior_extent();
        (lo, [0, 1, 2].map(|a| lo[a] + n[a]))
    }
}
