//! # watershed-solvers
//!
//! The solvers of Watershed (its Wasatch): explicit time integrators (forward
//! Euler, SSP-RK2, SSP-RK3) driven through the graph, the transport-equation
//! builder, boundary conditions as modifiers, and incompressible flow with a
//! multigrid pressure projection.
//!
//! Not built yet: this crate is the place for the solvers issue. It depends
//! on the three crates below it.

pub use watershed_exprgraph as exprgraph;
