//! Transformations of a graph before it runs.
//!
//! * [`fusion`]: inlines a language node into its only consumer.

pub mod fusion;
