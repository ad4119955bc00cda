//! Lifetime analysis of scratch fields and the memory plan.
//!
//! Each scratch field is taken from the pool just before its producer runs
//! and returned right after its last user (reader or modifier) finishes.
//! Simulating the serial plan order gives the peak of live scratch bytes
//! with reuse; without reuse every scratch field would be alive at once.
//! The smallest budget any order could work with is the largest set of
//! scratch fields one node needs at once (its scratch inputs and outputs).

use crate::node::{FieldInfo, GraphNode};

/// What the plan says about memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Peak bytes of live scratch fields in the plan order, with reuse.
    pub peak_with_reuse: usize,
    /// Bytes of all scratch fields: the peak if none were ever returned.
    pub peak_without_reuse: usize,
    /// Bytes of persistent fields (alive for the life of the graph).
    pub persistent_bytes: usize,
    /// Number of scratch fields.
    pub scratch_fields: usize,
    /// The smallest memory budget under which every node can run.
    pub minimum_budget: usize,
    /// The node that needs `minimum_budget`.
    pub minimum_budget_expression: String,
}

/// Plans memory for running `nodes` in `order`.
pub(crate) fn plan(
    nodes: &[GraphNode],
    fields: &[FieldInfo],
    users: &[Vec<usize>],
    producer: &[Option<usize>],
    order: &[usize],
) -> MemoryPlan {
    let scratch = |slot: usize| !fields[slot].persistent;
    let mut position = vec![0; nodes.len()];
    for (p, &n) in order.iter().enumerate() {
        position[n] = p;
    }
    // Plan position after which each scratch field is released.
    let last_use: Vec<Option<usize>> = (0..fields.len())
        .map(|slot| {
            users[slot]
                .iter()
                .map(|&u| position[u])
                .max()
                .or(producer[slot].map(|p| position[p]))
        })
        .collect();
    let mut live = 0usize;
    let mut peak = 0usize;
    for (p, &n) in order.iter().enumerate() {
        for &slot in &nodes[n].outputs {
            if scratch(slot) && producer[slot] == Some(n) {
                live += fields[slot].bytes;
            }
        }
        peak = peak.max(live);
        for slot in 0..fields.len() {
            if scratch(slot) && last_use[slot] == Some(p) {
                live -= fields[slot].bytes;
            }
        }
    }
    let (minimum_budget, minimum_budget_expression) = nodes
        .iter()
        .map(|node| {
            let bytes: usize = node
                .inputs
                .iter()
                .chain(&node.outputs)
                .filter(|&&s| scratch(s))
                .map(|&s| fields[s].bytes)
                .sum();
            (bytes, node.name.clone())
        })
        .max_by_key(|(bytes, _)| *bytes)
        .unwrap_or_default();
    MemoryPlan {
        peak_with_reuse: peak,
        peak_without_reuse: fields
            .iter()
            .filter(|f| !f.persistent)
            .map(|f| f.bytes)
            .sum(),
        persistent_bytes: fields
            .iter()
            .filter(|f| f.persistent)
            .map(|f| f.bytes)
            .sum(),
        scratch_fields: fields.iter().filter(|f| !f.persistent).count(),
        minimum_budget,
        minimum_budget_expression,
    }
}
