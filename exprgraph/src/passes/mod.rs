//! Transformations of a graph before it runs.
//!
//! * [`cse`]: hoists a costly subexpression that several language nodes
//!   compute into a node of its own (runs first);
//! * [`fusion`]: inlines a language node into its only consumer;
//! * [`horizontal`]: runs independent language nodes over the same box as
//!   one loop nest (after the extent analysis).

pub mod cse;
pub mod fusion;
pub mod horizontal;
