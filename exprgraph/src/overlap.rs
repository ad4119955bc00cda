//! Which points of each node can run before some fields' ghost layers
//! arrive (issue 51: the halo exchange overlapped with interior work).
//!
//! A decomposed run exchanges the ghost points of its state fields across
//! patch seams after every stage. Most points of the next stage read no
//! ghost: a node whose stencil reaches `w` points beyond a cell can compute
//! every cell at least `w` points inside the patch before the exchange
//! ends. [`OverlapPlan`] says, for each node of a graph, which box of its
//! region it computes *before* the exchanged fields' ghosts are valid (its
//! clean box) and which boxes after (its rim: the region minus the clean
//! box, at most six boxes). [`crate::ExpressionGraph::execute_interior`]
//! and [`crate::ExpressionGraph::execute_rim`] run the two halves.
//! [`stale_sides`] says which sides of a patch of a decomposed grid get
//! their ghosts from another rank (the sides to cut), for
//! [`crate::patched::PatchedGraphs`] and the transport solvers on patches.
//!
//! ## Rules (forward, in plan order)
//!
//! * A field listed as exchanged is valid on its interior only until the
//!   exchange ends. Every other placeholder is valid everywhere it is
//!   allocated.
//! * A language node (not a modifier, not a group, not reading its own
//!   output) is split: its clean box is its region intersected, for every
//!   field it reads, with that field's valid box shrunk by the kernel's
//!   read extents on that field. The rest of its region is its rim.
//! * Its output is then valid on the clean box, unless modifiers (boundary
//!   conditions) write the field: they run once the whole region is
//!   computed, so its readers wait for the rim.
//! * Everything else (reductions, native code, modifier nodes, horizontal
//!   groups, nodes whose clean box is empty and every node reading what
//!   they produce) is deferred: it runs whole after the exchange.
//!
//! Each point is computed once, by the same kernel, from the same inputs:
//! the split changes the order points are computed in, never their values,
//! so a split execution gives the bits of [`crate::ExpressionGraph::execute`].

use crate::error::{GraphError, GraphResult};
use crate::graph::ExpressionGraph;
use crate::tag::Tag;
use std::ops::Range;
use watershed_fields::{FieldLayout, IndexBox, PatchLayout};
use watershed_operators::kernel::Kernel;

/// What one node does in each half of a split execution.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeSplit {
    /// Computes `clean` before the exchange ends, then `rim` (and its
    /// fused modifiers, if any) after it.
    Split {
        /// The box computed while the exchange is in flight.
        clean: IndexBox,
        /// The rest of the node's region, computed after the exchange.
        rim: Vec<IndexBox>,
    },
    /// Runs whole after the exchange.
    Deferred,
}

/// For each node of a graph, what it computes before and after the
/// exchange of some fields' ghosts (see the module docs).
///
/// ```
/// use watershed_exprgraph::{ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag};
/// use watershed_exprgraph::overlap::NodeSplit;
/// use watershed_fields::{CellCentre, Grid, IndexBox, LocationKind};
/// use watershed_operators::{div, grad};
/// let (phi, rhs) = (Tag::none("phi"), Tag::none("rhs"));
/// let mut factory = Factory::new();
/// factory.placeholder(phi.clone(), LocationKind::CellCentre)?;
/// let p = phi.clone();
/// factory.register(LanguageExpression::new::<CellCentre>(rhs.clone(), move |s| {
///     div(grad(s.field(&p)))
/// }))?;
/// let patch = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let graph = ExpressionGraph::build(&factory, &[rhs], &patch, &GraphOptions::default())?;
/// let plan = graph.overlap_plan(&[phi])?;
/// // The Laplacian reads one neighbour each way: cells 1..7 need no ghost.
/// let NodeSplit::Split { clean, rim } = &plan.nodes()[0] else { panic!("not split") };
/// assert_eq!(*clean, IndexBox::new([1, 1, 1], [7, 7, 7]));
/// assert_eq!(rim.iter().map(IndexBox::len).sum::<usize>(), 8 * 8 * 8 - 6 * 6 * 6);
/// assert_eq!(plan.clean_share(), 216.0 / 512.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct OverlapPlan {
    nodes: Vec<NodeSplit>,
    exchanged: Vec<Tag>,
    /// Points computed before / after the exchange (split nodes' clean
    /// boxes; their rims and deferred nodes' regions).
    points_before: usize,
    points_after: usize,
}

impl OverlapPlan {
    /// Per node of the graph's plan (in the order of the plan's nodes),
    /// its split.
    pub fn nodes(&self) -> &[NodeSplit] {
        &self.nodes
    }

    /// The fields whose ghosts arrive between the two halves.
    pub fn exchanged(&self) -> &[Tag] {
        &self.exchanged
    }

    /// How many nodes compute part of their region before the exchange
    /// ends.
    pub fn split_nodes(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n, NodeSplit::Split { .. }))
            .count()
    }

    /// The share of the points the language nodes compute that are
    /// computed before the exchange ends (0 when nothing can be).
    pub fn clean_share(&self) -> f64 {
        let all = self.points_before + self.points_after;
        if all == 0 {
            0.0
        } else {
            self.points_before as f64 / all as f64
        }
    }
}

/// The sides of patch `index` whose ghost layers are cut off the box its
/// graph may read while the exchange runs: every ghost region (a face, an
/// edge or a corner of the ghost layers) filled from a patch of another
/// rank must lie outside that box. Regions filled by this rank's own
/// patches are copied before the messages travel
/// ([`watershed_fields::halo::exchange_during`]); a patch's own periodic
/// images and physical ghosts are filled when the field is written (by
/// the graph's conditions). A
/// stale face cuts its side; a stale edge or corner not already cut off
/// cuts its side along its last axis (never x, where possible: a rim
/// along x is rows of single points).
pub fn stale_sides(layout: &PatchLayout, index: usize, owned: &Range<usize>) -> [[bool; 2]; 3] {
    let grid = layout.grid();
    let (counts, periodic, active) = (layout.counts(), grid.periodic(), grid.active_dimensions());
    let here = layout.position(index);
    // The patch filling the ghost region at `offset` (-1, 0, 1 per axis),
    // or `None` where a non-periodic boundary's conditions fill it.
    let source = |offset: [isize; 3]| -> Option<usize> {
        let mut position = here;
        for a in 0..3 {
            let moved = here[a] as isize + offset[a];
            position[a] = if (0..counts[a] as isize).contains(&moved) {
                moved as usize
            } else if periodic[a] {
                moved.rem_euclid(counts[a] as isize) as usize
            } else {
                return None;
            };
        }
        Some(layout.index(position))
    };
    let mut regions = Vec::new();
    for dz in -1..=1isize {
        for dy in -1..=1isize {
            for dx in -1..=1isize {
                let offset = [dx, dy, dz];
                let nonzero = (0..3).filter(|&a| offset[a] != 0).count();
                if nonzero == 0 || (0..3).any(|a| offset[a] != 0 && !active[a]) {
                    continue;
                }
                regions.push((nonzero, offset));
            }
        }
    }
    // Faces first: they force their cuts.
    regions.sort_by_key(|(nonzero, _)| *nonzero);
    let mut stale = [[false; 2]; 3];
    for (_, offset) in regions {
        let Some(from) = source(offset) else {
            continue;
        };
        if owned.contains(&from) {
            continue;
        }
        let side = |a: usize| usize::from(offset[a] > 0);
        if (0..3).any(|a| offset[a] != 0 && stale[a][side(a)]) {
            continue;
        }
        if let Some(a) = (0..3).rev().find(|&a| offset[a] != 0) {
            stale[a][side(a)] = true;
        }
    }
    stale
}

/// `region` minus `clean` (a box inside it) as at most six boxes: slabs
/// below and above along z, then along y within the clean z range, then
/// along x within the clean y and z ranges.
pub fn rim_boxes(region: &IndexBox, clean: &IndexBox) -> Vec<IndexBox> {
    let mut rim = Vec::with_capacity(6);
    if clean.is_empty() {
        if !region.is_empty() {
            rim.push(*region);
        }
        return rim;
    }
    let mut rest = *region;
    for axis in [2, 1, 0] {
        let mut below = rest;
        below.hi[axis] = clean.lo[axis];
        let mut above = rest;
        above.lo[axis] = clean.hi[axis];
        for slab in [below, above] {
            if !slab.is_empty() {
                rim.push(slab);
            }
        }
        rest.lo[axis] = clean.lo[axis];
        rest.hi[axis] = clean.hi[axis];
    }
    rim
}

/// `valid` shrunk so that every point of the result reads, at the offsets
/// `min..=max`, only points of `valid`.
fn readable_from(valid: &IndexBox, min: [isize; 3], max: [isize; 3]) -> IndexBox {
    IndexBox::new(
        [0, 1, 2].map(|a| valid.lo[a] - min[a]),
        [0, 1, 2].map(|a| valid.hi[a] - max[a]),
    )
}

impl ExpressionGraph {
    /// Which box of each node can run before the ghost layers of
    /// `exchanged` (placeholders of this graph) are valid: see
    /// [`OverlapPlan`]. An error when a tag is not a placeholder of the
    /// graph, or when the graph runs nodes on a GPU or under a memory
    /// budget (a split execution keeps its scratch fields from one half to
    /// the other, on the CPU).
    pub fn overlap_plan(&self, exchanged: &[Tag]) -> GraphResult<OverlapPlan> {
        self.overlap_plan_with_sides(exchanged, [[true; 2]; 3])
    }

    /// [`Self::overlap_plan`] when only some sides of the exchanged
    /// fields receive ghosts from the exchange: `stale[axis][0]` the minus
    /// side, `stale[axis][1]` the plus side. The ghosts of the other sides
    /// are valid while the exchange runs (a physical condition's, or a
    /// patch's own periodic images, filled when the field was written), so
    /// readers may read them before the exchange ends: a patch whose
    /// layout does not split the x axis then computes whole rows first.
    pub fn overlap_plan_with_sides(
        &self,
        exchanged: &[Tag],
        stale: [[bool; 2]; 3],
    ) -> GraphResult<OverlapPlan> {
        let plan = &self.plan;
        if self.device_plan.gpu_nodes() > 0 {
            return Err(GraphError::Usage(
                "a split execution (exchange overlapped with interior work) runs CPU plans only; this graph places nodes on a GPU: execute it whole".into(),
            ));
        }
        if let Some(budget) = plan.budget {
            return Err(GraphError::Usage(format!(
                "a split execution keeps its scratch fields from one half to the other, which a memory budget ({budget} bytes) does not allow; execute the graph whole"
            )));
        }
        let mut valid: Vec<IndexBox> = plan
            .fields
            .iter()
            .map(|f| {
                if f.placeholder {
                    FieldLayout::new(&plan.patch, f.location).allocated()
                } else {
                    IndexBox::new([0; 3], [0; 3])
                }
            })
            .collect();
        for tag in exchanged {
            let slot = self.slot(tag, "exchanged")?;
            let info = &plan.fields[slot];
            if !info.placeholder {
                return Err(GraphError::Usage(format!(
                    "{tag} is computed by the graph, not a placeholder; only fields filled from outside (a solver's state) can have their ghosts exchanged while the graph runs"
                )));
            }
            let layout = FieldLayout::new(&plan.patch, info.location);
            let (interior, mut box_) = (layout.interior(), layout.allocated());
            for (axis, [minus, plus]) in stale.into_iter().enumerate() {
                if minus {
                    box_.lo[axis] = interior.lo[axis];
                }
                if plus {
                    box_.hi[axis] = interior.hi[axis];
                }
            }
            valid[slot] = box_;
        }
        let modified: Vec<bool> = (0..plan.fields.len())
            .map(|slot| {
                plan.users[slot]
                    .iter()
                    .any(|&u| plan.nodes[u].modifier && plan.nodes[u].outputs.contains(&slot))
            })
            .collect();
        let mut nodes = vec![NodeSplit::Deferred; plan.nodes.len()];
        let (mut before, mut after) = (0usize, 0usize);
        for &n in &plan.order {
            let node = &plan.nodes[n];
            let split = match (&node.form.language(), node.region, node.outputs.as_slice()) {
                (Some(language), Some(region), &[output]) if !node.modifier => {
                    let kernel = Kernel::compile(language.root(), &plan.patch, true)?;
                    let mut clean = region;
                    for read in &kernel.fields {
                        let slot = node
                            .inputs
                            .iter()
                            .chain(&node.outputs)
                            .find(|&&s| plan.fields[s].tag.id() == read.id);
                        clean = match slot {
                            Some(&s) if s != output => clean.intersect(&readable_from(
                                &valid[s],
                                read.extent.min,
                                read.extent.max,
                            )),
                            _ => IndexBox::new([0; 3], [0; 3]),
                        };
                    }
                    if clean.is_empty() {
                        None
                    } else {
                        let has_modifiers =
                            modified[output] || !language.fused_modifiers().is_empty();
                        if !has_modifiers {
                            valid[output] = clean;
                        }
                        Some((region, clean))
                    }
                }
                _ => None,
            };
            match split {
                Some((region, clean)) => {
                    before += clean.len();
                    after += region.len() - clean.len();
                    nodes[n] = NodeSplit::Split {
                        clean,
                        rim: rim_boxes(&region, &clean),
                    };
                }
                None => {
                    after += node.region.map_or(0, |r| r.len());
                }
            }
        }
        Ok(OverlapPlan {
            nodes,
            exchanged: exchanged.to_vec(),
            points_before: before,
            points_after: after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The rim and the clean box cover the region exactly once.
        #[test]
        fn rim_and_clean_box_tile_the_region(
            lo in proptest::array::uniform3(-2isize..3),
            size in proptest::array::uniform3(1isize..6),
            inset_lo in proptest::array::uniform3(0isize..3),
            inset_hi in proptest::array::uniform3(0isize..3),
        ) {
            let region = IndexBox::new(lo, [0, 1, 2].map(|a| lo[a] + size[a]));
            let clean = IndexBox::new(
                [0, 1, 2].map(|a| region.lo[a] + inset_lo[a]),
                [0, 1, 2].map(|a| region.hi[a] - inset_hi[a]),
            );
            let rim = rim_boxes(&region, &clean);
            prop_assert!(rim.len() <= 6);
            for point in region.iter() {
                let covering = rim.iter().filter(|b| b.contains(point)).count()
                    + usize::from(!clean.is_empty() && clean.contains(point));
                prop_assert_eq!(covering, 1, "point {:?}", point);
            }
            for b in &rim {
                prop_assert!(b.iter().all(|p| region.contains(p)));
            }
        }
    }
}
