//! # watershed-io
//!
//! A run's output, for the `watershed` program's cases and for any program
//! of your own:
//!
//! * [`dumps`]: one HDF5 file per dump, written atomically, and the XDMF
//!   time series beside them ([`DumpSeries`]), which ParaView opens with its
//!   default reader;
//! * [`rank_dumps`]: dumps written per rank, each rank's patches in a file
//!   of its own, shown by the XDMF as one dataset;
//! * [`xdmf`]: the layout of those XDMF documents;
//! * [`lock`]: one run per output folder (a lock file);
//! * [`csv`]: CSV tables and time series flushed as the run goes;
//! * [`plot`] (feature `plot`, on by default): PNG line charts and images
//!   of a field's slice, with an embedded font;
//! * [`attributes`], [`files`], [`dump_file`]: HDF5 attributes, files
//!   written whole or not at all, and one dump file's root attributes and
//!   datasets.
//!
//! `watershed_fields::io` writes and reads one field; this crate writes a
//! run's worth of them.
//!
//! ```
//! use watershed_fields::{CellCentre, Device, Grid, SpatialField, XFace};
//! use watershed_io::DumpSeries;
//! let grid = Grid::new([8, 8, 1], [1.0, 1.0, 0.125], [0.0; 3])?;
//! let patch = grid.whole_domain(1);
//! let mut temperature = SpatialField::<CellCentre>::new("T", &patch, Device::Cpu)?;
//! let u = SpatialField::<XFace>::new("u", &patch, Device::Cpu)?;
//! let folder = tempfile::tempdir()?;
//! let mut series = DumpSeries::create(folder.path(), "demo", &grid, false, None)?;
//! for step in 0..3u64 {
//!     temperature.fill(step as f64)?;
//!     series.write(0.1 * step as f64, step, &[("T", &temperature), ("u", &u)])?;
//! }
//! // demo_00000000.h5 ... demo_00000002.h5, demo.xmf (T) and demo_xface.xmf (u).
//! assert_eq!(series.dumps().len(), 3);
//! assert!(folder.path().join("demo_xface.xmf").exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod attributes;
pub mod csv;
pub mod dump_file;
pub mod dumps;
pub mod error;
pub mod files;
pub mod lock;
#[cfg(feature = "plot")]
pub mod plot;
pub mod rank_dumps;
pub mod record;
pub mod xdmf;

pub use dumps::{DumpPiece, DumpRecord, DumpSeries, DumpableField, DumpedField};
pub use error::{OutputError, OutputResult};
