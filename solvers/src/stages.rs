//! What the transport and flow solvers share to run Shu-Osher stages
//! through a graph: the stage parameters, the update expression, and the
//! rotation of the time levels.
//!
//! Each stage computes `next = a start + b (now + dt rhs(now))` as one
//! language node (the right-hand side fuses into it), reading `a`, `b`,
//! `dt` and the stage time as [`Parameter`]s, so the same compiled kernel
//! serves every stage and step. No field is copied between stages: after
//! stage 1 the storage of the three levels rotates (start <- now <- next),
//! after later stages `now` and `next` swap; an integrator whose later
//! stages never read `start` (forward Euler) only swaps. Forward Euler's
//! single stage (`a = 0`, `b = 1`) computes `next = now + dt rhs`, its
//! weights constants, and has no start level.

use crate::error::SolverResult;
use crate::integrator::{Stage, TimeIntegrator};
use watershed_exprgraph::{ExpressionGraph, GraphError, LanguageExpression, Tag};
use watershed_fields::Location;
use watershed_operators::{Expr, OperatorError, Parameter, cond};

/// The scalar parameters of a stage, shared by every update node of a solver.
#[derive(Debug, Clone)]
pub struct StageParameters {
    /// Time at which the stage's right-hand side is evaluated (`t`).
    pub time: Parameter,
    /// The step (`dt`).
    pub dt: Parameter,
    /// Weight of the solution at the start of the step (`a`).
    pub a: Parameter,
    /// Weight of the stage's forward-Euler update (`b`).
    pub b: Parameter,
    /// Time of the state the stage writes: the next stage's right-hand
    /// side time, the step's end after the last stage (SSP-RK3: t + dt,
    /// t + dt/2, t + dt). Boundary values given as expressions of time
    /// are evaluated at it, so each stage's ghosts bound its own state.
    pub state_time: Parameter,
}

impl Default for StageParameters {
    fn default() -> Self {
        StageParameters {
            time: Parameter::new("t", 0.0),
            dt: Parameter::new("dt", 0.0),
            a: Parameter::new("a", 0.0),
            b: Parameter::new("b", 1.0),
            state_time: Parameter::new("t_state", 0.0),
        }
    }
}

impl StageParameters {
    /// Sets the parameters for `stage` of a step of `dt` starting at `time`,
    /// taken as a stage whose result is the step's end (`state_time` =
    /// `time + dt`); [`Self::set_stage`] knows the stages that follow.
    pub fn set(&self, stage: &Stage, time: f64, dt: f64) {
        self.time.set(time + stage.c * dt);
        self.dt.set(dt);
        self.a.set(stage.a);
        self.b.set(stage.b);
        self.state_time.set(time + dt);
    }

    /// Sets the parameters for stage `index` of `integrator` in a step of
    /// `dt` starting at `time`, the state time included: the next stage's
    /// `c`, or the step's end after the last stage.
    pub fn set_stage(&self, integrator: TimeIntegrator, index: usize, time: f64, dt: f64) {
        let stages = integrator.stages();
        let Some(stage) = stages.get(index) else {
            return;
        };
        self.set(stage, time, dt);
        let state = stages.get(index + 1).map_or(1.0, |next| next.c);
        self.state_time.set(time + state * dt);
    }
}

/// The node computing `next = a start + b (now + dt rhs)`. Where `a` is 0
/// (the first stage) `start` is not read, so whatever its storage holds
/// before it first receives the step's start value cannot leak in. An
/// integrator of one stage with `a = 0` and `b = 1` (forward Euler) gets
/// `next = now + dt rhs` with those weights as constants: nothing to
/// select, multiply or add per point for them (the same values, except
/// that a result of `-0.0` is no longer turned into `+0.0` by adding the
/// unread `a start` as `0.0`). It checks every value it writes
/// ([`LanguageExpression::checking_finite`]), which replaces a separate
/// scan of each solution per step; see [`not_finite_in`].
pub(crate) fn update_expression<F: Location>(
    now: &Tag,
    next: &Tag,
    start: &Tag,
    rhs: &Tag,
    parameters: &StageParameters,
    integrator: TimeIntegrator,
) -> LanguageExpression {
    let (n, o, r) = (now.clone(), start.clone(), rhs.clone());
    let p = parameters.clone();
    let single_euler_stage = !reads_start_level(integrator);
    LanguageExpression::new::<F>(next.clone(), move |s| {
        let update = s.field::<F>(&n) + p.dt.expr() * s.field::<F>(&r);
        if single_euler_stage {
            return update;
        }
        let a: Expr<'static, F> = p.a.expr();
        let kept = cond(a.clone().not_equals(0.0), a * s.field::<F>(&o)).otherwise(0.0);
        kept + p.b.expr() * update
    })
    .checking_finite()
}

/// Whether the update nodes of `integrator` read the start level (its
/// placeholder is then in the graph): every integrator but one of a
/// single stage with `a = 0` and `b = 1` (forward Euler), whose update is
/// `now + dt rhs` ([`update_expression`]).
pub(crate) fn reads_start_level(integrator: TimeIntegrator) -> bool {
    !matches!(
        integrator.stages(),
        [Stage { a, b, .. }] if *a == 0.0 && *b == 1.0
    )
}

/// When `error` is a checked node's report of a value that is not finite
/// ([`OperatorError::NotFinite`]), the node's name and the first such point.
pub(crate) fn not_finite_in(error: &GraphError) -> Option<(&str, [isize; 3])> {
    match error {
        GraphError::Expression { expression, source } => match source.as_ref() {
            GraphError::Operator(OperatorError::NotFinite { point, .. }) => {
                Some((expression.as_str(), *point))
            }
            inner => not_finite_in(inner),
        },
        _ => None,
    }
}

/// After stage `index`: the new value moves to `now` without copying.
/// After the first stage the old `now` becomes `start` when a later stage
/// reads it (`integrator.reads_start()`); otherwise (forward Euler) `now`
/// and `next` just swap, so a step cycles through two fields rather than
/// three (a third less memory in flight: at 32^3 the 30 ExprLib solutions
/// then stay in the last-level cache).
pub(crate) fn advance_levels(
    graph: &ExpressionGraph,
    integrator: TimeIntegrator,
    index: usize,
    start: &Tag,
    now: &Tag,
    next: &Tag,
) -> SolverResult<()> {
    if index == 0 && integrator.reads_start() {
        graph.rotate_fields(&[start.clone(), now.clone(), next.clone()])?;
    } else {
        graph.rotate_fields(&[now.clone(), next.clone()])?;
    }
    Ok(())
}
