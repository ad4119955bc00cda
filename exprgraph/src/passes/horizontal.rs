//! Horizontal fusion: independent language nodes over the same box of the
//! same location (the updates of the 30 equations of the ExprLib test) run
//! as one node, [`HorizontalGroup`](crate::group::HorizontalGroup), whose members compute their rows of a
//! strip of planes in turn before the next strip starts
//! ([`watershed_operators::assign_nodes_then`]). An input the members share
//! (a diffusivity every equation reads) is then fetched from memory once
//! per strip instead of once per equation; each member keeps its own
//! kernel, so values are bitwise those of the ungrouped graph.
//!
//! Members: language nodes (not modifiers) with one output that is
//! persistent (grouping allocates every member's output at once, so
//! scratch outputs, which the memory plan frees and reuses one by one, are
//! left alone), the same location, target and computed box, and no path
//! between any two of them. The pass forms one group at a time and
//! recomputes reachability after each, so contracting a group never closes
//! a cycle (a cycle through a group would be a path between two members).
//! It runs after the extent analysis (the boxes must be known) and before
//! the execution order is planned.

use crate::error::GraphResult;
use crate::expression::{Expression, LanguageExpression};
use crate::group::{HorizontalGroup, MAX_MEMBERS};
use crate::node::NodeForm;
use crate::node::{FieldInfo, GraphNode, Target, edges, link};
use std::sync::Arc;
use watershed_fields::{IndexBox, LocationKind};

/// Nodes with equal keys may share a group: location, target, box.
type GroupKey = (LocationKind, Target, IndexBox);

/// Whether `node` may join a group, with its grouping key.
fn key(node: &GraphNode, fields: &[FieldInfo]) -> Option<GroupKey> {
    let language = node.form.language()?;
    if node.modifier || node.outputs.len() != 1 || !fields[node.outputs[0]].persistent {
        return None;
    }
    Some((language.location(), node.target, node.region?))
}

/// Every node reachable from each node along the graph's dependency
/// edges.
fn reachability(nodes: &[GraphNode], field_count: usize) -> Vec<Vec<bool>> {
    let (users, producer) = link(nodes, field_count);
    let (_, children) = edges(nodes, &users, &producer);
    (0..nodes.len())
        .map(|start| {
            let mut seen = vec![false; nodes.len()];
            let mut stack = children[start].clone();
            while let Some(n) = stack.pop() {
                if !seen[n] {
                    seen[n] = true;
                    stack.extend(children[n].iter().copied());
                }
            }
            seen
        })
        .collect()
}

/// Groups independent language nodes in place (see the module docs);
/// returns how many groups were formed.
pub(crate) fn group(nodes: &mut Vec<GraphNode>, fields: &[FieldInfo]) -> GraphResult<usize> {
    let mut groups = 0;
    loop {
        let reach = reachability(nodes, fields.len());
        let keys: Vec<Option<GroupKey>> = nodes.iter().map(|n| key(n, fields)).collect();
        let mut chosen: Vec<usize> = Vec::new();
        for first in 0..nodes.len() {
            if keys[first].is_none() {
                continue;
            }
            chosen = vec![first];
            for n in first + 1..nodes.len() {
                if chosen.len() == MAX_MEMBERS {
                    break;
                }
                if keys[n] == keys[first] && chosen.iter().all(|&m| !reach[m][n] && !reach[n][m]) {
                    chosen.push(n);
                }
            }
            if chosen.len() >= 2 {
                break;
            }
            chosen.clear();
        }
        if chosen.len() < 2 {
            return Ok(groups);
        }
        let location = keys[chosen[0]]
            .as_ref()
            .map_or(LocationKind::CellCentre, |k| k.0);
        let members: Vec<Arc<LanguageExpression>> = chosen
            .iter()
            .filter_map(|&n| match &nodes[n].form {
                NodeForm::Language(language) => Some(language.clone()),
                _ => None,
            })
            .collect();
        let group = HorizontalGroup::new(members, location);
        let first = &nodes[chosen[0]];
        let mut node = GraphNode {
            name: group.name(),
            form: NodeForm::Group(Arc::new(group)),
            modifier: false,
            outputs: Vec::new(),
            inputs: Vec::new(),
            target: first.target,
            region: first.region,
            fused_from: Vec::new(),
            parameters_read: Vec::new(),
            parameters_written: Vec::new(),
        };
        for &n in &chosen {
            let member = &nodes[n];
            node.outputs.extend(member.outputs.iter().copied());
            for &id in &member.parameters_read {
                if !node.parameters_read.contains(&id) {
                    node.parameters_read.push(id);
                }
            }
            for &s in &member.inputs {
                if !node.inputs.contains(&s) {
                    node.inputs.push(s);
                }
            }
            node.fused_from.push(member.name.clone());
            node.fused_from.extend(member.fused_from.iter().cloned());
        }
        // The group takes its first member's place; the others go.
        let place = chosen[0];
        nodes[place] = node;
        for &n in chosen[1..].iter().rev() {
            nodes.remove(n);
        }
        groups += 1;
    }
}
