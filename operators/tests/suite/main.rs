//! The integration tests of this crate that need no process of their own,
//! in one test binary (one build and one link instead of one per file:
//! the suite's build time). Each module is one former test file; a file
//! that needs a process of its own (a global allocator, GPU emulation
//! switched on by the environment, a build without default features)
//! stays beside this folder as its own binary.

#[path = "../common/mod.rs"]
mod common;

mod codegen;
mod compile_memo;
mod convergence;
mod derivative;
mod fourth_order;
mod gpu_launch_on_host;
mod gpu_points;
mod intergrid;
mod launch;
mod prepared;
mod prepared_reduction;
mod properties;
mod stencils_vs_reference;
mod structure;
mod trust;
mod vmath;
mod whole_step;
