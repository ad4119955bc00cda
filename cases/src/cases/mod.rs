//! The cases: each a module with its configuration, its simulation and its
//! check.

pub mod advection;
pub mod cavity;
pub mod channel;
pub mod cylinder;
pub mod heat;
pub mod reacting;
pub mod scalability;
pub mod taylor_green;
pub mod tgv_reference;
