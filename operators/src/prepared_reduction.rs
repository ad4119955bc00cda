//! Reductions checked once and run many times: the dot products and norms
//! of an iterative solver, a finiteness or CFL check per time step.
//!
//! [`crate::reduce`] finds the lowered kernel of its tree (hashing the
//! whole tree), binds the slots, checks the region against the ghost layers
//! and plans the rows on every call; on a small grid that costs more than
//! the sum itself. A [`PreparedReduction`] does that once. Like
//! [`crate::PreparedAssignment`], a run re-checks only what those checks
//! depend on besides the tree (each slot's field by id and layout) and
//! prepares again,
//! with the errors of a fresh call, at the first difference; so it refuses
//! what [`crate::reduce`] refuses and returns the same bits.

use crate::checks::{CheckedReduction, ReduceRegion};
use crate::cpu::{Parallelism, Plan};
use crate::error::OperatorResult;
use crate::expr::{BoundField, Expr, IntoExpr};
use crate::ir::Node;
use crate::vocabulary::Reduction;
use std::sync::Arc;
use watershed_fields::{Location, LocationKind};

/// A reduction of one expression prepared for fields of given layouts.
/// [`Self::run`] returns the raw accumulation: for
/// [`Reduction::SumOfSquares`] the sum of squares (take its square root
/// for the L2 norm).
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_operators::{Parallelism, PreparedReduction, ReduceRegion, Reduction, field};
/// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let mut a = SpatialField::<CellCentre>::new("a", &patch, Device::Cpu)?;
/// let b = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu)?;
/// a.fill(2.0)?;
/// let mut dot = PreparedReduction::new(
///     field(&a) * field(&b),
///     Reduction::Sum,
///     ReduceRegion::Interior,
///     Parallelism::Serial,
/// )?;
/// assert_eq!(dot.run(&[&a, &b])?, 0.0);
/// let mut b = b;
/// b.fill(0.5)?;
/// // 16 interior cells of 2 * 0.5.
/// assert_eq!(dot.run(&[&a, &b])?, 16.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PreparedReduction {
    root: Arc<Node>,
    kind: LocationKind,
    region: ReduceRegion,
    parallelism: Parallelism,
    checked: CheckedReduction,
    /// The evaluator's plan, made by the first run after preparing.
    plan: Option<Plan>,
}

impl PreparedReduction {
    /// Prepares `reduction` of `expr` over `region` for its fields (every
    /// check of [`crate::reduce`], with its errors).
    pub fn new<'a, L: Location>(
        expr: impl IntoExpr<'a, L>,
        reduction: Reduction,
        region: ReduceRegion,
        parallelism: Parallelism,
    ) -> OperatorResult<Self> {
        let expr: Expr<'a, L> = expr.into_expr();
        let checked =
            CheckedReduction::new(expr.node(), L::KIND, expr.fields(), reduction, region)?;
        Ok(PreparedReduction {
            root: expr.node().clone(),
            kind: L::KIND,
            region,
            parallelism,
            checked,
            plan: None,
        })
    }

    /// Prepares `reduction` of the IR tree `root` (an expression at `kind`)
    /// over `region` for `fields`, bound by id as in [`crate::assign_node`]:
    /// what a graph node holds, whose leaves are tags rather than fields.
    /// Errors as [`crate::reduce`].
    pub fn of_node(
        root: &Arc<Node>,
        kind: LocationKind,
        fields: &[&dyn BoundField],
        reduction: Reduction,
        region: ReduceRegion,
        parallelism: Parallelism,
    ) -> OperatorResult<Self> {
        let checked = CheckedReduction::new(root, kind, fields, reduction, region)?;
        Ok(PreparedReduction {
            root: root.clone(),
            kind,
            region,
            parallelism,
            checked,
            plan: None,
        })
    }

    /// The IR tree it reduces.
    pub fn root(&self) -> &Arc<Node> {
        &self.root
    }

    /// The location of the tree's values.
    pub fn location(&self) -> LocationKind {
        self.kind
    }

    /// What it accumulates.
    pub fn reduction(&self) -> Reduction {
        self.checked.reduction
    }

    /// The points it reduces over.
    pub fn region(&self) -> ReduceRegion {
        self.region
    }

    /// Reduces over `fields` (bound by id as in [`crate::assign_node`]):
    /// the fields the expression was built from, or others with the same
    /// ids. Errors as [`crate::reduce`].
    pub fn run(&mut self, fields: &[&dyn BoundField]) -> OperatorResult<f64> {
        self.run_with(fields, self.parallelism)
    }

    /// [`Self::run`] with other `parallelism` (a graph's scheduler hands
    /// each node its pool); the result is the same bit for bit.
    pub fn run_with(
        &mut self,
        fields: &[&dyn BoundField],
        parallelism: Parallelism,
    ) -> OperatorResult<f64> {
        if !self.checked.fits(fields) {
            self.checked = CheckedReduction::new(
                &self.root,
                self.kind,
                fields,
                self.checked.reduction,
                self.region,
            )?;
            self.plan = None;
        }
        let data = self.checked.data(fields)?;
        let plan = self.plan.get_or_insert_with(|| self.checked.plan(&data));
        Ok(self.checked.run(&data, plan, parallelism))
    }
}
