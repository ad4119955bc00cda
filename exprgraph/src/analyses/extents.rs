//! Stencil-extent analysis: the region every node must compute and the ghost
//! width every field needs, derived backwards from the roots (as AMReX's
//! `nGrow` and Devito's halo analysis).
//!
//! ## Rules
//!
//! * Every field must hold valid values at least on its interior. Roots,
//!   persistent fields and scratch fields alike: a node never computes less
//!   than its output's interior.
//! * A language node computes its output over the union of its consumers'
//!   demands (each consumer's region grown by the exact box of offsets at
//!   which its kernel reads the field, from [`Kernel::compile`]). Its own
//!   inputs are then demanded over that region grown by its read extents.
//! * A field with modifiers (boundary conditions) is computed by its
//!   producer over its interior only: its ghost points belong to the
//!   modifiers, which run right after the producer.
//! * A reduction ([`crate::LanguageReduction`]) reduces over the interior
//!   of its location: its inputs are demanded over that interior grown by
//!   its read extents.
//! * A native expression is Rust code the analysis cannot see into: it is
//!   assumed to read its inputs on their interior.
//! * Placeholders hold whatever the caller or their modifiers put there.
//!
//! Every demand must lie inside the field's allocation on the graph's patch;
//! otherwise building fails with [`GraphError::MissingGhosts`], naming the
//! tag, the side, the width needed, the width available and the reader. With
//! [`GhostPolicy::Grow`](crate::GhostPolicy::Grow) the graph instead widens
//! its patch to [`RegionPlan::needed_ghosts`]. Nothing is ever clipped.

use crate::error::{GraphError, GraphResult};
use crate::node::{FieldInfo, GraphNode};
use watershed_fields::{FieldLayout, GhostWidth, IndexBox, Patch};
use watershed_operators::kernel::Kernel;

/// What the analysis found.
#[derive(Debug, Clone)]
pub struct RegionPlan {
    /// Per node: the box of its output's indices it computes (`None` for
    /// native expressions, which compute what their code computes).
    pub node_regions: Vec<Option<IndexBox>>,
    /// Per field slot: the points that must hold valid values once its
    /// producer and modifiers have run.
    pub field_demands: Vec<IndexBox>,
    /// Per field slot and side (-x, +x, -y, +y, -z, +z): the node whose read
    /// sets the demand on that side, if it reaches beyond the interior.
    readers: Vec<[Option<String>; 6]>,
}

fn hull(a: &IndexBox, b: &IndexBox) -> IndexBox {
    IndexBox::new(
        [0, 1, 2].map(|k| a.lo[k].min(b.lo[k])),
        [0, 1, 2].map(|k| a.hi[k].max(b.hi[k])),
    )
}

/// "-x", "+x", "-y", "+y", "-z", "+z" for sides 0..6.
fn side_name(side: usize) -> &'static str {
    ["-x", "+x", "-y", "+y", "-z", "+z"][side]
}

impl RegionPlan {
    /// How far beyond its interior field `slot` is demanded on each side.
    fn beyond_interior(&self, slot: usize, interior: &IndexBox) -> GhostWidth {
        let demand = &self.field_demands[slot];
        GhostWidth {
            minus: [0, 1, 2].map(|a| (interior.lo[a] - demand.lo[a]).max(0) as usize),
            plus: [0, 1, 2].map(|a| (demand.hi[a] - interior.hi[a]).max(0) as usize),
        }
    }

    /// The ghost layers per side that the patch needs for every demand to
    /// fit (the largest over all fields).
    pub fn needed_ghosts(&self, fields: &[FieldInfo], patch: &Patch) -> GhostWidth {
        let mut needed = GhostWidth::none();
        for (slot, field) in fields.iter().enumerate() {
            let interior = FieldLayout::new(patch, field.location).interior();
            let beyond = self.beyond_interior(slot, &interior);
            for a in 0..3 {
                needed.minus[a] = needed.minus[a].max(beyond.minus[a]);
                needed.plus[a] = needed.plus[a].max(beyond.plus[a]);
            }
        }
        needed
    }

    /// The ghost layers field `slot` needs (beyond its interior) per side.
    pub fn ghosts_of(&self, slot: usize, field: &FieldInfo, patch: &Patch) -> GhostWidth {
        let interior = FieldLayout::new(patch, field.location).interior();
        self.beyond_interior(slot, &interior)
    }

    /// Checks that field `slot`'s demand fits `layout` (the graph's own, or
    /// that of a field bound from outside).
    pub fn check_fits(
        &self,
        slot: usize,
        field: &FieldInfo,
        layout: &FieldLayout,
        what: &str,
    ) -> GraphResult<()> {
        let interior = layout.interior();
        let beyond = self.beyond_interior(slot, &interior);
        let available = layout.ghosts();
        for axis in 0..3 {
            for (side, needed, have) in [
                (2 * axis, beyond.minus[axis], available.minus[axis]),
                (2 * axis + 1, beyond.plus[axis], available.plus[axis]),
            ] {
                if needed > have {
                    let reader = self.readers[slot][side]
                        .clone()
                        .unwrap_or_else(|| "a consumer".into());
                    return Err(GraphError::MissingGhosts {
                        tag: field.tag.clone(),
                        side: side_name(side),
                        needed,
                        available: have,
                        reader,
                        what: what.to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Runs the analysis over `nodes` (in the topological `order`) on `patch`.
/// Also checks that every language node reads each field at the location
/// the field is declared with.
pub(crate) fn analyse(
    nodes: &[GraphNode],
    fields: &[FieldInfo],
    order: &[usize],
    patch: &Patch,
) -> GraphResult<RegionPlan> {
    let interior = |slot: usize| FieldLayout::new(patch, fields[slot].location).interior();
    let mut plan = RegionPlan {
        node_regions: vec![None; nodes.len()],
        field_demands: (0..fields.len()).map(interior).collect(),
        readers: vec![Default::default(); fields.len()],
    };
    let mut modified = vec![false; fields.len()];
    for node in nodes.iter().filter(|n| n.modifier) {
        for &slot in &node.outputs {
            modified[slot] = true;
        }
    }
    for &n in order.iter().rev() {
        let node = &nodes[n];
        let (region, kernel) = if let Some(reduction) = node.form.reduction() {
            let region = FieldLayout::new(patch, reduction.location()).interior();
            (region, Kernel::compile(reduction.root(), patch, false)?)
        } else {
            let Some(language) = node.form.language() else {
                continue; // native: inputs read on their interior (the floor)
            };
            let Some(&output) = node.outputs.first() else {
                continue;
            };
            // A modifier (a node of its own, or fused into this one) fills
            // the ghosts and boundary points readers read beyond the interior.
            let region =
                if node.modifier || modified[output] || !language.fused_modifiers().is_empty() {
                    interior(output)
                } else {
                    plan.field_demands[output]
                };
            (region, Kernel::compile(language.root(), patch, true)?)
        };
        plan.node_regions[n] = Some(region);
        for read in &kernel.fields {
            let Some(&slot) = node
                .inputs
                .iter()
                .chain(&node.outputs)
                .find(|&&s| fields[s].tag.id() == read.id)
            else {
                continue; // every leaf is an input (checked when the node was made)
            };
            if let Some(op) = read.transfer {
                return Err(GraphError::Usage(format!(
                    "{} reads '{}' through {}, an operator between two grids, but a graph holds the fields of one patch; run inter-grid operators with `assign` on fields of both grids (as the multigrid solver does)",
                    node.name,
                    fields[slot].tag,
                    op.name()
                )));
            }
            if read.location != fields[slot].location {
                return Err(GraphError::LocationConflict {
                    tag: fields[slot].tag.clone(),
                    first: fields[slot].location,
                    first_by: if fields[slot].placeholder {
                        "its placeholder declaration".into()
                    } else {
                        "its producer".into()
                    },
                    second: read.location,
                    second_by: format!("the reads of {}", node.name),
                });
            }
            let wanted = IndexBox::new(
                [0, 1, 2].map(|a| region.lo[a] + read.extent.min[a]),
                [0, 1, 2].map(|a| region.hi[a] + read.extent.max[a]),
            );
            let before = plan.field_demands[slot];
            let after = hull(&before, &wanted);
            for a in 0..3 {
                if after.lo[a] < before.lo[a] {
                    plan.readers[slot][2 * a] = Some(node.name.clone());
                }
                if after.hi[a] > before.hi[a] {
                    plan.readers[slot][2 * a + 1] = Some(node.name.clone());
                }
            }
            plan.field_demands[slot] = after;
        }
    }
    Ok(plan)
}
