//! The integration tests of this crate that need no process of their own,
//! in one test binary (one build and one link instead of one per file:
//! the suite's build time). Each module is one former test file; a file
//! that needs a process of its own (a global allocator, GPU emulation
//! switched on by the environment, a build without default features)
//! stays beside this folder as its own binary.

mod boundary_expressions;
mod channel;
mod energy_conserving_flow;
mod fused_boundaries;
mod immersed_couette;
mod immersed_force;
mod lid_driven_cavity;
mod patched;
mod patched_flow;
/// The flows on patches that `patched_flow` and `patched_flow_state`
/// compare with the whole domain.
#[path = "../support/patched_flow_case.rs"]
mod patched_flow_case;
mod patched_flow_state;
mod patched_multigrid;
mod restart_api;
mod scalar_conservation;
mod taylor_green;
mod transport_terms;
mod trust;
mod verification;
