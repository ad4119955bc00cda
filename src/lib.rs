//! # watershed
//!
//! The umbrella crate of Watershed, a Rust engine for PDE/CFD field
//! computations in the style of ExprLib / SpatialOps-Nebo / Wasatch. It
//! re-exports the member crates, lowest layer first:
//!
//! | module | crate | what it holds |
//! | --- | --- | --- |
//! | [`fields`] | `watershed-fields` | grids, staggered locations, multi-device fields, pools, HDF5 I/O |
//! | [`operators`] | `watershed-operators` | the field-expression language |
//! | [`exprgraph`] | `watershed-exprgraph` | expressions, the DAG, fusion, memory plan, scheduler |
//! | [`solvers`] | `watershed-solvers` | time integration, transport equations, projection |
//! | [`io`] | `watershed-io` | a run's output: HDF5 dumps with their XDMF series, CSV, PNG charts |
//! | `cases` | `watershed-cases` | the case library behind the `watershed` program (feature `cases`) |
//!
//! Features (all on by default): `cuda` (GPU support, loaded at run time),
//! `hdf5-static` (HDF5 built from source; off, the system library),
//! `plot` (PNG charts and field images), `cases` (the case library).
//! `default-features = false` is the light build for your own programs.
//!
//! The cross-crate integration tests live in this package's `tests/`.
//!
//! ```
//! use watershed::fields::{CellCentre, Device, Grid, SpatialField};
//! let grid = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])?;
//! let field = SpatialField::<CellCentre>::new("phi", &grid.whole_domain(1), Device::Cpu)?;
//! assert_eq!(field.layout().allocated_extent(), [10, 10, 10]);
//! # Ok::<(), watershed::fields::FieldError>(())
//! ```

#[cfg(feature = "cases")]
pub use watershed_cases as cases;
pub use watershed_exprgraph as exprgraph;
pub use watershed_fields as fields;
pub use watershed_io as io;
pub use watershed_operators as operators;
pub use watershed_solvers as solvers;

/// The README's Rust examples, compiled and run as doc tests so that the
/// README stays true to the code.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeExamples;
