//! The runtime expression IR: one tree of [`Node`]s per expression, the single
//! source of truth for CPU evaluation, CUDA code generation, fusion and
//! ghost/stencil-extent analysis.
//!
//! Nodes are immutable and shared (`Arc`), so building and combining
//! expressions is cheap. Field leaves carry the field's id, name and
//! location; the data is bound at evaluation time. A tree prints as the
//! mathematics it stands for ([`std::fmt::Display`]) and hashes by structure
//! ([`Node::structural_hash`]: field leaves by order of first appearance, not
//! by name), which is the key for caching compiled kernels.

use crate::mask::PointSet;
use crate::parameter::ParameterCell;
use crate::pointwise::{BinaryOp, UnaryOp};
use crate::stencil::StencilOp;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use watershed_fields::LocationKind;

/// One node of an expression tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// A field, read at the point being computed.
    Field {
        /// [`watershed_fields::SpatialField::id`] of the field.
        id: u64,
        /// Its name, for messages and printing.
        name: Arc<str>,
        /// Its location.
        location: LocationKind,
    },
    /// A number.
    Constant(f64),
    /// A scalar parameter, read when an evaluation starts (the same value
    /// at every point; fits any location).
    Parameter {
        /// The shared value.
        cell: Arc<ParameterCell>,
    },
    /// The x, y or z coordinate of the point, at `location`.
    Coordinate {
        /// 0, 1, 2 for x, y, z.
        axis: usize,
        /// Location of the points.
        location: LocationKind,
    },
    /// 1.0 on the points of a set, 0.0 elsewhere.
    Mask {
        /// The points.
        set: Arc<PointSet>,
        /// Location of the points.
        location: LocationKind,
    },
    /// A function of one argument.
    Unary {
        /// The function.
        op: UnaryOp,
        /// Its argument.
        arg: Arc<Node>,
    },
    /// A function of two arguments.
    Binary {
        /// The function.
        op: BinaryOp,
        /// First argument.
        left: Arc<Node>,
        /// Second argument.
        right: Arc<Node>,
    },
    /// `if_true` where `condition` is non-zero, `if_false` elsewhere.
    Select {
        /// The condition (a boolean expression).
        condition: Arc<Node>,
        /// Value where it holds.
        if_true: Arc<Node>,
        /// Value elsewhere.
        if_false: Arc<Node>,
    },
    /// A stencil applied to its arguments.
    Stencil {
        /// The stencil.
        op: StencilOp,
        /// Its arguments (see [`StencilOp::arity`]).
        args: SmallVec<[Arc<Node>; 2]>,
    },
}

impl Node {
    /// The location of the node's values; `None` for constants, which fit
    /// any location.
    pub fn location(&self) -> Option<LocationKind> {
        match self {
            Node::Field { location, .. }
            | Node::Coordinate { location, .. }
            | Node::Mask { location, .. } => Some(*location),
            Node::Constant(_) | Node::Parameter { .. } => None,
            Node::Unary { arg, .. } => arg.location(),
            Node::Binary { left, right, .. } => left.location().or(right.location()),
            Node::Select {
                condition,
                if_true,
                if_false,
            } => if_true
                .location()
                .or(if_false.location())
                .or(condition.location()),
            Node::Stencil { op, args } => op.destination().or_else(|| args[0].location()),
        }
    }

    /// Children, in order.
    pub fn children(&self) -> SmallVec<[&Arc<Node>; 3]> {
        match self {
            Node::Field { .. }
            | Node::Constant(_)
            | Node::Parameter { .. }
            | Node::Coordinate { .. }
            | Node::Mask { .. } => SmallVec::new(),
            Node::Unary { arg, .. } => SmallVec::from_iter([arg]),
            Node::Binary { left, right, .. } => SmallVec::from_iter([left, right]),
            Node::Select {
                condition,
                if_true,
                if_false,
            } => SmallVec::from_iter([condition, if_true, if_false]),
            Node::Stencil { args, .. } => args.iter().collect(),
        }
    }

    /// Number of nodes in the tree (shared subtrees counted each time).
    pub fn size(&self) -> usize {
        1 + self.children().iter().map(|c| c.size()).sum::<usize>()
    }

    /// The distinct fields read, in order of first appearance: (id, name, location).
    pub fn fields(&self) -> Vec<(u64, Arc<str>, LocationKind)> {
        let mut found: Vec<(u64, Arc<str>, LocationKind)> = Vec::new();
        self.visit(&mut |node| {
            if let Node::Field { id, name, location } = node
                && !found.iter().any(|(seen, _, _)| seen == id)
            {
                found.push((*id, name.clone(), *location));
            }
        });
        found
    }

    /// The distinct parameters read, in order of first appearance.
    pub fn parameters(&self) -> Vec<Arc<ParameterCell>> {
        let mut found: Vec<Arc<ParameterCell>> = Vec::new();
        self.visit(&mut |node| {
            if let Node::Parameter { cell } = node
                && !found.iter().any(|seen| seen.id() == cell.id())
            {
                found.push(cell.clone());
            }
        });
        found
    }

    /// True when `other` has the same structure as this tree: the same
    /// operations, constants and locations, and the same pattern of repeated
    /// fields and parameters (their ids and names may differ). Two such
    /// trees lower to the same kernel.
    pub fn same_structure(&self, other: &Node) -> bool {
        fn walk(
            a: &Node,
            b: &Node,
            fields: &mut HashMap<u64, u64>,
            parameters: &mut HashMap<u64, u64>,
        ) -> bool {
            let leaf_matches = match (a, b) {
                (
                    Node::Field {
                        id: x, location: l, ..
                    },
                    Node::Field {
                        id: y, location: m, ..
                    },
                ) => l == m && *fields.entry(*x).or_insert(*y) == *y,
                (Node::Parameter { cell: x }, Node::Parameter { cell: y }) => {
                    *parameters.entry(x.id()).or_insert(y.id()) == y.id()
                }
                (Node::Constant(x), Node::Constant(y)) => x.to_bits() == y.to_bits(),
                (
                    Node::Coordinate { axis, location },
                    Node::Coordinate {
                        axis: b_axis,
                        location: b_location,
                    },
                ) => axis == b_axis && location == b_location,
                (
                    Node::Mask { set, location },
                    Node::Mask {
                        set: s,
                        location: l,
                    },
                ) => set == s && location == l,
                (Node::Unary { op, .. }, Node::Unary { op: o, .. }) => op == o,
                (Node::Binary { op, .. }, Node::Binary { op: o, .. }) => op == o,
                (Node::Select { .. }, Node::Select { .. }) => true,
                (Node::Stencil { op, .. }, Node::Stencil { op: o, .. }) => op == o,
                _ => false,
            };
            if !leaf_matches {
                return false;
            }
            let (x, y) = (a.children(), b.children());
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(c, d)| walk(c, d, fields, parameters))
        }
        walk(self, other, &mut HashMap::new(), &mut HashMap::new())
    }

    /// A hash of the tree's value: like [`Self::structural_hash`], but
    /// field and parameter leaves hash by their ids, so two trees with equal
    /// hashes (confirmed with `==`) compute the same values at every point.
    /// Common-subexpression elimination keys on it. `memo` caches the hash
    /// of each subtree by address (trees share subtrees), so hashing every
    /// subtree of a tree costs one pass.
    pub fn value_hash(&self, memo: &mut HashMap<*const Node, u64>) -> u64 {
        let key = self as *const Node;
        if let Some(&hash) = memo.get(&key) {
            return hash;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::mem::discriminant(self).hash(&mut h);
        match self {
            Node::Field { id, location, .. } => (id, location).hash(&mut h),
            Node::Parameter { cell } => cell.id().hash(&mut h),
            Node::Constant(value) => value.to_bits().hash(&mut h),
            Node::Coordinate { axis, location } => (axis, location).hash(&mut h),
            Node::Mask { set, location } => (set, location).hash(&mut h),
            Node::Unary { op, .. } => op.hash(&mut h),
            Node::Binary { op, .. } => op.hash(&mut h),
            Node::Select { .. } => {}
            Node::Stencil { op, .. } => op.hash(&mut h),
        }
        for child in self.children() {
            child.value_hash(memo).hash(&mut h);
        }
        let hash = h.finish();
        memo.insert(key, hash);
        hash
    }

    /// This tree with every subtree equal to `pattern` (by value, `==`)
    /// replaced by `replacement`; subtrees that contain no match are shared,
    /// not rebuilt. Common-subexpression elimination uses it to read a
    /// hoisted subexpression's field instead of recomputing it.
    pub fn replace_subtree(self: &Arc<Node>, pattern: &Node, replacement: &Arc<Node>) -> Arc<Node> {
        if self.as_ref() == pattern {
            return replacement.clone();
        }
        let children = self.children();
        if children.is_empty() {
            return self.clone();
        }
        let replaced: SmallVec<[Arc<Node>; 3]> = children
            .iter()
            .map(|c| c.replace_subtree(pattern, replacement))
            .collect();
        if children
            .iter()
            .zip(&replaced)
            .all(|(old, new)| Arc::ptr_eq(old, new))
        {
            return self.clone();
        }
        Arc::new(self.with_children(replaced.into_iter().collect()))
    }

    /// This node with its children replaced (in [`Self::children`] order).
    fn with_children(&self, mut children: SmallVec<[Arc<Node>; 3]>) -> Node {
        let mut next = || children.remove(0);
        match self {
            Node::Field { .. }
            | Node::Constant(_)
            | Node::Parameter { .. }
            | Node::Coordinate { .. }
            | Node::Mask { .. } => self.clone(),
            Node::Unary { op, .. } => Node::Unary {
                op: *op,
                arg: next(),
            },
            Node::Binary { op, .. } => {
                let left = next();
                Node::Binary {
                    op: *op,
                    left,
                    right: next(),
                }
            }
            Node::Select { .. } => {
                let condition = next();
                let if_true = next();
                Node::Select {
                    condition,
                    if_true,
                    if_false: next(),
                }
            }
            Node::Stencil { op, args } => Node::Stencil {
                op: *op,
                args: (0..args.len()).map(|_| next()).collect(),
            },
        }
    }

    /// This tree with every leaf of field `id` replaced by `replacement`
    /// (leaves are shared, inner nodes rebuilt). Graph fusion
    /// uses it to inline a producer's expression into its consumer.
    pub fn substitute(self: &Arc<Node>, id: u64, replacement: &Arc<Node>) -> Arc<Node> {
        self.map_leaves(&|leaf| match leaf {
            Node::Field { id: found, .. } if *found == id => Some(replacement.clone()),
            _ => None,
        })
    }

    /// This tree with every parameter leaf replaced by the constant `value`
    /// gives it (other leaves are shared, inner nodes rebuilt).
    pub fn with_parameter_values(
        self: &Arc<Node>,
        value: &impl Fn(&ParameterCell) -> f64,
    ) -> Arc<Node> {
        self.map_leaves(&|leaf| match leaf {
            Node::Parameter { cell } => Some(Arc::new(Node::Constant(value(cell)))),
            _ => None,
        })
    }

    /// This tree with each leaf for which `replace` returns a node replaced
    /// by it; inner nodes are rebuilt around their new children.
    fn map_leaves(self: &Arc<Node>, replace: &impl Fn(&Node) -> Option<Arc<Node>>) -> Arc<Node> {
        let swap = |child: &Arc<Node>| child.map_leaves(replace);
        match self.as_ref() {
            Node::Field { .. }
            | Node::Constant(_)
            | Node::Parameter { .. }
            | Node::Coordinate { .. }
            | Node::Mask { .. } => replace(self).unwrap_or_else(|| self.clone()),
            Node::Unary { op, arg } => Arc::new(Node::Unary {
                op: *op,
                arg: swap(arg),
            }),
            Node::Binary { op, left, right } => Arc::new(Node::Binary {
                op: *op,
                left: swap(left),
                right: swap(right),
            }),
            Node::Select {
                condition,
                if_true,
                if_false,
            } => Arc::new(Node::Select {
                condition: swap(condition),
                if_true: swap(if_true),
                if_false: swap(if_false),
            }),
            Node::Stencil { op, args } => Arc::new(Node::Stencil {
                op: *op,
                args: args.iter().map(swap).collect(),
            }),
        }
    }

    /// Calls `f` on every node, parents before children.
    pub fn visit(&self, f: &mut impl FnMut(&Node)) {
        f(self);
        for child in self.children() {
            child.visit(f);
        }
    }

    /// A hash of the tree's structure: operations, constants, locations and
    /// which leaves are the same field, but not the fields' ids or names.
    /// Two assignments with equal hashes can share a compiled kernel.
    pub fn structural_hash(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let mut slots = HashMap::new();
        let mut parameters = HashMap::new();
        self.hash_structure(&mut hasher, &mut slots, &mut parameters);
        hasher.finish()
    }

    fn hash_structure(
        &self,
        h: &mut impl Hasher,
        slots: &mut HashMap<u64, usize>,
        parameters: &mut HashMap<u64, usize>,
    ) {
        std::mem::discriminant(self).hash(h);
        match self {
            Node::Field { id, location, .. } => {
                let next = slots.len();
                slots.entry(*id).or_insert(next).hash(h);
                location.hash(h);
            }
            Node::Parameter { cell } => {
                let next = parameters.len();
                parameters.entry(cell.id()).or_insert(next).hash(h);
            }
            Node::Constant(value) => value.to_bits().hash(h),
            Node::Coordinate { axis, location } => (axis, location).hash(h),
            Node::Mask { set, location } => (set, location).hash(h),
            Node::Unary { op, .. } => op.hash(h),
            Node::Binary { op, .. } => op.hash(h),
            Node::Select { .. } => {}
            Node::Stencil { op, .. } => op.hash(h),
        }
        for child in self.children() {
            child.hash_structure(h, slots, parameters);
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Field { name, .. } => write!(f, "{name}"),
            Node::Constant(value) => write!(f, "{value:?}"),
            Node::Parameter { cell } => write!(f, "{}", cell.name()),
            Node::Coordinate { axis, .. } => write!(f, "{}", crate::stencil::axis_name(*axis)),
            Node::Mask { set, .. } => write!(f, "mask({})", set.describe()),
            Node::Unary {
                op: UnaryOp::Negate,
                arg,
            } => write!(f, "-({arg})"),
            Node::Unary { op, arg } => write!(f, "{}({arg})", op.name()),
            Node::Binary { op, left, right } if op.is_infix() => {
                write!(f, "({left} {} {right})", op.name())
            }
            Node::Binary { op, left, right } => write!(f, "{}({left}, {right})", op.name()),
            Node::Select {
                condition,
                if_true,
                if_false,
            } => write!(f, "select({condition}, {if_true}, {if_false})"),
            Node::Stencil { op, args } => {
                write!(f, "{}(", op.name())?;
                for (i, arg) in args.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{arg}")?;
                }
                write!(f, ")")
            }
        }
    }
}
