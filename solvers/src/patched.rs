//! Transport equations on the patches of a decomposed grid (issue 51):
//! one [`TransportSolver`] per patch a rank owns, each built by the same
//! recipe on its own [`Patch`], their solutions' ghost points across patch
//! seams exchanged after every stage, and every reduction combined in
//! patch order, so that a run gives the bits of the whole domain whatever
//! the layout, and the same bits on 1, 2 or 4 ranks.
//!
//! Why it is bitwise equal to one patch:
//! * Each patch's graph computes its interior from its ghost layers with
//!   the arithmetic of the whole domain: coordinates are global
//!   (`origin + (offset + i) h`), the physical conditions are applied only
//!   on patch sides on the domain's boundary, and a periodic axis split
//!   into several patches is not filled from the patch's own far side
//!   ([`crate::boundary`]).
//! * After each stage, the seam ghosts take the owning patch's values
//!   ([`watershed_fields::halo::exchange_with`]), then the physical
//!   conditions are applied again at the stage's state time, so the ghosts
//!   where a physical side meets a seam also read the new seam values:
//!   every allocated point of a patch then holds what the whole domain
//!   holds there.
//! * The stable time step takes, per field, the largest magnitude over
//!   all patches before the limits are formed (a per-patch `dt` and its
//!   minimum would differ where two axes' maxima lie on different patches).
//!   Sums ([`PatchedTransport::sum_over_patches`]) add per-patch partial
//!   results in patch order, the same order on any number of ranks.
//!
//! ## The exchange overlapped with interior work
//!
//! With several patches and [`PatchedTransport::set_overlap`] on (off by
//! default: the split costs compute, see there), a stage's exchange is not run when the stage ends but posted when the
//! next one starts: the values sent are read, the seams between this
//! rank's own patches copied, the messages posted, and every owned
//! patch's graph computes the points of its updates that read no ghost
//! another rank sends ([`TransportSolver::run_stage_interior`], from the
//! graph's [`OverlapPlan`](watershed_exprgraph::overlap::OverlapPlan) for
//! the sides `stale_sides` cuts); then the ghosts from other ranks are
//! written, the physical conditions refilled at the solutions' time, and
//! the rims computed. Each point is computed once
//! from the same values, so the bits do not change. Until the next stage
//! the seam ghosts of the solutions are one exchange behind: every method
//! that reads them ([`PatchedTransport::whole_solution`], the gathers,
//! [`PatchedTransport::over_patches`], ...) first completes the exchange
//! ([`PatchedTransport::settle`]); the stable time step reads interiors
//! only and does not. Exchange time counts only what the exchange adds
//! to the stepping thread's time (the interior work it ran during one is
//! counted apart, [`PatchedTransport::interior_during_exchanges`]).
//!
//! A rank that fails returns its error; the caller of a run on several
//! ranks must end the job (`MPI_Abort`) rather than return, or the others
//! wait in the next exchange.

use crate::error::{SolverError, SolverResult};
use crate::solver::TransportSolver;
use crate::span_recording::SpanRecording;
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};
use watershed_exprgraph::overlap::{OverlapPlan, stale_sides};
use watershed_exprgraph::{RecordedEvent, Tag};
use watershed_fields::halo::{
    CopyRun, HaloBuffers, HaloFields, HaloPlan, HaloRoute, copy_runs_between, copy_runs_by_points,
    exchange_during, exchange_reusing,
};
use watershed_fields::ranks::RankLink;
use watershed_fields::{
    CellCentre, FieldError, FieldResult, LocationKind, Patch, PatchLayout, SpatialField,
};
use watershed_operators::gpu_points::PointBatch;

/// The trace track of a decomposed run's exchanges, gathers and reductions.
pub const EXCHANGE_TRACK: &str = "exchanges across patches";

/// Transport equations on the patches of `layout` this rank owns.
///
/// ```
/// use std::rc::Rc;
/// use watershed_fields::{GhostWidth, Grid, PatchLayout, ranks::SingleProcess};
/// use watershed_solvers::{Diffusivity, PatchedTransport, TransportEquation, TransportSolverBuilder};
/// let grid = Grid::new([16, 8, 1], [1.0; 3], [0.0; 3])?.with_periodic([true, true, false]);
/// let layout = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1))?;
/// let mut heat = PatchedTransport::build(layout, Rc::new(SingleProcess), |patch| {
///     TransportSolverBuilder::new(patch)
///         .equation(TransportEquation::new("T").diffusion(Diffusivity::Constant(0.1)))
///         .build()
/// })?;
/// heat.set_initial_condition("T", |[x, y, _]| (6.28 * x).sin() * (6.28 * y).cos())?;
/// let dt = heat.stable_time_step(0.5, 0.25)?;
/// heat.step(dt)?;
/// assert_eq!(heat.steps(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PatchedTransport {
    layout: PatchLayout,
    link: Rc<dyn RankLink>,
    owned: Range<usize>,
    /// One per owned patch, in patch order.
    solvers: Vec<TransportSolver>,
    /// This rank's part of the layout's cell-centred exchange.
    route: HaloRoute,
    /// The exchange's scratch storage, reused.
    buffers: RefCell<HaloBuffers>,
    equations: Vec<String>,
    /// The fields limiting the time step, the same on every patch.
    limit_fields: Vec<(Tag, usize)>,
    /// Wall time spent in exchanges and reductions across patches (the
    /// interior work run during an exchange excluded).
    exchange_time: Cell<Duration>,
    /// Per owned patch, how its graph splits around the exchange; `None`
    /// when the exchange is not overlapped (one patch, a graph on a GPU or
    /// under a memory budget, or [`Self::set_overlap`] off).
    overlap: Option<Vec<OverlapPlan>>,
    /// The seam ghosts of the solutions are one exchange behind (the last
    /// stage's exchange waits for the next stage, or [`Self::settle`]).
    stale: Cell<bool>,
    /// Interior work run while exchanges were in flight.
    interior_during_exchanges: Cell<Duration>,
    /// When recording for a trace: each exchange, gather and reduction
    /// since [`Self::start_recording`].
    recording: SpanRecording,
}

impl std::fmt::Debug for PatchedTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchedTransport")
            .field("patches", &self.layout.counts())
            .field("rank", &self.link.rank())
            .field("ranks", &self.link.ranks())
            .field("owned", &self.owned)
            .field("equations", &self.equations)
            .finish()
    }
}

impl PatchedTransport {
    /// Builds the solver of each patch of `layout` the rank of `link`
    /// owns with `recipe` (the same recipe a whole-domain run uses, given
    /// the patch instead of the whole domain). An error when the recipe
    /// builds on another patch, or gives patches different equations.
    pub fn build(
        layout: PatchLayout,
        link: Rc<dyn RankLink>,
        mut recipe: impl FnMut(&Patch) -> SolverResult<TransportSolver>,
    ) -> SolverResult<Self> {
        let owned = layout.owned_by(link.rank(), link.ranks())?;
        let mut solvers = Vec::with_capacity(owned.len());
        for index in owned.clone() {
            let patch = layout.patch(index)?;
            let solver = recipe(&patch)?;
            let built = solver.graph().patch();
            if *built != patch {
                return Err(SolverError::Setup {
                    equation: solver.equation_names().join(", "),
                    reason: format!(
                        "the recipe for patch {index} built a solver on cells {:?} at {:?} with {:?} ghosts, but the patch has {:?} at {:?} with {:?}; build on the patch the recipe is given",
                        built.cells(),
                        built.offset(),
                        built.ghosts(),
                        patch.cells(),
                        patch.offset(),
                        patch.ghosts()
                    ),
                });
            }
            solvers.push(solver);
        }
        let Some(first) = solvers.first() else {
            return Err(SolverError::Field(FieldError::InvalidLayout {
                reason: format!("rank {} owns no patch", link.rank()),
            }));
        };
        let equations = first.equation_names();
        let limit_fields = first.limit_fields();
        for (solver, index) in solvers.iter().zip(owned.clone()) {
            if solver.equation_names() != equations || solver.limit_fields() != limit_fields {
                return Err(SolverError::Setup {
                    equation: solver.equation_names().join(", "),
                    reason: format!(
                        "patch {index} has the equations {:?}, patch {} has {equations:?} (or their velocities and diffusivities differ); every patch must be built by the same recipe",
                        solver.equation_names(),
                        owned.start
                    ),
                });
            }
        }
        let plan = HaloPlan::new(&layout, LocationKind::CellCentre)?;
        // A patch's own periodic images are filled by its conditions with
        // every update (see `crate::boundary`): the exchange skips them.
        let route = HaloRoute::new_without_own_images(&plan, &layout, link.rank(), link.ranks())?;
        let transport = PatchedTransport {
            layout,
            link,
            owned,
            solvers,
            route,
            buffers: RefCell::new(HaloBuffers::default()),
            equations,
            limit_fields,
            exchange_time: Cell::new(Duration::ZERO),
            overlap: None,
            stale: Cell::new(false),
            interior_during_exchanges: Cell::new(Duration::ZERO),
            recording: SpanRecording::default(),
        };
        Ok(transport)
    }

    /// Overlaps each stage's exchange with the next stage's interior work
    /// (`true`, where the graphs allow it: see the module docs) or runs it
    /// when the stage ends (`false`, the default). The values are the same
    /// either way. The split costs compute (its thin rim boxes recompute
    /// the stencils' face values at their edges, and each box is a kernel
    /// call): on the 2-core development machine it hid 25-35 % of the
    /// exchange, and a step was at best as fast as without it
    /// (`docs/benchmarks.md`). Completes a pending exchange first; every
    /// rank must call it alike.
    pub fn set_overlap(&mut self, overlap: bool) -> SolverResult<()> {
        self.settle()?;
        self.overlap = if overlap && self.layout.len() > 1 {
            split_graphs(&self.solvers, &self.layout, &self.owned)
        } else {
            None
        };
        Ok(())
    }

    /// Whether the exchange is overlapped with interior work.
    pub fn overlaps(&self) -> bool {
        self.overlap.is_some()
    }

    /// Completes the exchange the last stage left pending (see the module
    /// docs), so that every allocated point of every owned patch holds
    /// the whole domain's value. The methods that read ghosts call it;
    /// call it before reading a solver's solution through
    /// [`Self::solvers`].
    pub fn settle(&self) -> SolverResult<()> {
        if self.stale.get() {
            let equations: Vec<&str> = self.equations.iter().map(String::as_str).collect();
            self.exchange_equations(&equations)?;
        }
        Ok(())
    }

    /// Wall time of the interior work run while exchanges were in flight
    /// (the work [`Self::exchange_time`] leaves out).
    pub fn interior_during_exchanges(&self) -> Duration {
        self.interior_during_exchanges.get()
    }

    /// The patch layout.
    pub fn layout(&self) -> &PatchLayout {
        &self.layout
    }

    /// The patches this rank owns.
    pub fn owned(&self) -> Range<usize> {
        self.owned.clone()
    }

    /// The solvers of the owned patches, in patch order. With the
    /// exchange overlapped their solutions' seam ghosts may be one
    /// exchange behind: call [`Self::settle`] before reading ghosts.
    pub fn solvers(&self) -> &[TransportSolver] {
        &self.solvers
    }

    /// The names of the equations.
    pub fn equation_names(&self) -> &[String] {
        &self.equations
    }

    /// The rank link.
    pub fn link(&self) -> &dyn RankLink {
        self.link.as_ref()
    }

    /// Simulated time (the same on every patch).
    pub fn time(&self) -> f64 {
        self.solvers[0].time()
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.solvers[0].steps()
    }

    /// Sets the clock of every patch (see [`TransportSolver::set_clock`]).
    pub fn set_clock(&mut self, time: f64, steps: u64) -> SolverResult<()> {
        for solver in &mut self.solvers {
            solver.set_clock(time, steps)?;
        }
        Ok(())
    }

    /// Sets the solution of `equation` from `f(x, y, z)` on every patch
    /// (see [`TransportSolver::set_initial_condition`]), then exchanges its
    /// seam ghosts.
    pub fn set_initial_condition(
        &self,
        equation: &str,
        f: impl Fn([f64; 3]) -> f64,
    ) -> SolverResult<()> {
        for solver in &self.solvers {
            solver.set_initial_condition(equation, &f)?;
        }
        self.exchange(equation).map(|_| ())
    }

    /// Runs `f` on the solution of `equation` of each owned patch (its
    /// index, its solver), mutably, then refills its ghosts (conditions,
    /// then seams), as after a restart.
    pub fn with_solutions_mut(
        &self,
        equation: &str,
        mut f: impl FnMut(usize, &mut SpatialField<CellCentre>) -> SolverResult<()>,
    ) -> SolverResult<()> {
        self.settle()?;
        for (solver, index) in self.solvers.iter().zip(self.owned.clone()) {
            solver.with_solution_mut(equation, |field| f(index, field))??;
        }
        self.exchange(equation).map(|_| ())
    }

    /// Sets the velocity placeholders `velocity` of every owned patch's
    /// solver to its window of `flow`'s velocity, ghosts included
    /// ([`TransportSolver::carry_by`]): from the flow's own patch where the
    /// flow's state lives on the same patches (nothing crosses ranks),
    /// else from its whole domain (gathered when stale: collective), so
    /// each point gets the value a solver over the whole domain would
    /// carry.
    pub fn carry_by(
        &self,
        flow: &crate::incompressible::IncompressibleFlow,
        velocity: &[Tag; 3],
    ) -> SolverResult<()> {
        // A pending overlapped stage may still read the velocity.
        self.settle()?;
        for solver in &self.solvers {
            solver.carry_by(flow, velocity)?;
        }
        Ok(())
    }
    /// The solution of `equation` on the whole domain, with its ghost
    /// layers, from every patch of every rank (collective: every rank
    /// calls it; every rank gets the field). Each patch's allocated points
    /// hold the whole domain's values there (see the module docs), so the
    /// field is what one patch over the whole domain holds, bit for bit:
    /// dumps and checkpoints do not depend on the layout.
    pub fn whole_solution(&self, equation: &str) -> SolverResult<SpatialField<CellCentre>> {
        let (mine, per_patch) = self.allocated_values(equation)?;
        let all = self.gather(&mine, per_patch)?;
        self.assemble(equation, &all)
    }

    /// [`Self::whole_solution`] on rank 0 only (`None` on the others), for
    /// writing: no other rank holds a copy of the whole domain.
    pub fn gather_solution(
        &self,
        equation: &str,
    ) -> SolverResult<Option<SpatialField<CellCentre>>> {
        let (mine, per_patch) = self.allocated_values(equation)?;
        let counts = self.counts(per_patch)?;
        let started = Instant::now();
        let gathered = self.link.gather_to_root(&mine, &counts);
        self.spent("gather to rank 0", started);
        match gathered? {
            Some(all) => Ok(Some(self.assemble(equation, &all)?)),
            None => Ok(None),
        }
    }

    /// Every allocated value of `equation`'s solution on each owned patch,
    /// in patch order, and how many each patch has.
    fn allocated_values(&self, equation: &str) -> SolverResult<(Vec<f64>, usize)> {
        self.settle()?;
        let per_patch = self.solvers[0].with_solution(equation, |f| f.layout().allocated_len())?;
        let mut mine = Vec::with_capacity(per_patch * self.solvers.len());
        for solver in &self.solvers {
            solver.with_solution(equation, |f| -> SolverResult<()> {
                mine.extend_from_slice(f.values()?);
                Ok(())
            })??;
        }
        Ok((mine, per_patch))
    }

    /// The whole domain's field from `all`, every patch's allocated values
    /// in patch order.
    fn assemble(&self, equation: &str, all: &[f64]) -> SolverResult<SpatialField<CellCentre>> {
        Ok(self.layout.assemble::<CellCentre>(equation, all)?)
    }

    /// Sets the solution of `equation` on every owned patch, ghosts
    /// included, from `whole` (a field over the whole domain with at least
    /// the patches' ghost layers, e.g. read from a checkpoint a run on any
    /// layout wrote), then refills the ghosts (conditions at the clock's
    /// time, then seams): set the clock first ([`Self::set_clock`]).
    pub fn set_whole_solution(
        &self,
        equation: &str,
        whole: &SpatialField<CellCentre>,
    ) -> SolverResult<()> {
        let from = whole.layout();
        let values = whole.values()?;
        let covered = from.allocated();
        self.with_solutions_mut(equation, |index, field| {
            let to = field.layout().clone();
            let offset = to.patch().offset().map(|o| o as isize);
            if from.patch().cells() != self.layout.grid().cells()
                || to
                    .allocated()
                    .iter()
                    .any(|l| !covered.contains([0, 1, 2].map(|a| l[a] + offset[a])))
            {
                return Err(SolverError::Setup {
                    equation: equation.to_string(),
                    reason: format!(
                        "the whole-domain field '{}' has {:?} cells with {:?} ghosts; patch {index} needs the grid's {:?} cells with at least {:?} ghosts",
                        whole.name(),
                        from.patch().cells(),
                        from.ghosts(),
                        self.layout.grid().cells(),
                        to.ghosts()
                    ),
                });
            }
            let data = field.values_mut()?;
            for local in to.allocated().iter() {
                let global = [0, 1, 2].map(|a| local[a] + offset[a]);
                data[to.linear_index(local)] = values[from.linear_index(global)];
            }
            Ok(())
        })
    }

    /// Fills the ghost points of `equation`'s solution across patch seams
    /// from the patches owning them, then the physical conditions again;
    /// returns how many seam points this rank wrote.
    pub fn exchange(&self, equation: &str) -> SolverResult<usize> {
        self.exchange_equations(&[equation])
    }

    /// [`Self::exchange`] of several equations' solutions at once: one
    /// message per pair of ranks carries all of them.
    pub fn exchange_equations(&self, equations: &[&str]) -> SolverResult<usize> {
        if self.layout.len() == 1 || equations.is_empty() {
            // One patch spans every axis: its own conditions fill its
            // periodic images, and it has no seam.
            return Ok(0);
        }
        // A pending exchange covers every equation.
        let all: Vec<&str> = self.equations.iter().map(String::as_str).collect();
        let equations = if self.stale.get() {
            &all[..]
        } else {
            equations
        };
        let started = Instant::now();
        let mut fields = SolutionFields::new(self.owned.start, &self.solvers, equations);
        let exchanged = exchange_reusing(
            &self.route,
            self.link.as_ref(),
            &mut fields,
            &mut self.buffers.borrow_mut(),
        );
        self.spent("seams", started);
        if let Some(failure) = fields.failure.into_inner() {
            return Err(failure);
        }
        let exchanged = exchanged?;
        self.stale.set(false);
        Ok(exchanged)
    }

    /// Stage `stage` of a step of `dt` with the exchange the last stage
    /// left pending overlapped with every owned patch's interior work
    /// (see the module docs); leaves this stage's exchange pending.
    fn overlapped_stage(&mut self, stage: usize, dt: f64) -> SolverResult<()> {
        let Some(plans) = self.overlap.as_ref() else {
            return Err(SolverError::Setup {
                equation: self.equations.join(", "),
                reason: "an overlapped stage was asked for without the graphs' split".into(),
            });
        };
        let owned = self.owned.clone();
        let failed = RefCell::new(None);
        let worked = Cell::new(Duration::ZERO);
        let mut interiors = |progress: &mut dyn FnMut()| -> FieldResult<()> {
            let began = Instant::now();
            for ((solver, index), plan) in self.solvers.iter().zip(owned.clone()).zip(plans) {
                if let Err(error) = solver.run_stage_interior(stage, dt, plan, progress) {
                    let error = on_patch(error, &self.layout, index);
                    let reason = error.to_string();
                    *failed.borrow_mut() = Some(error);
                    worked.set(worked.get() + began.elapsed());
                    return Err(FieldError::InvalidLayout { reason });
                }
            }
            worked.set(worked.get() + began.elapsed());
            Ok(())
        };
        if self.stale.get() {
            let equations: Vec<&str> = self.equations.iter().map(String::as_str).collect();
            let started = Instant::now();
            let mut fields = SolutionFields::new(self.owned.start, &self.solvers, &equations);
            let exchanged = exchange_during(
                &self.route,
                self.link.as_ref(),
                &mut fields,
                &mut self.buffers.borrow_mut(),
                &mut interiors,
            );
            self.spent_around(
                "seams, overlapped with interior work",
                started,
                worked.get(),
            );
            if let Some(failure) = failed.into_inner().or(fields.failure.into_inner()) {
                return Err(failure);
            }
            exchanged?;
            self.stale.set(false);
        } else {
            interiors(&mut || {})?;
            if let Some(failure) = failed.into_inner() {
                return Err(failure);
            }
        }
        for ((solver, index), plan) in self.solvers.iter_mut().zip(owned).zip(plans) {
            solver
                .run_stage_rim(stage, dt, plan)
                .map_err(|e| on_patch(e, &self.layout, index))?;
        }
        self.stale.set(true);
        Ok(())
    }

    /// Adds the time since `started` to the exchange time, and to the
    /// recording (as `what`) when one runs.
    fn spent(&self, what: &str, started: Instant) {
        self.spent_around(what, started, Duration::ZERO);
    }

    /// [`Self::spent`] for an exchange during which `work` of interior
    /// computation ran: only the rest counts as exchange time; the
    /// recorded span covers it all (the interior work shows on the
    /// graphs' tracks beside it).
    fn spent_around(&self, what: &str, started: Instant, work: Duration) {
        let ended = Instant::now();
        let exposed = ended.duration_since(started).saturating_sub(work);
        self.exchange_time.set(self.exchange_time.get() + exposed);
        self.interior_during_exchanges
            .set(self.interior_during_exchanges.get() + work);
        self.recording.record(EXCHANGE_TRACK, what, started, ended);
    }

    /// Records every following exchange, gather and reduction across
    /// patches, timed from `epoch` (the graphs' epoch: one timeline), until
    /// [`Self::take_recording`].
    pub fn start_recording(&self, epoch: Instant) {
        self.recording.start(epoch);
    }

    /// The events recorded since [`Self::start_recording`], on their own
    /// track ([`EXCHANGE_TRACK`]) of a Chrome trace; recording stops.
    pub fn take_recording(&self) -> Vec<RecordedEvent> {
        self.recording.take()
    }

    /// Wall time this rank spent in seam exchanges and in combining
    /// reductions across patches, since the solver was built (waits for
    /// other ranks included).
    pub fn exchange_time(&self) -> Duration {
        self.exchange_time.get()
    }

    /// Advances every equation on every owned patch by one step of `dt`,
    /// exchanging the seams after each stage (overlapped with the next
    /// stage's interior work: see the module docs). An error names the
    /// patch and gives global cell indices.
    pub fn step(&mut self, dt: f64) -> SolverResult<()> {
        let owned = self.owned.clone();
        for (solver, index) in self.solvers.iter().zip(owned.clone()) {
            solver
                .begin_step(dt)
                .map_err(|e| on_patch(e, &self.layout, index))?;
        }
        for stage in 0..self.solvers[0].stage_count() {
            if self.overlap.is_some() {
                self.overlapped_stage(stage, dt)?;
                continue;
            }
            for (solver, index) in self.solvers.iter_mut().zip(owned.clone()) {
                solver
                    .run_stage(stage, dt)
                    .map_err(|e| on_patch(e, &self.layout, index))?;
            }
            let equations: Vec<&str> = self.equations.iter().map(String::as_str).collect();
            self.exchange_equations(&equations)?;
        }
        for solver in &mut self.solvers {
            solver.end_step(dt);
        }
        Ok(())
    }

    /// The largest stable `dt` over the whole domain (see
    /// [`TransportSolver::stable_time_step`]): each limiting field's
    /// largest magnitude over every patch of every rank, then the limits.
    pub fn stable_time_step(&self, cfl: f64, diffusion_number: f64) -> SolverResult<f64> {
        let fields = &self.limit_fields;
        let mut mine = Vec::with_capacity(self.solvers.len() * fields.len());
        for solver in &self.solvers {
            mine.extend(solver.largest_magnitudes(fields)?);
        }
        let all = self.gather(&mine, fields.len())?;
        let mut largest = vec![0.0f64; fields.len()];
        for patch in all.chunks(fields.len().max(1)) {
            for (l, v) in largest.iter_mut().zip(patch) {
                // NaN wins, so a field that is not finite is not hidden.
                *l = if v.is_nan() { *v } else { l.max(*v) };
            }
        }
        self.solvers[0].stable_time_step_by(cfl, diffusion_number, |tag, _| {
            let k = fields.iter().position(|(t, _)| t == tag).ok_or_else(|| {
                SolverError::TimeStep(format!("the field {tag} limits no patch's time step"))
            })?;
            Ok(largest[k])
        })
    }

    /// `partial(patch index, solver)` of every patch, summed in patch order
    /// over every rank: the same sum on any number of ranks.
    pub fn sum_over_patches(
        &self,
        mut partial: impl FnMut(usize, &TransportSolver) -> SolverResult<f64>,
    ) -> SolverResult<f64> {
        let all = self.over_patches(1, |index, solver| Ok(vec![partial(index, solver)?]))?;
        Ok(all.iter().map(|v| v[0]).sum())
    }

    /// `values(patch index, solver)` (`count` values each) of every patch
    /// of every rank, in patch order (collective: every rank calls it and
    /// gets them all). Every ghost is current when `values` runs (a
    /// pending exchange completes first).
    pub fn over_patches(
        &self,
        count: usize,
        values: impl FnMut(usize, &TransportSolver) -> SolverResult<Vec<f64>>,
    ) -> SolverResult<Vec<Vec<f64>>> {
        self.settle()?;
        self.over_patch_interiors(count, values)
    }

    /// [`Self::over_patches`] for values of the interiors only (bounds,
    /// norms, sums over cells): a pending exchange stays pending, so the
    /// next stage still overlaps it, and the seam ghosts `values` could
    /// read may be one exchange behind.
    pub fn over_patch_interiors(
        &self,
        count: usize,
        mut values: impl FnMut(usize, &TransportSolver) -> SolverResult<Vec<f64>>,
    ) -> SolverResult<Vec<Vec<f64>>> {
        let mut mine = Vec::with_capacity(count * self.solvers.len());
        for (solver, index) in self.solvers.iter().zip(self.owned.clone()) {
            let v = values(index, solver)?;
            if v.len() != count {
                return Err(SolverError::Setup {
                    equation: self.equations.join(", "),
                    reason: format!(
                        "patch {index} gave {} value(s) to combine over the patches, not {count}",
                        v.len()
                    ),
                });
            }
            mine.extend(v);
        }
        let all = self.gather(&mine, count)?;
        Ok(all.chunks(count.max(1)).map(<[f64]>::to_vec).collect())
    }

    /// How many values each rank contributes with `per_patch` per patch.
    fn counts(&self, per_patch: usize) -> SolverResult<Vec<usize>> {
        let ranks = self.link.ranks();
        Ok((0..ranks)
            .map(|rank| {
                self.layout
                    .owned_by(rank, ranks)
                    .map(|run| run.len() * per_patch)
            })
            .collect::<FieldResult<Vec<usize>>>()?)
    }

    /// `per_patch` values of each owned patch, gathered from every rank in
    /// patch order.
    fn gather(&self, mine: &[f64], per_patch: usize) -> SolverResult<Vec<f64>> {
        let counts = self.counts(per_patch)?;
        let started = Instant::now();
        let all = self.link.gather_in_rank_order(mine, &counts);
        self.spent("reduction", started);
        Ok(all?)
    }
}

/// Each solver's split around the exchange of its solutions' ghosts, or
/// `None` when a graph cannot be split (it runs on a GPU or under a memory
/// budget): the exchange then runs when each stage ends.
fn split_graphs(
    solvers: &[TransportSolver],
    layout: &PatchLayout,
    owned: &Range<usize>,
) -> Option<Vec<OverlapPlan>> {
    solvers
        .iter()
        .zip(owned.clone())
        .map(|(s, index)| s.overlap_plan(stale_sides(layout, index, owned)).ok())
        .collect()
}

/// `error` of patch `index` with its cells made global and the patch named.
fn on_patch(error: SolverError, layout: &PatchLayout, index: usize) -> SolverError {
    let offset = layout
        .patch(index)
        .map(|p| p.offset().map(|o| o as isize))
        .unwrap_or_default();
    let global = |cell: [isize; 3]| [0, 1, 2].map(|a| cell[a] + offset[a]);
    match error {
        SolverError::Diverged {
            equation,
            cell,
            step,
            time,
            cause,
        } => SolverError::Diverged {
            equation,
            cell: global(cell),
            step,
            time,
            cause: format!("{cause} (on patch {index} of layout {:?})", layout.counts()),
        },
        SolverError::NonFiniteInput {
            field,
            cell,
            detail,
        } => SolverError::NonFiniteInput {
            field,
            cell: global(cell),
            detail: format!(
                "{detail} (on patch {index} of layout {:?})",
                layout.counts()
            ),
        },
        other => other,
    }
}

/// The solutions of some equations of a rank's solvers, as the exchange
/// reads and writes them (one value per equation at each point). A
/// solver's error is kept whole in `failure` (the exchange carries field
/// errors only).
struct SolutionFields<'a> {
    first: usize,
    solvers: &'a [TransportSolver],
    equations: &'a [&'a str],
    failure: RefCell<Option<SolverError>>,
    /// Point moves enqueued on GPUs, waited for when the exchange settles.
    batch: RefCell<PointBatch>,
    /// Per owned patch (from `first`), once asked: the equations'
    /// solution tags where they live on a GPU (`None` on the host).
    residence: RefCell<Vec<Option<Option<Vec<Tag>>>>>,
    /// Patches with a physical side whose seam ghosts were written on
    /// their GPU: their conditions are refilled there when the exchange
    /// settles.
    refills: RefCell<Vec<usize>>,
}

impl<'a> SolutionFields<'a> {
    fn new(first: usize, solvers: &'a [TransportSolver], equations: &'a [&'a str]) -> Self {
        SolutionFields {
            first,
            solvers,
            equations,
            failure: RefCell::new(None),
            batch: RefCell::new(PointBatch::new()),
            residence: RefCell::new(Vec::new()),
            refills: RefCell::new(Vec::new()),
        }
    }
}

impl SolutionFields<'_> {
    fn solver(&self, patch: usize) -> FieldResult<&TransportSolver> {
        patch
            .checked_sub(self.first)
            .and_then(|k| self.solvers.get(k))
            .ok_or_else(|| FieldError::InvalidLayout {
                reason: format!(
                    "patch {patch} is not among this rank's patches {}..{}",
                    self.first,
                    self.first + self.solvers.len()
                ),
            })
    }

    /// The equations' solution tags of `patch` where its solutions live
    /// on a GPU (their points then move there), `None` on the host.
    fn gpu_tags(&self, patch: usize) -> FieldResult<Option<Vec<Tag>>> {
        let solver = self.solver(patch)?;
        let k = patch - self.first;
        if let Some(Some(known)) = self.residence.borrow().get(k) {
            return Ok(known.clone());
        }
        let tags = self.keep(solver.solution_tags(self.equations).map(Ok))?;
        let mut on_gpu = false;
        for tag in &tags {
            on_gpu |= self.keep(
                solver
                    .graph()
                    .field_lives_on_gpu(tag)
                    .map_err(SolverError::from)
                    .map(Ok),
            )?;
        }
        let known = on_gpu.then_some(tags);
        let mut residence = self.residence.borrow_mut();
        if residence.len() <= k {
            residence.resize(k + 1, None);
        }
        residence[k] = Some(known.clone());
        Ok(known)
    }

    /// The tags of `patch` when its solutions are written on their GPU
    /// (they live there); a patch with a physical side is noted for its
    /// conditions to be refilled there when the exchange settles.
    fn gpu_written(&self, patch: usize) -> FieldResult<Option<Vec<Tag>>> {
        let tags = self.gpu_tags(patch)?;
        if tags.is_some() && self.solver(patch)?.has_physical_side() {
            let mut refills = self.refills.borrow_mut();
            if !refills.contains(&patch) {
                refills.push(patch);
            }
        }
        Ok(tags)
    }

    /// `result`'s field error, or its solver error kept in `failure`.
    fn keep<T>(&self, result: SolverResult<FieldResult<T>>) -> FieldResult<T> {
        match result {
            Ok(inner) => inner,
            Err(SolverError::Field(error)) => Err(error),
            Err(error) => {
                let reason = error.to_string();
                *self.failure.borrow_mut() = Some(error);
                Err(FieldError::InvalidLayout { reason })
            }
        }
    }
}

impl HaloFields for SolutionFields<'_> {
    fn width(&self) -> usize {
        self.equations.len()
    }

    /// Each equation's runs copied as slices from one solver's solution
    /// into another's (its physical conditions then refilled, as after
    /// every write of seam ghosts).
    fn copy_runs(
        &mut self,
        source: usize,
        destination: usize,
        runs: &[CopyRun],
    ) -> FieldResult<()> {
        if source == destination {
            // A patch's own periodic images are not exchanged (the route
            // leaves them out); kept general through read and write.
            return copy_runs_by_points(self, source, destination, runs);
        }
        let (from, to) = (self.solver(source)?, self.solver(destination)?);
        if let (Some(tags), Some(_)) = (self.gpu_written(destination)?, self.gpu_tags(source)?) {
            // Both on a GPU: copied there (through the host when they
            // lie on two GPUs).
            let read: Vec<usize> = runs.iter().flat_map(|r| r.from..r.from + r.len).collect();
            let written: Vec<usize> = runs.iter().flat_map(|r| r.to..r.to + r.len).collect();
            let copied = to.graph().copy_points_from::<CellCentre>(
                &mut self.batch.borrow_mut(),
                &tags,
                &written,
                from.graph(),
                &read,
            );
            return self.keep(copied.map_err(SolverError::from).map(Ok));
        }
        for equation in self.equations {
            let copied = to.with_seam_ghosts_mut(equation, |written| {
                let read = from.with_solution(equation, |read| -> FieldResult<()> {
                    copy_runs_between(Some(read.values()?), written.values_mut()?, runs);
                    Ok(())
                });
                self.keep(read)
            });
            self.keep(copied)?;
        }
        Ok(())
    }

    fn read(&self, patch: usize, at: &[usize], out: &mut Vec<f64>) -> FieldResult<()> {
        let solver = self.solver(patch)?;
        let width = self.equations.len();
        let start = out.len();
        out.resize(start + at.len() * width, 0.0);
        if let Some(tags) = self.gpu_tags(patch)? {
            // Gathered on the GPU, equation after equation, then
            // point-major as messages carry them.
            let mut fields = vec![0.0; at.len() * width];
            let read = solver.graph().read_points::<CellCentre>(
                &mut self.batch.borrow_mut(),
                &tags,
                at,
                &mut fields,
            );
            self.keep(read.map_err(SolverError::from).map(Ok))?;
            for (e, field) in fields.chunks(at.len().max(1)).enumerate() {
                for (slot, &v) in out[start + e..].iter_mut().step_by(width).zip(field) {
                    *slot = v;
                }
            }
            return Ok(());
        }
        for (e, equation) in self.equations.iter().enumerate() {
            let read = solver.with_solution(equation, |field| {
                let values = field.values()?;
                for (slot, &i) in out[start + e..].iter_mut().step_by(width).zip(at) {
                    *slot = values[i];
                }
                Ok(())
            });
            self.keep(read)?;
        }
        Ok(())
    }

    fn write(&mut self, patch: usize, at: &[usize], values: &[f64]) -> FieldResult<()> {
        let solver = self.solver(patch)?;
        let width = self.equations.len();
        if let Some(tags) = self.gpu_written(patch)? {
            let mut fields = Vec::with_capacity(values.len());
            for e in 0..width {
                fields.extend(values[e..].iter().step_by(width));
            }
            let written = solver.graph().write_points::<CellCentre>(
                &mut self.batch.borrow_mut(),
                &tags,
                at,
                &fields,
            );
            return self.keep(written.map_err(SolverError::from).map(Ok));
        }
        for (e, equation) in self.equations.iter().enumerate() {
            let written = solver.with_seam_ghosts_mut(equation, |field| -> FieldResult<()> {
                let data = field.values_mut()?;
                for (&i, &v) in at.iter().zip(values[e..].iter().step_by(width)) {
                    data[i] = v;
                }
                Ok(())
            });
            self.keep(written)?;
        }
        Ok(())
    }

    /// Waits for the point moves enqueued on GPUs, then refills the
    /// conditions of the patches with a physical side whose seam ghosts
    /// were written there (as [`TransportSolver::with_seam_ghosts_mut`]
    /// does on the host after each write).
    fn settle(&mut self) -> FieldResult<()> {
        let settled = self.batch.get_mut().finish();
        self.keep(settled.map_err(SolverError::from).map(Ok))?;
        let refills = std::mem::take(self.refills.get_mut());
        for patch in refills {
            let solver = self.solver(patch)?;
            for equation in self.equations {
                self.keep(solver.refill_where_active(equation).map(Ok))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::stale_sides;
    use watershed_fields::{GhostWidth, Grid, PatchLayout};

    fn layout(counts: [usize; 3], periodic: [bool; 3]) -> PatchLayout {
        let grid = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])
            .unwrap()
            .with_periodic(periodic);
        PatchLayout::new(&grid, counts, GhostWidth::uniform(1)).unwrap()
    }

    #[test]
    fn only_regions_filled_by_other_ranks_are_cut_off() {
        // One rank owns every patch: nothing waits for a message.
        let all = layout([2, 2, 2], [true; 3]);
        for index in 0..8 {
            assert_eq!(stale_sides(&all, index, &(0..8)), [[false; 2]; 3]);
        }
        // 1 x 2 x 2 on 2 ranks: rank 0 owns the z = 0 plane, both of its
        // y neighbours (periodic) are its own; only z waits.
        let planes = layout([1, 2, 2], [true; 3]);
        let owned = planes.owned_by(0, 2).unwrap();
        for index in owned.clone() {
            assert_eq!(
                stale_sides(&planes, index, &owned),
                [[false, false], [false, false], [true, true]]
            );
        }
        // 2 x 2 x 2 on 3 ranks, not periodic: rank 0 owns patches 0-2;
        // patch 0's x and y neighbours are its own, its z neighbour (4)
        // and its xy edge (3) are not: z and then y (the edge's last
        // axis) are cut on the plus side, the minus sides are physical.
        let cube = layout([2, 2, 2], [false; 3]);
        let owned = cube.owned_by(0, 3).unwrap();
        assert_eq!(owned, 0..3);
        assert_eq!(
            stale_sides(&cube, 0, &owned),
            [[false, false], [false, true], [false, true]]
        );
    }
}
