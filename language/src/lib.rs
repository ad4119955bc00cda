//! # watershed-language
//!
//! The field language of Watershed (its Nebo) as data: what a user writes
//! and what every later stage reads. Nothing here runs an expression;
//! lowering (`watershed-lowering`), the back ends (`watershed-backends`)
//! and assignment (`watershed-operators`, which re-exports this crate)
//! sit above it and this crate imports none of them.
//!
//! ```
//! use watershed_fields::{CellCentre, Device, Grid, SpatialField};
//! use watershed_language::{div, field, grad, interp};
//! let grid = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])?;
//! let patch = grid.whole_domain(1);
//! let phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu)?;
//! let gamma = SpatialField::<CellCentre>::new("gamma", &patch, Device::Cpu)?;
//! let rhs = -div(interp(&gamma) * grad(&phi)) + field(&phi);
//! // The typed expression carries its IR tree, printable and hashable.
//! assert!(rhs.node().to_string().contains("phi"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`pointwise`] | every pointwise op: name, CPU function, CUDA spelling; the limiters |
//! | [`stencil`] | every stencil: source and destination locations, points and weights |
//! | [`ir`] | the runtime IR |
//! | [`expr`] | the typed front end: [`Expr`], arithmetic, math functions, [`Condition`], [`cond`] |
//! | [`mask`] | point sets for conditions ([`Mask`], [`Side`]) |
//! | [`parameter`] | scalar parameters read by expressions ([`Parameter`]) |
//! | [`calculus`] | gradient, divergence, interpolants, Laplacian (second and fourth order), relabelling between locations, upwind, limited, shifts, restriction and prolongation between grids; [`FaceVector`] |
//! | [`vmath`] | the vectorisable `exp`, `log`, `sin`, `cos`, `tanh`, `pow` shared by the interpreter and the generated code |
//! | [`error`] | [`OperatorError`], the one error type of the stages up to assignment |
//!
//! Expressions are `f64`.

#![warn(missing_docs)]

pub mod calculus;
pub mod error;
pub mod expr;
pub mod ir;
pub mod mask;
pub mod parameter;
pub mod pointwise;
pub mod stencil;
pub mod vmath;

pub use calculus::{
    FaceLocation, FaceVector, derivative, div, divergence, divergence4, grad, gradient, gradient4,
    interp, interpolate_to_cell, interpolate_to_cell4, interpolate_to_face, interpolate_to_face4,
    laplacian, laplacian4, limited, prolongate, relabel, restrict, shift, upwind,
};
pub use error::{CompileFailure, OperatorError, OperatorResult};
pub use expr::{
    BoundField, CondChain, Condition, Expr, IntoExpr, abs, cond, coordinate, cos, exp, field, log,
    max, min, on, pow, sin, sqrt, tanh,
};
pub use mask::{Mask, PointSet, Side};
pub use parameter::Parameter;
pub use pointwise::{BinaryOp, Limiter, UnaryOp};
