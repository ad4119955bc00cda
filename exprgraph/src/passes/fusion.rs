//! Fusion: a language node whose field is scratch, has no modifiers and is
//! read by exactly one node, itself a language node on the same target, is
//! inlined into that consumer: the consumer's IR gets the producer's IR in
//! place of the field's leaves, so the intermediate field is never
//! materialised. Repeated until nothing changes, so Wasatch-style chains
//! (fluxes -> divergence -> right-hand side) collapse into one node.
//!
//! Results: the fused kernel evaluates the same mathematics, but the
//! evaluator may group it differently (weights are folded into products, a
//! stencil of an inlined expression recomputes it at each offset), so values
//! agree with the unfused graph to rounding, not bit for bit: the tests
//! bound the difference by 1e-14 relative to the field's magnitude.

use crate::error::GraphResult;
use crate::graph::{FieldInfo, GraphNode, link, node_of};
use crate::tag::Tag;
use std::collections::HashMap;
use std::sync::Arc;

/// Fuses `nodes` in place; returns how many producers were inlined.
pub(crate) fn fuse(
    nodes: &mut Vec<GraphNode>,
    fields: &mut Vec<FieldInfo>,
    slot_of: &mut HashMap<Tag, usize>,
) -> GraphResult<usize> {
    let mut fusions = 0;
    loop {
        let (users, _) = link(nodes, fields.len());
        let candidate = nodes.iter().enumerate().find_map(|(p, producer)| {
            let language = producer.expression.as_language()?;
            if producer.modifier || producer.outputs.len() != 1 {
                return None;
            }
            let slot = producer.outputs[0];
            if fields[slot].persistent || users[slot].len() != 1 {
                return None;
            }
            let consumer = users[slot][0];
            let target = &nodes[consumer];
            if consumer == p || target.modifier || target.target != producer.target {
                return None;
            }
            let consumer_language = target.expression.as_language()?;
            Some((p, consumer, slot, consumer_language.fuse(language)))
        });
        let Some((p, consumer, slot, fused)) = candidate else {
            break;
        };
        let mut fused_node = node_of(Arc::new(fused), false, slot_of)?;
        fused_node.fused_from = nodes[consumer].fused_from.clone();
        fused_node.fused_from.push(nodes[p].name.clone());
        fused_node
            .fused_from
            .extend(nodes[p].fused_from.iter().cloned());
        nodes[consumer] = fused_node;
        nodes.remove(p);
        remove_field(nodes, fields, slot_of, slot);
        fusions += 1;
    }
    Ok(fusions)
}

/// Drops field `slot` and renumbers the slots above it.
fn remove_field(
    nodes: &mut [GraphNode],
    fields: &mut Vec<FieldInfo>,
    slot_of: &mut HashMap<Tag, usize>,
    slot: usize,
) {
    let removed = fields.remove(slot);
    slot_of.remove(&removed.tag);
    for value in slot_of.values_mut() {
        if *value > slot {
            *value -= 1;
        }
    }
    for node in nodes.iter_mut() {
        for s in node.inputs.iter_mut().chain(node.outputs.iter_mut()) {
            debug_assert_ne!(*s, slot, "the removed field is used by no remaining node");
            if *s > slot {
                *s -= 1;
            }
        }
    }
}
