//! Advancing transport equations in time through the expression graph.
//!
//! The graph computes each equation's right-hand side from the solution at
//! the current stage (STATE_N), and an update node per equation computes
//! STATE_NP1 = `a u(n) + b (u + dt rhs)`; the right-hand side fuses into it,
//! and so do the boundary conditions (a language modifier of STATE_NP1,
//! whose ghost layers normal to x are written with each row). STATE_NP1
//! then becomes STATE_N with its ghosts filled; whatever writes STATE_N
//! from outside (initial conditions, [`TransportSolver::with_solution_mut`])
//! fills its ghosts from the same conditions afterwards. The time,
//! `dt` and the stage weights are scalar [`Parameter`](watershed_operators::Parameter)s
//! the nodes read, so every node is a language node and nothing is rebuilt
//! or re-lowered between stages. Each stage executes the graph once; the time
//! levels then exchange storage (see [`crate::stages`]) instead of being
//! copied.

use crate::assignment_memo::Assignments;
use crate::boundary::{BoundaryCondition, BoundaryConditions, BoundaryFill};
use crate::error::{SolverError, SolverResult};
use crate::integrator::TimeIntegrator;
use crate::multigrid::first_non_finite;
use crate::stages::{
    StageParameters, advance_levels, not_finite_in, reads_start_level, update_expression,
};
use crate::staggered::SpaceOrder;
use crate::stepping::{self, StabilityLimit, Stepping, TimeStep};
use crate::transport::{Diffusivity, TransportEquation};
use std::sync::Mutex;
use watershed_exprgraph::overlap::OverlapPlan;
use watershed_exprgraph::{ExecutionMode, ExpressionGraph, Factory, GraphError, GraphOptions, Tag};
use watershed_fields::on_face;
use watershed_fields::{CellCentre, LocationKind, Patch, SpatialField};
use watershed_operators::{
    Assign, AssignOptions, Parallelism, Parameter, PreparedReduction, ReduceRegion, Reduction,
    Region, abs, field, interior_min,
};

/// Collects equations, extra expressions and options; builds the solver.
pub struct TransportSolverBuilder {
    patch: Patch,
    factory: Factory,
    equations: Vec<TransportEquation>,
    integrator: TimeIntegrator,
    mode: ExecutionMode,
    options: GraphOptions,
    parameters: StageParameters,
}

impl TransportSolverBuilder {
    /// A solver on `patch` (SSP-RK3, serial, fusion on).
    pub fn new(patch: &Patch) -> Self {
        TransportSolverBuilder {
            patch: patch.clone(),
            factory: Factory::new(),
            equations: Vec::new(),
            integrator: TimeIntegrator::default(),
            mode: ExecutionMode::Serial,
            options: GraphOptions::default(),
            parameters: StageParameters::default(),
        }
    }

    /// The stage parameters the solver will set before every stage: use
    /// `stage_parameters().time.expr()` in a source or coefficient to make
    /// it depend on time (it holds the time at which the stage's right-hand
    /// side is evaluated).
    pub fn stage_parameters(&self) -> &StageParameters {
        &self.parameters
    }

    /// Adds an equation.
    pub fn equation(mut self, equation: TransportEquation) -> Self {
        self.equations.push(equation);
        self
    }

    /// The factory, to register the expressions and placeholders the
    /// equations refer to (velocities, diffusivities, sources).
    pub fn factory_mut(&mut self) -> &mut Factory {
        &mut self.factory
    }

    /// The time integrator.
    pub fn integrator(mut self, integrator: TimeIntegrator) -> Self {
        self.integrator = integrator;
        self
    }

    /// Serial or threaded execution.
    pub fn mode(mut self, mode: ExecutionMode) -> Self {
        self.mode = mode;
        self
    }

    /// Graph options (fusion, persistent tags, memory budget).
    pub fn graph_options(mut self, options: GraphOptions) -> Self {
        self.options = options;
        self
    }

    /// Registers everything and builds the graph.
    pub fn build(mut self) -> SolverResult<TransportSolver> {
        if self.equations.is_empty() {
            return Err(SolverError::Setup {
                equation: "(none)".into(),
                reason: "the solver has no equation; add one with TransportSolverBuilder::equation"
                    .into(),
            });
        }
        let mut roots = Vec::new();
        for equation in &self.equations {
            equation.register(&mut self.factory, &self.patch)?;
            let start = equation.start_tag();
            if reads_start_level(self.integrator) {
                self.factory
                    .placeholder(start.clone(), LocationKind::CellCentre)?;
            }
            let (solution, next, rhs) = (
                equation.solution_tag(),
                equation.next_tag(),
                equation.rhs_tag(),
            );
            self.factory.register(update_expression::<CellCentre>(
                &solution,
                &next,
                &start,
                &rhs,
                &self.parameters,
                self.integrator,
            ))?;
            // The ghosts of each stage's result, filled as it is written
            // (fusion folds the modifier into the update node); the result
            // becomes STATE_N without a copy.
            self.factory.attach_modifier(
                next.clone(),
                equation
                    .boundary()
                    .clone()
                    .with_time(&self.parameters.state_time)
                    .modifier::<CellCentre>(&next),
            )?;
            roots.push(next);
        }
        let graph = ExpressionGraph::build(&self.factory, &roots, &self.patch, &self.options)?;
        // A side without a condition would keep whatever its ghosts held
        // (the initial values): a boundary nobody chose; a condition given
        // for a periodic side would be silently replaced by the images.
        let grid = self.patch.grid();
        for equation in &self.equations {
            for side in watershed_operators::Side::ALL {
                let resolved = grid.active_dimensions()[side.axis];
                let periodic = grid.periodic()[side.axis];
                let given = equation.boundary().get(side);
                if resolved
                    && periodic
                    && equation.boundary().is_named(side)
                    && given.is_some_and(|c| *c != BoundaryCondition::Periodic)
                {
                    return Err(SolverError::Setup {
                        equation: equation.name().into(),
                        reason: format!(
                            "side {} is given the condition {}, but the grid is periodic along {} and the periodic images fill it; remove the condition or make the grid not periodic along that axis (Grid::with_periodic)",
                            side.name(),
                            given.map(|c| c.describe()).unwrap_or_default(),
                            ["x", "y", "z"][side.axis]
                        ),
                    });
                }
                if resolved && !periodic && given.is_none() {
                    return Err(SolverError::Setup {
                        equation: equation.name().into(),
                        reason: format!(
                            "side {} has no boundary condition and the grid is not periodic along it; give one with BoundaryConditions::with (Neumann(0.0) for an insulated wall) or BoundaryConditions::all",
                            side.name()
                        ),
                    });
                }
            }
        }
        for equation in &self.equations {
            // Receives the step's start value after the first stage, which
            // does not read it (see `crate::stages`).
            if reads_start_level(self.integrator) {
                graph.fill_placeholder(&equation.start_tag())?;
            }
        }
        Ok(TransportSolver {
            graph,
            equations: self.equations,
            integrator: self.integrator,
            parameters: self.parameters,
            mode: self.mode,
            time: 0.0,
            steps: 0,
            maxima: Mutex::new(Assignments::default()),
            fills: Mutex::new(Vec::new()),
        })
    }
}

/// What [`TransportSolver::stable_time_step`] says when nothing limits the step.
const UNLIMITED: &str =
    "no equation limits the time step (no diffusion, no convection); use TimeStep::Fixed";

/// `max |f|` over `f`'s interior (prepared once per field in `maxima`).
fn max_abs<L: watershed_fields::Location>(
    maxima: &mut Assignments,
    f: &SpatialField<L>,
) -> SolverResult<f64> {
    maxima.reduce(
        "max |f|",
        [f.id(), 0],
        watershed_fields::Device::Cpu,
        &[f],
        || {
            PreparedReduction::new(
                abs(field(f)),
                Reduction::Max,
                ReduceRegion::Interior,
                Parallelism::Rayon,
            )
        },
    )
}

/// Transport equations advancing in time.
pub struct TransportSolver {
    graph: ExpressionGraph,
    equations: Vec<TransportEquation>,
    integrator: TimeIntegrator,
    parameters: StageParameters,
    mode: ExecutionMode,
    time: f64,
    steps: u64,
    /// The time step's `max |k|` and `max |u|` reductions, prepared once
    /// per field (a mutex because the query takes `&self`).
    maxima: Mutex<Assignments>,
    /// Per equation, its boundary conditions prepared for its solution,
    /// once a patch's seam ghosts were first written
    /// ([`Self::with_seam_ghosts_mut`]).
    fills: Mutex<Vec<Option<BoundaryFill<CellCentre>>>>,
}

impl std::fmt::Debug for TransportSolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportSolver")
            .field(
                "equations",
                &self.equations.iter().map(|e| e.name()).collect::<Vec<_>>(),
            )
            .field("integrator", &self.integrator)
            .field("time", &self.time)
            .field("steps", &self.steps)
            .finish()
    }
}

impl TransportSolver {
    /// The expression graph (for introspection, timings, traces).
    pub fn graph(&self) -> &ExpressionGraph {
        &self.graph
    }

    /// Current time.
    pub fn time(&self) -> f64 {
        self.time
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Names of the equations, in the order they were added.
    pub fn equation_names(&self) -> Vec<String> {
        self.equations
            .iter()
            .map(|e| e.name().to_string())
            .collect()
    }

    /// Sets the clock (time and steps taken), e.g. when restarting from a
    /// checkpoint. The time must be finite.
    pub fn set_clock(&mut self, time: f64, steps: u64) -> SolverResult<()> {
        if !time.is_finite() {
            return Err(SolverError::TimeStep(format!(
                "set_clock: time = {time} must be finite"
            )));
        }
        self.time = time;
        self.steps = steps;
        Ok(())
    }

    /// Runs `f` on the current solution of `equation`, mutably (e.g. to
    /// restore it from a checkpoint); then fills its ghost points from the
    /// equation's boundary conditions, as the steps do.
    pub fn with_solution_mut<R>(
        &self,
        equation: &str,
        f: impl FnOnce(&mut SpatialField<CellCentre>) -> R,
    ) -> SolverResult<R> {
        let equation = self.equation(equation)?;
        let conditions = self.conditions_now(equation);
        self.graph
            .with_field_mut::<CellCentre, _>(&equation.solution_tag(), |field| {
                let result = f(field);
                self.apply_checked(&conditions, field, equation.name())
                    .map(|()| result)
            })?
    }

    /// Sets the velocity placeholders `velocity` (x, y, z faces) of this
    /// solver to the current velocity of `flow`, so that the equations are
    /// carried by the computed flow. Call it before each step. The flow's
    /// patch must cover this solver's, ghosts included (the same grid, at
    /// least as many ghost layers): a solver on one patch of a decomposed
    /// grid takes its window of a flow over the whole domain, its seam
    /// ghosts the flow's values at the same points. Where the flow's state
    /// lives on the same patches and this rank holds the solver's patch,
    /// the window comes from that patch's velocity, its seams exchanged
    /// after the flow's step ([`IncompressibleFlow::with_patch_velocity`](crate::IncompressibleFlow::with_patch_velocity)):
    /// the same values, and nothing of the whole domain is gathered.
    pub fn carry_by(
        &self,
        flow: &crate::incompressible::IncompressibleFlow,
        velocity: &[Tag; 3],
    ) -> SolverResult<()> {
        /// The window of `source` that `tag` of `graph` covers, ghosts
        /// included; `None` when `source` does not cover it.
        fn copy_from<F: watershed_exprgraph::GraphLocation>(
            graph: &ExpressionGraph,
            source: &SpatialField<F>,
            tag: &Tag,
        ) -> SolverResult<Option<()>> {
            let from = source.layout().clone();
            graph.with_field_mut::<F, _>(tag, |target| -> SolverResult<Option<()>> {
                let to = target.layout().clone();
                let offset = [0, 1, 2]
                    .map(|a| to.patch().offset()[a] as isize - from.patch().offset()[a] as isize);
                let own = to.allocated();
                let covered = watershed_fields::IndexBox::new(
                    [0, 1, 2].map(|a| own.lo[a] + offset[a]),
                    [0, 1, 2].map(|a| own.hi[a] + offset[a]),
                );
                if to.patch().grid() != from.patch().grid()
                    || from.allocated().intersect(&covered) != covered
                {
                    return Ok(None);
                }
                crate::windows::take_window(source, target, offset, true)?;
                Ok(Some(()))
            })?
        }
        fn copy<F: watershed_exprgraph::GraphLocation + watershed_operators::FaceLocation>(
            graph: &ExpressionGraph,
            flow: &crate::incompressible::IncompressibleFlow,
            tag: &Tag,
        ) -> SolverResult<()> {
            let patch = graph.patch();
            if let Some(Some(())) = flow
                .with_patch_velocity::<F, _>(patch, |source| copy_from(graph, source, tag))?
                .transpose()?
            {
                return Ok(());
            }
            flow.with_velocity::<F, _>(|source| -> SolverResult<()> {
                match copy_from(graph, source, tag)? {
                    Some(()) => Ok(()),
                    None => {
                        let (from, to) = (
                            source.layout().clone(),
                            graph.with_field::<F, _>(tag, |t| t.layout().clone())?,
                        );
                        Err(SolverError::Setup {
                            equation: tag.to_string(),
                            reason: format!(
                                "the flow's velocity covers {:?} points from cell {:?} of a {:?}-cell grid with {:?} ghost layers, the transport solver's field {tag} needs {:?} from cell {:?} of a {:?}-cell grid with {:?}; build the flow on the same grid, over a patch that covers the solver's, with at least as many ghost layers",
                                from.interior_extent(),
                                from.patch().offset(),
                                from.patch().grid().cells(),
                                from.ghosts(),
                                to.interior_extent(),
                                to.patch().offset(),
                                to.patch().grid().cells(),
                                to.ghosts()
                            ),
                        })
                    }
                }
            })?
        }
        let active = self.graph.patch().grid().active_dimensions();
        for axis in (0..3).filter(|&a| active[a]) {
            on_face!(axis, F => copy::<F>(&self.graph, flow, &velocity[axis])?);
        }
        Ok(())
    }

    /// The boundary conditions of `equation` evaluated now: values given as
    /// expressions of time read the state time, set to the solver's time
    /// (each step's stages set it again).
    fn conditions_now(&self, equation: &TransportEquation) -> BoundaryConditions {
        self.parameters.state_time.set(self.time);
        equation
            .boundary()
            .clone()
            .with_time(&self.parameters.state_time)
    }

    /// Applies `conditions` to `field` (the solution of `equation`) and
    /// refuses a value they write that is not finite, naming the side.
    fn apply_checked(
        &self,
        conditions: &BoundaryConditions,
        field: &mut SpatialField<CellCentre>,
        equation: &str,
    ) -> SolverResult<()> {
        conditions.apply(field)?;
        let probe = conditions.non_finite_value::<CellCentre>(field.layout(), field.name())?;
        if let Some((side, point, what)) = probe {
            return Err(SolverError::NonFiniteInput {
                field: equation.to_string(),
                cell: point,
                detail: format!(
                    "the boundary condition on side {} of {equation}: {what} is not finite at {point:?} at t = {:e}; an expression of the boundary value evaluated outside its domain?",
                    side.name(),
                    self.time
                ),
            });
        }
        Ok(())
    }

    /// The solution tags of `equations`, in order.
    pub(crate) fn solution_tags(&self, equations: &[&str]) -> SolverResult<Vec<Tag>> {
        equations
            .iter()
            .map(|name| self.equation(name).map(|e| e.solution_tag()))
            .collect()
    }

    /// Whether the solver's patch has a side on the domain's boundary
    /// that is not periodic (its conditions fill ghosts there, which a
    /// seam exchange then fills again: [`Self::with_seam_ghosts_mut`]).
    pub(crate) fn has_physical_side(&self) -> bool {
        let patch = self.graph.patch();
        (0..3).any(|a| patch.minus_boundary()[a] || patch.plus_boundary()[a])
    }

    fn equation(&self, name: &str) -> SolverResult<&TransportEquation> {
        self.equations
            .iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| self.no_equation(name))
    }

    fn no_equation(&self, name: &str) -> SolverError {
        SolverError::Setup {
            equation: name.to_string(),
            reason: format!(
                "no such equation; the solver has {:?}",
                self.equations.iter().map(|e| e.name()).collect::<Vec<_>>()
            ),
        }
    }

    /// Sets the solution of `equation` from `f(x, y, z)`: every point, then
    /// the ghost points on sides with a boundary condition from that
    /// condition (so a non-periodic `f` cannot leave a periodic seam wrong).
    pub fn set_initial_condition(
        &self,
        equation: &str,
        f: impl Fn([f64; 3]) -> f64,
    ) -> SolverResult<()> {
        let equation = self.equation(equation)?;
        let (tag, conditions) = (equation.solution_tag(), self.conditions_now(equation));
        self.graph
            .with_field_mut::<CellCentre, _>(&tag, |field| -> SolverResult<()> {
                let layout = field.layout().clone();
                let values = field.values_mut()?;
                for index in layout.allocated() {
                    values[layout.linear_index(index)] = f(layout.coordinate(index));
                }
                self.apply_checked(&conditions, field, equation.name())
            })?
    }

    /// Sets the interior of `equation`'s solution from `values`, indexed
    /// `[i, j, k]` with the shape of the grid's cells `(nx, ny, nz)` (any
    /// memory order, e.g. a NumPy array read from a file), and fills its
    /// ghost points from the equation's boundary conditions. A wrong shape
    /// or a value that is not finite is refused before anything is written.
    ///
    /// ```
    /// use ndarray::Array3;
    /// use watershed_fields::Grid;
    /// use watershed_solvers::{
    ///     BoundaryCondition, BoundaryConditions, Diffusivity, TransportEquation,
    ///     TransportSolverBuilder,
    /// };
    /// let patch = Grid::new([4, 3, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let insulated = BoundaryConditions::all(BoundaryCondition::Neumann(0.0));
    /// let solver = TransportSolverBuilder::new(&patch)
    ///     .equation(
    ///         TransportEquation::new("T")
    ///             .diffusion(Diffusivity::Constant(0.1))
    ///             .boundary_conditions(insulated),
    ///     )
    ///     .build()?;
    /// let values = Array3::from_shape_fn((4, 3, 1), |(i, j, _)| (i + 10 * j) as f64);
    /// solver.set_initial_values("T", values.view())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_initial_values(
        &self,
        equation: &str,
        values: ndarray::ArrayView3<'_, f64>,
    ) -> SolverResult<()> {
        let info = self.equation(equation)?;
        let (tag, conditions) = (info.solution_tag(), self.conditions_now(info));
        let cells = self.graph.patch().cells();
        if values.shape() != cells {
            return Err(SolverError::Setup {
                equation: equation.to_string(),
                reason: format!(
                    "set_initial_values: the array has shape {:?}, but the solution has {cells:?} interior cells (indexed [i, j, k])",
                    values.shape()
                ),
            });
        }
        if let Some(((i, j, k), _)) = values.indexed_iter().find(|(_, v)| !v.is_finite()) {
            return Err(SolverError::NonFiniteInput {
                field: tag.to_string(),
                cell: [i as isize, j as isize, k as isize],
                detail: format!(
                    "set_initial_values: the value for {tag} at [{i}, {j}, {k}] is not finite"
                ),
            });
        }
        self.graph
            .with_field_mut::<CellCentre, _>(&tag, |field| -> SolverResult<()> {
                let layout = field.layout().clone();
                let out = field.values_mut()?;
                for ((i, j, k), v) in values.indexed_iter() {
                    out[layout.linear_index([i as isize, j as isize, k as isize])] = *v;
                }
                self.apply_checked(&conditions, field, equation)
            })?
    }

    /// Sets the solution of `equation` from an expression of the field
    /// language, e.g. of the coordinates: every point it can compute, then
    /// the ghost points on sides with a boundary condition from that
    /// condition.
    pub fn set_initial_condition_expression(
        &self,
        equation: &str,
        expression: watershed_operators::Expr<'_, CellCentre>,
    ) -> SolverResult<()> {
        let equation = self.equation(equation)?;
        let (tag, conditions) = (equation.solution_tag(), self.conditions_now(equation));
        self.graph
            .with_field_mut::<CellCentre, _>(&tag, |field| -> SolverResult<()> {
                let options = AssignOptions {
                    region: Region::LargestComputable,
                    ..Default::default()
                };
                field.assign_with(expression, options)?;
                self.apply_checked(&conditions, field, equation.name())
            })?
    }

    /// Runs `f` on the current solution of `equation`.
    pub fn with_solution<R>(
        &self,
        equation: &str,
        f: impl FnOnce(&SpatialField<CellCentre>) -> R,
    ) -> SolverResult<R> {
        let tag = self.equation(equation)?.solution_tag();
        Ok(self.graph.with_field::<CellCentre, _>(&tag, f)?)
    }

    /// The stage parameters (time, dt, a, b) the update nodes read.
    pub fn stage_parameters(&self) -> &StageParameters {
        &self.parameters
    }

    /// Advances every equation by one step of `dt`.
    pub fn step(&mut self, dt: f64) -> SolverResult<()> {
        self.begin_step(dt)?;
        for index in 0..self.stage_count() {
            self.run_stage(index, dt)?;
        }
        self.end_step(dt);
        Ok(())
    }

    /// The stages of a step.
    pub(crate) fn stage_count(&self) -> usize {
        self.integrator.stages().len()
    }

    /// What a step checks before its first stage: `dt`, and the inputs
    /// before the very first step.
    pub(crate) fn begin_step(&self, dt: f64) -> SolverResult<()> {
        if !(dt.is_finite() && dt > 0.0) {
            return Err(SolverError::TimeStep(format!(
                "dt = {dt} must be finite and positive"
            )));
        }
        if self.time + dt == self.time {
            return Err(SolverError::TimeStep(format!(
                "dt = {dt:e} is too small to move the time t = {} (t + dt == t in f64); use a larger dt or start the clock nearer 0",
                self.time
            )));
        }
        if self.steps == 0 {
            self.check_inputs_finite("before the first step")?;
        }
        Ok(())
    }

    /// Stage `index` of a step of `dt`: the graph runs once (every update
    /// and the ghosts its conditions fill), then the time levels move.
    pub(crate) fn run_stage(&mut self, index: usize, dt: f64) -> SolverResult<()> {
        self.parameters
            .set_stage(self.integrator, index, self.time, dt);
        if let Err(error) = self.graph.execute(self.mode) {
            return Err(self.diverged_or(error, dt)?);
        }
        self.advance_all_levels(index)
    }

    /// How this solver's graph splits around the exchange of its
    /// solutions' ghosts ([`watershed_exprgraph::overlap`]): what a
    /// stage computes before the seams arrive, and after;
    /// `stale[axis][side]`: the sides whose ghosts the exchange fills
    /// (the others are valid while it runs).
    pub(crate) fn overlap_plan(&self, stale: [[bool; 2]; 3]) -> SolverResult<OverlapPlan> {
        let solutions: Vec<Tag> = self.equations.iter().map(|e| e.solution_tag()).collect();
        Ok(self.graph.overlap_plan_with_sides(&solutions, stale)?)
    }

    /// The first half of stage `index` of a step of `dt` (see
    /// [`Self::run_stage`]): the points that read no ghost of the
    /// solutions, with `progress` called between nodes. The state time is put back to the solutions' time
    /// afterwards, since their ghosts are refilled at it before the second
    /// half ([`Self::with_seam_ghosts_mut`]).
    pub(crate) fn run_stage_interior(
        &self,
        index: usize,
        dt: f64,
        overlap: &OverlapPlan,
        progress: &mut dyn FnMut(),
    ) -> SolverResult<()> {
        let solutions_time = self.parameters.state_time.get();
        self.parameters
            .set_stage(self.integrator, index, self.time, dt);
        let ran = self
            .graph
            .execute_interior_with(self.mode, overlap, progress);
        self.parameters.state_time.set(solutions_time);
        match ran {
            Ok(()) => Ok(()),
            Err(error) => Err(self.diverged_or(error, dt)?),
        }
    }

    /// The second half of stage `index` ([`Self::run_stage_interior`]
    /// first, then the solutions' ghosts): the rest of every update, the
    /// ghosts of its conditions, then the time levels move.
    pub(crate) fn run_stage_rim(
        &mut self,
        index: usize,
        dt: f64,
        overlap: &OverlapPlan,
    ) -> SolverResult<()> {
        self.parameters
            .set_stage(self.integrator, index, self.time, dt);
        if let Err(error) = self.graph.execute_rim(self.mode, overlap) {
            return Err(self.diverged_or(error, dt)?);
        }
        self.advance_all_levels(index)
    }

    /// After stage `index`: every equation's time levels move
    /// ([`advance_levels`]).
    fn advance_all_levels(&self, index: usize) -> SolverResult<()> {
        for equation in &self.equations {
            advance_levels(
                &self.graph,
                self.integrator,
                index,
                &equation.start_tag(),
                &equation.solution_tag(),
                &equation.next_tag(),
            )?;
        }
        Ok(())
    }

    /// Ends a step of `dt`: the clock moves.
    pub(crate) fn end_step(&mut self, dt: f64) {
        self.time += dt;
        self.steps += 1;
    }

    /// Runs `f` on the current solution of `equation` (whose ghost points
    /// across patch seams `f` writes), then, on a patch with a physical
    /// side, fills the ghosts of its boundary conditions again at the time
    /// of the state it holds, as the last stage wrote them (no clock is
    /// set): the corners between a physical side and a seam then read the
    /// new seam values, as in the whole domain.
    pub(crate) fn with_seam_ghosts_mut<R>(
        &self,
        equation: &str,
        f: impl FnOnce(&mut SpatialField<CellCentre>) -> R,
    ) -> SolverResult<R> {
        let index = self.equation_index(equation)?;
        // Only a physical side has ghosts the exchange does not fill:
        // a periodic axis's images, the patch's own or another's, are
        // copies of the same values.
        let physical = self.has_physical_side();
        self.graph.with_field_mut::<CellCentre, _>(
            &self.equations[index].solution_tag(),
            |field| {
                let result = f(field);
                if physical {
                    self.refill(index, field)?;
                }
                Ok(result)
            },
        )?
    }

    /// The refill of [`Self::with_seam_ghosts_mut`], for seam ghosts of
    /// `equation` written where its solution lives (on its GPU, by the
    /// point moves of an exchange): its boundary conditions filled again
    /// there, so the corners between a physical side and a seam read the
    /// new seam values, and the solution stays on its device. Nothing on
    /// a patch without a physical side.
    pub(crate) fn refill_where_active(&self, equation: &str) -> SolverResult<()> {
        if !self.has_physical_side() {
            return Ok(());
        }
        let index = self.equation_index(equation)?;
        self.graph.with_field_in_place_mut::<CellCentre, _>(
            &self.equations[index].solution_tag(),
            |field| self.refill(index, field),
        )?
    }

    /// Fills the boundary conditions of equation `index` into `field`
    /// (its solution) at the time of the state it holds, where the field
    /// is active ([`BoundaryFill::apply_where_active`]), the fill prepared
    /// once per equation.
    fn refill(&self, index: usize, field: &mut SpatialField<CellCentre>) -> SolverResult<()> {
        let equation = &self.equations[index];
        let mut fills = self
            .fills
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if fills.len() < self.equations.len() {
            fills.resize_with(self.equations.len(), || None);
        }
        let fill = match &mut fills[index] {
            Some(fill) => fill,
            slot => {
                let conditions = equation
                    .boundary()
                    .clone()
                    .with_time(&self.parameters.state_time);
                slot.insert(BoundaryFill::new(
                    &conditions,
                    field.layout(),
                    equation.name(),
                )?)
            }
        };
        fill.apply_where_active(field)
    }

    /// The position of equation `name`, or the error naming the solver's
    /// equations.
    fn equation_index(&self, name: &str) -> SolverResult<usize> {
        self.equations
            .iter()
            .position(|e| e.name() == name)
            .ok_or_else(|| self.no_equation(name))
    }

    /// `error` as [`SolverError::Diverged`] when it is a stage update's report
    /// of a value that is not finite (every update checks what it writes,
    /// so no separate scan of the solutions is needed); otherwise as is.
    fn diverged_or(&self, error: GraphError, dt: f64) -> SolverResult<SolverError> {
        let Some((node, cell)) = not_finite_in(&error) else {
            return Ok(error.into());
        };
        let Some(equation) = self
            .equations
            .iter()
            .find(|e| e.next_tag().name.as_ref() == node)
        else {
            return Ok(error.into());
        };
        Ok(SolverError::Diverged {
            equation: equation.name().to_string(),
            cell,
            step: self.steps + 1,
            time: self.time + dt,
            cause: self.diagnose(dt, equation)?,
        })
    }

    /// Every placeholder the graph reads other than the solutions (velocities,
    /// diffusivities, sources) and the solutions themselves must be finite.
    fn check_inputs_finite(&self, when: &str) -> SolverResult<()> {
        for equation in &self.equations {
            if let Some(Diffusivity::Field(tag)) = equation.diffusivity() {
                let lowest = self
                    .graph
                    .with_field::<CellCentre, _>(tag, |k| interior_min(field(k)))??;
                if lowest < 0.0 {
                    return Err(SolverError::Setup {
                        equation: equation.name().to_string(),
                        reason: format!(
                            "the diffusivity field {tag} is negative (down to {lowest}) {when}; a negative diffusivity makes the equation ill-posed"
                        ),
                    });
                }
            }
        }
        let solutions: Vec<Tag> = self.equations.iter().map(|e| e.solution_tag()).collect();
        for info in self.graph.fields().iter().filter(|f| f.placeholder) {
            let bad = self.first_non_finite_of(&info.tag, info.location)?;
            if let Some(cell) = bad {
                let what = if solutions.contains(&info.tag) {
                    "the initial condition of"
                } else {
                    "the input"
                };
                return Err(SolverError::NonFiniteInput {
                    field: info.tag.to_string(),
                    cell,
                    detail: format!("{what} {} is not finite {when}", info.tag),
                });
            }
        }
        Ok(())
    }

    fn first_non_finite_of(
        &self,
        tag: &Tag,
        location: LocationKind,
    ) -> SolverResult<Option<[isize; 3]>> {
        Ok(match location {
            LocationKind::CellCentre => self
                .graph
                .with_field::<CellCentre, _>(tag, first_non_finite)??,
            face => on_face!(face.face_axis().unwrap_or(2), F => {
                self.graph.with_field::<F, _>(tag, first_non_finite)??
            }),
        })
    }

    /// Why a solution stopped being finite during the last step.
    fn diagnose(&self, dt: f64, equation: &TransportEquation) -> SolverResult<String> {
        // A boundary value that is not finite (an expression evaluated
        // outside its domain) reaches the cells next to the boundary: the
        // conditions alone, at each state time of the step.
        let layout = self
            .graph
            .with_field::<CellCentre, _>(&equation.solution_tag(), |f| f.layout().clone())?;
        let probe = Parameter::new("t (probe)", self.time);
        let conditions = equation.boundary().clone().with_time(&probe);
        let stages = self.integrator.stages();
        for k in 0..stages.len() {
            let fraction = stages.get(k + 1).map_or(1.0, |next| next.c);
            let at = self.time + fraction * dt;
            probe.set(at);
            if let Some((side, point, what)) =
                conditions.non_finite_value::<CellCentre>(&layout, equation.name())?
            {
                return Ok(format!(
                    "the boundary condition on side {}: {what} is not finite at {point:?} at t = {at:e}; an expression of the boundary value evaluated outside its domain (e.g. sqrt or log of a negative value)?",
                    side.name()
                ));
            }
        }
        let solutions: Vec<Tag> = self.equations.iter().map(|e| e.solution_tag()).collect();
        for info in self.graph.fields().iter().filter(|f| f.placeholder) {
            if solutions.contains(&info.tag) {
                continue; // overwritten by the step; its start value was checked
            }
            if let Some(cell) = self.first_non_finite_of(&info.tag, info.location)? {
                return Ok(format!(
                    "the input {} was already not finite at cell {cell:?}; fix that input",
                    info.tag
                ));
            }
        }
        let stable = self.limits(1.0, 0.5).ok().and_then(|l| l.scheme_limit());
        Ok(match stable {
            Some(limit) if dt > limit => format!(
                "every input was finite, and dt = {dt:e} exceeds the explicit stability limit of {:?} on this grid (about {limit:.3e}): reduce the time step",
                self.integrator
            ),
            _ => format!(
                "every input was finite and dt = {dt:e} is within the stability limit, so an expression of the right-hand side {} produced it (a source or a coefficient evaluated outside its domain, e.g. log or sqrt of a negative value, sin or cos of |x| > {:e}, or a division by zero)",
                equation.rhs_tag(),
                watershed_operators::vmath::SIN_COS_MAX_ARGUMENT
            ),
        })
    }

    /// The largest stable `dt` for the given Courant and diffusion numbers,
    /// from the interior values of the velocities and diffusivities.
    pub fn stable_time_step(&self, cfl: f64, diffusion_number: f64) -> SolverResult<f64> {
        self.limits(cfl, diffusion_number)?.time_step(UNLIMITED)
    }

    /// [`Self::stable_time_step`] with `largest(tag, axis)` giving `max |f|`
    /// of each field [`Self::limit_fields`] lists (of every patch of a
    /// decomposed grid).
    pub(crate) fn stable_time_step_by(
        &self,
        cfl: f64,
        diffusion_number: f64,
        largest: impl FnMut(&Tag, usize) -> SolverResult<f64>,
    ) -> SolverResult<f64> {
        self.limits_by(cfl, diffusion_number, largest)?
            .time_step(UNLIMITED)
    }

    /// The Courant, diffusion and scheme limits of every equation.
    fn limits(&self, cfl: f64, diffusion_number: f64) -> SolverResult<StabilityLimit> {
        // Equations often share a diffusivity or a velocity: each field's
        // maximum is computed once per call.
        let mut known: Vec<(Tag, f64)> = Vec::new();
        self.limits_by(cfl, diffusion_number, |tag, axis| {
            self.largest_magnitude(tag, axis, &mut known)
        })
    }

    /// The limits with `largest(tag, axis)` giving `max |f|` of each field
    /// [`Self::limit_fields`] lists (of this patch, or of every patch).
    pub(crate) fn limits_by(
        &self,
        cfl: f64,
        diffusion_number: f64,
        mut largest: impl FnMut(&Tag, usize) -> SolverResult<f64>,
    ) -> SolverResult<StabilityLimit> {
        let grid = self.graph.patch().grid();
        let order = if self
            .equations
            .iter()
            .any(|e| e.order() == SpaceOrder::Fourth)
        {
            SpaceOrder::Fourth
        } else {
            SpaceOrder::Second
        };
        let mut limit = StabilityLimit::new(grid, cfl, diffusion_number, self.integrator, order)?;
        for equation in &self.equations {
            if let Some(diffusivity) = equation.diffusivity() {
                limit.diffusion(match diffusivity {
                    Diffusivity::Constant(k) => k.abs(),
                    Diffusivity::Field(tag) => largest(tag, 3)?,
                });
            }
            if let Some(velocity) = equation.velocity() {
                let active = grid.active_dimensions();
                let mut speeds = [0.0f64; 3];
                for axis in (0..3).filter(|&a| active[a]) {
                    speeds[axis] = largest(&velocity[axis], axis)?;
                }
                let central = equation
                    .convective_scheme()
                    .is_some_and(crate::transport::ConvectiveScheme::is_central);
                limit.convection(speeds, central);
            }
        }
        Ok(limit)
    }

    /// The fields whose largest magnitude limits the time step, each once,
    /// with its axis (3: cells; else the faces normal to it): the
    /// diffusivity fields and the velocity components.
    pub(crate) fn limit_fields(&self) -> Vec<(Tag, usize)> {
        let active = self.graph.patch().grid().active_dimensions();
        let mut fields: Vec<(Tag, usize)> = Vec::new();
        for equation in &self.equations {
            if let Some(Diffusivity::Field(tag)) = equation.diffusivity() {
                fields.push((tag.clone(), 3));
            }
            if let Some(velocity) = equation.velocity() {
                for axis in (0..3).filter(|&a| active[a]) {
                    fields.push((velocity[axis].clone(), axis));
                }
            }
        }
        let mut unique: Vec<(Tag, usize)> = Vec::with_capacity(fields.len());
        for field in fields {
            if !unique.iter().any(|(tag, _)| *tag == field.0) {
                unique.push(field);
            }
        }
        unique
    }

    /// `max |f|` over this patch's interior of each field `fields` lists.
    pub(crate) fn largest_magnitudes(&self, fields: &[(Tag, usize)]) -> SolverResult<Vec<f64>> {
        let mut known: Vec<(Tag, f64)> = Vec::new();
        fields
            .iter()
            .map(|(tag, axis)| self.largest_magnitude(tag, *axis, &mut known))
            .collect()
    }

    /// `max |f|` over the interior of the field `tag` (cells for `axis` 3,
    /// else faces normal to `axis`), remembered in `known` for this call.
    fn largest_magnitude(
        &self,
        tag: &Tag,
        axis: usize,
        known: &mut Vec<(Tag, f64)>,
    ) -> SolverResult<f64> {
        if let Some((_, value)) = known.iter().find(|(t, _)| t == tag) {
            return Ok(*value);
        }
        let mut maxima = self
            .maxima
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let value = if axis == 3 {
            self.graph
                .with_field::<CellCentre, _>(tag, |k| max_abs(&mut maxima, k))??
        } else {
            on_face!(axis, F => self.graph.with_field::<F, _>(tag, |u| max_abs(&mut maxima, u))??)
        };
        known.push((tag.clone(), value));
        Ok(value)
    }

    /// Advances to `end_time`; returns the number of steps taken.
    pub fn advance(&mut self, end_time: f64, step: TimeStep) -> SolverResult<u64> {
        stepping::advance(self, end_time, step)
    }
}

impl Stepping for TransportSolver {
    fn time(&self) -> f64 {
        self.time
    }

    fn steps(&self) -> u64 {
        self.steps
    }

    fn stable_time_step(&self, cfl: f64, diffusion_number: f64) -> SolverResult<f64> {
        TransportSolver::stable_time_step(self, cfl, diffusion_number)
    }

    fn step(&mut self, dt: f64) -> SolverResult<()> {
        TransportSolver::step(self, dt)
    }
}
