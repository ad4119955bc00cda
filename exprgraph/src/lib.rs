//! # watershed-exprgraph
//!
//! The expression graph of Watershed (its ExprLib). Users register
//! expressions that compute fields (named by [`Tag`]s) from other fields; the
//! graph is built from root tags, fused, planned and executed many times.
//!
//! ```
//! use watershed_exprgraph::{ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag};
//! use watershed_fields::{CellCentre, Grid, LocationKind};
//! use watershed_operators::{div, grad, interp};
//!
//! let (phi, gamma, rhs) = (Tag::none("phi"), Tag::none("gamma"), Tag::none("rhs"));
//! let mut factory = Factory::new();
//! factory.placeholder(phi.clone(), LocationKind::CellCentre)?;
//! factory.placeholder(gamma.clone(), LocationKind::CellCentre)?;
//! let (p, g) = (phi.clone(), gamma.clone());
//! factory.register(LanguageExpression::new::<CellCentre>(rhs.clone(), move |s| {
//!     div(interp(s.field(&g)) * grad(s.field(&p)))
//! }))?;
//! let patch = Grid::new([16, 16, 16], [1.0; 3], [0.0; 3])?.whole_domain(1);
//! let graph = ExpressionGraph::build(&factory, &[rhs.clone()], &patch, &GraphOptions::default())?;
//! // Placeholders must be given values before the graph reads them.
//! graph.with_field_mut::<CellCentre, _>(&gamma, |f| f.fill(1.0))??;
//! graph.with_field_mut::<CellCentre, _>(&phi, |f| f.fill(0.5))??;
//! graph.execute(ExecutionMode::Threaded(2))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Crate layout
//!
//! Three layers: what a graph is made of, the plan built from it, and the
//! executor that runs a plan. Only the executor's modules import each
//! other in a circle (`scripts/import-circles.py exprgraph/src`).
//!
//! | layer | module | what it holds |
//! | --- | --- | --- |
//! | parts | [`tag`] | [`Tag`] and [`Context`] (STATE_N, STATE_NP1, STATE_NONE, ...) |
//! | parts | [`expression`] | the [`Expression`] trait (the node protocol), [`LanguageExpression`], [`LanguageModifier`], [`NativeExpression`] |
//! | parts | [`reduction`] | [`LanguageReduction`]: a reduction node writing a parameter that later nodes read |
//! | parts | [`group`] | [`HorizontalGroup`](group::HorizontalGroup): language nodes run side by side as one loop nest |
//! | parts | [`node`] | [`NodeForm`] (the form of a node's expression: language, modifier, reduction, group, native), the graph's nodes, fields and edges |
//! | parts | [`factory`] | [`Factory`]: builders by tag, placeholders, modifiers, reductions |
//! | parts | [`store`] | [`AnyField`] and the per-graph field store |
//! | parts | [`error`] | [`GraphError`] |
//! | plan | `collect` | the walk from the roots through the factory: missing producers, cycles |
//! | plan | [`passes`] | common subexpressions, fusion of language nodes, horizontal groups |
//! | plan | [`analyses`] | critical path and plan order; extents and ghosts; field lifetimes and the memory plan |
//! | plan | [`plan`] | [`GraphOptions`], [`GhostPolicy`] and the plan: nodes, edges, order, boxes, memory |
//! | plan | [`placement`] | device per node, copies between devices, the stream protocol as data ([`placement::policy`]: what users ask for) |
//! | plan | [`generated_source`] | the C or CUDA source of a graph's kernels, in execution order |
//! | executor | [`graph`] | [`ExpressionGraph`]: a plan, its placement and its execution state; field access, introspection |
//! | executor | `state` | the state of a graph's executions: field store and pool, statistics, versions, GPU streams and replay |
//! | executor | `placing`, `dot` | placing a built graph again; its Graphviz views |
//! | executor | [`overlap`] | which box of each node runs before an exchange of ghost layers ends (interior) and which after (rim), from a built graph's plan |
//! | executor | [`scheduler`] | execution: serial or threaded, memory budget, the node protocol; a split execution's two halves around an exchange (`scheduler/split.rs`) |
//! | executor | [`patched`] | [`PatchedGraphs`](patched::PatchedGraphs): one graph per patch a rank owns, seams of cell and face fields exchanged, whole fields gathered and put back |
//! | executor | [`adaptive`] | `ExecutionMode::Adaptive`: one thread timed against several, the faster kept |
//! | executor | [`gpu`] | the GPU executor, step replay as CUDA graphs, the GPU timeline |
//! | executor | [`trace`] | Chrome-trace timeline and the timing table |

#![warn(missing_docs)]

pub mod adaptive;
pub mod analyses;
mod collect;
mod dot;
pub mod error;
pub mod expression;
pub mod factory;
mod field_points;
pub mod generated_source;
pub mod gpu;
pub mod graph;
pub mod group;
pub mod node;
pub mod overlap;
pub mod passes;
pub mod patched;
pub mod placement;
mod placing;
pub mod plan;
pub mod reduction;
pub mod scheduler;
mod state;
pub mod store;
pub mod tag;
pub mod trace;

pub use error::{GraphError, GraphResult};
pub use expression::{
    EvaluationContext, Expression, ExpressionKind, LanguageExpression, LanguageModifier,
    MaskedAssignment, NativeExpression, Symbols,
};
pub use factory::Factory;
pub use gpu::executor::GpuScratch;
pub use gpu::replay::{ReplayStatistics, StepReplay};
pub use gpu::timeline::{GpuSpan, GpuWork};
pub use graph::ExpressionGraph;
pub use node::NodeForm;
pub use node::{FieldInfo, Target};
pub use placement::{CostModel, DevicePlan, MeasuredCost, PlacementPolicy, StreamMode, Transfer};
pub use plan::{GhostPolicy, GraphOptions};
pub use reduction::LanguageReduction;
pub use scheduler::{ExecutionMode, ExecutionReport, TraceEvent};
pub use store::{AnyField, GraphLocation};
pub use tag::{Context, Tag};
pub use trace::{ExpressionTiming, RecordedEvent, TimingTable, chrome_trace_of};
pub use watershed_operators as operators;
