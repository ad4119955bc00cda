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
//! compiler exists) or the row interpreter ([`cpu`]); CUDA C for GPUs.
//!
//! ## Crates, by stage
//!
//! This crate is the facade users import; it re-exports the stages below
//! it under the module names they always had (`watershed_operators::ir`,
//! `watershed_operators::kernel`, ...). No stage imports a later one.
//!
//! | crate | modules | what it holds |
//! | --- | --- | --- |
//! | `watershed-language` | [`pointwise`], [`stencil`], [`ir`], [`expr`], [`mask`], [`parameter`], [`calculus`], [`vmath`], [`error`] | the language as data: typed front end, runtime IR, stencil tables, [`OperatorError`] |
//! | `watershed-lowering` | [`kernel`], [`cache`] | device-neutral lowering to fused row programs with read extents; each structure lowered once |
//! | `watershed-backends` | [`cpu`], [`vocabulary`], [`codegen`] | the row interpreter and its parallel executor; C and CUDA C from one kernel, run-time compilation, NVRTC |
//! | `watershed-operators` (this crate) | [`assign`], [`checks`], [`prepared`], [`prepared_reduction`], [`gpu`], [`gpu_points`], [`gpu_reduction`], `ghost_fill` | [`Assign`], regions, ghost/aliasing/grid checks, reductions; [`PreparedAssignment`] (targets of up to 256 Ki points run boundary-condition masked assignments as one ghost fill; larger ones run those with a copy or mirror shape as plain loops, in row epilogues and after the update); GPU launches of assignments and reductions; a GPU field's halo points gathered and scattered on its GPU |
//!
//! Expressions are `f64`.

#![warn(missing_docs)]

pub mod assign;
pub mod checks;
mod ghost_fill;
pub mod gpu;
pub mod gpu_points;
pub mod gpu_reduction;
pub mod prepared;
pub mod prepared_reduction;

pub use watershed_backends::{codegen, cpu, vocabulary};
pub use watershed_language::{
    calculus, error, expr, ir, mask, parameter, pointwise, stencil, vmath,
};
pub use watershed_lowering::{cache, kernel};

pub use assign::{
    Assign, NodeAssignment, assign_node, assign_node_reading_target, assign_node_then,
    assign_nodes_then, field_max, field_min, interior_max, interior_min, interior_norm_l2,
    interior_sum, norm_l2, reduce, row_epilogue_count, sum, update, update_with,
};
pub use cache::{CacheStatistics, LoweredKernel, cache_statistics, lower_cached};
pub use calculus::{
    FaceLocation, FaceVector, derivative, div, divergence, divergence4, grad, gradient, gradient4,
    interp, interpolate_to_cell, interpolate_to_cell4, interpolate_to_face, interpolate_to_face4,
    laplacian, laplacian4, limited, prolongate, relabel, restrict, shift, upwind,
};
pub use checks::{AssignOptions, MaskedAssignment, ReduceRegion, Region};
pub use codegen::Backend;
pub use cpu::Parallelism;
pub use error::{CompileFailure, OperatorError, OperatorResult};
pub use expr::{
    BoundField, CondChain, Condition, Expr, IntoExpr, abs, cond, coordinate, cos, exp, field, log,
    max, min, on, pow, sin, sqrt, tanh,
};
pub use mask::{Mask, PointSet, Side};
pub use parameter::Parameter;
pub use pointwise::{BinaryOp, Limiter, UnaryOp};
pub use prepared::PreparedAssignment;
pub use prepared_reduction::PreparedReduction;
pub use vocabulary::Reduction;
pub use watershed_fields as fields;
