//! Building the graph from root tags, and looking at it.
//!
//! [`ExpressionGraph::build`] asks each expression what it requires,
//! recursively from the roots, and reports a missing producer (and who
//! required it) or a cycle (printed tag by tag). It then attaches modifiers,
//! decides which fields are persistent, fuses language nodes (see
//! [`crate::passes::fusion`]), links the execution graph, computes critical-path
//! priorities and the depth-first plan order, and plans memory (see [`crate::analyses`]).
//!
//! Persistent fields: placeholders, the roots, fields the user flags, and the
//! outputs of graph edge nodes (expressions with no parents or no children).
//! Every other field is scratch: taken from the graph's pool just before its
//! producer runs and returned after its last consumer.

use crate::analyses::extents::{self, RegionPlan};
use crate::analyses::{critical_path, lifetimes};
use crate::error::{GraphError, GraphResult};
use crate::expression::{Expression, ExpressionKind};
use crate::factory::Factory;
use crate::node::NodeForm;
use crate::passes::{cse, fusion, horizontal};
use crate::placement::{self, DevicePlan, PlacementPolicy, StreamMode};
use crate::scheduler::Statistics;
use crate::store::{AnyField, FieldStore, GraphLocation};
use crate::tag::Tag;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use watershed_fields::{
    FieldInit, FieldLayout, GhostWidth, HostMemory, IndexBox, Lifetime, LocationKind, MemoryPool,
    Patch,
};

/// Where a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// CPU threads.
    Cpu,
    /// A CUDA stream on GPU `k` (language nodes, and native nodes or
    /// solves that can run there; see [`crate::placement`]).
    Gpu(usize),
}

/// What the graph does when a field's ghost layers are too few for the
/// stencils that read it (see [`crate::analyses::extents`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GhostPolicy {
    /// Refuse to build, naming the tag, the side, the width needed and the
    /// width the patch has.
    #[default]
    Require,
    /// Widen the patch's ghost layers to what the analysis asks for (never
    /// narrow them); [`ExpressionGraph::patch`] tells the result.
    Grow,
}

/// Options of [`ExpressionGraph::build`].
#[derive(Debug, Clone, Default)]
pub struct GraphOptions {
    /// Skip fusion (it is on unless this is set).
    pub no_fusion: bool,
    /// Disables common-subexpression elimination across expressions
    /// ([`crate::passes::cse`]): a costly subexpression several language
    /// nodes compute is otherwise hoisted into a node of its own.
    pub no_common_subexpressions: bool,
    /// Enables horizontal fusion ([`crate::passes::horizontal`]):
    /// independent language nodes over the same box run as one loop nest.
    /// Off by default: on the 2-core development machine it saved nothing
    /// measurable on the ExprLib test and serialised the members' ghost
    /// layers (see `docs/benchmarks.md`). `no_fusion` disables it too.
    pub horizontal_fusion: bool,
    /// Tags to keep for the life of the graph (e.g. fields to output).
    pub persistent: Vec<Tag>,
    /// Most bytes of scratch fields alive at once; nodes whose outputs do
    /// not fit wait. Refused up front when no order of execution could fit.
    pub memory_budget: Option<usize>,
    /// Whether too few ghost layers are an error (the default) or make the
    /// graph widen its patch.
    pub ghosts: GhostPolicy,
    /// Which device runs each node ([`crate::placement`]; all CPU unless
    /// set).
    pub placement: PlacementPolicy,
    /// How GPU nodes share streams (a stream per node from a pool unless
    /// set).
    pub streams: StreamMode,
    /// Host memory of the graph's fields: `None` chooses page-locked
    /// (pinned) memory when `placement` puts nodes on a GPU, so copies run
    /// asynchronously at full speed, and pageable memory otherwise. Pinning
    /// that fails falls back to pageable memory, counted in the pool's
    /// statistics ([`ExpressionGraph::pool`]). Set it to compare the two.
    pub host_memory: Option<HostMemory>,
}

/// What the graph knows about a field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldInfo {
    /// Its tag.
    pub tag: Tag,
    /// Its location.
    pub location: LocationKind,
    /// Kept for the life of the graph.
    pub persistent: bool,
    /// Provided from outside.
    pub placeholder: bool,
    /// Bytes of storage.
    pub bytes: usize,
}

/// A node of the execution graph.
pub(crate) struct GraphNode {
    pub form: NodeForm,
    pub name: String,
    pub modifier: bool,
    pub outputs: Vec<usize>,
    pub inputs: Vec<usize>,
    pub target: Target,
    /// The box of its output it computes (language nodes; from the extent
    /// analysis).
    pub region: Option<IndexBox>,
    /// Names of the expressions fusion inlined into this node.
    pub fused_from: Vec<String>,
    /// Ids of the parameters it reads: it follows the reductions writing
    /// them.
    pub parameters_read: Vec<u64>,
    /// Ids of the parameters it writes (a reduction's result).
    pub parameters_written: Vec<u64>,
}

/// Bookkeeping of the DFS that collects nodes and fields.
struct Collector<'f> {
    factory: &'f Factory,
    fields: Vec<FieldInfo>,
    slot_of: HashMap<Tag, usize>,
    nodes: Vec<(NodeForm, bool)>,
    node_of_registration: HashMap<usize, usize>,
    finished: HashMap<Tag, bool>,
    stack: Vec<Tag>,
    patch: &'f Patch,
}

impl Collector<'_> {
    fn field(
        &mut self,
        tag: &Tag,
        location: LocationKind,
        placeholder: bool,
        by: &str,
    ) -> GraphResult<usize> {
        if let Some(&slot) = self.slot_of.get(tag) {
            let existing = &self.fields[slot];
            if existing.location != location {
                return Err(GraphError::LocationConflict {
                    tag: tag.clone(),
                    first: existing.location,
                    first_by: "its producer".into(),
                    second: location,
                    second_by: by.to_string(),
                });
            }
            return Ok(slot);
        }
        let mut info = FieldInfo {
            tag: tag.clone(),
            location,
            persistent: placeholder,
            placeholder,
            bytes: 0,
        };
        info.bytes = checked_field_bytes(self.patch, &info)?;
        self.fields.push(info);
        self.slot_of.insert(tag.clone(), self.fields.len() - 1);
        Ok(self.fields.len() - 1)
    }

    fn visit(&mut self, tag: &Tag, required_by: &str) -> GraphResult<()> {
        match self.finished.get(tag) {
            Some(true) => return Ok(()),
            Some(false) => {
                let start = self.stack.iter().position(|t| t == tag).unwrap_or(0);
                let mut cycle: Vec<Tag> = self.stack[start..].to_vec();
                cycle.push(tag.clone());
                return Err(GraphError::Cycle { cycle });
            }
            None => {}
        }
        if let Some(&location) = self.factory.placeholders.get(tag) {
            self.field(tag, location, true, "a placeholder")?;
            // On the stack while its modifiers' requirements are visited, so
            // a loop through a modifier is reported with the modified tag.
            self.finished.insert(tag.clone(), false);
            self.stack.push(tag.clone());
            self.visit_modifiers(tag)?;
            self.stack.pop();
            self.finished.insert(tag.clone(), true);
            return Ok(());
        }
        if let Some(registration) = self.factory.reductions.get(tag) {
            self.finished.insert(tag.clone(), false);
            self.stack.push(tag.clone());
            let node = (registration.builder)();
            self.nodes.push((node.clone(), false));
            let expression = node.expression();
            let name = expression.name();
            for required in expression.requires() {
                self.visit(&required, &name)?;
            }
            self.visit_parameter_writers(expression, None)?;
            self.stack.pop();
            self.finished.insert(tag.clone(), true);
            return Ok(());
        }
        let Some(&registration) = self.factory.producer_of.get(tag) else {
            return Err(GraphError::MissingProducer {
                tag: tag.clone(),
                required_by: required_by.to_string(),
            });
        };
        self.finished.insert(tag.clone(), false);
        self.stack.push(tag.clone());
        let node = match self.node_of_registration.get(&registration) {
            Some(&node) => node,
            None => {
                let node = (self.factory.registrations[registration].builder)();
                let name = node.expression().name();
                for (computed, location) in node.expression().computes() {
                    self.field(&computed, location, false, &name)?;
                }
                self.nodes.push((node, false));
                self.node_of_registration
                    .insert(registration, self.nodes.len() - 1);
                self.nodes.len() - 1
            }
        };
        let node = self.nodes[node].0.clone();
        let expression = node.expression();
        let name = expression.name();
        for required in expression.requires() {
            self.visit(&required, &name)?;
        }
        self.visit_parameter_writers(expression, None)?;
        self.visit_modifiers(tag)?;
        self.stack.pop();
        self.finished.insert(tag.clone(), true);
        Ok(())
    }

    fn visit_modifiers(&mut self, tag: &Tag) -> GraphResult<()> {
        let Some(modifiers) = self.factory.modifiers.get(tag) else {
            return Ok(());
        };
        for registration in modifiers {
            let node = (registration.builder)();
            let modifier = node.expression();
            let name = modifier.name();
            for (computed, location) in modifier.computes() {
                if computed == *tag {
                    self.field(&computed, location, false, &name)?;
                }
            }
            self.nodes.push((node.clone(), true));
            for required in modifier.requires() {
                if required != *tag {
                    self.visit(&required, &name)?;
                }
            }
            self.visit_parameter_writers(modifier, Some(tag))?;
        }
        Ok(())
    }

    /// Visits the reductions writing the parameters `expression` reads (a
    /// modifier reads them in the assignments it builds for `modified`'s
    /// layout), so that they join the graph.
    fn visit_parameter_writers(
        &mut self,
        expression: &dyn Expression,
        modified: Option<&Tag>,
    ) -> GraphResult<()> {
        let location = match modified {
            Some(tag) => self.slot_of.get(tag).map(|&s| self.fields[s].location),
            None => expression.computes().first().map(|(_, l)| *l),
        };
        let layout = FieldLayout::new(self.patch, location.unwrap_or(LocationKind::CellCentre));
        let name = expression.name();
        // Best effort: a modifier's builder may refuse the patch before
        // `GhostPolicy::Grow` widens it; `refresh_parameter_reads` checks
        // every node again on the final patch.
        let read = expression.parameters_read(&layout).unwrap_or_default();
        for id in read {
            if let Some(writer) = self.factory.reduction_writing.get(&id) {
                let writer = writer.clone();
                self.visit(&writer, &name)?;
            }
        }
        Ok(())
    }
}

/// A graph of expressions set up for repeated execution on one patch.
pub struct ExpressionGraph {
    pub(crate) patch: Patch,
    pub(crate) fields: Vec<FieldInfo>,
    pub(crate) slot_of: HashMap<Tag, usize>,
    pub(crate) nodes: Vec<GraphNode>,
    pub(crate) parents: Vec<Vec<usize>>,
    pub(crate) children: Vec<Vec<usize>>,
    /// Nodes using each field after its producer (readers and modifiers).
    pub(crate) users: Vec<Vec<usize>>,
    /// The node that allocates each scratch field.
    pub(crate) producer: Vec<Option<usize>>,
    pub(crate) order: Vec<usize>,
    pub(crate) priority: Vec<f64>,
    pub(crate) plan: lifetimes::MemoryPlan,
    pub(crate) budget: Option<usize>,
    pub(crate) store: FieldStore,
    pub(crate) pool: MemoryPool,
    pub(crate) statistics: Mutex<Statistics>,
    pub(crate) fusions: usize,
    /// Subexpressions hoisted by common-subexpression elimination.
    pub(crate) hoisted: usize,
    /// Groups of nodes fused horizontally.
    pub(crate) groups: usize,
    pub(crate) regions: RegionPlan,
    /// Per field: a placeholder that was bound, written or filled (reading
    /// one that was not is an error at execute).
    pub(crate) provided: Vec<AtomicBool>,
    /// Per field: a count bumped by everything that may write it (see
    /// [`ExpressionGraph::field_version`]).
    pub(crate) versions: Vec<AtomicU64>,
    /// The fields an execution may write: every node's outputs.
    pub(crate) written: Vec<usize>,
    /// Serialises executions of this graph.
    pub(crate) execution: Mutex<()>,
    /// Trials and choice of [`crate::ExecutionMode::Adaptive`].
    pub(crate) adaptive: Mutex<crate::adaptive::AdaptiveState>,
    /// Placement, copies and stream steps ([`crate::placement`]).
    pub(crate) device_plan: DevicePlan,
    /// The plan's GPU streams, reused across executions.
    pub(crate) gpu_streams: crate::gpu::executor::StreamPool,
    /// The finiteness checks of GPU kernels in the execution in progress.
    pub(crate) finite_watches: crate::gpu::executor::FiniteWatches,
    /// Replay of steps as CUDA graphs ([`crate::StepReplay`]).
    pub(crate) replay: Mutex<crate::gpu::replay::ReplayState>,
    /// Scratch fields of GPU nodes are allocated in stream order
    /// ([`crate::GpuScratch::StreamOrdered`]); changed under the replay lock.
    pub(crate) stream_ordered_scratch: AtomicBool,
    /// Executions time their GPU side ([`crate::gpu::timeline`]).
    pub(crate) gpu_timeline: AtomicBool,
}

thread_local! {
    /// Graphs whose fields the current thread is inside `with_field` of.
    static FIELD_ACCESS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Marks the current thread as inside `with_field` of a graph while alive.
struct FieldAccess(usize);

impl FieldAccess {
    fn enter(graph: &ExpressionGraph) -> Self {
        let id = graph as *const ExpressionGraph as usize;
        FIELD_ACCESS.with(|a| a.borrow_mut().push(id));
        FieldAccess(id)
    }
}

impl Drop for FieldAccess {
    fn drop(&mut self) {
        FIELD_ACCESS.with(|a| {
            let mut a = a.borrow_mut();
            if let Some(p) = a.iter().rposition(|&g| g == self.0) {
                a.remove(p);
            }
        });
    }
}

/// True when the current thread is inside `with_field` of `graph`.
pub(crate) fn in_field_access(graph: &ExpressionGraph) -> bool {
    let id = graph as *const ExpressionGraph as usize;
    FIELD_ACCESS.with(|a| a.borrow().contains(&id))
}

impl std::fmt::Debug for ExpressionGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpressionGraph")
            .field("nodes", &self.node_count())
            .field("edges", &self.edge_count())
            .field("fields", &self.fields.len())
            .finish()
    }
}

impl ExpressionGraph {
    /// Builds the graph that computes `roots` on `patch`.
    pub fn build(
        factory: &Factory,
        roots: &[Tag],
        patch: &Patch,
        options: &GraphOptions,
    ) -> GraphResult<Self> {
        let mut collector = Collector {
            factory,
            fields: Vec::new(),
            slot_of: HashMap::new(),
            nodes: Vec::new(),
            node_of_registration: HashMap::new(),
            finished: HashMap::new(),
            stack: Vec::new(),
            patch,
        };
        for root in roots {
            collector.visit(root, "the root list")?;
        }
        let mut orphans: Vec<(&Tag, &str)> = factory
            .modifiers
            .iter()
            .filter(|(tag, _)| !collector.slot_of.contains_key(*tag))
            .flat_map(|(tag, list)| list.iter().map(move |r| (tag, r.name.as_str())))
            .collect();
        orphans.sort_by_key(|(tag, _)| tag.to_string());
        if let Some((tag, name)) = orphans.first() {
            return Err(GraphError::UnknownTag {
                tag: (*tag).clone(),
                what: format!(
                    "modifier {name} is attached to it, but no expression of the graph computes or reads it; check the tag's name and context, or build the graph from a factory without that modifier"
                ),
            });
        }
        let Collector {
            mut fields,
            mut slot_of,
            nodes: collected,
            ..
        } = collector;

        let mut nodes: Vec<GraphNode> = collected
            .into_iter()
            .map(|(expression, modifier)| node_of(expression, modifier, &slot_of, &fields, patch))
            .collect::<GraphResult<_>>()?;

        // Persistence.
        for tag in roots.iter().chain(&options.persistent) {
            if factory.reductions.contains_key(tag) {
                continue; // a scalar result, not a field
            }
            match slot_of.get(tag) {
                Some(&slot) => fields[slot].persistent = true,
                None => {
                    return Err(GraphError::UnknownTag {
                        tag: tag.clone(),
                        what: "flagged persistent".into(),
                    });
                }
            }
        }
        let (users, _) = link(&nodes, fields.len());
        for node in nodes.iter().filter(|n| !n.modifier) {
            // Placeholders count as parents (ExprLib makes them nodes).
            let has_parents = !node.inputs.is_empty();
            let has_children = node
                .outputs
                .iter()
                .any(|&s| !users[s].iter().all(|&u| nodes[u].modifier));
            if !has_parents || !has_children {
                for &slot in &node.outputs {
                    fields[slot].persistent = true;
                }
            }
        }

        let mut hoisted = 0;
        if !options.no_common_subexpressions {
            hoisted = cse::eliminate(&mut nodes, &mut fields, &mut slot_of, patch)?;
        }
        let mut fusions = 0;
        if !options.no_fusion {
            fusions = fusion::fuse(&mut nodes, &mut fields, &mut slot_of, patch)?;
        }

        let (users, producer) = link(&nodes, fields.len());
        let (parents, children) = edges(&nodes, &users, &producer);
        check_acyclic(&nodes, &parents, &fields)?;
        let priority = critical_path::priorities(&children, &vec![1.0; nodes.len()]);
        let order = critical_path::plan_order(&parents, &children, &priority);

        let regions = extents::analyse(&nodes, &fields, &order, patch)?;
        let patch = match options.ghosts {
            GhostPolicy::Require => patch.clone(),
            GhostPolicy::Grow => {
                let needed = regions.needed_ghosts(&fields, patch);
                let have = patch.ghosts();
                let widened = GhostWidth {
                    minus: [0, 1, 2].map(|a| have.minus[a].max(needed.minus[a])),
                    plus: [0, 1, 2].map(|a| have.plus[a].max(needed.plus[a])),
                };
                let grown = Patch::new(patch.grid(), patch.offset(), patch.cells(), widened)?;
                for field in &mut fields {
                    field.bytes = checked_field_bytes(&grown, field)?;
                }
                grown
            }
        };
        for (slot, field) in fields.iter().enumerate() {
            let layout = FieldLayout::new(&patch, field.location);
            regions.check_fits(slot, field, &layout, "the graph's patch")?;
        }
        for (node, region) in nodes.iter_mut().zip(&regions.node_regions) {
            node.region = *region;
        }
        refresh_parameter_reads(&mut nodes, &fields, &patch, factory)?;

        // Horizontal fusion needs the boxes; the order is planned again
        // over the grouped nodes.
        let mut groups = 0;
        if !options.no_fusion && options.horizontal_fusion {
            groups = horizontal::group(&mut nodes, &fields)?;
        }
        let (users, producer) = link(&nodes, fields.len());
        let (parents, children) = edges(&nodes, &users, &producer);
        check_acyclic(&nodes, &parents, &fields)?;
        let priority = critical_path::priorities(&children, &vec![1.0; nodes.len()]);
        let order = critical_path::plan_order(&parents, &children, &priority);

        let plan = lifetimes::plan(&nodes, &fields, &users, &producer, &order);
        if let Some(budget) = options.memory_budget
            && budget < plan.minimum_budget.max(plan.peak_with_reuse)
        {
            // Nodes start in plan order under a budget, so the plan order's
            // own peak must fit, not only the largest single node.
            let (needed, expression) = if plan.peak_with_reuse > plan.minimum_budget {
                (
                    plan.peak_with_reuse,
                    "the plan order (its peak of live scratch fields)".to_string(),
                )
            } else {
                (plan.minimum_budget, plan.minimum_budget_expression.clone())
            };
            return Err(GraphError::BudgetTooSmall {
                budget,
                needed,
                expression,
            });
        }

        let host_memory = options.host_memory.unwrap_or(match options.placement {
            PlacementPolicy::Cpu => HostMemory::Pageable,
            _ => HostMemory::Pinned,
        });
        let pool = MemoryPool::host(host_memory);
        let store = FieldStore::with_slots(fields.len());
        for (slot, field) in fields.iter().enumerate() {
            if field.persistent {
                let lifetime = Lifetime::Persistent;
                let value = AnyField::new(
                    field.location,
                    &field.tag.name,
                    &patch,
                    lifetime,
                    &pool,
                    FieldInit::Zero,
                )?;
                store.put(slot, Some(value));
            }
        }
        let node_count = nodes.len();
        let field_count = fields.len();
        let mut written: Vec<usize> = nodes.iter().flat_map(|n| n.outputs.clone()).collect();
        written.sort_unstable();
        written.dedup();
        let mut graph = ExpressionGraph {
            patch,
            regions,
            fields,
            slot_of,
            nodes,
            parents,
            children,
            users,
            producer,
            order,
            priority,
            plan,
            budget: options.memory_budget,
            store,
            pool,
            statistics: Mutex::new(Statistics::new(node_count)),
            fusions,
            hoisted,
            groups,
            provided: (0..field_count).map(|_| AtomicBool::new(false)).collect(),
            versions: (0..field_count).map(|_| AtomicU64::new(0)).collect(),
            written,
            execution: Mutex::new(()),
            adaptive: Mutex::new(Default::default()),
            device_plan: DevicePlan::unplanned(),
            gpu_streams: Default::default(),
            finite_watches: Default::default(),
            replay: Default::default(),
            stream_ordered_scratch: AtomicBool::new(false),
            gpu_timeline: AtomicBool::new(false),
        };
        graph.device_plan = placement::all_cpu(&graph);
        if options.placement != PlacementPolicy::Cpu || options.streams != StreamMode::default() {
            graph.place(options.placement.clone(), options.streams)?;
        }
        Ok(graph)
    }

    /// Number of expression nodes (modifiers included).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Number of dependency edges between nodes.
    pub fn edge_count(&self) -> usize {
        self.children.iter().map(Vec::len).sum()
    }

    /// How many producers fusion inlined into their consumers.
    pub fn fusions(&self) -> usize {
        self.fusions
    }

    /// How many shared subexpressions common-subexpression elimination
    /// hoisted into nodes of their own ([`crate::passes::cse`]).
    pub fn common_subexpressions(&self) -> usize {
        self.hoisted
    }

    /// How many groups of independent nodes run as one loop nest
    /// ([`crate::passes::horizontal`]).
    pub fn horizontal_groups(&self) -> usize {
        self.groups
    }

    /// The fields of the graph.
    pub fn fields(&self) -> &[FieldInfo] {
        &self.fields
    }

    /// The field named `tag`, if the graph holds it.
    pub fn field_info(&self, tag: &Tag) -> Option<&FieldInfo> {
        self.slot_of.get(tag).map(|&s| &self.fields[s])
    }

    /// Node names in execution (plan) order.
    pub fn execution_order(&self) -> Vec<String> {
        self.order
            .iter()
            .map(|&n| self.nodes[n].name.clone())
            .collect()
    }

    /// The memory plan: peaks with and without reuse.
    pub fn memory_plan(&self) -> &lifetimes::MemoryPlan {
        &self.plan
    }

    /// The graph's pool (its statistics count this graph's fields).
    pub fn pool(&self) -> &MemoryPool {
        &self.pool
    }

    /// The patch the graph computes on.
    pub fn patch(&self) -> &Patch {
        &self.patch
    }

    fn slot(&self, tag: &Tag, what: &str) -> GraphResult<usize> {
        self.slot_of
            .get(tag)
            .copied()
            .ok_or_else(|| GraphError::UnknownTag {
                tag: tag.clone(),
                what: what.to_string(),
            })
    }

    /// Runs `f` on the persistent field `tag` of location `L`.
    pub fn with_field<L: GraphLocation, R>(
        &self,
        tag: &Tag,
        f: impl FnOnce(&watershed_fields::SpatialField<L>) -> R,
    ) -> GraphResult<R> {
        let slot = self.slot(tag, "read")?;
        // With GPU nodes, fields change location during an execution and
        // kernels may still use them: wait for a running execution, and
        // make the CPU copy current (a copy from the GPU, read-only).
        let _execution = self.waits_for_execution();
        self.current_on_cpu(slot, false)?;
        let _access = FieldAccess::enter(self);
        let guard = self.store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let field = guard.as_ref().ok_or_else(|| GraphError::FieldUnavailable {
            tag: tag.clone(),
            expression: "the caller".into(),
            reason: "it is a scratch field, alive only while the graph executes; flag it persistent to keep it".into(),
        })?;
        let typed = L::get(field).ok_or(GraphError::WrongLocation {
            tag: tag.clone(),
            actual: field.kind(),
            requested: L::KIND,
        })?;
        Ok(f(typed))
    }

    /// Runs `f` on the persistent field `tag` of location `L`, mutably (to
    /// set initial conditions or placeholder values).
    pub fn with_field_mut<L: GraphLocation, R>(
        &self,
        tag: &Tag,
        f: impl FnOnce(&mut watershed_fields::SpatialField<L>) -> R,
    ) -> GraphResult<R> {
        let slot = self.slot(tag, "written")?;
        let _execution = self.waits_for_execution();
        self.current_on_cpu(slot, true)?;
        let _access = FieldAccess::enter(self);
        let mut guard = self.store.slots[slot]
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let field = guard.as_mut().ok_or_else(|| GraphError::FieldUnavailable {
            tag: tag.clone(),
            expression: "the caller".into(),
            reason: "it is a scratch field, alive only while the graph executes; flag it persistent to keep it".into(),
        })?;
        let actual = field.kind();
        let typed = L::get_mut(field).ok_or(GraphError::WrongLocation {
            tag: tag.clone(),
            actual,
            requested: L::KIND,
        })?;
        self.provided[slot].store(true, Ordering::Release);
        let result = f(typed);
        self.versions[slot].fetch_add(1, Ordering::AcqRel);
        Ok(result)
    }

    /// Sets every point of the persistent field `tag` of location `L`,
    /// ghosts included, to `value` (a placeholder's constant: a uniform
    /// velocity, a coefficient).
    ///
    /// ```
    /// use watershed_exprgraph::{ExpressionGraph, Factory, GraphOptions, Tag};
    /// use watershed_fields::{Grid, LocationKind, XFace};
    /// let u = Tag::none("u");
    /// let mut factory = Factory::new();
    /// factory.placeholder(u.clone(), LocationKind::XFace)?;
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let graph = ExpressionGraph::build(&factory, &[u.clone()], &patch, &GraphOptions::default())?;
    /// graph.fill_field::<XFace>(&u, 2.0)?;
    /// graph.set_field::<XFace>(&u, |[x, y, _]| x * y)?;
    /// let corner = graph.with_field::<XFace, _>(&u, |f| {
    ///     let layout = f.layout();
    ///     f.values().map(|v| v[layout.linear_index([1, 1, 0])])
    /// })??;
    /// assert_eq!(corner, 0.25 * 0.375); // the face at x = 1/4, y = 3/8
    /// # Ok::<(), watershed_exprgraph::GraphError>(())
    /// ```
    pub fn fill_field<L: GraphLocation>(&self, tag: &Tag, value: f64) -> GraphResult<()> {
        Ok(self.with_field_mut::<L, _>(tag, |field| field.fill(value))??)
    }

    /// Sets every point of the persistent field `tag` of location `L`,
    /// ghosts included, to `value([x, y, z])` at the point's coordinates (a
    /// face field's points are on its faces).
    pub fn set_field<L: GraphLocation>(
        &self,
        tag: &Tag,
        value: impl Fn([f64; 3]) -> f64,
    ) -> GraphResult<()> {
        self.with_field_mut::<L, _>(tag, |field| -> GraphResult<()> {
            let layout = field.layout().clone();
            let values = field.values_mut()?;
            for index in layout.allocated().iter() {
                values[layout.linear_index(index)] = value(layout.coordinate(index));
            }
            Ok(())
        })?
    }

    /// The execution lock, so that a host access waits for a running
    /// execution (on the CPU an input changed between two nodes of one
    /// execution gave torn results; with GPU nodes kernels run after their
    /// node returns); nothing when this thread is already inside an access
    /// to this graph, whose outer access holds the lock (a nested access
    /// would otherwise wait for itself).
    fn waits_for_execution(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        if in_field_access(self) {
            return None;
        }
        Some(self.execution.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Makes the CPU copy of the field in `slot` current (and, for
    /// `writing`, the active one), copying from a GPU when needed.
    fn current_on_cpu(&self, slot: usize, writing: bool) -> GraphResult<()> {
        let cpu = watershed_fields::Device::Cpu;
        let ready = self.store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_none_or(|f| f.active_device() == cpu || (!writing && f.is_valid_on(cpu)));
        if ready {
            return Ok(());
        }
        let mut guard = self.store.slots[slot]
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(field) = guard.as_mut() {
            if writing {
                field.make_active_on(cpu, None)?;
            } else {
                field.validate_on(cpu)?;
            }
        }
        Ok(())
    }

    /// Nodes of `kind` (after fusion; modifiers included).
    pub fn nodes_of_kind(&self, kind: ExpressionKind) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.form.expression().kind() == kind)
            .count()
    }

    /// The language kernels one execution runs after fusion: one per
    /// language node, one per masked assignment of each language modifier
    /// (a boundary condition is one per side and ghost layer).
    pub fn kernel_count(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| {
                let location = n
                    .form
                    .expression()
                    .computes()
                    .first()
                    .map_or(LocationKind::CellCentre, |(_, l)| *l);
                n.form
                    .expression()
                    .kernels(&FieldLayout::new(&self.patch, location))
            })
            .sum()
    }

    /// The names of the nodes that check every value they write
    /// ([`LanguageExpression::checking_finite`](crate::LanguageExpression::checking_finite)),
    /// in execution order.
    pub fn finite_checked_nodes(&self) -> Vec<String> {
        let mut names = Vec::new();
        for node in &self.nodes {
            match &node.form {
                NodeForm::Language(l) if l.checks_finite() => names.push(l.name()),
                NodeForm::Group(group) => names.extend(
                    group
                        .members()
                        .filter(|l| l.checks_finite())
                        .map(|l| l.name()),
                ),
                _ => {}
            }
        }
        names
    }

    /// Native (hand-written, CPU-only) nodes: what keeps a graph off a GPU.
    pub fn native_node_count(&self) -> usize {
        self.nodes_of_kind(ExpressionKind::Native)
    }

    /// Rotates the storage of persistent fields of one location without
    /// copying: the field in `tags[1]` moves to `tags[0]`, `tags[2]` to
    /// `tags[1]`, ..., and `tags[0]`'s to the last. With two tags it swaps
    /// them: advancing STATE_NP1 to STATE_N is a pointer exchange, not a
    /// copy. Each field is renamed after the tag it now holds; the values
    /// move, ghosts included.
    ///
    /// Every tag must be persistent (a placeholder, a root, or flagged
    /// persistent), of the same location and layout, and not currently
    /// borrowed through [`Self::with_field`].
    ///
    /// ```
    /// use watershed_exprgraph::{Context, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag};
    /// use watershed_fields::{CellCentre, Grid, LocationKind};
    /// let (now, next) = (Tag::new("u", Context::StateN), Tag::new("u", Context::StateNp1));
    /// let mut factory = Factory::new();
    /// factory.placeholder(now.clone(), LocationKind::CellCentre)?;
    /// let n = now.clone();
    /// factory.register(LanguageExpression::new::<CellCentre>(next.clone(), move |s| {
    ///     2.0 * s.field::<CellCentre>(&n)
    /// }))?;
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let graph = ExpressionGraph::build(&factory, &[next.clone()], &patch, &GraphOptions::default())?;
    /// graph.with_field_mut::<CellCentre, _>(&now, |u| u.fill(1.0))??;
    /// for _ in 0..3 {
    ///     graph.execute(watershed_exprgraph::ExecutionMode::Serial)?;
    ///     graph.rotate_fields(&[now.clone(), next.clone()])?;
    /// }
    /// let value = graph.with_field::<CellCentre, _>(&now, |u| {
    ///     u.values().map(|v| v[u.layout().linear_index([1, 1, 0])])
    /// })??;
    /// assert_eq!(value, 8.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rotate_fields(&self, tags: &[Tag]) -> GraphResult<()> {
        let mut slots = Vec::with_capacity(tags.len());
        for tag in tags {
            let slot = self.slot(tag, "rotated")?;
            if slots.contains(&slot) {
                return Err(GraphError::Native(format!(
                    "rotate_fields: {tag} is named twice; name each time level once"
                )));
            }
            let info = &self.fields[slot];
            let first = &self.fields[slots.first().copied().unwrap_or(slot)];
            if !(info.persistent || info.placeholder) {
                return Err(GraphError::FieldUnavailable {
                    tag: tag.clone(),
                    expression: "rotate_fields".into(),
                    reason: "it is a scratch field, alive only while the graph executes; flag it persistent to rotate it".into(),
                });
            }
            if info.location != first.location {
                return Err(GraphError::WrongLocation {
                    tag: tag.clone(),
                    actual: info.location,
                    requested: first.location,
                });
            }
            slots.push(slot);
        }
        if slots.len() < 2 {
            return Ok(());
        }
        if in_field_access(self) {
            return Err(GraphError::Native(
                "rotate_fields was called inside with_field of the same graph; call it after the access ends".into(),
            ));
        }
        let _serial = self.execution.lock().unwrap_or_else(|p| p.into_inner());
        // Lock in slot order (every multi-slot locker does), so two rotations
        // cannot deadlock.
        let mut order: Vec<usize> = (0..slots.len()).collect();
        order.sort_by_key(|&i| slots[i]);
        let mut guards: Vec<Option<std::sync::RwLockWriteGuard<'_, Option<AnyField>>>> =
            (0..slots.len()).map(|_| None).collect();
        for &i in &order {
            guards[i] = Some(
                self.store.slots[slots[i]]
                    .write()
                    .unwrap_or_else(|p| p.into_inner()),
            );
        }
        let mut held: Vec<Option<AnyField>> = guards
            .iter_mut()
            .map(|g| g.as_mut().and_then(|g| g.take()))
            .collect();
        let layouts: Vec<Option<FieldLayout>> = held
            .iter()
            .map(|f| f.as_ref().map(|f| f.as_bound().layout().clone()))
            .collect();
        if let Some(bad) = (1..held.len()).find(|&i| layouts[i] != layouts[0]) {
            // Put everything back before reporting.
            for (guard, field) in guards.iter_mut().zip(held) {
                if let Some(guard) = guard {
                    **guard = field;
                }
            }
            return Err(GraphError::Native(format!(
                "rotate_fields: {} and {} have different layouts (ghost layers or allocation); they cannot exchange storage",
                tags[0], tags[bad]
            )));
        }
        held.rotate_left(1);
        for ((guard, mut field), tag) in guards.iter_mut().zip(held).zip(tags) {
            if let Some(f) = field.as_mut() {
                f.rename(&tag.to_string());
            }
            if let Some(guard) = guard {
                **guard = field;
            }
        }
        for &slot in &slots {
            self.provided[slot].store(true, Ordering::Release);
            self.versions[slot].fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Replaces the storage of placeholder `tag` with `field` (e.g. a field
    /// wrapping memory an outer framework owns). Returns the field it held.
    pub fn bind_placeholder<L: GraphLocation>(
        &self,
        tag: &Tag,
        field: watershed_fields::SpatialField<L>,
    ) -> GraphResult<Option<AnyField>> {
        let slot = self.slot(tag, "bound")?;
        let info = &self.fields[slot];
        if !info.placeholder {
            return Err(GraphError::UnknownTag {
                tag: tag.clone(),
                what: "bound from outside, but it is computed by an expression, not a placeholder"
                    .into(),
            });
        }
        if info.location != L::KIND {
            return Err(GraphError::WrongLocation {
                tag: tag.clone(),
                actual: info.location,
                requested: L::KIND,
            });
        }
        let patch = field.layout().patch();
        if patch.grid() != self.patch.grid()
            || patch.offset() != self.patch.offset()
            || patch.cells() != self.patch.cells()
        {
            return Err(GraphError::Native(format!(
                "field '{}' bound to {tag} lives on another patch than the graph's",
                field.name()
            )));
        }
        self.regions.check_fits(
            slot,
            info,
            field.layout(),
            &format!("the bound field '{}'", field.name()),
        )?;
        let previous = self.store.put(slot, Some(L::wrap(field)));
        self.provided[slot].store(true, Ordering::Release);
        self.versions[slot].fetch_add(1, Ordering::AcqRel);
        Ok(previous)
    }

    /// Says that placeholder `tag` is meant to hold what it holds now (zeros
    /// unless written): reading a placeholder nobody bound, wrote or filled
    /// is otherwise an error at execute.
    pub fn fill_placeholder(&self, tag: &Tag) -> GraphResult<()> {
        let slot = self.slot(tag, "filled")?;
        if !self.fields[slot].placeholder {
            return Err(GraphError::UnknownTag {
                tag: tag.clone(),
                what: "filled as a placeholder, but it is computed by an expression".into(),
            });
        }
        self.provided[slot].store(true, Ordering::Release);
        Ok(())
    }

    /// A number that changes whenever the field `tag` may have changed:
    /// an execution (for every field a node computes or modifies),
    /// [`Self::with_field_mut`], [`Self::bind_placeholder`] and
    /// [`Self::rotate_fields`] each move it on. The same number at two
    /// moments means the same values, so a driver can keep a scalar it
    /// derived from the field (a graph reduction's result, a norm) and
    /// tell when it has gone stale. `None` for a field bound to external
    /// memory, which its owner may write without the graph knowing.
    ///
    /// ```
    /// use watershed_exprgraph::{ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag};
    /// use watershed_fields::{CellCentre, Grid, LocationKind};
    /// let (u, twice) = (Tag::none("u"), Tag::none("2u"));
    /// let mut factory = Factory::new();
    /// factory.placeholder(u.clone(), LocationKind::CellCentre)?;
    /// let t = u.clone();
    /// factory.register(LanguageExpression::new::<CellCentre>(twice.clone(), move |s| {
    ///     2.0 * s.field::<CellCentre>(&t)
    /// }))?;
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let graph = ExpressionGraph::build(&factory, &[twice.clone()], &patch, &GraphOptions::default())?;
    /// let before = graph.field_version(&u)?;
    /// graph.with_field::<CellCentre, _>(&u, |_| ())?;
    /// assert_eq!(graph.field_version(&u)?, before); // read only
    /// graph.with_field_mut::<CellCentre, _>(&u, |f| f.fill(1.0))??;
    /// assert_ne!(graph.field_version(&u)?, before);
    /// let computed = graph.field_version(&twice)?;
    /// graph.execute(ExecutionMode::Serial)?;
    /// assert_ne!(graph.field_version(&twice)?, computed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn field_version(&self, tag: &Tag) -> GraphResult<Option<u64>> {
        let slot = self.slot(tag, "asked for its version")?;
        let external = self.store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(AnyField::is_external);
        Ok((!external).then(|| self.versions[slot].load(Ordering::Acquire)))
    }

    /// The ghost layers per side that the stencils reading `tag` need
    /// beyond its interior (from the extent analysis).
    pub fn required_ghosts(&self, tag: &Tag) -> GraphResult<GhostWidth> {
        let slot = self.slot(tag, "asked for its ghost width")?;
        Ok(self
            .regions
            .ghosts_of(slot, &self.fields[slot], &self.patch))
    }

    /// The box of `tag`'s indices its producer computes each execution
    /// (`None` for placeholders and fields of native expressions).
    pub fn computed_region(&self, tag: &Tag) -> GraphResult<Option<IndexBox>> {
        let slot = self.slot(tag, "asked for its computed region")?;
        Ok(self.producer[slot].and_then(|n| self.nodes[n].region))
    }

    /// The execution graph in Graphviz DOT: one node per expression,
    /// labelled with its name and the tags it computes, filled by target
    /// (CPU light blue, GPUs green, khaki, pink, lavender), boxes for
    /// language expressions,
    /// ellipses for native ones, diamonds for modifiers, hexagons for
    /// reductions (an edge to each node reading their parameter); placeholders are
    /// grey notes; fused nodes have a double border and list the
    /// expressions inlined into them. Copies between devices
    /// ([`crate::placement::transfers`]) are dashed red edges from the
    /// writer (or placeholder) to each reader, labelled with the field, the
    /// devices and the bytes. A legend cluster explains the shapes.
    /// Render with `dot -Tpng`.
    pub fn to_dot(&self) -> String {
        let mut dot = String::from(
            "digraph watershed {\n  rankdir=BT;\n  node [style=filled, fontname=\"Helvetica\"];\n",
        );
        for (slot, field) in self.fields.iter().enumerate() {
            if field.placeholder {
                let _ = writeln!(
                    dot,
                    "  f{slot} [label=\"{}\", shape=note, fillcolor=grey85];",
                    escape(&field.tag.to_string())
                );
            }
        }
        for (n, node) in self.nodes.iter().enumerate() {
            let mut tags: Vec<String> = node
                .outputs
                .iter()
                .map(|&s| self.fields[s].tag.to_string())
                .collect();
            if let Some(reduction) = node.form.reduction() {
                tags.push(format!(
                    "{:?} into parameter {}",
                    reduction.reduction(),
                    reduction.parameter().name()
                ));
            }
            let shape = match node.form.expression().kind() {
                _ if node.modifier => "diamond",
                ExpressionKind::Language => "box",
                ExpressionKind::Reduction => "hexagon",
                ExpressionKind::Native => "ellipse",
                ExpressionKind::IterativeSolve => "octagon",
            };
            let color = target_colour(node.target);
            if node.fused_from.is_empty() {
                let _ = writeln!(
                    dot,
                    "  n{n} [label=\"{}\\n{}\", shape={shape}, fillcolor={color}];",
                    escape(&node.name),
                    escape(&tags.join(", "))
                );
            } else {
                let _ = writeln!(
                    dot,
                    "  n{n} [label=\"{}\\n{}\\nfused: {}\", shape={shape}, peripheries=2, fillcolor={color}];",
                    escape(&node.name),
                    escape(&tags.join(", ")),
                    escape(&node.fused_from.join(", "))
                );
            }
            for &input in &node.inputs {
                if self.fields[input].placeholder && !node.outputs.contains(&input) {
                    let _ = writeln!(dot, "  f{input} -> n{n};");
                }
            }
        }
        for (n, children) in self.children.iter().enumerate() {
            for c in children {
                let _ = writeln!(dot, "  n{n} -> n{c};");
            }
        }
        // Copies between devices: dashed red edges from the writer (or
        // the placeholder) to each reader, labelled with what moves.
        for transfer in self.device_plan.transfers() {
            let from = match transfer.after_node {
                Some(w) => format!("n{w}"),
                None if self.fields[transfer.slot].placeholder => format!("f{}", transfer.slot),
                None => "start".to_string(),
            };
            if from == "start" && !dot.contains("  start [") {
                dot.push_str(
                    "  start [label=\"start of the execution\", shape=plaintext, style=\"\"];\n",
                );
            }
            for &reader in &transfer.before_nodes {
                let _ = writeln!(
                    dot,
                    "  {from} -> n{reader} [style=dashed, color=red, fontcolor=red, label=\"{}\\n{} -> {}, {} B\"];",
                    escape(&transfer.field.to_string()),
                    transfer.from,
                    transfer.to,
                    transfer.bytes
                );
            }
        }
        dot.push_str(concat!(
            "  subgraph cluster_legend {\n    label=\"legend\"; fontname=\"Helvetica\";\n",
            "    legend_language [label=\"language expression\", shape=box, fillcolor=lightblue];\n",
            "    legend_fused [label=\"fused expressions\\n(fused: the inlined ones)\", shape=box, peripheries=2, fillcolor=lightblue];\n",
            "    legend_native [label=\"native (CPU-only)\", shape=ellipse, fillcolor=lightblue];\n",
            "    legend_modifier [label=\"modifier\", shape=diamond, fillcolor=lightblue];\n",
            "    legend_reduction [label=\"reduction into a parameter\", shape=hexagon, fillcolor=lightblue];\n",
            "    legend_gpu [label=\"placed on a GPU\\n(GPU 0 green, 1 khaki, 2 pink, 3 lavender)\", shape=box, fillcolor=palegreen];\n",
            "    legend_copy_from [label=\"writer\", shape=box, fillcolor=palegreen];\n",
            "    legend_copy_to [label=\"reader on another device\", shape=ellipse, fillcolor=lightblue];\n",
            "    legend_copy_from -> legend_copy_to [style=dashed, color=red, fontcolor=red, label=\"copy: field,\\nfrom -> to, bytes\"];\n",
            "    legend_placeholder [label=\"placeholder\", shape=note, fillcolor=grey85];\n",
            "  }\n}\n"
        ));
        dot
    }
}

impl ExpressionGraph {
    /// The dependency graph of the quantities in Graphviz DOT: one node per
    /// field (placeholders grey, persistent fields bold, scratch fields
    /// dashed), an edge from each field an expression reads to each field it
    /// computes, labelled with the expression. Fused fields no longer appear.
    pub fn dependency_dot(&self) -> String {
        let mut dot = String::from(
            "digraph dependencies {\n  rankdir=BT;\n  node [fontname=\"Helvetica\"];\n",
        );
        for (slot, field) in self.fields.iter().enumerate() {
            let style = if field.placeholder {
                "filled\", fillcolor=\"grey85"
            } else if field.persistent {
                "bold"
            } else {
                "dashed"
            };
            let _ = writeln!(
                dot,
                "  f{slot} [label=\"{}\\n{}\", style=\"{style}\"];",
                escape(&field.tag.to_string()),
                field.location
            );
        }
        for node in &self.nodes {
            for &input in &node.inputs {
                for &output in &node.outputs {
                    let _ = writeln!(
                        dot,
                        "  f{input} -> f{output} [label=\"{}\"];",
                        escape(&node.name)
                    );
                }
            }
        }
        dot.push_str("}\n");
        dot
    }
}

/// Bytes of `field`'s storage on `patch`, refusing sizes that overflow.
pub(crate) fn checked_field_bytes(patch: &Patch, field: &FieldInfo) -> GraphResult<usize> {
    FieldLayout::new(patch, field.location)
        .allocated_len()
        .checked_mul(std::mem::size_of::<f64>())
        .ok_or_else(|| {
            GraphError::Field(watershed_fields::FieldError::InvalidGrid {
                reason: format!(
                    "field {} of {:?} cells with {:?} ghost layers needs more bytes than this machine can address",
                    field.tag,
                    patch.cells(),
                    patch.ghosts()
                ),
            })
        })
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A node for `expression`, with its field slots.
pub(crate) fn node_of(
    form: NodeForm,
    modifier: bool,
    slot_of: &HashMap<Tag, usize>,
    fields: &[FieldInfo],
    patch: &Patch,
) -> GraphResult<GraphNode> {
    let expression = form.expression();
    let name = expression.name();
    let slot = |tag: &Tag| {
        slot_of
            .get(tag)
            .copied()
            .ok_or_else(|| GraphError::UnknownTag {
                tag: tag.clone(),
                what: format!("used by {name}"),
            })
    };
    let outputs = expression
        .computes()
        .iter()
        .map(|(t, _)| slot(t))
        .collect::<GraphResult<Vec<_>>>()?;
    let mut inputs = Vec::new();
    for tag in expression.requires() {
        let s = slot(&tag)?;
        if !inputs.contains(&s) && !outputs.contains(&s) {
            inputs.push(s);
        }
    }
    let location = outputs
        .first()
        .map_or(LocationKind::CellCentre, |&s| fields[s].location);
    // Best effort before the patch is final (see `refresh_parameter_reads`).
    let parameters_read = expression
        .parameters_read(&FieldLayout::new(patch, location))
        .unwrap_or_default();
    let parameters_written = expression.parameters_written();
    Ok(GraphNode {
        name,
        modifier,
        outputs,
        inputs,
        target: Target::Cpu,
        region: None,
        fused_from: Vec::new(),
        parameters_read,
        parameters_written,
        form,
    })
}

/// Reads again the parameters each node reads, on the final `patch` (a
/// modifier's builder sees the layout it will run with), and refuses a
/// node that reads the parameter of a registered reduction the graph does
/// not hold (it could only have been missed on the unfinished patch).
fn refresh_parameter_reads(
    nodes: &mut [GraphNode],
    fields: &[FieldInfo],
    patch: &Patch,
    factory: &Factory,
) -> GraphResult<()> {
    let written: Vec<u64> = nodes
        .iter()
        .flat_map(|n| n.parameters_written.iter().copied())
        .collect();
    for node in nodes.iter_mut() {
        let location = node
            .outputs
            .first()
            .map_or(LocationKind::CellCentre, |&s| fields[s].location);
        node.parameters_read = node
            .form
            .expression()
            .parameters_read(&FieldLayout::new(patch, location))?;
        for id in &node.parameters_read {
            if let Some(writer) = factory.reduction_writing.get(id)
                && !written.contains(id)
            {
                let name = factory
                    .reductions
                    .get(writer)
                    .map_or_else(|| writer.to_string(), |r| r.name.clone());
                return Err(GraphError::Usage(format!(
                    "{} reads the parameter that reduction {name} writes, but the graph does not hold that reduction; add its tag {writer} to the roots",
                    node.name
                )));
            }
        }
    }
    Ok(())
}

/// For each field: the nodes that use it after it is produced (readers and
/// modifiers), and the node producing it (none for placeholders).
pub(crate) fn link(
    nodes: &[GraphNode],
    field_count: usize,
) -> (Vec<Vec<usize>>, Vec<Option<usize>>) {
    let mut users = vec![Vec::new(); field_count];
    let mut producer = vec![None; field_count];
    for (n, node) in nodes.iter().enumerate() {
        for &s in &node.inputs {
            users[s].push(n);
        }
        for &s in &node.outputs {
            if node.modifier {
                users[s].push(n);
            } else {
                producer[s] = Some(n);
            }
        }
    }
    (users, producer)
}

/// The DOT fill colour of a node on `target`.
fn target_colour(target: Target) -> &'static str {
    match target {
        Target::Cpu => "lightblue",
        Target::Gpu(k) => ["palegreen", "khaki", "pink", "lavender"][k % 4],
    }
}

/// Parents and children: each writer of a field follows the previous
/// writer (producer, then modifiers in order); each reader follows the last;
/// each reader of a parameter follows the reduction writing it.
pub(crate) fn edges(
    nodes: &[GraphNode],
    users: &[Vec<usize>],
    producer: &[Option<usize>],
) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let mut parents = vec![Vec::new(); nodes.len()];
    for (slot, slot_users) in users.iter().enumerate() {
        let mut writers: Vec<usize> = producer[slot].into_iter().collect();
        writers.extend(
            slot_users
                .iter()
                .copied()
                .filter(|&u| nodes[u].modifier && nodes[u].outputs.contains(&slot)),
        );
        for pair in writers.windows(2) {
            parents[pair[1]].push(pair[0]);
        }
        if let Some(&last) = writers.last() {
            for &reader in slot_users {
                if !writers.contains(&reader) {
                    parents[reader].push(last);
                }
            }
        }
    }
    for (writer, node) in nodes.iter().enumerate() {
        for id in &node.parameters_written {
            for (reader, other) in nodes.iter().enumerate() {
                if reader != writer && other.parameters_read.contains(id) {
                    parents[reader].push(writer);
                }
            }
        }
    }
    let mut children = vec![Vec::new(); nodes.len()];
    for (n, ps) in parents.iter_mut().enumerate() {
        ps.sort_unstable();
        ps.dedup();
        for &p in ps.iter() {
            children[p].push(n);
        }
    }
    (parents, children)
}

/// Refuses cycles that modifiers or multi-output expressions introduce
/// (the DFS catches the others), naming the tags around the cycle.
fn check_acyclic(
    nodes: &[GraphNode],
    parents: &[Vec<usize>],
    fields: &[FieldInfo],
) -> GraphResult<()> {
    let mut graph = petgraph::graph::DiGraph::<usize, ()>::new();
    let indices: Vec<_> = (0..nodes.len()).map(|n| graph.add_node(n)).collect();
    for (n, ps) in parents.iter().enumerate() {
        for &p in ps {
            graph.add_edge(indices[p], indices[n], ());
        }
    }
    if petgraph::algo::toposort(&graph, None).is_ok() {
        return Ok(());
    }
    let components = petgraph::algo::tarjan_scc(&graph);
    let cycle_nodes = components
        .into_iter()
        .find(|c| c.len() > 1)
        .unwrap_or_default();
    let mut cycle: Vec<Tag> = cycle_nodes
        .iter()
        .filter_map(|i| {
            let node = &nodes[graph[*i]];
            match node.outputs.first() {
                Some(&s) => Some(fields[s].tag.clone()),
                None => node
                    .form
                    .reduction()
                    .map(|r| r.result().clone()),
            }
        })
        .collect();
    if let Some(first) = cycle.first().cloned() {
        cycle.push(first);
    }
    Err(GraphError::Cycle { cycle })
}
