//! What a completed dump holds ([`DumpRecord`], [`DumpedField`],
//! [`DumpPiece`]): what [`crate::dumps`] and [`crate::rank_dumps`] write
//! and [`crate::xdmf`] lists.

use watershed_fields::LocationKind;

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
