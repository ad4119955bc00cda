//! Boundary values given as expressions of the field language: of the
//! boundary point's coordinates, of the time of the state they bound, and
//! of any [`Parameter`] the user captures (a parabolic inflow, an
//! oscillating wall, a heat flux that ramps up).
//!
//! A [`BoundaryExpression`] is a function from a [`BoundaryPoint`] (x, y,
//! z and t as expressions) to an expression. It is called once per side
//! and field location when the conditions are written as masked
//! assignments (`crate::boundary`), so the value is fused into the ghost
//! fill and compiled like the rest, on the CPU (interpreter or C) and on
//! GPUs, and evaluated at run time: the time is a [`Parameter`] that the
//! solver sets to the time of the state being bounded, which is each
//! Runge-Kutta stage's own (`StageParameters::state_time`), not the time
//! of the right-hand side that later reads the ghosts.
//!
//! Where the value is evaluated: for a ghost point (and the boundary face
//! of a face field normal to the side) the coordinate along the side's
//! normal is the boundary's own position, and the coordinates across it
//! are those of the point, so a value `g(x, y, t)` on the side x = 0 is
//! `g(0, y_j, t)` in row j. The expression may read no field: it is
//! checked when the conditions are built, and refused by name.

use crate::error::{SolverError, SolverResult};
use std::sync::Arc;
use watershed_fields::{CellCentre, Location};
use watershed_operators::{Expr, Side, coordinate, relabel};

/// Where and when a boundary value is evaluated, as expressions a
/// [`BoundaryExpression`] combines.
#[derive(Debug, Clone)]
pub struct BoundaryPoint {
    /// x of the point (the boundary's own x on the sides normal to x).
    pub x: Expr<'static, CellCentre>,
    /// y of the point (the boundary's own y on the sides normal to y).
    pub y: Expr<'static, CellCentre>,
    /// z of the point (the boundary's own z on the sides normal to z).
    pub z: Expr<'static, CellCentre>,
    /// The time of the state the condition bounds.
    pub t: Expr<'static, CellCentre>,
}

type Build = dyn Fn(&BoundaryPoint) -> Expr<'static, CellCentre> + Send + Sync;

/// A boundary value as a function of where and when ([`BoundaryPoint`]),
/// written in the field language.
///
/// ```
/// use watershed_solvers::boundary_value::BoundaryExpression;
/// use watershed_operators::{cos, min, Parameter};
/// // A parabolic inflow on x = 0 of a channel of height 0.41, its peak
/// // speed a parameter, switched on smoothly over one time unit.
/// let peak = Parameter::new("U_max", 1.5);
/// let inflow = BoundaryExpression::new("parabolic inflow", move |p| {
///     let ramp = 0.5 - 0.5 * cos(std::f64::consts::PI * min(p.t.clone(), 1.0));
///     4.0 * peak.expr() * p.y.clone() * (0.41 - p.y.clone()) / (0.41 * 0.41) * ramp
/// });
/// assert_eq!(inflow.name(), "parabolic inflow");
/// ```
#[derive(Clone)]
pub struct BoundaryExpression {
    name: Arc<str>,
    build: Arc<Build>,
}

impl BoundaryExpression {
    /// The value `build(point)`, called `name` in messages.
    pub fn new(
        name: &str,
        build: impl Fn(&BoundaryPoint) -> Expr<'static, CellCentre> + Send + Sync + 'static,
    ) -> Self {
        BoundaryExpression {
            name: name.into(),
            build: Arc::new(build),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value on `side` for the points of location `L`: the boundary
    /// lies at `boundary` along the side's axis, the grid's cells are
    /// `spacing` wide, and `time` is the state's time. Refused, naming
    /// the expression and `field`, when it reads a field.
    pub(crate) fn at<L: Location>(
        &self,
        side: Side,
        boundary: f64,
        spacing: [f64; 3],
        time: Expr<'static, CellCentre>,
        field: &str,
    ) -> SolverResult<Expr<'static, L>> {
        // L's coordinates written with the cell centres' (the expression
        // is built at the cells and relabelled to L, whose points have the
        // same indices): a face lies half a cell below its cell's centre
        // along its axis.
        let stagger = L::KIND.stagger();
        let across = |axis: usize| -> Expr<'static, CellCentre> {
            if axis == side.axis {
                Expr::constant(boundary)
            } else {
                let shift = (stagger[axis] - 0.5) * spacing[axis];
                if shift == 0.0 {
                    coordinate::<CellCentre>(axis)
                } else {
                    coordinate::<CellCentre>(axis) + shift
                }
            }
        };
        let point = BoundaryPoint {
            x: across(0),
            y: across(1),
            z: across(2),
            t: time,
        };
        let value = (self.build)(&point);
        if !value.node().fields().is_empty() {
            return Err(SolverError::Setup {
                equation: field.to_string(),
                reason: format!(
                    "the boundary value `{}` reads a field; a boundary value may use only the point's coordinates, the time and parameters",
                    self.name
                ),
            });
        }
        Ok(relabel::<CellCentre, L>(value))
    }
}

impl std::fmt::Debug for BoundaryExpression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BoundaryExpression({:?})", self.name)
    }
}

/// Two expressions are equal when they are the same function (clones of
/// one [`BoundaryExpression`]).
impl PartialEq for BoundaryExpression {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.build, &other.build)
    }
}
