//! # watershed-fields
//!
//! The bottom layer of Watershed: structured grids, staggered locations,
//! spatial fields that live on one or more devices, memory pools and HDF5
//! I/O. Everything above (the expression language, the graph, the solvers)
//! computes on [`SpatialField`]s.
//!
//! ## Crate layout
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`grid`] | [`Grid`] (the domain), [`Patch`] (a window with ghost layers), [`GhostWidth`] |
//! | [`location`] | zero-sized markers [`CellCentre`], [`XFace`], [`YFace`], [`ZFace`], [`LocationKind`] and [`on_face!`] |
//! | [`decomposition`] | [`PatchLayout`]: a grid's fixed decomposition into patches, their neighbours and the ranks that own them |
//! | [`halo`] | [`halo::exchange_with`]: the ghost points of a rank's patches from the patches owning them, in one process or across ranks; [`halo::exchange_ghosts`] for a slice of every patch's field |
//! | [`ranks`] | [`ranks::RankLink`]: how the ranks of a decomposed run swap values, [`ranks::SingleProcess`] for one process |
//! | `halo_mpi` (feature `mpi`) | `MpiLink`, a `RankLink` over an MPI communicator, and `exchange_ghosts_across` |
//! | [`side`] | [`Side`]: an axis and its minus or plus end |
//! | [`layout`] | [`FieldLayout`]: sizes per location, [`IndexBox`] loops over interior and ghosts |
//! | [`device`] | [`Device`]: CPU or GPU *k* |
//! | [`state`] | [`state::LocationTable`]: the valid / active rules of Table 2.1 of the thesis |
//! | [`field`] | [`SpatialField`]: memory and copies of each location, under those rules |
//! | [`external`] | [`ExternalBuffer`]: caller-owned storage, never freed by Watershed |
//! | [`pool`] | [`MemoryPool`]: per-device size-class pools with statistics and leak checks |
//! | [`gpu`] | the narrow device layer: CUDA detection, streams, events, device and pinned memory, copies (cargo feature `cuda`; without it every GPU request is a clear error; never panics without a GPU) |
//! | [`views`] | ndarray views of CPU data, with and without ghosts |
//! | [`hashing`] | the one fast hasher of the engine's in-memory maps and digests |
//! | [`io`] | HDF5 read and write of fields with their grid attributes |
//! | [`shared_object`] | the kernel caches' shared objects, installed with a checksum and verified before they are loaded |
//! | [`error`] | [`FieldError`], naming the field, device or file at fault |
//!
//! ## Example
//!
//! ```
//! use watershed_fields::{CellCentre, Device, Grid, SpatialField, XFace};
//! let grid = Grid::new([16, 16, 1], [1.0, 1.0, 1.0], [0.0; 3])?;
//! let patch = grid.whole_domain(1);
//! let mut phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu)?;
//! for index in phi.layout().interior() {
//!     let [x, y, _] = phi.layout().coordinate(index);
//!     let at = phi.layout().linear_index(index);
//!     phi.values_mut()?[at] = x * y;
//! }
//! let flux = SpatialField::<XFace>::new("flux", &patch, Device::Cpu)?;
//! assert_eq!(flux.layout().interior_extent(), [17, 16, 1]);
//! # Ok::<(), watershed_fields::FieldError>(())
//! ```

#![warn(missing_docs)]

pub mod decomposition;
pub mod device;
pub mod error;
pub mod external;
pub mod field;
pub mod gpu;
pub mod grid;
pub mod halo;
#[cfg(feature = "mpi")]
pub mod halo_mpi;
pub mod hashing;
pub mod host_memory;
pub mod io;
pub mod layout;
pub mod location;
pub mod pool;
pub mod ranks;
pub mod scalar;
pub mod shared_object;
pub mod side;
pub mod state;
pub mod views;

pub use decomposition::PatchLayout;
pub use device::Device;
pub use error::{FieldError, FieldResult};
pub use external::ExternalBuffer;
pub use field::{FieldBuilder, FieldInit, GpuBuffer, Lifetime, LocationState, SpatialField};
pub use gpu::{GpuCalls, GpuFunction, GpuMark, GpuStream, ValidationEvent, gpu_calls};
pub use grid::{GhostWidth, Grid, Patch};
pub use layout::{FieldLayout, IndexBox};
pub use location::{CellCentre, Location, LocationKind, XFace, YFace, ZFace};
pub use pool::{HostMemory, MemoryPool, PoolBlock, PoolStatistics};
pub use scalar::FieldScalar;
pub use side::Side;
