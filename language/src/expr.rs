//! The typed front end: expressions whose location is a type parameter, so
//! that mixing cell and face values without an operator between them does not
//! compile.
//!
//! An [`Expr<'a, L>`] is an IR tree plus the fields it reads (borrowed for
//! `'a`). Arithmetic operators, math functions, comparisons ([`Condition`]),
//! `cond` chains and masks build new expressions; nothing is evaluated until
//! an assignment (`Assign` of `watershed-operators`) or a reduction.

use crate::ir::Node;
use crate::mask::Mask;
use crate::parameter::Parameter;
use crate::pointwise::{BinaryOp, UnaryOp};
use std::marker::PhantomData;
use std::ops::{Add, BitAnd, BitOr, Div, Mul, Neg, Not, Sub};
use std::sync::Arc;
use watershed_fields::{Device, FieldLayout, FieldResult, GpuBuffer, Location, SpatialField};

/// A field an expression reads, seen without its location type.
pub trait BoundField: Sync {
    /// [`SpatialField::id`].
    fn id(&self) -> u64;
    /// The field's name.
    fn name(&self) -> &str;
    /// The field's layout.
    fn layout(&self) -> &FieldLayout;
    /// Its CPU values (errors when the CPU location is not valid).
    fn cpu_values(&self) -> FieldResult<&[f64]>;
    /// Its memory on GPU `device`, for reading (errors when that location
    /// is not valid).
    fn gpu_buffer(&self, device: Device) -> FieldResult<GpuBuffer>;
}

impl<L: Location> BoundField for SpatialField<L, f64> {
    fn id(&self) -> u64 {
        SpatialField::id(self)
    }
    fn name(&self) -> &str {
        SpatialField::name(self)
    }
    fn layout(&self) -> &FieldLayout {
        SpatialField::layout(self)
    }
    fn cpu_values(&self) -> FieldResult<&[f64]> {
        self.values()
    }
    fn gpu_buffer(&self, device: Device) -> FieldResult<GpuBuffer> {
        SpatialField::gpu_buffer(self, device)
    }
}

/// The fields an expression reads, without duplicates. (A `Vec`, not a
/// `SmallVec`: it must be covariant in `'a` so that expressions borrowing
/// fields of different lifetimes combine.)
pub type Bindings<'a> = Vec<&'a dyn BoundField>;

fn merge<'a>(mut a: Bindings<'a>, b: &Bindings<'a>) -> Bindings<'a> {
    for field in b {
        if !a.iter().any(|f| f.id() == field.id()) {
            a.push(*field);
        }
    }
    a
}

/// A value at every point of location `L`.
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_language::{exp, Expr};
/// let grid = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])?;
/// let phi = SpatialField::<CellCentre>::new("phi", &grid.whole_domain(1), Device::Cpu)?;
/// let source: Expr<CellCentre> = 2.0 * exp(-Expr::from(&phi)) + 1.0;
/// assert_eq!(source.to_string(), "((2.0 * exp(-(phi))) + 1.0)");
/// # Ok::<(), watershed_fields::FieldError>(())
/// ```
pub struct Expr<'a, L: Location> {
    pub(crate) node: Arc<Node>,
    pub(crate) fields: Bindings<'a>,
    _location: PhantomData<L>,
}

impl Parameter {
    /// The parameter as an expression of any location (it has the same
    /// value at every point; the expression's leaf holds its cell, so a
    /// new value reaches every kernel that reads it).
    pub fn expr<'a, L: Location>(&self) -> Expr<'a, L> {
        Expr::new(
            Node::Parameter {
                cell: self.cell().clone(),
            },
            Vec::new(),
        )
    }
}

impl<L: Location> Clone for Expr<'_, L> {
    fn clone(&self) -> Self {
        Expr {
            node: self.node.clone(),
            fields: self.fields.clone(),
            _location: PhantomData,
        }
    }
}

impl<L: Location> std::fmt::Debug for Expr<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expr<{}>({})", L::KIND, self.node)
    }
}

impl<L: Location> std::fmt::Display for Expr<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.node)
    }
}

impl<'a, L: Location> Expr<'a, L> {
    pub(crate) fn new(node: Node, fields: Bindings<'a>) -> Self {
        Expr {
            node: Arc::new(node),
            fields,
            _location: PhantomData,
        }
    }

    /// A leaf for a field that is bound only at evaluation time (see
    /// `assign_node` of `watershed-operators`): the expression graph uses this for fields
    /// named by tags. `id` must match the [`BoundField::id`] supplied then.
    pub fn symbol(id: u64, name: &str) -> Self {
        Expr::new(
            Node::Field {
                id,
                name: name.into(),
                location: L::KIND,
            },
            Vec::new(),
        )
    }

    /// A constant.
    pub fn constant(value: f64) -> Self {
        Expr::new(Node::Constant(value), Vec::new())
    }

    /// The IR tree.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// The fields the expression reads.
    pub fn fields(&self) -> &[&'a dyn BoundField] {
        &self.fields
    }

    pub(crate) fn unary(self, op: UnaryOp) -> Self {
        Expr::new(Node::Unary { op, arg: self.node }, self.fields)
    }

    pub(crate) fn binary<M: Location>(self, op: BinaryOp, other: Expr<'a, L>) -> Expr<'a, M> {
        let fields = merge(self.fields, &other.fields);
        Expr::new(
            Node::Binary {
                op,
                left: self.node,
                right: other.node,
            },
            fields,
        )
    }

    /// `self < other`.
    pub fn lt(self, other: impl IntoExpr<'a, L>) -> Condition<'a, L> {
        Condition(self.binary(BinaryOp::Less, other.into_expr()))
    }
    /// `self <= other`.
    pub fn le(self, other: impl IntoExpr<'a, L>) -> Condition<'a, L> {
        Condition(self.binary(BinaryOp::LessEqual, other.into_expr()))
    }
    /// `self > other`.
    pub fn gt(self, other: impl IntoExpr<'a, L>) -> Condition<'a, L> {
        Condition(self.binary(BinaryOp::Greater, other.into_expr()))
    }
    /// `self >= other`.
    pub fn ge(self, other: impl IntoExpr<'a, L>) -> Condition<'a, L> {
        Condition(self.binary(BinaryOp::GreaterEqual, other.into_expr()))
    }
    /// `self == other` (exact comparison).
    pub fn equals(self, other: impl IntoExpr<'a, L>) -> Condition<'a, L> {
        Condition(self.binary(BinaryOp::Equal, other.into_expr()))
    }
    /// `self != other` (exact comparison).
    pub fn not_equals(self, other: impl IntoExpr<'a, L>) -> Condition<'a, L> {
        Condition(self.binary(BinaryOp::NotEqual, other.into_expr()))
    }
}

impl<'a, L: Location> From<&'a SpatialField<L, f64>> for Expr<'a, L> {
    fn from(field: &'a SpatialField<L, f64>) -> Self {
        let fields: Bindings<'a> = vec![field];
        Expr::new(
            Node::Field {
                id: field.id(),
                name: field.name().into(),
                location: L::KIND,
            },
            fields,
        )
    }
}

/// Anything usable where an expression of location `L` is expected: an
/// [`Expr`], a `&SpatialField<L>`, or an `f64`.
pub trait IntoExpr<'a, L: Location> {
    /// The expression.
    fn into_expr(self) -> Expr<'a, L>;
}

impl<'a, L: Location> IntoExpr<'a, L> for Expr<'a, L> {
    fn into_expr(self) -> Expr<'a, L> {
        self
    }
}

impl<'a, L: Location> IntoExpr<'a, L> for &Expr<'a, L> {
    fn into_expr(self) -> Expr<'a, L> {
        self.clone()
    }
}

impl<'a, L: Location> IntoExpr<'a, L> for &'a SpatialField<L, f64> {
    fn into_expr(self) -> Expr<'a, L> {
        Expr::from(self)
    }
}

impl<'a, L: Location> IntoExpr<'a, L> for f64 {
    fn into_expr(self) -> Expr<'a, L> {
        Expr::constant(self)
    }
}

/// Wraps a field as an expression: `field(&phi) + &psi`.
pub fn field<L: Location>(field: &SpatialField<L, f64>) -> Expr<'_, L> {
    Expr::from(field)
}

macro_rules! arithmetic {
    ($trait:ident, $method:ident, $op:expr) => {
        impl<'a, L: Location, R: IntoExpr<'a, L>> $trait<R> for Expr<'a, L> {
            type Output = Expr<'a, L>;
            fn $method(self, rhs: R) -> Expr<'a, L> {
                self.binary($op, rhs.into_expr())
            }
        }
        impl<'a, L: Location> $trait<Expr<'a, L>> for f64 {
            type Output = Expr<'a, L>;
            fn $method(self, rhs: Expr<'a, L>) -> Expr<'a, L> {
                Expr::constant(self).binary($op, rhs)
            }
        }
        impl<'a, L: Location> $trait<Expr<'a, L>> for &'a SpatialField<L, f64> {
            type Output = Expr<'a, L>;
            fn $method(self, rhs: Expr<'a, L>) -> Expr<'a, L> {
                Expr::from(self).binary($op, rhs)
            }
        }
    };
}

arithmetic!(Add, add, BinaryOp::Add);
arithmetic!(Sub, sub, BinaryOp::Subtract);
arithmetic!(Mul, mul, BinaryOp::Multiply);
arithmetic!(Div, div, BinaryOp::Divide);

impl<'a, L: Location> Neg for Expr<'a, L> {
    type Output = Expr<'a, L>;
    fn neg(self) -> Expr<'a, L> {
        self.unary(UnaryOp::Negate)
    }
}

macro_rules! unary_function {
    ($(#[$doc:meta])* $name:ident, $op:expr) => {
        $(#[$doc])*
        pub fn $name<'a, L: Location>(value: impl IntoExpr<'a, L>) -> Expr<'a, L> {
            value.into_expr().unary($op)
        }
    };
}

unary_function!(
    /// `e^value`.
    exp, UnaryOp::Exp);
unary_function!(
    /// Natural logarithm.
    log, UnaryOp::Log);
unary_function!(
    /// Square root.
    sqrt, UnaryOp::Sqrt);
unary_function!(
    /// Sine.
    sin, UnaryOp::Sin);
unary_function!(
    /// Cosine.
    cos, UnaryOp::Cos);
unary_function!(
    /// Hyperbolic tangent.
    tanh, UnaryOp::Tanh);
unary_function!(
    /// Absolute value.
    abs, UnaryOp::Abs);

/// `base^exponent`.
pub fn pow<'a, L: Location>(
    base: impl IntoExpr<'a, L>,
    exponent: impl IntoExpr<'a, L>,
) -> Expr<'a, L> {
    base.into_expr().binary(BinaryOp::Pow, exponent.into_expr())
}

/// The smaller of two values.
pub fn min<'a, L: Location>(a: impl IntoExpr<'a, L>, b: impl IntoExpr<'a, L>) -> Expr<'a, L> {
    a.into_expr().binary(BinaryOp::Min, b.into_expr())
}

/// The larger of two values.
pub fn max<'a, L: Location>(a: impl IntoExpr<'a, L>, b: impl IntoExpr<'a, L>) -> Expr<'a, L> {
    a.into_expr().binary(BinaryOp::Max, b.into_expr())
}

/// The coordinate along `axis` (0, 1, 2) of every point of `L`. Any other
/// axis is refused with [`crate::OperatorError::InvalidAxis`] when the
/// expression is assigned or reduced.
pub fn coordinate<'a, L: Location>(axis: usize) -> Expr<'a, L> {
    Expr::new(
        Node::Coordinate {
            axis,
            location: L::KIND,
        },
        Vec::new(),
    )
}

/// A boolean at every point of `L`: a comparison, a mask, or a logical
/// combination of those (`&`, `|`, `!`).
#[derive(Clone, Debug)]
pub struct Condition<'a, L: Location>(pub(crate) Expr<'a, L>);

impl<'a, L: Location> Condition<'a, L> {
    /// The IR tree (1.0 where true, 0.0 where false).
    pub fn node(&self) -> &Arc<Node> {
        &self.0.node
    }
}

impl<'a, L: Location> BitAnd for Condition<'a, L> {
    type Output = Condition<'a, L>;
    fn bitand(self, rhs: Self) -> Self {
        Condition(self.0.binary(BinaryOp::And, rhs.0))
    }
}

impl<'a, L: Location> BitOr for Condition<'a, L> {
    type Output = Condition<'a, L>;
    fn bitor(self, rhs: Self) -> Self {
        Condition(self.0.binary(BinaryOp::Or, rhs.0))
    }
}

impl<'a, L: Location> Not for Condition<'a, L> {
    type Output = Condition<'a, L>;
    fn not(self) -> Self {
        Condition(self.0.unary(UnaryOp::Not))
    }
}

/// True on the points of `mask`.
pub fn on<'a, L: Location>(mask: &Mask<L>) -> Condition<'a, L> {
    Condition(Expr::new(
        Node::Mask {
            set: mask.set.clone(),
            location: L::KIND,
        },
        Vec::new(),
    ))
}

/// A `cond` chain under construction: `cond(c1, v1).cond(c2, v2).otherwise(v)`
/// takes, at each point, the value of the first condition that holds.
#[derive(Debug)]
pub struct CondChain<'a, L: Location> {
    branches: Vec<(Condition<'a, L>, Expr<'a, L>)>,
}

/// Starts a `cond` chain (Nebo's `cond(c1, v1)(c2, v2)(default)`).
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_language::{cond, field, Expr};
/// let grid = Grid::new([8, 1, 1], [1.0; 3], [0.0; 3])?;
/// let t = SpatialField::<CellCentre>::new("T", &grid.whole_domain(0), Device::Cpu)?;
/// let clipped: Expr<CellCentre> = cond(field(&t).lt(0.0), 0.0)
///     .cond(field(&t).gt(1.0), 1.0)
///     .otherwise(&t);
/// # let _ = clipped;
/// # Ok::<(), watershed_fields::FieldError>(())
/// ```
pub fn cond<'a, L: Location>(
    condition: Condition<'a, L>,
    value: impl IntoExpr<'a, L>,
) -> CondChain<'a, L> {
    CondChain {
        branches: vec![(condition, value.into_expr())],
    }
}

impl<'a, L: Location> CondChain<'a, L> {
    /// Adds a branch, tried after the earlier ones.
    pub fn cond(mut self, condition: Condition<'a, L>, value: impl IntoExpr<'a, L>) -> Self {
        self.branches.push((condition, value.into_expr()));
        self
    }

    /// Closes the chain with the value where no condition holds.
    pub fn otherwise(self, default: impl IntoExpr<'a, L>) -> Expr<'a, L> {
        let mut result = default.into_expr();
        for (condition, value) in self.branches.into_iter().rev() {
            let fields = merge(merge(condition.0.fields, &value.fields), &result.fields);
            result = Expr::new(
                Node::Select {
                    condition: condition.0.node,
                    if_true: value.node,
                    if_false: result.node,
                },
                fields,
            );
        }
        result
    }
}
