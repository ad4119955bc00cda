//! Horizontal fusion: independent language nodes over the same box of the
//! same location (the updates of the 30 equations of the ExprLib test) run
//! as one node, [`HorizontalGroup`], whose members compute their rows of a
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

use crate::error::{GraphError, GraphResult};
use crate::expression::{EvaluationContext, Expression, ExpressionKind, LanguageExpression};
use crate::graph::{FieldInfo, GraphNode, Target, edges, link};
use crate::node::NodeForm;
use crate::store::{AnyField, GraphLocation};
use crate::tag::Tag;
use std::sync::Arc;
use watershed_fields::{CellCentre, FieldLayout, IndexBox, LocationKind, XFace, YFace, ZFace};
use watershed_operators::{
    AssignOptions, BoundField, NodeAssignment, OperatorError, Region, assign_nodes_then,
};

/// The most members one group takes.
pub const MAX_MEMBERS: usize = 64;

/// Independent language nodes evaluated as one loop nest (see the module
/// docs).
pub struct HorizontalGroup {
    members: Vec<Arc<LanguageExpression>>,
    location: LocationKind,
}

impl HorizontalGroup {
    /// The members' language forms, in evaluation order.
    pub fn members(&self) -> impl Iterator<Item = &LanguageExpression> {
        self.members.iter().map(|m| m.as_ref())
    }

    /// How many expressions run side by side.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a group has at least two members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

impl Expression for HorizontalGroup {
    fn name(&self) -> String {
        let names: Vec<String> = self.members.iter().map(|m| m.name()).collect();
        format!("side by side: {}", names.join(", "))
    }

    fn computes(&self) -> Vec<(Tag, LocationKind)> {
        self.members.iter().flat_map(|m| m.computes()).collect()
    }

    fn requires(&self) -> Vec<Tag> {
        let mut all: Vec<Tag> = Vec::new();
        for tag in self.members.iter().flat_map(|m| m.requires()) {
            if !all.contains(&tag) {
                all.push(tag);
            }
        }
        all
    }

    fn kind(&self) -> ExpressionKind {
        ExpressionKind::Language
    }

    fn kernels(&self, layout: &FieldLayout) -> usize {
        self.members.iter().map(|m| m.kernels(layout)).sum()
    }


    fn parameters_read(&self, layout: &FieldLayout) -> GraphResult<Vec<u64>> {
        let mut ids = Vec::new();
        for member in &self.members {
            ids.extend(member.parameters_read(layout)?);
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    fn evaluate(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()> {
        match self.location {
            LocationKind::CellCentre => self.run::<CellCentre>(context),
            LocationKind::XFace => self.run::<XFace>(context),
            LocationKind::YFace => self.run::<YFace>(context),
            LocationKind::ZFace => self.run::<ZFace>(context),
        }
    }
}

impl HorizontalGroup {
    fn run<L: GraphLocation>(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()> {
        let expression = context.expression.to_string();
        let unavailable = |tag: &Tag, reason: &str| GraphError::FieldUnavailable {
            tag: tag.clone(),
            expression: expression.clone(),
            reason: reason.to_string(),
        };
        let region = match context.region {
            Some(region) => Region::Box(region),
            None => Region::Interior,
        };
        let parallelism = context.parallelism;
        let (bindings, outputs) = context.split_for_group()?;
        let bound: Vec<&dyn BoundField> = bindings.iter().map(|b| b as &dyn BoundField).collect();
        let languages: Vec<&LanguageExpression> = self.members().collect();
        // Each member's target, in member order (the guards are distinct,
        // so their `&mut` borrows are too).
        let mut targets: Vec<Option<&mut AnyField>> = languages.iter().map(|_| None).collect();
        for (tag, field) in outputs {
            if let Some(m) = languages.iter().position(|l| l.target() == tag) {
                targets[m] = field;
            }
        }
        let mut thens = Vec::with_capacity(languages.len());
        let mut members = Vec::with_capacity(languages.len());
        for (language, target) in languages.iter().zip(&mut targets) {
            let tag = language.target();
            let field = target
                .as_deref_mut()
                .ok_or_else(|| unavailable(tag, "it has not been allocated"))?;
            let actual = field.kind();
            let field = L::get_mut(field).ok_or_else(|| GraphError::WrongLocation {
                tag: tag.clone(),
                actual,
                requested: L::KIND,
            })?;
            thens.push(language.fused_assignments(field.layout())?);
            members.push((language, field));
        }
        let mut assignments: Vec<NodeAssignment<'_, L>> = members
            .into_iter()
            .zip(&thens)
            .map(|((language, field), then)| NodeAssignment {
                target: field,
                target_leaf: language.target().id(),
                root: language.root(),
                options: AssignOptions {
                    region,
                    parallelism,
                    check_finite: language.checks_finite(),
                    ..Default::default()
                },
                then,
            })
            .collect();
        assign_nodes_then(&mut assignments, &bound).map_err(|error| match &error {
            // Name the member whose value is not finite, as its own node
            // would have been named.
            OperatorError::NotFinite { target, .. } => GraphError::Expression {
                expression: target.clone(),
                source: Box::new(GraphError::Operator(error)),
            },
            _ => GraphError::Operator(error),
        })
    }
}

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
        let group = HorizontalGroup { members, location };
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
