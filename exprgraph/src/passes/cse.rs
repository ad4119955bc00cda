//! Common-subexpression elimination across expressions: a costly
//! subexpression that several language nodes compute at their own points
//! (the coupled source `sum_j exp(phi_j)` written out in each of N
//! equations) is hoisted into one new node that computes it once into a
//! scratch field, and every node that contained it reads that field
//! instead.
//!
//! * Identity is by value ([`Node::value_hash`], confirmed with `==`): the
//!   same operations on the same fields, parameters and constants.
//! * Only subtrees evaluated at the node's own points are candidates: those
//!   reached from the root through pointwise operations (a stencil node is
//!   a candidate, its arguments, read at shifted points, are not). So the
//!   hoisted field is read at offset zero and the extent analysis gives its
//!   node the union of its readers' regions, with no ghost layers beyond
//!   what the readers already needed from the inputs.
//! * Inter-grid operators (restriction, prolongation) are never hoisted:
//!   their result lives on the reader's grid but their reads on another.
//! * A subtree is hoisted only when it is worth a store and a load per
//!   point and reader ([`cost`] at least [`MINIMUM_COST`]); repeats inside
//!   one node are left to the lowering, which computes them once per point
//!   anyway (`Kernel::compile` shares equal subtrees).
//! * The candidate saving the most work (cost times extra readers) goes
//!   first, and the pass repeats until none is left, so the largest shared
//!   subexpression is hoisted whole and its parts only where they are also
//!   shared elsewhere. Every hoist shrinks the graph's total tree size, so
//!   the pass ends.
//!
//! Values are those of the original graph to rounding, not bit for bit:
//! the hoisted node evaluates the same tree at the same points, but a
//! reader no longer folds the subtree's sums into its own linear form
//! (`a + (b + c)` instead of `a + b + c`); the tests bound the difference
//! by 1e-14 relative to the field's magnitude, as for fusion.

use crate::error::GraphResult;
use crate::expression::LanguageExpression;
use crate::node::NodeForm;
use crate::node::{FieldInfo, GraphNode, Target, checked_field_bytes, node_of};
use crate::tag::Tag;
use std::collections::HashMap;
use std::sync::Arc;
use watershed_fields::{LocationKind, Patch};
use watershed_operators::ir::Node;
use watershed_operators::stencil::StencilOp;
use watershed_operators::{BinaryOp, UnaryOp};

/// The least [`cost`] of a hoisted subexpression: one transcendental
/// function, or about a dozen cheap operations, per point.
pub const MINIMUM_COST: u32 = 16;

/// Rough cost per point of evaluating `node` (arithmetic operations, a
/// transcendental function counting 20), for deciding what to hoist.
pub fn cost(node: &Node) -> u32 {
    let own = match node {
        Node::Field { .. }
        | Node::Constant(_)
        | Node::Parameter { .. }
        | Node::Coordinate { .. }
        | Node::Mask { .. } => 0,
        Node::Unary { op, .. } => match op {
            UnaryOp::Exp | UnaryOp::Log | UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Tanh => 20,
            UnaryOp::Sqrt => 4,
            _ => 1,
        },
        Node::Binary { op, .. } => match op {
            BinaryOp::Pow => 40,
            BinaryOp::Divide => 4,
            _ => 1,
        },
        Node::Select { .. } => 1,
        Node::Stencil { args, .. } => 2 * args.len() as u32 + 1,
    };
    node.children()
        .iter()
        .fold(own, |total, child| total.saturating_add(cost(child)))
}

/// True when `node` may be computed by a node of its own at its readers'
/// points: it has no inter-grid operator (and, checked by the caller, a
/// location).
fn hoistable(node: &Node) -> bool {
    let mut inter_grid = false;
    node.visit(&mut |n| {
        if let Node::Stencil {
            op: StencilOp::Restrict { .. } | StencilOp::Prolongate { .. },
            ..
        } = n
        {
            inter_grid = true;
        }
    });
    !inter_grid
}

/// The subtrees of `root` evaluated at the root's points, parents first.
fn pointwise_subtrees(root: &Arc<Node>, found: &mut Vec<Arc<Node>>) {
    found.push(root.clone());
    match root.as_ref() {
        Node::Unary { .. } | Node::Binary { .. } | Node::Select { .. } => {
            for child in root.children() {
                pointwise_subtrees(child, found);
            }
        }
        _ => {}
    }
}

/// A candidate: the subtree and the nodes that contain it.
struct Candidate {
    tree: Arc<Node>,
    location: LocationKind,
    cost: u32,
    target: Target,
    readers: Vec<usize>,
}

/// Hoists shared subexpressions out of the language nodes of `nodes`
/// (modifiers excluded), adding a node and a scratch field per hoist;
/// returns how many were hoisted.
pub(crate) fn eliminate(
    nodes: &mut Vec<GraphNode>,
    fields: &mut Vec<FieldInfo>,
    slot_of: &mut HashMap<Tag, usize>,
    patch: &Patch,
) -> GraphResult<usize> {
    let mut hoisted = 0;
    while let Some(best) = best_candidate(nodes) {
        let location = best.location;
        let tag = fresh_tag(slot_of);
        let info = FieldInfo {
            tag: tag.clone(),
            location,
            persistent: false,
            placeholder: false,
            bytes: 0,
        };
        let bytes = checked_field_bytes(patch, &info)?;
        fields.push(FieldInfo { bytes, ..info });
        slot_of.insert(tag.clone(), fields.len() - 1);

        let leaf = Arc::new(Node::Field {
            id: tag.id(),
            name: tag.name.clone(),
            location,
        });
        let mut inputs: Vec<Tag> = Vec::new();
        for &reader in &best.readers {
            // Candidates come from language nodes only.
            let Some(language) = nodes[reader].form.language() else {
                continue;
            };
            for t in language.requires_tags() {
                if !inputs.contains(t) {
                    inputs.push(t.clone());
                }
            }
            let rewritten = language.with_subtree_read_from(&best.tree, &leaf, &tag);
            let mut node = node_of(
                NodeForm::Language(Arc::new(rewritten)),
                false,
                slot_of,
                fields,
                patch,
            )?;
            node.target = nodes[reader].target;
            node.fused_from = std::mem::take(&mut nodes[reader].fused_from);
            nodes[reader] = node;
        }
        let producer = LanguageExpression::hoisted(tag, location, best.tree.clone(), inputs);
        let mut node = node_of(
            NodeForm::Language(Arc::new(producer)),
            false,
            slot_of,
            fields,
            patch,
        )?;
        node.target = best.target;
        // Before its first reader, so that plans listing nodes in order read
        // naturally.
        let first = best.readers.iter().copied().min().unwrap_or(nodes.len());
        nodes.insert(first, node);
        hoisted += 1;
    }
    Ok(hoisted)
}

/// A tag no field of the graph has yet.
fn fresh_tag(slot_of: &HashMap<Tag, usize>) -> Tag {
    let mut k = 0usize;
    loop {
        let tag = Tag::none(&format!("cse{k}"));
        if !slot_of.contains_key(&tag) {
            return tag;
        }
        k += 1;
    }
}

/// The shared subexpression whose hoisting saves the most work, if any is
/// worth it. Deterministic: ties go to the one found first.
fn best_candidate(nodes: &[GraphNode]) -> Option<Candidate> {
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut index: HashMap<(u64, Target), Vec<usize>> = HashMap::new();
    for (n, node) in nodes.iter().enumerate() {
        if node.modifier {
            continue;
        }
        let Some(language) = node.form.language() else {
            continue;
        };
        let mut subtrees = Vec::new();
        pointwise_subtrees(language.root(), &mut subtrees);
        let mut hashes = HashMap::new();
        for tree in subtrees {
            let c = cost(&tree);
            if c < MINIMUM_COST || !hoistable(&tree) {
                continue;
            }
            let Some(location) = tree.location() else {
                continue;
            };
            let key = (tree.value_hash(&mut hashes), node.target);
            let bucket = index.entry(key).or_default();
            match bucket
                .iter()
                .copied()
                .find(|&i| candidates[i].tree.as_ref() == tree.as_ref())
            {
                Some(i) => {
                    if !candidates[i].readers.contains(&n) {
                        candidates[i].readers.push(n);
                    }
                }
                None => {
                    bucket.push(candidates.len());
                    candidates.push(Candidate {
                        tree,
                        location,
                        cost: c,
                        target: node.target,
                        readers: vec![n],
                    });
                }
            }
        }
    }
    let saving = |c: &Candidate| u64::from(c.cost) * (c.readers.len() as u64 - 1);
    let mut best: Option<Candidate> = None;
    for candidate in candidates {
        if candidate.readers.len() < 2 {
            continue;
        }
        if best.as_ref().is_none_or(|b| saving(&candidate) > saving(b)) {
            best = Some(candidate);
        }
    }
    best
}
