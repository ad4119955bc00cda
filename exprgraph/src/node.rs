//! The elements of a graph: its nodes (with the form of the expression
//! each runs), the fields they read and write, and the edges between them.
//!
//! The graph sees into four built-in forms: it fuses language expressions
//! and modifiers, orders reductions by the parameters they write, groups
//! language nodes side by side and compiles all of them for the CPU or a
//! GPU. Anything else is native code behind the [`Expression`] protocol.
//! [`NodeForm`] names the form once, when the expression is
//! registered, so the passes, the placement and the executors `match` on
//! it instead of asking the trait object what it is.

use crate::error::{GraphError, GraphResult};
use crate::expression::{Expression, LanguageExpression, LanguageModifier};
use crate::group::HorizontalGroup;
use crate::reduction::LanguageReduction;
use crate::tag::Tag;
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use watershed_fields::{FieldLayout, IndexBox, LocationKind, Patch};

/// The expression of one graph node.
///
/// ```
/// use watershed_exprgraph::{LanguageExpression, NodeForm, Tag};
/// use watershed_fields::CellCentre;
/// let u = Tag::none("u");
/// let double = LanguageExpression::new::<CellCentre>(Tag::none("v"), move |s| s.field(&u) * 2.0);
/// let node = NodeForm::from_expression(double);
/// assert!(node.language().is_some());
/// assert_eq!(node.expression().name(), "v");
/// ```
#[derive(Clone)]
pub enum NodeForm {
    /// A field written in the expression language.
    Language(Arc<LanguageExpression>),
    /// A language modifier (boundary conditions) of a field.
    Modifier(Arc<LanguageModifier>),
    /// A reduction into a parameter.
    Reduction(Arc<LanguageReduction>),
    /// Independent language nodes run as one loop nest (horizontal fusion).
    Group(Arc<HorizontalGroup>),
    /// Code the graph cannot see into: native Rust, an iterative solve.
    Native(Arc<dyn Expression>),
}

impl NodeForm {
    /// The form of `expression`: a built-in form when it is one, native
    /// otherwise. This is where a registered expression's concrete type is
    /// looked at, once.
    pub fn from_expression<E: Expression + 'static>(expression: E) -> Self {
        let any: Box<dyn Any> = Box::new(expression);
        let any = match any.downcast::<LanguageExpression>() {
            Ok(language) => return NodeForm::Language(Arc::from(language)),
            Err(other) => other,
        };
        let any = match any.downcast::<LanguageModifier>() {
            Ok(modifier) => return NodeForm::Modifier(Arc::from(modifier)),
            Err(other) => other,
        };
        let any = match any.downcast::<LanguageReduction>() {
            Ok(reduction) => return NodeForm::Reduction(Arc::from(reduction)),
            Err(other) => other,
        };
        let any = match any.downcast::<HorizontalGroup>() {
            Ok(group) => return NodeForm::Group(Arc::from(group)),
            Err(other) => other,
        };
        match any.downcast::<E>() {
            Ok(native) => NodeForm::Native(Arc::new(*native)),
            // `any` was made from an `E` two lines above.
            Err(_) => unreachable!("a boxed value downcasts to its own type"),
        }
    }

    /// The node protocol (name, fields, evaluation) of whichever form.
    pub fn expression(&self) -> &dyn Expression {
        match self {
            NodeForm::Language(e) => e.as_ref(),
            NodeForm::Modifier(e) => e.as_ref(),
            NodeForm::Reduction(e) => e.as_ref(),
            NodeForm::Group(e) => e.as_ref(),
            NodeForm::Native(e) => e.as_ref(),
        }
    }

    /// The language expression, if the node is one.
    pub fn language(&self) -> Option<&LanguageExpression> {
        match self {
            NodeForm::Language(e) => Some(e),
            _ => None,
        }
    }

    /// The language modifier, if the node is one.
    pub fn modifier(&self) -> Option<&LanguageModifier> {
        match self {
            NodeForm::Modifier(e) => Some(e),
            _ => None,
        }
    }

    /// The reduction, if the node is one.
    pub fn reduction(&self) -> Option<&LanguageReduction> {
        match self {
            NodeForm::Reduction(e) => Some(e),
            _ => None,
        }
    }

    /// The horizontal group, if the node is one.
    pub fn group(&self) -> Option<&HorizontalGroup> {
        match self {
            NodeForm::Group(e) => Some(e),
            _ => None,
        }
    }

    /// The language expressions the node runs as its kernels' bodies: the
    /// expression itself, or a group's members in order; none for the
    /// other forms.
    pub fn language_members(&self) -> Vec<&LanguageExpression> {
        match self {
            NodeForm::Language(e) => vec![e.as_ref()],
            NodeForm::Group(group) => group.members().collect(),
            _ => Vec::new(),
        }
    }
}

impl std::fmt::Debug for NodeForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let form = match self {
            NodeForm::Language(_) => "Language",
            NodeForm::Modifier(_) => "Modifier",
            NodeForm::Reduction(_) => "Reduction",
            NodeForm::Group(_) => "Group",
            NodeForm::Native(_) => "Native",
        };
        write!(f, "{form}({})", self.expression().name())
    }
}

/// Where a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// CPU threads.
    Cpu,
    /// A CUDA stream on GPU `k` (language nodes, and native nodes or
    /// solves that can run there; see [`crate::placement`]).
    Gpu(usize),
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

/// A node for `expression`, with its field slots.
pub(crate) fn node_of(
    form: NodeForm,
    modifier: bool,
    slot_of: &HashMap<Tag, usize>,
    fields: &[FieldInfo],
    patch: &Patch,
) -> GraphResult<GraphNode> {
    // A reduction keeps its last raw result and its prepared kernel: each
    // graph built from one factory (the patches of a `PatchedGraphs`)
    // needs its own, or every patch would report the last one's partial
    // result.
    let form = match form {
        NodeForm::Reduction(shared) => NodeForm::Reduction(Arc::new(shared.as_ref().clone())),
        other => other,
    };
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
pub(crate) fn check_acyclic(
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
                None => node.form.reduction().map(|r| r.result().clone()),
            }
        })
        .collect();
    if let Some(first) = cycle.first().cloned() {
        cycle.push(first);
    }
    Err(GraphError::Cycle { cycle })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expression::NativeExpression;
    use crate::tag::Tag;
    use watershed_fields::{CellCentre, LocationKind};

    #[test]
    fn each_form_is_named_from_its_type() {
        let u = Tag::none("u");
        let w = u.clone();
        let language =
            LanguageExpression::new::<CellCentre>(Tag::none("v"), move |s| s.field(&w) + 1.0);
        assert!(matches!(
            NodeForm::from_expression(language),
            NodeForm::Language(_)
        ));
        let native = NativeExpression::new(
            "copy",
            vec![(Tag::none("c"), LocationKind::CellCentre)],
            vec![u],
            |_| Ok(()),
        );
        let node = NodeForm::from_expression(native);
        assert!(matches!(node, NodeForm::Native(_)));
        assert!(node.language().is_none() && node.reduction().is_none());
        assert_eq!(format!("{node:?}"), "Native(copy)");
    }
}
