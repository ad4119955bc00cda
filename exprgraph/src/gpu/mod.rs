//! The GPU part of the graph engine, in one place:
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`executor`] | the host side of a GPU plan: copies, events, waits, kernel launches, GPU scratch, finiteness watches |
//! | [`replay`] | a step on one GPU replayed as a CUDA graph, keyed by all it enqueues |
//! | [`timeline`] | when GPU kernels and copies ran on each stream, for the trace |
//!
//! The plan it carries out (devices per node, transfers, the stream
//! protocol as data) is [`crate::placement`]'s.

pub(crate) mod executor;
pub mod replay;
pub mod timeline;
