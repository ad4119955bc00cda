//! Fusion: a language node whose field is scratch, has no modifiers and is
//! read by exactly one node, itself a language node or a reduction
//! ([`crate::LanguageReduction`]) on the same target, is inlined into that
//! consumer: the consumer's IR gets the producer's IR in place of the
//! field's leaves, so the intermediate field is never materialised. Repeated until nothing changes, so Wasatch-style chains
//! (fluxes -> divergence -> right-hand side) collapse into one node.
//!
//! A language modifier (boundary conditions) whose field's producer is a
//! language node on the same target is folded into that producer
//! ([`LanguageExpression::then_modify`](crate::expression::LanguageExpression::then_modify)): its ghost layers normal to x are
//! then filled right after each group of rows is written, while the rows
//! are in cache, instead of by a later pass that fetches every row again.
//! A producer carrying modifiers is never inlined into a consumer (its
//! field must be materialised with its ghosts), nor is one that checks
//! that its values are finite (the check belongs to its field).
//!
//! Results: the fused kernel evaluates the same mathematics, but the
//! evaluator may group it differently (weights are folded into products, a
//! stencil of an inlined expression recomputes it at each offset), so values
//! agree with the unfused graph to rounding, not bit for bit: the tests
//! bound the difference by 1e-14 relative to the field's magnitude.

use crate::error::GraphResult;
use crate::node::NodeForm;
use crate::node::{FieldInfo, GraphNode, link, node_of};
use crate::tag::Tag;
use std::collections::HashMap;
use std::sync::Arc;
use watershed_fields::Patch;

/// Fuses `nodes` in place; returns how many producers were inlined.
pub(crate) fn fuse(
    nodes: &mut Vec<GraphNode>,
    fields: &mut Vec<FieldInfo>,
    slot_of: &mut HashMap<Tag, usize>,
    patch: &Patch,
) -> GraphResult<usize> {
    let mut fusions = 0;
    loop {
        let (users, _) = link(nodes, fields.len());
        let candidate = nodes.iter().enumerate().find_map(|(p, producer)| {
            let language = producer.form.language()?;
            // A producer that checks its values keeps its own node: inlined,
            // its check would be lost (or report the consumer's field), and
            // a consumer could hide the bad value.
            if producer.modifier
                || producer.outputs.len() != 1
                || !language.fused_modifiers().is_empty()
                || language.checks_finite()
            {
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
            let fused = match target.form.reduction() {
                Some(reduction) => NodeForm::Reduction(Arc::new(reduction.fuse(language))),
                None => NodeForm::Language(Arc::new(target.form.language()?.fuse(language))),
            };
            Some((p, consumer, slot, fused))
        });
        let Some((p, consumer, slot, fused)) = candidate else {
            if fuse_modifier(nodes, fields, slot_of, patch)? {
                fusions += 1;
                continue;
            }
            break;
        };
        let mut fused_node = node_of(fused, false, slot_of, fields, patch)?;
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

/// Folds the first language modifier of a field produced by a language
/// node into that node; false when there is none to fold.
fn fuse_modifier(
    nodes: &mut Vec<GraphNode>,
    fields: &[FieldInfo],
    slot_of: &HashMap<Tag, usize>,
    patch: &Patch,
) -> GraphResult<bool> {
    let (users, producer) = link(nodes, fields.len());
    let candidate = nodes.iter().enumerate().find_map(|(m, node)| {
        let modifier = node.form.modifier()?;
        if !node.modifier || node.outputs.len() != 1 || !node.inputs.is_empty() {
            return None;
        }
        let slot = node.outputs[0];
        let p = producer[slot]?;
        // Only the field's first modifier: later ones run after it.
        let first = users[slot]
            .iter()
            .copied()
            .find(|&u| nodes[u].modifier && nodes[u].outputs.contains(&slot))?;
        let target = &nodes[p];
        if first != m || target.outputs.len() != 1 || target.target != node.target {
            return None;
        }
        let language = target.form.language()?;
        Some((m, p, language.then_modify(modifier)))
    });
    let Some((m, p, fused)) = candidate else {
        return Ok(false);
    };
    let mut fused_node = node_of(
        NodeForm::Language(Arc::new(fused)),
        false,
        slot_of,
        fields,
        patch,
    )?;
    fused_node.fused_from = nodes[p].fused_from.clone();
    fused_node.fused_from.push(nodes[m].name.clone());
    nodes[p] = fused_node;
    nodes.remove(m);
    Ok(true)
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
