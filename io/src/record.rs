//! What a completed dump holds ([`DumpRecord`], [`DumpedField`],
//! [`DumpPiece`]): what [`crate::dumps`] and [`crate::rank_dumps`] write
//! and [`crate::xdmf`] lists.

use watershed_fields::{FieldLayout, GhostWidth, Grid, LocationKind, Patch};

/// One field written into a dump.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpedField {
    /// Dataset name.
    pub name: String,
    /// Staggered location.
    pub location: LocationKind,
    /// Stored points (x, y, z).
    pub extent: [usize; 3],
    /// Values per point: 1 for a scalar, 3 for a vector (a dataset of
    /// shape `(nz, ny, nx, 3)`).
    pub components: usize,
    /// For a field derived from the solution for viewing (not part of the
    /// state): how it was computed. Stored as the dataset's `derived`
    /// attribute and in the XDMF.
    pub derived: Option<String>,
}

/// One patch of a dump written per rank ([`crate::rank_dumps`]): where its
/// cells lie in the grid and which file and group hold them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpPiece {
    /// The rank's HDF5 file (in the output directory).
    pub file: String,
    /// The group holding the patch's fields in that file (`patch_<index>`).
    pub group: String,
    /// The patch's index in its layout.
    pub patch: usize,
    /// Its first cell in the whole grid (x, y, z).
    pub offset: [usize; 3],
    /// Its cells (x, y, z).
    pub cells: [usize; 3],
}

impl DumpPiece {
    /// The points a `location` field of this patch of `grid` stores: its
    /// cells, and at faces one more along the face axis where the patch
    /// ends on a side of the grid that is not periodic (the seam face
    /// between two patches is the plus-side patch's first, so the pieces
    /// of a face field do not overlap). `None` when the patch does not
    /// lie in `grid`.
    ///
    /// ```
    /// use watershed_fields::{Grid, LocationKind};
    /// use watershed_io::DumpPiece;
    /// let grid = Grid::new([8, 4, 1], [1.0; 3], [0.0; 3]).unwrap();
    /// let piece = |offset| DumpPiece {
    ///     file: "f.h5".into(),
    ///     group: "patch_00000".into(),
    ///     patch: 0,
    ///     offset,
    ///     cells: [4, 4, 1],
    /// };
    /// assert_eq!(piece([0, 0, 0]).extent(&grid, LocationKind::XFace), Some([4, 4, 1]));
    /// assert_eq!(piece([4, 0, 0]).extent(&grid, LocationKind::XFace), Some([5, 4, 1]));
    /// assert_eq!(piece([4, 0, 0]).extent(&grid, LocationKind::CellCentre), Some([4, 4, 1]));
    /// assert_eq!(piece([6, 0, 0]).extent(&grid, LocationKind::XFace), None);
    /// ```
    pub fn extent(&self, grid: &Grid, location: LocationKind) -> Option<[usize; 3]> {
        let patch = Patch::new(grid, self.offset, self.cells, GhostWidth::uniform(0)).ok()?;
        Some(FieldLayout::new(&patch, location).interior_extent())
    }
}

/// One completed dump.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpRecord {
    /// The HDF5 file's name (in the output directory).
    pub file: String,
    /// Simulated time.
    pub time: f64,
    /// Step.
    pub step: u64,
    /// Its fields (of a dump per rank: their extent is the whole grid's).
    pub fields: Vec<DumpedField>,
    /// Of a dump written per rank, its patches in patch order (each holds
    /// every field); empty when [`Self::file`] holds the whole domain.
    pub pieces: Vec<DumpPiece>,
}
