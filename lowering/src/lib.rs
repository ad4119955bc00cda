//! # watershed-lowering
//!
//! Device-neutral lowering of Watershed's IR ([`watershed_language::ir`]):
//! a tree becomes a fused row program ([`kernel::Kernel`], printable) of
//! linear forms, products and shared subexpressions, with the extents it
//! reads beyond the rows it writes (the analysis that ghost-width checks
//! use). [`cache`] lowers each structure once per grid spacing. Every back
//! end (`watershed-backends`: the row interpreter, generated C, CUDA C)
//! runs these programs; this crate imports none of them and keeps nothing
//! of theirs: each kernel has a process-wide identity
//! ([`kernel::Kernel::identity`]) by which the back ends key the forms they
//! compile.
//!
//! ```
//! use std::sync::Arc;
//! use watershed_fields::{CellCentre, Device, Grid, SpatialField};
//! use watershed_language::{field, laplacian};
//! use watershed_lowering::lower_cached;
//! let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])?;
//! let patch = grid.whole_domain(1);
//! let phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu)?;
//! let root = Arc::clone((laplacian(&phi) + field(&phi)).node());
//! let lowered = lower_cached(&root, &patch, true)?;
//! // One field slot (phi), read one point beyond the row along x and y
//! // (the 5-point Laplacian of a 2D grid) and not at all along z.
//! let phi_reads = &lowered.kernel.fields[0].extent;
//! assert_eq!((phi_reads.min, phi_reads.max), ([-1, -1, 0], [1, 1, 0]));
//! // The same structure is lowered once.
//! assert!(Arc::ptr_eq(&lowered.kernel, &lower_cached(&root, &patch, true)?.kernel));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod cache;
pub mod kernel;
pub mod lower;

pub use cache::{CacheStatistics, LoweredKernel, cache_statistics, lower_cached};

// The language's modules under their own names, so that paths in this
// crate read as they do in the facade (`crate::ir`, `crate::error`).
use watershed_language::{error, ir, mask, parameter, pointwise, stencil};
