//! # watershed-operators
//!
//! The field-expression language of Watershed (its Nebo). Users write the
//! mathematics of a PDE term once:
//!
//! ```
//! use watershed_fields::{CellCentre, Device, Grid, SpatialField};
//! use watershed_operators::{div, field, grad, interp, Assign};
//! let grid = Grid::new([16, 16, 16], [1.0; 3], [0.0; 3])?;
//! let patch = grid.whole_domain(1);
//! let phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu)?;
//! let gamma = SpatialField::<CellCentre>::new("gamma", &patch, Device::Cpu)?;
//! let src = SpatialField::<CellCentre>::new("src", &patch, Device::Cpu)?;
//! let mut rhs = SpatialField::<CellCentre>::new("rhs", &patch, Device::Cpu)?;
//! rhs.assign(-div(interp(&gamma) * grad(&phi)) + &src)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! and it runs as one fused pass over the target (no full-size
//! temporaries), on any number of threads with bitwise identical results.
//!
//! ## Stages (each printable)
//!
//! typed expression ([`Expr`], locations checked at compile time)
//! -> IR tree ([`ir::Node`], `Display`, structural hash)
//! -> row program ([`kernel::Kernel`], `Display`)
//! -> generated C, compiled at run time ([`codegen`], the default when a C
//! compiler exists) or the row interpreter ([`evaluate`]); CUDA C for GPUs.
//!
//! ## Crate layout
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`pointwise`] | every pointwise op: name, CPU function, CUDA spelling; the limiters |
//! | [`stencil`] | every stencil: source and destination locations, points and weights |
//! | [`ir`] | the runtime IR |
//! | [`expr`] | the typed front end: [`Expr`], arithmetic, math functions, [`Condition`], [`cond`] |
//! | [`mask`] | point sets for conditions ([`Mask`], [`Side`]) |
//! | [`parameter`] | scalar parameters read by expressions ([`Parameter`]) |
//! | [`calculus`] | gradient, divergence, interpolants, Laplacian, upwind, limited, shifts, restriction and prolongation between grids; [`FaceVector`] |
//! | [`kernel`] | lowering of the IR to a fused row program, with read extents |
//! | [`cache`] | the lowering cache: each structure lowered once per grid spacing |
//! | [`evaluate`] | the serial / rayon CPU evaluator (row interpreter) and reductions |
//! | [`codegen`] | C and CUDA C from the lowered kernels; run-time compilation, disk cache, NVRTC |
//! | [`vmath`] | the vectorisable `exp` shared by the interpreter and generated code |
//! | [`assign`] | [`Assign`], regions, ghost/aliasing/grid checks, reduction functions |
//! | [`prepared`] | [`PreparedAssignment`]: an assignment's checks and kernels found once, run many times |
//! | [`error`] | [`OperatorError`] |
//!
//! Expressions are `f64`.

#![warn(missing_docs)]

pub mod assign;
pub mod cache;
pub mod calculus;
pub mod codegen;
pub mod error;
pub mod evaluate;
pub mod expr;
pub mod gpu;
pub mod ir;
pub mod kernel;
pub mod mask;
pub mod parameter;
pub mod pointwise;
pub mod prepared;
pub mod prepared_reduction;
pub mod stencil;
pub mod vmath;

pub use assign::{
    Assign, AssignOptions, MaskedAssignment, NodeAssignment, ReduceRegion, Region, assign_node,
    assign_node_reading_target, assign_node_then, assign_nodes_then, field_max, field_min,
    interior_max, interior_min, interior_norm_l2, interior_sum, norm_l2, reduce,
    row_epilogue_count, sum, update, update_with,
};
pub use cache::{
    CacheStatistics, LoweredKernel, cache_statistics, lower_cached, lower_specialised,
};
pub use calculus::{
    FaceLocation, FaceVector, derivative, div, divergence, grad, gradient, interp,
    interpolate_to_cell, interpolate_to_face, laplacian, limited, prolongate, restrict, shift,
    upwind,
};
pub use codegen::Backend;
pub use error::{CompileFailure, OperatorError, OperatorResult};
pub use evaluate::{Parallelism, Reduction};
pub use expr::{
    BoundField, CondChain, Condition, Expr, IntoExpr, abs, cond, coordinate, cos, exp, field, log,
    max, min, on, pow, sin, sqrt, tanh,
};
pub use mask::{Mask, PointSet, Side};
pub use parameter::Parameter;
pub use pointwise::{BinaryOp, Limiter, UnaryOp};
pub use prepared::PreparedAssignment;
pub use prepared_reduction::PreparedReduction;
pub use watershed_fields as fields;
