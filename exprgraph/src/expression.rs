//! Expressions: the nodes of a graph. Each computes one or more fields and
//! requires others.
//!
//! Kinds ([`ExpressionKind`]):
//! * [`LanguageExpression`]: an assignment written in the field-expression
//!   language over fields named by tags. It can run on any device and can be
//!   fused with its consumer (its IR is inlined there).
//! * [`NativeExpression`]: arbitrary Rust code over CPU fields. CPU only.
//! * reductions ([`crate::LanguageReduction`]), which run wherever their
//!   kernel can, and iterative solves (a loop over language kernels, such
//!   as a pressure projection's Poisson solve), which run on a GPU when
//!   they say so ([`Expression::gpu_support`]).
//!
//! During evaluation an expression sees exactly the fields it declared,
//! through an [`EvaluationContext`]: inputs read-only, outputs writable.

use crate::error::{GraphError, GraphResult};
use crate::store::{AnyField, GraphLocation};
use crate::tag::Tag;
use std::sync::{Arc, Mutex, RwLockReadGuard, RwLockWriteGuard};
use watershed_fields::{
    Device, FieldLayout, FieldResult, GpuBuffer, IndexBox, Location, LocationKind, SpatialField,
};
use watershed_operators::ir::Node;
use watershed_operators::{
    AssignOptions, BoundField, Expr, Parallelism, Parameter, PreparedAssignment, Region,
    assign_node_then, row_epilogue_count,
};

/// The kinds of expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpressionKind {
    /// Written in the field-expression language: any device, fusable.
    Language,
    /// Hand-written Rust over CPU fields.
    Native,
    /// A reduction written in the language, whose scalar result goes to a
    /// parameter ([`crate::LanguageReduction`]); on a GPU the host waits
    /// for its value.
    Reduction,
    /// An iterative solve: a loop, controlled by Rust code that tests a
    /// convergence criterion, over prepared language kernels and
    /// reductions (e.g. the multigrid-preconditioned CG of a pressure
    /// projection). Not fusable; runs on the CPU, or on a GPU where the
    /// node says it can ([`Expression::gpu_support`]): its kernels are
    /// then enqueued on the node's stream and the host waits only for
    /// the reductions that steer the loop.
    IterativeSolve,
}

/// A node of the graph.
pub trait Expression: Send + Sync {
    /// A short name for messages, traces and DOT output.
    fn name(&self) -> String;
    /// The fields it computes, with their locations.
    fn computes(&self) -> Vec<(Tag, LocationKind)>;
    /// The fields it reads.
    fn requires(&self) -> Vec<Tag>;
    /// Language or native.
    fn kind(&self) -> ExpressionKind;
    /// The ids of the parameters it reads when its output has `layout`
    /// (its expression's leaves and its boundary values'): it runs after
    /// the graph's reduction writing any of them. Code the graph cannot see
    /// into declares none, unless it says so: a [`NativeExpression`] that
    /// reads a reduction's parameter declares it with
    /// [`NativeExpression::reading`].
    fn parameters_read(&self, layout: &FieldLayout) -> GraphResult<Vec<u64>> {
        let _ = layout;
        Ok(Vec::new())
    }
    /// The ids of the parameters it writes (a reduction's result).
    fn parameters_written(&self) -> Vec<u64> {
        Vec::new()
    }
    /// The kernels one execution runs when its output has `layout`: 1 for
    /// a language expression (plus the masked assignments of modifiers
    /// fused into it that do not run as row epilogues), one per masked
    /// assignment for a language modifier, 0 for native code (which runs no
    /// kernel of the language).
    fn kernels(&self, layout: &FieldLayout) -> usize {
        let _ = layout;
        usize::from(self.kind() == ExpressionKind::Language)
    }
    /// Computes the outputs from the inputs.
    fn evaluate(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()>;
    /// For a node not written in the expression language (native code, an
    /// iterative solve): whether it can run on GPU `ordinal` through
    /// [`Self::evaluate_on_gpu`], or why not. Language nodes, modifiers,
    /// groups and reductions are judged by their kernels instead, and this
    /// is not asked of them. The default: CPU only.
    fn gpu_support(&self, ordinal: usize) -> Result<(), String> {
        let _ = ordinal;
        Err(match self.kind() {
            ExpressionKind::IterativeSolve => {
                "it is an iterative solve that cannot run its loop on a GPU; it runs on the CPU"
            }
            _ => {
                "it is native Rust code, which runs on the CPU only; write it in the expression language to run it on a GPU"
            }
        }
        .into())
    }
    /// Runs a node that [`Self::gpu_support`] accepts on the GPU of
    /// `stream`: its inputs are valid there and its outputs active there
    /// when this is called. It enqueues its work on `stream` (the host may
    /// wait inside, e.g. for a reduction's value) and may return before
    /// the stream finishes: the graph orders every reader of its outputs
    /// after the stream's work. The default refuses.
    fn evaluate_on_gpu(
        &self,
        context: &mut EvaluationContext<'_>,
        stream: &watershed_fields::GpuStream,
    ) -> GraphResult<()> {
        let _ = context;
        Err(GraphError::NotPlaceable {
            node: self.name(),
            device: stream.device(),
            reason: self
                .gpu_support(stream.device().gpu_ordinal().unwrap_or(0))
                .err()
                .unwrap_or_else(|| "it implements no GPU evaluation".into()),
        })
    }
}

/// Every output of an expression with its field (`None` when unallocated).
pub(crate) type OutputFields<'a> = Vec<(&'a Tag, Option<&'a mut AnyField>)>;

/// The fields one expression may touch while it runs.
pub struct EvaluationContext<'g> {
    pub(crate) expression: &'g str,
    pub(crate) inputs: Vec<(&'g Tag, RwLockReadGuard<'g, Option<AnyField>>)>,
    pub(crate) outputs: Vec<(&'g Tag, RwLockWriteGuard<'g, Option<AnyField>>)>,
    pub(crate) parallelism: Parallelism,
    pub(crate) region: Option<IndexBox>,
}

impl EvaluationContext<'_> {
    /// How data-parallel loops inside the expression should use threads
    /// (the scheduler's pool: nested parallelism without oversubscription).
    pub fn parallelism(&self) -> Parallelism {
        self.parallelism
    }

    /// The box of its output the graph's extent analysis asks this
    /// expression to compute (`None` for native expressions: they compute
    /// what their code computes, at least the interior).
    pub fn region(&self) -> Option<IndexBox> {
        self.region
    }

    /// Every input bound under its tag's id (for IR leaves built from
    /// tags), and every output with its field (`None` when unallocated).
    pub(crate) fn split_for_group(
        &mut self,
    ) -> GraphResult<(Vec<TagBinding<'_>>, OutputFields<'_>)> {
        let bindings = bind_inputs(self.expression, &self.inputs)?;
        let outputs = self
            .outputs
            .iter_mut()
            .map(|(tag, guard)| (*tag, guard.as_mut()))
            .collect();
        Ok((bindings, outputs))
    }

    /// Every input bound under its tag's id (for IR leaves built from
    /// tags).
    pub(crate) fn input_bindings(&self) -> GraphResult<Vec<TagBinding<'_>>> {
        bind_inputs(self.expression, &self.inputs)
    }

    /// An input field.
    pub fn input_any(&self, tag: &Tag) -> GraphResult<&AnyField> {
        find_input(self.expression, &self.inputs, tag)
    }

    /// An input field of location `L`.
    pub fn input<L: GraphLocation>(&self, tag: &Tag) -> GraphResult<&SpatialField<L>> {
        at_location(tag, self.input_any(tag)?)
    }

    /// An input field of location `I` and an output field of location `O`
    /// at once (an expression reading one field while it writes another,
    /// such as a solve reading its right-hand side and writing its
    /// solution).
    pub fn input_and_output<I: GraphLocation, O: GraphLocation>(
        &mut self,
        input: &Tag,
        output: &Tag,
    ) -> GraphResult<(&SpatialField<I>, &mut SpatialField<O>)> {
        let read = at_location(input, find_input(self.expression, &self.inputs, input)?)?;
        let written = find_output(self.expression, &mut self.outputs, output)?;
        Ok((read, at_location_mut(output, written)?))
    }

    /// An output field.
    pub fn output_any(&mut self, tag: &Tag) -> GraphResult<&mut AnyField> {
        find_output(self.expression, &mut self.outputs, tag)
    }

    /// An output field of location `L`.
    pub fn output<L: GraphLocation>(&mut self, tag: &Tag) -> GraphResult<&mut SpatialField<L>> {
        at_location_mut(tag, self.output_any(tag)?)
    }
}

/// The error for `tag` not being available to `expression`.
fn unavailable(expression: &str, tag: &Tag, reason: &str) -> GraphError {
    GraphError::FieldUnavailable {
        tag: tag.clone(),
        expression: expression.to_string(),
        reason: reason.to_string(),
    }
}

/// The input `tag` among `inputs` of `expression`.
fn find_input<'a>(
    expression: &str,
    inputs: &'a [(&Tag, RwLockReadGuard<'_, Option<AnyField>>)],
    tag: &Tag,
) -> GraphResult<&'a AnyField> {
    let (_, guard) = inputs.iter().find(|(t, _)| *t == tag).ok_or_else(|| {
        unavailable(
            expression,
            tag,
            "it is not among the fields the expression requires",
        )
    })?;
    guard
        .as_ref()
        .ok_or_else(|| unavailable(expression, tag, "it has not been allocated"))
}

/// The output `tag` among `outputs` of `expression`.
fn find_output<'a>(
    expression: &str,
    outputs: &'a mut [(&Tag, RwLockWriteGuard<'_, Option<AnyField>>)],
    tag: &Tag,
) -> GraphResult<&'a mut AnyField> {
    let (_, guard) = outputs.iter_mut().find(|(t, _)| *t == tag).ok_or_else(|| {
        unavailable(
            expression,
            tag,
            "it is not among the fields the expression computes",
        )
    })?;
    guard
        .as_mut()
        .ok_or_else(|| unavailable(expression, tag, "it has not been allocated"))
}

/// `field` (named by `tag`) as a field of location `L`.
fn at_location<'a, L: GraphLocation>(
    tag: &Tag,
    field: &'a AnyField,
) -> GraphResult<&'a SpatialField<L>> {
    L::get(field).ok_or_else(|| GraphError::WrongLocation {
        tag: tag.clone(),
        actual: field.kind(),
        requested: L::KIND,
    })
}

/// `field` (named by `tag`) as a field of location `L`, mutably.
fn at_location_mut<'a, L: GraphLocation>(
    tag: &Tag,
    field: &'a mut AnyField,
) -> GraphResult<&'a mut SpatialField<L>> {
    let actual = field.kind();
    L::get_mut(field).ok_or_else(|| GraphError::WrongLocation {
        tag: tag.clone(),
        actual,
        requested: L::KIND,
    })
}

/// The ids of the parameters `root` reads.
pub(crate) fn parameter_ids(root: &Node) -> Vec<u64> {
    root.parameters().iter().map(|p| p.id()).collect()
}

/// Every input of `expression` bound under its tag's id (for IR leaves
/// built from tags); an unallocated one is an error naming it.
fn bind_inputs<'a>(
    expression: &str,
    inputs: &'a [(&Tag, RwLockReadGuard<'_, Option<AnyField>>)],
) -> GraphResult<Vec<TagBinding<'a>>> {
    let mut bindings = Vec::with_capacity(inputs.len());
    for (tag, guard) in inputs {
        let field = guard.as_ref().ok_or_else(|| GraphError::FieldUnavailable {
            tag: (*tag).clone(),
            expression: expression.to_string(),
            reason: "it has not been allocated".to_string(),
        })?;
        bindings.push(TagBinding {
            id: tag.id(),
            field: field.as_bound(),
        });
    }
    Ok(bindings)
}

/// The `candidates` that `root` reads (tags of its field leaves), in order.
pub(crate) fn used_inputs(root: &Node, candidates: Vec<Tag>) -> Vec<Tag> {
    let ids: Vec<u64> = root.fields().iter().map(|(id, _, _)| *id).collect();
    candidates
        .into_iter()
        .filter(|t| ids.contains(&t.id()))
        .collect()
}

/// The tags a node reading `inputs` may read once `producer` is inlined
/// into it: its own except the producer's target, then the producer's.
pub(crate) fn inputs_after_inlining(inputs: &[Tag], producer: &LanguageExpression) -> Vec<Tag> {
    let mut candidates: Vec<Tag> = inputs
        .iter()
        .filter(|t| **t != producer.target)
        .cloned()
        .collect();
    for tag in &producer.inputs {
        if !candidates.contains(tag) {
            candidates.push(tag.clone());
        }
    }
    candidates
}

/// A field bound under its tag's id, so IR leaves built from tags find it.
pub(crate) struct TagBinding<'a> {
    id: u64,
    field: &'a dyn BoundField,
}

impl BoundField for TagBinding<'_> {
    fn id(&self) -> u64 {
        self.id
    }
    fn name(&self) -> &str {
        self.field.name()
    }
    fn layout(&self) -> &FieldLayout {
        self.field.layout()
    }
    fn cpu_values(&self) -> FieldResult<&[f64]> {
        self.field.cpu_values()
    }
    fn gpu_buffer(&self, device: Device) -> FieldResult<GpuBuffer> {
        self.field.gpu_buffer(device)
    }
}

/// Hands out expression leaves for tags while a [`LanguageExpression`] is built.
#[derive(Debug, Default)]
pub struct Symbols {
    used: Vec<Tag>,
}

impl Symbols {
    /// The tags handed out, in first-use order.
    pub(crate) fn into_used(self) -> Vec<Tag> {
        self.used
    }

    /// The field named `tag`, of location `L`, as an expression leaf.
    pub fn field<L: Location>(&mut self, tag: &Tag) -> Expr<'static, L> {
        if !self.used.contains(tag) {
            self.used.push(tag.clone());
        }
        Expr::symbol(tag.id(), &tag.name)
    }
}

/// An assignment `target <<= expression` over fields named by tags.
///
/// ```
/// use watershed_exprgraph::{LanguageExpression, Tag};
/// use watershed_fields::CellCentre;
/// use watershed_operators::{div, grad, interp};
/// let (rhs, gamma, phi) = (Tag::none("rhs"), Tag::none("gamma"), Tag::none("phi"));
/// let expression = LanguageExpression::new::<CellCentre>(rhs, |s| {
///     -div(interp(s.field(&gamma)) * grad(s.field(&phi)))
/// });
/// assert_eq!(expression.requires_tags().len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct LanguageExpression {
    target: Tag,
    location: LocationKind,
    root: Arc<Node>,
    inputs: Vec<Tag>,
    check_finite: bool,
    /// Modifiers of the target fused into this node: run right after the
    /// assignment, their row-local parts as row epilogues.
    then: Vec<LanguageModifier>,
    /// The assignment as last run, checked and lowered
    /// ([`PreparedAssignment`]): a graph runs the same node every
    /// execution, so each run after the first only binds its fields.
    prepared: PreparedCache<PreparedRun>,
    /// The assignments of a split execution ([`Self::evaluate_boxes`]):
    /// one per box and per fused modifier's masked assignment, each keyed
    /// by what it runs (0: the node's own value, `1 + k`: the `k`-th
    /// masked assignment).
    split: PreparedCache<Vec<(usize, PreparedRun)>>,
}

/// One assignment of a split node's half ([`LanguageExpression::evaluate_boxes`]):
/// its key in the node's split cache, its value, the fields it reads and
/// its options (the box among them).
type BoxRun<'n, 'f> = (
    usize,
    &'n Arc<Node>,
    &'n [&'f dyn BoundField],
    AssignOptions,
);

/// The prepared assignments of a language node as last run (`T`: a
/// [`PreparedRun`] or a [`ModifierRun`]). A clone starts empty: a cloned
/// expression may get other modifiers, and a node running in two graphs
/// at once must not wait for the other's lock.
struct PreparedCache<T>(Mutex<Option<T>>);

impl<T> Default for PreparedCache<T> {
    fn default() -> Self {
        PreparedCache(Mutex::new(None))
    }
}

/// The prepared assignment of a [`LanguageExpression`], with the options
/// and target layout it was prepared for (the fused modifiers' masked
/// assignments depend on the layout).
struct PreparedRun {
    options: AssignOptions,
    layout: FieldLayout,
    assignment: PreparedAssignment,
}

impl<T> Clone for PreparedCache<T> {
    fn clone(&self) -> Self {
        PreparedCache::default()
    }
}

impl<T> std::fmt::Debug for PreparedCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreparedCache")
    }
}

impl LanguageExpression {
    /// Runs the node's assignment into `target` through its prepared form,
    /// preparing it first when the options or the target's layout differ
    /// from the last run.
    fn run_prepared<L: Location>(
        &self,
        cache: &mut Option<PreparedRun>,
        target: &mut SpatialField<L>,
        bound: &[&dyn BoundField],
        options: AssignOptions,
    ) -> GraphResult<()> {
        let layout = target.layout();
        let reusable = cache
            .as_ref()
            .is_some_and(|run| run.options == options && &run.layout == layout);
        if !reusable {
            let then = self.fused_assignments(layout)?;
            let assignment = PreparedAssignment::new(
                target,
                self.target.id(),
                &self.root,
                bound,
                options,
                &then,
            )?;
            *cache = Some(PreparedRun {
                options,
                layout: layout.clone(),
                assignment,
            });
        }
        if let Some(run) = cache.as_mut() {
            run.assignment.run(target, bound)?;
        }
        Ok(())
    }
}

impl LanguageExpression {
    /// Runs the node over each of `boxes` only (boxes of its region, from
    /// an [`crate::overlap::OverlapPlan`]), without its fused modifiers;
    /// with `then_modifiers`, runs the fused modifiers' masked assignments
    /// after the boxes, in their order (the last half of a split node:
    /// every point of its region is then computed). Each point gets the
    /// value [`Expression::evaluate`] gives it.
    pub(crate) fn evaluate_boxes(
        &self,
        context: &mut EvaluationContext<'_>,
        boxes: &[IndexBox],
        then_modifiers: bool,
    ) -> GraphResult<()> {
        let expression = context.expression;
        let bindings = bind_inputs(expression, &context.inputs)?;
        let bound: Vec<&dyn BoundField> = bindings.iter().map(|b| b as &dyn BoundField).collect();
        let parallelism = context.parallelism;
        let (_, guard) = context
            .outputs
            .iter_mut()
            .find(|(t, _)| **t == self.target)
            .ok_or_else(|| GraphError::FieldUnavailable {
                tag: self.target.clone(),
                expression: expression.to_string(),
                reason: "it is not among the outputs".into(),
            })?;
        let target = guard.as_mut().ok_or_else(|| GraphError::FieldUnavailable {
            tag: self.target.clone(),
            expression: expression.to_string(),
            reason: "it has not been allocated".into(),
        })?;
        match target {
            AnyField::Cell(f) => self.run_boxes(f, &bound, boxes, parallelism, then_modifiers),
            AnyField::XFace(f) => self.run_boxes(f, &bound, boxes, parallelism, then_modifiers),
            AnyField::YFace(f) => self.run_boxes(f, &bound, boxes, parallelism, then_modifiers),
            AnyField::ZFace(f) => self.run_boxes(f, &bound, boxes, parallelism, then_modifiers),
        }
    }

    /// [`Self::evaluate_boxes`] on a target of location `L`, through the
    /// prepared assignments kept in `split` (prepared on first use).
    fn run_boxes<L: Location>(
        &self,
        target: &mut SpatialField<L>,
        bound: &[&dyn BoundField],
        boxes: &[IndexBox],
        parallelism: Parallelism,
        then_modifiers: bool,
    ) -> GraphResult<()> {
        let layout = target.layout().clone();
        let masked = if then_modifiers {
            self.fused_assignments(&layout)?
        } else {
            Vec::new()
        };
        let options = |region: &IndexBox, check_finite: bool| AssignOptions {
            region: Region::Box(*region),
            parallelism,
            check_finite,
            ..Default::default()
        };
        let mut runs: Vec<BoxRun<'_, '_>> = boxes
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| (0, &self.root, bound, options(b, self.check_finite)))
            .collect();
        for (k, (mask, root)) in masked.iter().enumerate() {
            runs.push((1 + k, root, &[], options(mask, false)));
        }
        // The same node may run in two graphs at once: the second prepares
        // copies of its own.
        let mut guard = self.split.0.try_lock().ok();
        let mut own = None;
        let kept: &mut Option<Vec<(usize, PreparedRun)>> = match guard.as_deref_mut() {
            Some(kept) => kept,
            None => &mut own,
        };
        let kept = kept.get_or_insert_with(Vec::new);
        for (key, root, fields, options) in runs {
            let found = kept
                .iter()
                .position(|(k, run)| *k == key && run.options == options && run.layout == layout);
            let index = match found {
                Some(index) => index,
                None => {
                    let assignment = PreparedAssignment::new(
                        target,
                        self.target.id(),
                        root,
                        fields,
                        options,
                        &[],
                    )?;
                    kept.push((
                        key,
                        PreparedRun {
                            options,
                            layout: layout.clone(),
                            assignment,
                        },
                    ));
                    kept.len() - 1
                }
            };
            kept[index].1.assignment.run(target, fields)?;
        }
        Ok(())
    }

    /// `target = build(symbols)`, where `build` names its input fields with
    /// [`Symbols::field`].
    pub fn new<L: Location>(
        target: Tag,
        build: impl FnOnce(&mut Symbols) -> Expr<'static, L>,
    ) -> Self {
        let mut symbols = Symbols::default();
        let expr = build(&mut symbols);
        let root = expr.node().clone();
        Self::from_parts(target, L::KIND, root, symbols.used)
    }

    fn from_parts(
        target: Tag,
        location: LocationKind,
        root: Arc<Node>,
        candidates: Vec<Tag>,
    ) -> Self {
        let inputs = used_inputs(&root, candidates);
        LanguageExpression {
            target,
            location,
            root,
            inputs,
            check_finite: false,
            then: Vec::new(),
            prepared: PreparedCache::default(),
            split: PreparedCache::default(),
        }
    }

    /// This expression, checking every value it writes: a value that is not
    /// finite fails the execution with
    /// [`OperatorError::NotFinite`](watershed_operators::OperatorError::NotFinite),
    /// naming the target and the first such point. The scan runs on each
    /// block right after it is computed, so it costs far less than a
    /// separate pass (solvers use it on their stage updates).
    pub fn checking_finite(mut self) -> Self {
        self.check_finite = true;
        self
    }

    /// True when the values written are checked ([`Self::checking_finite`]).
    pub fn checks_finite(&self) -> bool {
        self.check_finite
    }

    /// The tag assigned.
    pub fn target(&self) -> &Tag {
        &self.target
    }

    /// The location of the target.
    pub fn location(&self) -> LocationKind {
        self.location
    }

    /// The IR of the right-hand side.
    pub fn root(&self) -> &Arc<Node> {
        &self.root
    }

    /// The tags read.
    pub fn requires_tags(&self) -> &[Tag] {
        &self.inputs
    }

    /// This expression with `producer` inlined for its target's leaves: the
    /// fused node computes the same values without materialising the
    /// producer's field.
    pub fn fuse(&self, producer: &LanguageExpression) -> LanguageExpression {
        let root = self.root.substitute(producer.target.id(), &producer.root);
        let candidates = inputs_after_inlining(&self.inputs, producer);
        let mut fused = Self::from_parts(self.target.clone(), self.location, root, candidates);
        fused.check_finite = self.check_finite;
        fused.then = self.then.clone();
        fused
    }

    /// This expression reading field `tag` (whose leaf is `leaf`) wherever
    /// its tree contains `subtree`: common-subexpression elimination hoists
    /// `subtree` into a node computing `tag`.
    pub(crate) fn with_subtree_read_from(
        &self,
        subtree: &Node,
        leaf: &Arc<Node>,
        tag: &Tag,
    ) -> LanguageExpression {
        let root = self.root.replace_subtree(subtree, leaf);
        let mut candidates = self.inputs.clone();
        candidates.push(tag.clone());
        let mut rewritten = Self::from_parts(self.target.clone(), self.location, root, candidates);
        rewritten.check_finite = self.check_finite;
        rewritten.then = self.then.clone();
        rewritten
    }

    /// `target = root` for a subexpression hoisted out of other nodes;
    /// `candidates` are the tags its readers read (those it uses are kept).
    pub(crate) fn hoisted(
        target: Tag,
        location: LocationKind,
        root: Arc<Node>,
        candidates: Vec<Tag>,
    ) -> LanguageExpression {
        Self::from_parts(target, location, root, candidates)
    }

    /// This expression followed by `modifier` (a modifier of its target):
    /// one node whose assignment runs the modifier's row-local masked
    /// assignments (ghost layers normal to x) as row epilogues, while the
    /// rows are in cache, and the others right after
    /// ([`watershed_operators::assign_node_then`]). Values are those of
    /// running the modifier as a node of its own.
    pub fn then_modify(&self, modifier: &LanguageModifier) -> LanguageExpression {
        let mut fused = self.clone();
        fused.then.push(modifier.clone());
        fused
    }

    /// The modifiers fused into this node ([`Self::then_modify`]), in order.
    pub fn fused_modifiers(&self) -> &[LanguageModifier] {
        &self.then
    }

    /// The masked assignments of the fused modifiers for `layout`, in order.
    pub(crate) fn fused_assignments(
        &self,
        layout: &FieldLayout,
    ) -> GraphResult<Vec<MaskedAssignment>> {
        let mut all = Vec::new();
        for modifier in &self.then {
            all.extend(modifier.assignments(layout)?.iter().cloned());
        }
        Ok(all)
    }
}

impl Expression for LanguageExpression {
    fn name(&self) -> String {
        self.target.name.to_string()
    }

    fn computes(&self) -> Vec<(Tag, LocationKind)> {
        vec![(self.target.clone(), self.location)]
    }

    fn requires(&self) -> Vec<Tag> {
        self.inputs.clone()
    }

    fn kind(&self) -> ExpressionKind {
        ExpressionKind::Language
    }

    fn parameters_read(&self, layout: &FieldLayout) -> GraphResult<Vec<u64>> {
        let mut ids = parameter_ids(&self.root);
        for (_, root) in self.fused_assignments(layout)? {
            ids.extend(parameter_ids(&root));
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    fn kernels(&self, layout: &FieldLayout) -> usize {
        let Ok(then) = self.fused_assignments(layout) else {
            return 1;
        };
        let fused =
            row_epilogue_count(layout, &layout.interior(), self.target.id(), &then).unwrap_or(0);
        1 + then.len() - fused
    }

    fn evaluate(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()> {
        let expression = context.expression;
        let unavailable = |tag: &Tag, reason: &str| GraphError::FieldUnavailable {
            tag: tag.clone(),
            expression: expression.to_string(),
            reason: reason.to_string(),
        };
        let bindings = bind_inputs(expression, &context.inputs)?;
        let bound: Vec<&dyn BoundField> = bindings.iter().map(|b| b as &dyn BoundField).collect();
        let (_, guard) = context
            .outputs
            .iter_mut()
            .find(|(t, _)| **t == self.target)
            .ok_or_else(|| unavailable(&self.target, "it is not among the outputs"))?;
        let target = guard
            .as_mut()
            .ok_or_else(|| unavailable(&self.target, "it has not been allocated"))?;
        // Exactly the region the extent analysis derived from the consumers'
        // stencils (interior plus what they read beyond it, e.g. the last
        // face flux of a periodic patch is a ghost face); outside a graph,
        // the interior.
        let region = match context.region {
            Some(region) => Region::Box(region),
            None => Region::Interior,
        };
        let options = AssignOptions {
            region,
            parallelism: context.parallelism,
            check_finite: self.check_finite,
            ..Default::default()
        };
        // The same node may run in two graphs at once: the second waits
        // for nothing and runs unprepared.
        let Ok(mut cache) = self.prepared.0.try_lock() else {
            let then = self.fused_assignments(target.as_bound().layout())?;
            let leaf = self.target.id();
            match target {
                AnyField::Cell(f) => assign_node_then(f, leaf, &self.root, &bound, options, &then)?,
                AnyField::XFace(f) => {
                    assign_node_then(f, leaf, &self.root, &bound, options, &then)?
                }
                AnyField::YFace(f) => {
                    assign_node_then(f, leaf, &self.root, &bound, options, &then)?
                }
                AnyField::ZFace(f) => {
                    assign_node_then(f, leaf, &self.root, &bound, options, &then)?
                }
            }
            return Ok(());
        };
        match target {
            AnyField::Cell(f) => self.run_prepared(&mut cache, f, &bound, options),
            AnyField::XFace(f) => self.run_prepared(&mut cache, f, &bound, options),
            AnyField::YFace(f) => self.run_prepared(&mut cache, f, &bound, options),
            AnyField::ZFace(f) => self.run_prepared(&mut cache, f, &bound, options),
        }
    }
}

pub use watershed_operators::MaskedAssignment;

/// The masked assignments a modifier built, with the layout they are for.
type BuiltAssignments = (FieldLayout, Arc<Vec<MaskedAssignment>>);

type ModifierBuilder = dyn Fn(&FieldLayout) -> GraphResult<Vec<MaskedAssignment>> + Send + Sync;

/// A modifier written in the field language: masked assignments to boxes of
/// its target (ghost layers, boundary faces) whose values may read the
/// target itself outside the box written (mirror partners, periodic
/// images), parameters (time, a boundary amplitude) and coordinates.
/// Boundary conditions are its first use. Like any modifier it runs right
/// after the field's producer; being language, it needs no CPU-only code.
///
/// The boxes depend on the target's layout (its ghost layers), known only
/// once the graph is built, so the modifier holds a builder called with the
/// layout on first use; its assignments are then kept (and their kernels
/// lowered once).
///
/// ```
/// use watershed_exprgraph::{LanguageModifier, Tag};
/// use watershed_fields::{CellCentre, IndexBox, LocationKind};
/// use watershed_operators::{Expr, shift};
/// let u = Tag::none("u");
/// let id = u.id();
/// // Ghost layer -1 along x copies interior column 0 (a zero-gradient wall).
/// let wall = LanguageModifier::new("wall of u", u.clone(), LocationKind::CellCentre, move |layout| {
///     let mut ghost = layout.allocated();
///     ghost.lo[0] = -1;
///     ghost.hi[0] = 0;
///     let value = shift(Expr::<CellCentre>::symbol(id, "u"), [1, 0, 0]);
///     Ok(vec![(ghost, value.node().clone())])
/// });
/// # let _ = wall;
/// ```
#[derive(Clone)]
pub struct LanguageModifier {
    name: String,
    target: Tag,
    location: LocationKind,
    build: Arc<ModifierBuilder>,
    built: Arc<Mutex<Option<BuiltAssignments>>>,
    /// Its masked assignments as last run on their own (not fused into
    /// the target's producer), checked and lowered once.
    prepared: PreparedCache<ModifierRun>,
}

/// The prepared masked assignments of a [`LanguageModifier`] run as a
/// node of its own, with the options and target layout they were prepared
/// for.
struct ModifierRun {
    parallelism: Parallelism,
    layout: FieldLayout,
    assignments: Vec<PreparedAssignment>,
}

impl std::fmt::Debug for LanguageModifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanguageModifier")
            .field("name", &self.name)
            .field("target", &self.target)
            .finish()
    }
}

impl LanguageModifier {
    /// A modifier named `name` of the field `target` at `location`, whose
    /// masked assignments `build` returns for the target's layout. Leaves of
    /// the target are `Expr::symbol(target.id(), ..)`.
    pub fn new(
        name: &str,
        target: Tag,
        location: LocationKind,
        build: impl Fn(&FieldLayout) -> GraphResult<Vec<MaskedAssignment>> + Send + Sync + 'static,
    ) -> Self {
        LanguageModifier {
            name: name.to_string(),
            target,
            location,
            build: Arc::new(build),
            built: Arc::new(Mutex::new(None)),
            prepared: PreparedCache::default(),
        }
    }

    /// The field it modifies.
    pub fn target(&self) -> &Tag {
        &self.target
    }

    /// The masked assignments for `layout` (built on first use).
    pub fn assignments(&self, layout: &FieldLayout) -> GraphResult<Arc<Vec<MaskedAssignment>>> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, list)) = built.as_ref()
            && seen == layout
        {
            return Ok(list.clone());
        }
        let list = Arc::new((self.build)(layout)?);
        *built = Some((layout.clone(), list.clone()));
        Ok(list)
    }
}

impl Expression for LanguageModifier {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn computes(&self) -> Vec<(Tag, LocationKind)> {
        vec![(self.target.clone(), self.location)]
    }

    fn requires(&self) -> Vec<Tag> {
        Vec::new()
    }

    fn kind(&self) -> ExpressionKind {
        ExpressionKind::Language
    }

    fn kernels(&self, layout: &FieldLayout) -> usize {
        self.assignments(layout).map_or(0, |a| a.len())
    }

    fn parameters_read(&self, layout: &FieldLayout) -> GraphResult<Vec<u64>> {
        let mut ids: Vec<u64> = Vec::new();
        for (_, root) in self.assignments(layout)?.iter() {
            ids.extend(parameter_ids(root));
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    fn evaluate(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()> {
        let parallelism = context.parallelism;
        let target_id = self.target.id();
        let field = context.output_any(&self.target)?;
        let layout = field.as_bound().layout().clone();
        let options = |region: &IndexBox| AssignOptions {
            region: Region::Box(*region),
            parallelism,
            check_finite: false,
            ..Default::default()
        };
        // The same node may run in two graphs at once: the second waits
        // for nothing and prepares a copy of its own for this run.
        let mut guard = self.prepared.0.try_lock().ok();
        let mut own = None;
        let cache: &mut Option<ModifierRun> = match guard.as_deref_mut() {
            Some(kept) => kept,
            None => &mut own,
        };
        let reusable = cache
            .as_ref()
            .is_some_and(|run| run.parallelism == parallelism && run.layout == layout);
        if !reusable {
            let mut assignments = Vec::new();
            for (region, root) in self.assignments(&layout)?.iter() {
                let options = options(region);
                let prepared = match &*field {
                    AnyField::Cell(f) => {
                        PreparedAssignment::new(f, target_id, root, &[], options, &[])
                    }
                    AnyField::XFace(f) => {
                        PreparedAssignment::new(f, target_id, root, &[], options, &[])
                    }
                    AnyField::YFace(f) => {
                        PreparedAssignment::new(f, target_id, root, &[], options, &[])
                    }
                    AnyField::ZFace(f) => {
                        PreparedAssignment::new(f, target_id, root, &[], options, &[])
                    }
                }?;
                assignments.push(prepared);
            }
            *cache = Some(ModifierRun {
                parallelism,
                layout,
                assignments,
            });
        }
        for prepared in cache.iter_mut().flat_map(|run| run.assignments.iter_mut()) {
            match &mut *field {
                AnyField::Cell(f) => prepared.run(f, &[])?,
                AnyField::XFace(f) => prepared.run(f, &[])?,
                AnyField::YFace(f) => prepared.run(f, &[])?,
                AnyField::ZFace(f) => prepared.run(f, &[])?,
            }
        }
        Ok(())
    }
}

type NativeFunction = dyn Fn(&mut EvaluationContext<'_>) -> GraphResult<()> + Send + Sync;

/// Hand-written Rust over CPU fields.
///
/// ```
/// use watershed_exprgraph::{NativeExpression, Tag};
/// use watershed_fields::{CellCentre, LocationKind};
/// let (t, t_squared) = (Tag::none("T"), Tag::none("T2"));
/// let square = NativeExpression::new(
///     "square",
///     vec![(t_squared.clone(), LocationKind::CellCentre)],
///     vec![t.clone()],
///     move |context| {
///         let input: Vec<f64> = context.input::<CellCentre>(&t)?.values()?.to_vec();
///         let output = context.output::<CellCentre>(&t_squared)?.values_mut()?;
///         for (o, v) in output.iter_mut().zip(input) {
///             *o = v * v;
///         }
///         Ok(())
///     },
/// );
/// # let _ = square;
/// ```
pub struct NativeExpression {
    name: String,
    computes: Vec<(Tag, LocationKind)>,
    requires: Vec<Tag>,
    parameters: Vec<u64>,
    function: Box<NativeFunction>,
}

impl std::fmt::Debug for NativeExpression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeExpression")
            .field("name", &self.name)
            .field("computes", &self.computes)
            .field("requires", &self.requires)
            .finish()
    }
}

impl NativeExpression {
    /// An expression named `name` computing `computes` from `requires` with `function`.
    pub fn new(
        name: &str,
        computes: Vec<(Tag, LocationKind)>,
        requires: Vec<Tag>,
        function: impl Fn(&mut EvaluationContext<'_>) -> GraphResult<()> + Send + Sync + 'static,
    ) -> Self {
        NativeExpression {
            name: name.to_string(),
            computes,
            requires,
            parameters: Vec::new(),
            function: Box::new(function),
        }
    }

    /// Declares the parameters its code reads, so that it runs after the
    /// graph's reductions writing them ([`crate::LanguageReduction`]).
    pub fn reading(mut self, parameters: &[&Parameter]) -> Self {
        self.parameters
            .extend(parameters.iter().map(|parameter| parameter.id()));
        self
    }
}

impl Expression for NativeExpression {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn computes(&self) -> Vec<(Tag, LocationKind)> {
        self.computes.clone()
    }
    fn requires(&self) -> Vec<Tag> {
        self.requires.clone()
    }
    fn kind(&self) -> ExpressionKind {
        ExpressionKind::Native
    }
    fn parameters_read(&self, _layout: &FieldLayout) -> GraphResult<Vec<u64>> {
        Ok(self.parameters.clone())
    }
    fn evaluate(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()> {
        (self.function)(context)
    }
}
