//! What a completed dump holds ([`DumpRecord`], [`DumpedField`]): what
//! [`crate::dumps`] writes and [`crate::xdmf`] lists.

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

/// One completed dump.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpRecord {
    /// The HDF5 file's name (in the output directory).
    pub file: String,
    /// Simulated time.
    pub time: f64,
    /// Step.
    pub step: u64,
    /// Its fields.
    pub fields: Vec<DumpedField>,
}
