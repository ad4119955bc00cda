//! Reductions as graph nodes: a sum, minimum, maximum or sum of squares of
//! a language expression over the interior, written into a [`Parameter`]
//! that later nodes of the same execution read as an IR leaf (a CFL limit,
//! a normalisation, a norm the driver tests for convergence).
//!
//! A reduction is registered with [`Factory::register_reduction`] under the
//! tag that names its result. It joins a graph when that tag is a root or
//! when a node of the graph reads its parameter; every node reading the
//! parameter (in its expression, its fused modifiers or its boundary
//! values) runs after it. A parameter has at most one reduction writing it,
//! and a value that depends on itself (a node the reduction reads that
//! reads the reduction's parameter) is refused as a cycle.
//!
//! The reduction is checked and planned once ([`PreparedReduction`]); each
//! execution binds its fields and runs it with the node's thread pool. The
//! result is the same bit for bit whatever the thread count.
//!
//! [`Factory::register_reduction`]: crate::Factory::register_reduction

use crate::error::{GraphError, GraphResult};
use crate::expression::{
    EvaluationContext, Expression, ExpressionKind, LanguageExpression, Symbols,
    inputs_after_inlining, parameter_ids, used_inputs,
};
use crate::tag::Tag;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use watershed_fields::{FieldLayout, GpuStream, Location, LocationKind};
use watershed_operators::gpu_reduction::gpu_reduction;
use watershed_operators::ir::Node;
use watershed_operators::{
    BoundField, Expr, Parameter, PreparedReduction, ReduceRegion, Reduction,
};

/// `parameter = reduction of expression over the interior`, as a node of a
/// graph.
///
/// ```
/// use watershed_exprgraph::{ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, LanguageReduction, Tag};
/// use watershed_fields::{CellCentre, Grid, LocationKind};
/// use watershed_operators::{Parameter, Reduction, abs};
/// let (u, scaled, largest) = (Tag::none("u"), Tag::none("u scaled"), Tag::none("max |u|"));
/// let max_u = Parameter::new("max |u|", 0.0);
/// let mut factory = Factory::new();
/// factory.placeholder(u.clone(), LocationKind::CellCentre)?;
/// let t = u.clone();
/// factory.register_reduction(LanguageReduction::new::<CellCentre>(
///     largest.clone(), &max_u, Reduction::Max, move |s| abs(s.field(&t)),
/// ))?;
/// // A node reading the parameter runs after the reduction, in the same execution.
/// let (t, m) = (u.clone(), max_u.clone());
/// factory.register(LanguageExpression::new::<CellCentre>(scaled.clone(), move |s| {
///     s.field::<CellCentre>(&t) / m.expr()
/// }))?;
/// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let graph = ExpressionGraph::build(&factory, &[scaled.clone()], &patch, &GraphOptions::default())?;
/// graph.with_field_mut::<CellCentre, _>(&u, |f| f.fill(-4.0))??;
/// graph.execute(ExecutionMode::Serial)?;
/// assert_eq!(max_u.get(), 4.0);
/// let first = graph.with_field::<CellCentre, _>(&scaled, |f| f.values().map(|v| v[f.layout().linear_index([0, 0, 0])]))??;
/// assert_eq!(first, -1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LanguageReduction {
    result: Tag,
    parameter: Parameter,
    reduction: Reduction,
    location: LocationKind,
    root: Arc<Node>,
    inputs: Vec<Tag>,
    finish: Option<fn(f64) -> f64>,
    check_finite: bool,
    prepared: PreparedCache,
    /// The raw value of the last run (before `finish`), as bits: what a
    /// graph on one patch of several contributes to the whole domain's
    /// result ([`crate::patched::PatchedGraphs`]).
    last_raw: LastRaw,
}

/// The raw value a reduction last computed; a clone keeps it.
#[derive(Debug, Default)]
struct LastRaw(AtomicU64);

impl Clone for LastRaw {
    fn clone(&self) -> Self {
        LastRaw(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

/// The reduction as last run; a clone starts empty.
#[derive(Default)]
struct PreparedCache(Mutex<Option<PreparedReduction>>);

impl Clone for PreparedCache {
    fn clone(&self) -> Self {
        PreparedCache::default()
    }
}

impl std::fmt::Debug for PreparedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreparedCache")
    }
}

impl LanguageReduction {
    /// The node named by `result` that writes `reduction` of `build(symbols)`
    /// over the interior of `L` into `parameter` (for
    /// [`Reduction::SumOfSquares`], the sum of squares: see
    /// [`Self::finishing_with`]).
    pub fn new<L: Location>(
        result: Tag,
        parameter: &Parameter,
        reduction: Reduction,
        build: impl FnOnce(&mut Symbols) -> Expr<'static, L>,
    ) -> Self {
        let mut symbols = Symbols::default();
        let expr = build(&mut symbols);
        let root = expr.node().clone();
        Self::from_parts(
            result,
            parameter.clone(),
            reduction,
            L::KIND,
            root,
            symbols.into_used(),
        )
    }

    fn from_parts(
        result: Tag,
        parameter: Parameter,
        reduction: Reduction,
        location: LocationKind,
        root: Arc<Node>,
        candidates: Vec<Tag>,
    ) -> Self {
        let inputs = used_inputs(&root, candidates);
        LanguageReduction {
            result,
            parameter,
            reduction,
            location,
            root,
            inputs,
            finish: None,
            check_finite: false,
            prepared: PreparedCache::default(),
            last_raw: LastRaw::default(),
        }
    }

    /// This reduction writing `finish(raw)` instead of the raw result
    /// (`f64::sqrt` turns a sum of squares into the L2 norm).
    pub fn finishing_with(mut self, finish: fn(f64) -> f64) -> Self {
        self.finish = Some(finish);
        self
    }

    /// This reduction failing the execution with
    /// [`GraphError::ReductionNotFinite`] when its result is not finite, so
    /// a NaN never reaches the nodes that read it (every sum, minimum and
    /// maximum of values with a NaN is NaN).
    pub fn checking_finite(mut self) -> Self {
        self.check_finite = true;
        self
    }

    /// The tag naming the result (a root of a graph, never a field).
    pub fn result(&self) -> &Tag {
        &self.result
    }

    /// The parameter it writes.
    pub fn parameter(&self) -> &Parameter {
        &self.parameter
    }

    /// What it computes.
    pub fn reduction(&self) -> Reduction {
        self.reduction
    }

    /// The location whose interior it reduces over.
    pub fn location(&self) -> LocationKind {
        self.location
    }

    /// The IR of the reduced expression.
    pub fn root(&self) -> &Arc<Node> {
        &self.root
    }

    /// The tags read.
    pub fn requires_tags(&self) -> &[Tag] {
        &self.inputs
    }

    /// This reduction with `producer` inlined for its target's leaves
    /// (fusion: the producer's field is never materialised).
    pub(crate) fn fuse(&self, producer: &LanguageExpression) -> LanguageReduction {
        let root = self
            .root
            .substitute(producer.target().id(), producer.root());
        let candidates = inputs_after_inlining(&self.inputs, producer);
        let mut fused = Self::from_parts(
            self.result.clone(),
            self.parameter.clone(),
            self.reduction,
            self.location,
            root,
            candidates,
        );
        fused.finish = self.finish;
        fused.check_finite = self.check_finite;
        fused
    }

    /// Runs the prepared reduction (preparing it when `cache` is empty or
    /// the fields' layouts changed): the raw value.
    fn run(
        &self,
        cache: &mut Option<PreparedReduction>,
        bound: &[&dyn BoundField],
        context: &EvaluationContext<'_>,
    ) -> GraphResult<f64> {
        let parallelism = context.parallelism();
        let prepared = match cache {
            Some(prepared) => prepared,
            None => cache.insert(PreparedReduction::of_node(
                &self.root,
                self.location,
                bound,
                self.reduction,
                ReduceRegion::Interior,
                parallelism,
            )?),
        };
        Ok(prepared.run_with(bound, parallelism)?)
    }

    /// The raw value (before [`Self::finishing_with`]'s function) of the
    /// last run; 0 before the first.
    pub(crate) fn last_raw(&self) -> f64 {
        f64::from_bits(self.last_raw.0.load(Ordering::Relaxed))
    }

    /// Finishes `raw`, checks it when asked to, and writes the parameter.
    pub(crate) fn publish(&self, raw: f64) -> GraphResult<()> {
        self.last_raw.0.store(raw.to_bits(), Ordering::Relaxed);
        let value = self.finish.map_or(raw, |finish| finish(raw));
        if self.check_finite && !value.is_finite() {
            return Err(GraphError::ReductionNotFinite {
                reduction: self.name(),
                parameter: self.parameter.name().to_string(),
                value,
            });
        }
        self.parameter.set(value);
        Ok(())
    }

    /// Runs the reduction on the GPU of `stream` (its inputs valid there):
    /// launches the generated reduction kernel
    /// ([`watershed_operators::gpu_reduction`]), copies the row partials to
    /// the host, waits for them and folds them (the CPU's bits). The host
    /// blocks here: the nodes after it read the parameter when they are
    /// enqueued.
    pub(crate) fn evaluate_on_gpu(
        &self,
        context: &EvaluationContext<'_>,
        stream: &GpuStream,
    ) -> GraphResult<()> {
        let device = stream.device();
        let bindings = context.input_bindings()?;
        let bound: Vec<&dyn BoundField> = bindings.iter().map(|b| b as &dyn BoundField).collect();
        let launch = gpu_reduction(
            &self.root,
            self.location,
            &bound,
            self.reduction,
            ReduceRegion::Interior,
            device,
        )?;
        // SAFETY: the fields the kernel reads live in the graph's store
        // and are not written before this node returns (the plan orders
        // their writers after it, and `run_and_wait` waits for the stream).
        let value = unsafe { launch.run_and_wait(stream, &self.name())? };
        self.publish(value)
    }
}

impl Expression for LanguageReduction {
    fn name(&self) -> String {
        self.result.name.to_string()
    }

    fn computes(&self) -> Vec<(Tag, LocationKind)> {
        Vec::new()
    }

    fn requires(&self) -> Vec<Tag> {
        self.inputs.clone()
    }

    fn kind(&self) -> ExpressionKind {
        ExpressionKind::Reduction
    }

    fn kernels(&self, _layout: &FieldLayout) -> usize {
        1
    }

    fn parameters_read(&self, _layout: &FieldLayout) -> GraphResult<Vec<u64>> {
        Ok(parameter_ids(&self.root))
    }

    fn parameters_written(&self) -> Vec<u64> {
        vec![self.parameter.id()]
    }

    fn evaluate(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()> {
        let bindings = context.input_bindings()?;
        let bound: Vec<&dyn BoundField> = bindings.iter().map(|b| b as &dyn BoundField).collect();
        // The same node may run in two graphs at once: the second runs
        // unprepared.
        let value = match self.prepared.0.try_lock() {
            Ok(mut cache) => match self.run(&mut cache, &bound, context) {
                Ok(value) => value,
                Err(error) => {
                    *cache = None;
                    return Err(error);
                }
            },
            Err(_) => self.run(&mut None, &bound, context)?,
        };
        self.publish(value)
    }
}
