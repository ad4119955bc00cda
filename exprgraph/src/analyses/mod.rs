//! Analyses of a built graph: nothing here changes the graph.
//!
//! * [`critical_path`]: each node's longest path to a sink (measured node
//!   times when available), and the depth-first serial plan order;
//! * [`extents`]: the region every node computes and the ghost width every
//!   field needs, backwards from the roots;
//! * [`lifetimes`]: when each scratch field is allocated and released, the
//!   peaks with and without reuse, and the smallest workable budget.

pub mod critical_path;
pub mod extents;
pub mod lifetimes;
