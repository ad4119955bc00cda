//! Collecting a graph's nodes and fields: a depth-first walk from the root
//! tags through the factory's producers, modifiers and reductions that
//! reports a missing producer (and who required it) or a cycle (printed
//! tag by tag).

use crate::error::{GraphError, GraphResult};
use crate::expression::Expression;
use crate::factory::Factory;
use crate::node::{FieldInfo, GraphNode, NodeForm, checked_field_bytes, node_of};
use crate::tag::Tag;
use std::collections::HashMap;
use watershed_fields::{FieldLayout, LocationKind, Patch};

/// The fields (with the slot of each tag) and the nodes that compute
/// `roots` on `patch`, in the order the walk met them.
pub(crate) type Collected = (Vec<FieldInfo>, HashMap<Tag, usize>, Vec<GraphNode>);

/// Walks from `roots` through `factory` (see the module docs); a modifier
/// attached to a tag the graph never meets is refused.
pub(crate) fn collect(factory: &Factory, roots: &[Tag], patch: &Patch) -> GraphResult<Collected> {
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
        fields,
        slot_of,
        nodes: collected,
        ..
    } = collector;

    let nodes: Vec<GraphNode> = collected
        .into_iter()
        .map(|(expression, modifier)| node_of(expression, modifier, &slot_of, &fields, patch))
        .collect::<GraphResult<_>>()?;

    Ok((fields, slot_of, nodes))
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
