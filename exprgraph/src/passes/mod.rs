//! Transformations of a graph before it runs.
//!
//! * [`cse`]: hoists a costly subexpression that several language nodes
//!   compute into a node of its own (runs first);
//! * [`fusion`]: inlines a language node into its only consumer.

pub mod cse;
pub mod fusion;
