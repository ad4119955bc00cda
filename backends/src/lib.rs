//! # watershed-backends
//!
//! The back ends that run lowered kernels ([`watershed_lowering::kernel`]):
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`cpu`] | the serial / rayon CPU executor: blocks, strips, reductions, and the row interpreter (the reference every other back end is checked against) |
//! | [`vocabulary`] | what the CPU executor and the code generator share: the tile, field views, reduction kinds |
//! | [`codegen`] | C and CUDA C emitted from one kernel; run-time C compilation with a disk cache; NVRTC to PTX; launch shapes and argument blocks |
//! | [`fill`] | plain loops for masked assignments that copy or mirror their target's points (boundary conditions), run as row epilogues and ghost fills |
//!
//! Assignment (`watershed-operators`) chooses a back end per call and
//! does the checks; this crate trusts its callers to have done them (the
//! invariants are in `cpu/design.md` beside the executor).
//!
//! ```
//! use watershed_backends::codegen::Backend;
//! // The default: generated C when a C compiler exists, else the interpreter.
//! let resolved = Backend::Default.resolved()?;
//! assert!(resolved == Backend::C || resolved == Backend::Interpreter);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod codegen;
pub mod cpu;
pub mod fill;
pub mod vocabulary;

pub use codegen::Backend;
pub use cpu::Parallelism;
pub use vocabulary::Reduction;

// The lower stages' modules under their own names, so that paths in this
// crate read as they do in the facade (`crate::kernel`, `crate::ir`).
use watershed_language::{error, ir, mask, pointwise, stencil, vmath};
use watershed_lowering::{cache, kernel};
