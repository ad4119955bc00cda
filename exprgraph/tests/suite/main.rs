//! The integration tests of this crate that need no process of their own,
//! in one test binary (one build and one link instead of one per file:
//! the suite's build time). Each module is one former test file; a file
//! that needs a process of its own (a global allocator, GPU emulation
//! switched on by the environment, a build without default features)
//! stays beside this folder as its own binary.

mod construction;
mod cse;
mod decomposed;
mod horizontal;
mod host_access;
mod overlap;
mod properties;
mod reductions;
mod trace;
mod trust;
