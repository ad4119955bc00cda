//! # watershed-exprgraph
//!
//! The expression graph of Watershed (its ExprLib): tags and contexts,
//! expressions that advertise the fields they compute and require, the
//! factory and the DAG built from root tags, placement on CPU threads or CUDA
//! streams, fusion of fine-grained language nodes, the memory plan from field
//! lifetimes, and the scheduler with its Chrome-trace timeline.
//!
//! Not built yet: this crate is the place for the expression-graph issue. It
//! depends on [`watershed_fields`] and [`watershed_operators`].

pub use watershed_operators as operators;
