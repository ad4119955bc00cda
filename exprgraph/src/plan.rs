//! The plan of a graph: what it computes, in which order, over which
//! boxes and with which memory. Built once from root tags
//! ([`GraphPlan::build`]): the nodes are collected (`collect.rs`),
//! fields are marked persistent, common subexpressions hoisted and language
//! nodes fused ([`crate::passes`]), the extents analysed and the patch's
//! ghosts checked or grown, the order planned by critical path and memory
//! planned ([`crate::analyses`]). Placement ([`crate::placement`]) reads a
//! plan; execution ([`crate::scheduler`]) runs one.
//!
//! Persistent fields: placeholders, the roots, fields the user flags, and the
//! outputs of graph edge nodes (expressions with no parents or no children).
//! Every other field is scratch: taken from the graph's pool just before its
//! producer runs and returned after its last consumer.

use crate::analyses::extents::{self, RegionPlan};
use crate::analyses::{critical_path, lifetimes};
use crate::collect::collect;
use crate::error::{GraphError, GraphResult};
use crate::factory::Factory;
use crate::node::{FieldInfo, GraphNode, check_acyclic, checked_field_bytes, edges, link};
use crate::passes::{cse, fusion, horizontal};
use crate::placement::policy::{PlacementPolicy, StreamMode};
use crate::tag::Tag;
use std::collections::HashMap;
use watershed_fields::{FieldLayout, GhostWidth, HostMemory, LocationKind, Patch};

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
    /// Allocate the persistent fields when the graph is first used (a
    /// field read or written, an execution, a rotation) rather than when
    /// it is built: a graph kept for reads that may never come holds no
    /// memory until then ([`ExpressionGraph::holds_storage`]). Field
    /// versions and placeholders' provided flags work without storage.
    pub deferred_storage: bool,
}

/// The immutable part of a graph: nodes, fields, edges, order, boxes and
/// memory plan (see the module docs). Placement sets each node's target.
pub(crate) struct GraphPlan {
    pub patch: Patch,
    pub fields: Vec<FieldInfo>,
    pub slot_of: HashMap<Tag, usize>,
    pub nodes: Vec<GraphNode>,
    pub parents: Vec<Vec<usize>>,
    pub children: Vec<Vec<usize>>,
    /// Nodes using each field after its producer (readers and modifiers).
    pub users: Vec<Vec<usize>>,
    /// The node that allocates each scratch field.
    pub producer: Vec<Option<usize>>,
    pub order: Vec<usize>,
    pub priority: Vec<f64>,
    /// When each scratch field is allocated and freed.
    pub memory: lifetimes::MemoryPlan,
    /// Most bytes of scratch fields alive at once ([`GraphOptions::memory_budget`]).
    pub budget: Option<usize>,
    pub regions: RegionPlan,
    /// The fields an execution may write: every node's outputs.
    pub written: Vec<usize>,
    /// Producers inlined by fusion.
    pub fusions: usize,
    /// Subexpressions hoisted by common-subexpression elimination.
    pub hoisted: usize,
    /// Groups of nodes fused horizontally.
    pub groups: usize,
}

impl GraphPlan {
    /// Plans the graph that computes `roots` on `patch` (see the module
    /// docs).
    pub(crate) fn build(
        factory: &Factory,
        roots: &[Tag],
        patch: &Patch,
        options: &GraphOptions,
    ) -> GraphResult<Self> {
        let (mut fields, mut slot_of, mut nodes) = collect(factory, roots, patch)?;

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

        let memory = lifetimes::plan(&nodes, &fields, &users, &producer, &order);
        if let Some(budget) = options.memory_budget
            && budget < memory.minimum_budget.max(memory.peak_with_reuse)
        {
            // Nodes start in plan order under a budget, so the plan order's
            // own peak must fit, not only the largest single node.
            let (needed, expression) = if memory.peak_with_reuse > memory.minimum_budget {
                (
                    memory.peak_with_reuse,
                    "the plan order (its peak of live scratch fields)".to_string(),
                )
            } else {
                (
                    memory.minimum_budget,
                    memory.minimum_budget_expression.clone(),
                )
            };
            return Err(GraphError::BudgetTooSmall {
                budget,
                needed,
                expression,
            });
        }

        let mut written: Vec<usize> = nodes.iter().flat_map(|n| n.outputs.clone()).collect();
        written.sort_unstable();
        written.dedup();
        Ok(GraphPlan {
            patch,
            fields,
            slot_of,
            nodes,
            parents,
            children,
            users,
            producer,
            order,
            priority,
            memory,
            budget: options.memory_budget,
            regions,
            written,
            fusions,
            hoisted,
            groups,
        })
    }

    /// The host memory the graph's fields get under `options` (see
    /// [`GraphOptions::host_memory`]).
    pub(crate) fn host_memory(options: &GraphOptions) -> HostMemory {
        options.host_memory.unwrap_or(match options.placement {
            PlacementPolicy::Cpu => HostMemory::Pageable,
            _ => HostMemory::Pinned,
        })
    }

    /// Whether `options` ask for more than every node on the CPU.
    pub(crate) fn wants_placement(options: &GraphOptions) -> bool {
        options.placement != PlacementPolicy::Cpu || options.streams != StreamMode::default()
    }
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
