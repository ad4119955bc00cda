//! Geometric multigrid for the Poisson equation `lap(x) = b` on cell
//! centres, as a solver (V-cycles) and as a preconditioner of conjugate
//! gradients.
//!
//! Levels halve the cells of every active axis while they stay even and at
//! least two. Smoothing is weighted Jacobi, written in the field language
//! (`t = x + w/D (b - lap(x))`, then the roles of `x` and `t` swap), as are
//! the residual, the vector updates of CG, restriction (the mean of a coarse
//! cell's children) and prolongation ((bi/tri)linear, added to the fine
//! solution in place), so they run wherever the language runs. Boundary conditions are the problem's on the finest level and
//! their homogeneous versions for corrections. Without any Dirichlet side
//! the problem is singular: the right-hand side is made mean-free and so is
//! the solution.

use crate::assignment_memo::{Assignments, Recipe};
use crate::boundary::{BoundaryCondition, BoundaryConditions};
use crate::error::{SolverError, SolverResult};
use crate::immersed::Immersed;
use crate::multigrid_bodies::{
    CLOSED_LEVELS, FaceCoefficients, MovableField, fluid_sum, remove_fluid_mean, subtract_on_fluid,
};
use crate::poisson_iteration::{self, Iterated, PoissonSpace, Product};
use crate::staggered::SpaceOrder;
use watershed_fields::{CellCentre, Device, Grid, Patch, SpatialField, on_face};
use watershed_operators::{
    AssignOptions, BoundField, Expr, Parallelism, Parameter, PreparedReduction, ReduceRegion,
    Reduction, Region, divergence4, field, gradient4, laplacian, prolongate, restrict,
};

/// Multigrid settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MultigridOptions {
    /// Jacobi sweeps before restricting.
    pub pre_smoothing: usize,
    /// Jacobi sweeps after prolongating.
    pub post_smoothing: usize,
    /// Steps on the coarsest level. A coarsest level of at most 128 cells
    /// whose operator is symmetric with a small spread of eigenvalues is
    /// solved exactly in as many steps as it has distinct eigenvalues (2
    /// on power-of-two 2D grids, 3 in 3D) when those are fewer than this,
    /// else by this many Chebyshev steps (see [`Multigrid::coarsest_steps`]);
    /// any other coarsest level runs this many Jacobi sweeps.
    pub coarsest_sweeps: usize,
    /// Jacobi weight (0.8 in 2D and 6/7 in 3D damp high frequencies best).
    pub weight: f64,
    /// Jacobi weight on the coarsest level where it runs
    /// [`Self::coarsest_sweeps`] Jacobi sweeps (see there): every
    /// mode must shrink, not only the high ones. With 2 cells per axis and
    /// Neumann sides the eigenvalues of `D^-1 A` (`D` the interior
    /// diagonal) are 0 (the mean, removed separately), 1/2 and 1 in 2D; 2/3
    /// shrinks them 1.5x and 3x per sweep.
    pub coarsest_weight: f64,
    /// Stop when the residual norm falls below this fraction of the
    /// right-hand side's.
    pub relative_tolerance: f64,
    /// Give up after this many iterations.
    pub max_iterations: usize,
}

impl MultigridOptions {
    /// Refuses settings that cannot converge or would hide a failure.
    pub fn validate(&self) -> SolverResult<()> {
        let bad = |reason: String| {
            Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason,
            })
        };
        if !(self.weight.is_finite() && self.weight > 0.0 && self.weight <= 1.0) {
            return bad(format!(
                "MultigridOptions::weight = {} is outside (0, 1]: weighted Jacobi diverges or does nothing; use 0.8 (2D) or 6/7 (3D)",
                self.weight
            ));
        }
        if !(self.coarsest_weight.is_finite()
            && self.coarsest_weight > 0.0
            && self.coarsest_weight <= 1.0)
        {
            return bad(format!(
                "MultigridOptions::coarsest_weight = {} is outside (0, 1]: Jacobi on the coarsest level diverges or does nothing; use 2/3",
                self.coarsest_weight
            ));
        }
        if self.pre_smoothing + self.post_smoothing == 0 {
            return bad("MultigridOptions::pre_smoothing and post_smoothing are both 0: the V-cycle would not smooth and cannot converge".into());
        }
        if self.coarsest_sweeps == 0 {
            return bad(
                "MultigridOptions::coarsest_sweeps is 0: the coarsest level would not be solved"
                    .into(),
            );
        }
        if !(self.relative_tolerance.is_finite() && self.relative_tolerance > 0.0) {
            return bad(format!(
                "MultigridOptions::relative_tolerance = {} must be finite and positive",
                self.relative_tolerance
            ));
        }
        if self.max_iterations == 0 {
            return bad("MultigridOptions::max_iterations is 0: no iteration could run".into());
        }
        Ok(())
    }
}

/// The first interior point (i, j, k) of `field` whose value is not finite.
/// Scans whole x rows (contiguous, vectorised), so checking a field costs
/// about one read of its interior. A field valid only on a GPU is copied
/// to the host first.
pub(crate) fn first_non_finite<L: watershed_fields::Location>(
    field: &SpatialField<L>,
) -> SolverResult<Option<[isize; 3]>> {
    let layout = field.layout();
    let copied;
    let values: &[f64] = if field.is_valid_on(Device::Cpu) {
        field.values()?
    } else {
        // Only on a GPU: copied to the host (callers test a cheap device
        // reduction first and come here when it is not finite).
        copied = field.values_on(field.active_device())?;
        &copied
    };
    let interior = layout.interior();
    let nx = interior.extent()[0];
    if interior.is_empty() {
        return Ok(None);
    }
    for k in interior.lo[2]..interior.hi[2] {
        for j in interior.lo[1]..interior.hi[1] {
            let first = layout.linear_index([interior.lo[0], j, k]);
            let row = &values[first..first + nx];
            if !row.iter().fold(true, |ok, v| ok & v.is_finite()) {
                let i = row.iter().position(|v| !v.is_finite()).unwrap_or(0);
                return Ok(Some([interior.lo[0] + i as isize, j, k]));
            }
        }
    }
    Ok(None)
}

impl Default for MultigridOptions {
    fn default() -> Self {
        MultigridOptions {
            pre_smoothing: 3,
            post_smoothing: 3,
            coarsest_sweeps: 30,
            weight: 0.8,
            coarsest_weight: 2.0 / 3.0,
            relative_tolerance: 1e-10,
            max_iterations: 100,
        }
    }
}

/// How a solve went.
#[derive(Debug, Clone, PartialEq)]
pub struct SolveReport {
    /// Iterations (V-cycles or CG steps).
    pub iterations: usize,
    /// Residual L2 norm before each iteration and after the last.
    pub residuals: Vec<f64>,
    /// L2 norm of the right-hand side.
    pub rhs_norm: f64,
}

impl SolveReport {
    /// Mean factor by which an iteration reduced the residual.
    pub fn reduction_per_iteration(&self) -> f64 {
        match (self.residuals.first(), self.residuals.last()) {
            (Some(&first), Some(&last)) if self.iterations > 0 && first > 0.0 => {
                (last / first).powf(1.0 / self.iterations as f64)
            }
            _ => 0.0,
        }
    }
}

struct Level {
    x: SpatialField<CellCentre>,
    b: SpatialField<CellCentre>,
    r: SpatialField<CellCentre>,
    t: SpatialField<CellCentre>,
    diagonal: f64,
    /// Faces closed by immersed bodies ([`Multigrid::block_bodies`]):
    /// the level's operator and diagonal with them.
    coefficients: Option<FaceCoefficients>,
}

impl Level {
    fn new(patch: &Patch) -> SolverResult<Self> {
        let make = |name: &str| SpatialField::<CellCentre>::new(name, patch, Device::Cpu);
        let grid = patch.grid();
        let diagonal = -(0..3)
            .filter(|&a| grid.active_dimensions()[a])
            .map(|a| 2.0 / (grid.spacing()[a] * grid.spacing()[a]))
            .sum::<f64>();
        Ok(Level {
            x: make("mg_x")?,
            b: make("mg_b")?,
            r: make("mg_r")?,
            t: make("mg_t")?,
            diagonal,
            coefficients: None,
        })
    }
}

/// A multigrid Poisson solver for one patch covering the whole domain.
pub struct Multigrid {
    levels: Vec<Level>,
    conditions: BoundaryConditions,
    homogeneous: BoundaryConditions,
    singular: bool,
    options: MultigridOptions,
    cg: ConjugateGradientVectors,
    /// Every assignment, prepared once ([`crate::prepared`]).
    assignments: Assignments,
    /// Where every field of the hierarchy lives ([`Self::move_to`]).
    device: Device,
    /// The mean removed from a singular problem's fields.
    mean: Parameter,
    /// The weights of the coarsest-level steps, in order, when the
    /// hierarchy has several levels and the schedule can be trusted
    /// (`crate::coarsest`); else the coarsest level runs Jacobi sweeps.
    coarsest_steps: Option<Vec<f64>>,
    /// The factor `w_k / d` of the current coarsest step, a run-time argument
    /// of one prepared kernel per step shape.
    coarsest_factor: Parameter,
    /// The operator CG solves on the finest grid ([`Multigrid::with_order`]).
    order: SpaceOrder,
}

/// The vectors and scalars of preconditioned CG on the finest grid. The
/// scalars are [`Parameter`]s, so each vector update is one kernel lowered
/// once and run in place for every iteration. The preconditioned residual
/// `z` is the finest level's `x` after the V-cycle (read before the next
/// V-cycle starts from zero), not a copy of it.
struct ConjugateGradientVectors {
    x: SpatialField<CellCentre>,
    r: SpatialField<CellCentre>,
    p: SpatialField<CellCentre>,
    q: SpatialField<CellCentre>,
    alpha: Parameter,
    beta: Parameter,
}

impl std::fmt::Debug for Multigrid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multigrid")
            .field("levels", &self.levels.len())
            .field("singular", &self.singular)
            .field("options", &self.options)
            .finish()
    }
}

fn homogeneous(conditions: &BoundaryConditions) -> BoundaryConditions {
    let mut out = BoundaryConditions::new();
    for side in watershed_operators::Side::ALL {
        if let Some(condition) = conditions.get(side) {
            let zero = match condition {
                BoundaryCondition::Dirichlet(_) | BoundaryCondition::DirichletExpression(_) => {
                    BoundaryCondition::Dirichlet(0.0)
                }
                BoundaryCondition::Neumann(_)
                | BoundaryCondition::Flux { .. }
                | BoundaryCondition::NeumannExpression(_)
                | BoundaryCondition::FluxExpression { .. } => BoundaryCondition::Neumann(0.0),
                BoundaryCondition::Periodic => BoundaryCondition::Periodic,
            };
            out = out.with(side, zero);
        }
    }
    out
}

impl Multigrid {
    /// A solver for `lap(x) = b` on `patch` (one patch covering the domain,
    /// one ghost layer at least) with `conditions` on every non-periodic side.
    pub fn new(
        patch: &Patch,
        conditions: BoundaryConditions,
        options: MultigridOptions,
    ) -> SolverResult<Self> {
        Self::with_order(patch, conditions, options, SpaceOrder::Second)
    }

    /// A solver whose conjugate gradients ([`Self::solve_preconditioned_cg`])
    /// solve the Laplacian of `order`: the compact second-order one, or at
    /// fourth order the wide `sum_a div4_a(grad4_a(x))` (seven points per
    /// axis; the finest level's fields get 3 ghost layers), the operator
    /// whose solution makes the fourth-order divergence of a projected
    /// velocity vanish. The V-cycle that preconditions CG stays compact
    /// (the two operators' ratio lies in [1, 1.37] on every Fourier mode,
    /// so CG needs few more iterations); [`Self::solve`], plain V-cycles,
    /// solves only the compact operator and refuses a fourth-order solver.
    pub fn with_order(
        patch: &Patch,
        conditions: BoundaryConditions,
        options: MultigridOptions,
        order: SpaceOrder,
    ) -> SolverResult<Self> {
        let grid = patch.grid();
        if patch.cells() != grid.cells() {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: "multigrid needs a patch covering the whole grid".into(),
            });
        }
        options.validate()?;
        let active = grid.active_dimensions();
        if !active.contains(&true) {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: format!(
                    "the grid has {:?} cells: no axis has more than one cell, so there is no Poisson problem to solve",
                    grid.cells()
                ),
            });
        }
        let mut singular = true;
        for side in watershed_operators::Side::ALL {
            if !active[side.axis] || grid.periodic()[side.axis] {
                continue;
            }
            match conditions.get(side) {
                Some(BoundaryCondition::Dirichlet(_)) => singular = false,
                Some(_) => {}
                None => {
                    return Err(SolverError::Setup {
                        equation: "Poisson".into(),
                        reason: format!("side {} has no boundary condition", side.name()),
                    });
                }
            }
        }
        let finest_ghosts = match order {
            SpaceOrder::Second => 1,
            SpaceOrder::Fourth => 3,
        };
        let one_ghost = Patch::new(
            grid,
            [0; 3],
            grid.cells(),
            watershed_fields::GhostWidth::uniform(finest_ghosts),
        )?;
        let mut levels = vec![Level::new(&one_ghost)?];
        for coarse in &coarsened_grids(grid)?[1..] {
            levels.push(Level::new(&coarse.whole_domain(1))?);
        }
        let mut multigrid =
            Self::assembled(levels, &one_ghost, conditions, singular, options, order)?;
        multigrid.coarsest_steps = multigrid.assemble_coarsest_steps()?;
        Ok(multigrid)
    }

    /// A hierarchy of `levels` on the CPU, its CG vectors on `finest`, no
    /// coarsest steps yet.
    fn assembled(
        levels: Vec<Level>,
        finest: &Patch,
        conditions: BoundaryConditions,
        singular: bool,
        options: MultigridOptions,
        order: SpaceOrder,
    ) -> SolverResult<Self> {
        let make = |name: &str| SpatialField::<CellCentre>::new(name, finest, Device::Cpu);
        Ok(Multigrid {
            levels,
            homogeneous: homogeneous(&conditions),
            conditions,
            singular,
            options,
            cg: ConjugateGradientVectors {
                x: make("cg_x")?,
                r: make("cg_r")?,
                p: make("cg_p")?,
                q: make("cg_q")?,
                alpha: Parameter::new("alpha", 0.0),
                beta: Parameter::new("beta", 0.0),
            },
            assignments: Assignments::default(),
            device: Device::Cpu,
            mean: Parameter::new("mean", 0.0),
            coarsest_steps: None,
            coarsest_factor: Parameter::new("coarsest step", 0.0),
            order,
        })
    }

    /// The levels of one patch of a decomposed hierarchy
    /// (`crate::multigrid_patches`): `patches[l]` is the patch on level
    /// `l`'s grid, its CG vectors on `patches[0]`. The hierarchy's coarsest
    /// levels are agglomerated elsewhere, so this one has no coarsest
    /// steps and its last level is never smoothed here.
    pub(crate) fn on_patch(
        patches: &[Patch],
        conditions: BoundaryConditions,
        options: MultigridOptions,
        order: SpaceOrder,
        singular: bool,
    ) -> SolverResult<Self> {
        let Some(finest) = patches.first() else {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: "a patch's hierarchy needs at least one level".into(),
            });
        };
        let levels = patches
            .iter()
            .map(Level::new)
            .collect::<SolverResult<_>>()?;
        Self::assembled(levels, finest, conditions, singular, options, order)
    }

    /// Closes the faces of `immersed`'s bodies that bound fluid cells:
    /// the solution's gradient does not act across them, so the fluid's
    /// equations are those of the open faces only. The finest levels get
    /// the closed faces and smooth with their own diagonal
    /// (`crate::multigrid_bodies`); CG solves the finest level's operator.
    /// Second order only.
    pub(crate) fn block_bodies(&mut self, immersed: &Immersed) -> SolverResult<()> {
        self.close_faces(immersed)?;
        self.coarsest_steps = self.assemble_coarsest_steps()?;
        // Kernels prepared for the open operator are of no use now.
        self.assignments = Assignments::default();
        Ok(())
    }

    /// [`Self::block_bodies`] for the levels of one patch of a decomposed
    /// hierarchy ([`Self::on_patch`]): the same coefficients on the
    /// patch's part of each level (the bodies placed by grid index), and
    /// no coarsest steps (its coarsest levels are agglomerated elsewhere).
    pub(crate) fn block_bodies_on_patch(&mut self, immersed: &Immersed) -> SolverResult<()> {
        self.close_faces(immersed)?;
        self.assignments = Assignments::default();
        Ok(())
    }

    /// Takes the closed faces of `whole`'s levels `first..` (a whole
    /// domain's hierarchy with [`Self::block_bodies`] done) as this
    /// hierarchy's levels `0..`: the agglomerated coarse levels of a
    /// decomposed hierarchy whose level 0 is `whole`'s level `first`.
    pub(crate) fn adopt_closed_levels(
        &mut self,
        whole: &mut Multigrid,
        first: usize,
    ) -> SolverResult<()> {
        for (level, from) in self
            .levels
            .iter_mut()
            .zip(whole.levels.iter_mut().skip(first))
        {
            if from.x.layout().interior_extent() != level.x.layout().interior_extent() {
                return Err(SolverError::Setup {
                    equation: "Poisson".into(),
                    reason: format!(
                        "the agglomerated levels do not match the whole hierarchy's from level {first} ({:?} and {:?} cells)",
                        level.x.layout().interior_extent(),
                        from.x.layout().interior_extent()
                    ),
                });
            }
            level.coefficients = from.coefficients.take();
        }
        self.coarsest_steps = self.assemble_coarsest_steps()?;
        self.assignments = Assignments::default();
        Ok(())
    }

    /// Whether bodies close faces of the finest level.
    pub(crate) fn has_closed_faces(&self) -> bool {
        self.levels[0].coefficients.is_some()
    }

    /// The coefficients of [`Self::block_bodies`] on every level that gets
    /// them.
    fn close_faces(&mut self, immersed: &Immersed) -> SolverResult<()> {
        if self.order != SpaceOrder::Second {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: "immersed bodies need the second-order projection".into(),
            });
        }
        let patch = self.levels[0].x.layout().patch().clone();
        self.levels[0].coefficients = Some(FaceCoefficients::finest(
            &patch,
            immersed,
            self.levels[0].diagonal,
        )?);
        for level in 1..self.levels.len().min(CLOSED_LEVELS) {
            let ratio = refinement(&self.levels[level - 1], &self.levels[level]);
            let coarse = self.levels[level].x.layout().patch().clone();
            let diagonal = self.levels[level].diagonal;
            let coefficients = self.levels[level - 1]
                .coefficients
                .as_ref()
                .map(|fine| fine.coarsened(&coarse, ratio, diagonal))
                .transpose()?;
            self.levels[level].coefficients = coefficients;
        }
        Ok(())
    }

    /// The weights of the coarsest-level steps (`crate::coarsest`: an
    /// exact solve or Chebyshev steps), from the coarsest level's operator
    /// `A / d` assembled column by column: the level's language Laplacian,
    /// with its homogeneous boundary fill, applied to each unit vector. `None` for a single
    /// level (its solve uses the real conditions and is a smoother, not a
    /// coarse solve) and where the schedule is refused.
    fn assemble_coarsest_steps(&mut self) -> SolverResult<Option<Vec<f64>>> {
        let last = self.levels.len() - 1;
        if last == 0 {
            return Ok(None);
        }
        let (conditions, singular, sweeps) = (
            self.homogeneous.clone(),
            self.singular,
            self.options.coarsest_sweeps,
        );
        let Multigrid {
            levels,
            assignments,
            ..
        } = self;
        let l = &mut levels[last];
        let layout = l.x.layout().clone();
        let cells: Vec<[isize; 3]> = layout.interior().into_iter().collect();
        let n = cells.len();
        if n > crate::coarsest::MAX_CELLS {
            return Ok(None);
        }
        let mut matrix = vec![vec![0.0; n]; n];
        for (column, &cell) in cells.iter().enumerate() {
            l.x.fill(0.0)?;
            l.x.values_mut()?[layout.linear_index(cell)] = 1.0;
            conditions.apply(&mut l.x)?;
            let Level {
                r,
                x,
                coefficients,
                diagonal,
                ..
            } = &mut *l;
            match coefficients {
                // Closed faces: the symmetric `|D|^-1/2 A |D|^-1/2` (each
                // cell's own diagonal D), similar to `D^-1 A`.
                Some(closed) => {
                    let mut fields: Vec<&dyn BoundField> = vec![&*x];
                    fields.extend(closed.fields());
                    assignments.run(
                        "coarsest operator, closed",
                        [r.id(), x.id(), 0],
                        r,
                        &fields,
                        |r| Recipe::new(closed.operator(x).node().clone(), r.id()),
                    )?;
                    let inverse = closed.inverse_diagonal.values()?;
                    let values = r.values()?;
                    let scale = |at: [isize; 3]| inverse[layout.linear_index(at)].abs().sqrt();
                    for (row, &at) in cells.iter().enumerate() {
                        matrix[row][column] =
                            -values[layout.linear_index(at)] * scale(at) * scale(cell);
                    }
                }
                None => {
                    assignments.run("coarsest operator", [r.id(), x.id(), 0], r, &[&*x], |r| {
                        Recipe::new(laplacian(&*x).node().clone(), r.id())
                    })?;
                    let values = r.values()?;
                    for (row, &at) in cells.iter().enumerate() {
                        matrix[row][column] = values[layout.linear_index(at)] / *diagonal;
                    }
                }
            }
        }
        l.x.fill(0.0)?;
        Ok(crate::coarsest::step_weights(&matrix, singular, sweeps))
    }

    /// The weights of the coarsest level's steps, in the order it applies
    /// them: the inverses of the distinct eigenvalues of the level's `D^-1
    /// A` (an exact solve) or of the roots of the Chebyshev polynomial on
    /// its spectrum; `None` where that level runs
    /// [`MultigridOptions::coarsest_sweeps`] Jacobi sweeps instead.
    pub fn coarsest_steps(&self) -> Option<&[f64]> {
        self.coarsest_steps.as_deref()
    }

    /// The steps on the coarsest `level` (always a correction, with
    /// homogeneous conditions): the Richardson steps `x <- x + (w_k / d)
    /// (b - lap x)` with the weights `steps`, each filling `x`'s ghosts as
    /// a Jacobi sweep does; with `from_zero` the first reads neither `x`
    /// nor its ghosts.
    fn solve_coarsest(&mut self, level: usize, steps: &[f64], from_zero: bool) -> SolverResult<()> {
        let conditions = self.homogeneous.clone();
        let Multigrid {
            levels,
            assignments,
            coarsest_factor,
            ..
        } = self;
        let l = &mut levels[level];
        for (k, &weight) in steps.iter().enumerate() {
            if let Level {
                t,
                x,
                b,
                coefficients: Some(closed),
                ..
            } = l
            {
                // Closed faces: `w_k D^-1 (b - A x)` with each cell's own
                // diagonal.
                coarsest_factor.set(weight);
                let inverse = &closed.inverse_diagonal;
                let mut fields: Vec<&dyn BoundField> = vec![&*x, &*b, inverse];
                fields.extend(closed.fields());
                if from_zero && k == 0 {
                    let purpose = "coarsest step from zero, closed";
                    assignments.run(purpose, [t.id(), b.id(), 0], t, &fields, |t| {
                        let value = coarsest_factor.expr() * (field(inverse) * field(&*b));
                        Recipe::new(value.node().clone(), t.id()).filled(conditions.clone())
                    })?;
                } else {
                    let purpose = "coarsest step, closed";
                    assignments.run(purpose, [t.id(), x.id(), b.id()], t, &fields, |t| {
                        let value = field(&*x)
                            + coarsest_factor.expr()
                                * (field(inverse) * (field(&*b) - closed.operator(x)));
                        Recipe::new(value.node().clone(), t.id()).filled(conditions.clone())
                    })?;
                }
                std::mem::swap(&mut l.x, &mut l.t);
                continue;
            }
            coarsest_factor.set(weight / l.diagonal);
            let (t, x, b) = (&mut l.t, &l.x, &l.b);
            if from_zero && k == 0 {
                assignments.run(
                    "coarsest step from zero",
                    [t.id(), b.id(), 0],
                    t,
                    &[b],
                    |t| {
                        let value = coarsest_factor.expr() * field(b);
                        Recipe::new(value.node().clone(), t.id()).filled(conditions.clone())
                    },
                )?;
            } else {
                assignments.run("coarsest step", [t.id(), x.id(), b.id()], t, &[x, b], |t| {
                    let value = field(x) + coarsest_factor.expr() * (field(b) - laplacian(x));
                    Recipe::new(value.node().clone(), t.id()).filled(conditions.clone())
                })?;
            }
            std::mem::swap(&mut l.x, &mut l.t);
        }
        Ok(())
    }

    /// `solver` with its levels, and why there is only one when so.
    fn describe(&self, solver: &str) -> String {
        let cells = self.levels[0].x.layout().patch().cells();
        if self.levels.len() == 1 {
            format!(
                "{solver} (1 level: {cells:?} cells cannot be coarsened, since an axis is halved only when its count is even and at least 4, so it converges as slowly as Jacobi; use cell counts with factors of 2)"
            )
        } else {
            format!("{solver} ({} levels)", self.levels.len())
        }
    }

    /// Number of grid levels.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// True when no side is Dirichlet (solutions are defined up to a constant).
    pub fn is_singular(&self) -> bool {
        self.singular
    }

    fn conditions(&self, level: usize, homogeneous: bool) -> BoundaryConditions {
        if level == 0 && !homogeneous {
            self.conditions.clone()
        } else {
            self.homogeneous.clone()
        }
    }

    /// Which fill writers of `level`'s `x` use (see [`Self::v_cycle`]).
    fn fill_purpose(level: usize, homogeneous: bool, what: [&'static str; 2]) -> &'static str {
        if level == 0 && !homogeneous {
            what[0]
        } else {
            what[1]
        }
    }

    /// `t = x + w/D (b - lap x)` with `t`'s ghosts filled, then swap `x`
    /// and `t`. With `from_zero` the level's `x` is taken to be zero
    /// whatever it holds (a correction's first smoothing): the first sweep
    /// is then `t = w/D b`, which reads neither `x` nor its ghosts, so no
    /// pass zeroes `x` beforehand.
    pub(crate) fn smooth(
        &mut self,
        level: usize,
        sweeps: usize,
        homogeneous: bool,
        from_zero: bool,
    ) -> SolverResult<()> {
        let conditions = self.conditions(level, homogeneous);
        let purpose = Self::fill_purpose(level, homogeneous, ["smooth", "smooth, homogeneous"]);
        let weight = if level + 1 == self.levels.len() {
            self.options.coarsest_weight
        } else {
            self.options.weight
        };
        let Multigrid {
            levels,
            assignments,
            ..
        } = self;
        let l = &mut levels[level];
        if from_zero && sweeps == 0 {
            // Nothing sweeps: the zero must be written (ghosts too, which
            // homogeneous conditions keep at zero).
            return assignments.zero(&mut l.x);
        }
        let factor = weight / l.diagonal;
        for sweep in 0..sweeps {
            if let Level {
                t,
                x,
                b,
                coefficients: Some(closed),
                ..
            } = l
            {
                // Closed faces: each cell's own diagonal.
                let inverse = &closed.inverse_diagonal;
                let mut fields: Vec<&dyn BoundField> = vec![&*x, &*b, inverse];
                fields.extend(closed.fields());
                if from_zero && sweep == 0 {
                    let purpose = Self::fill_purpose(
                        level,
                        homogeneous,
                        [
                            "smooth from zero, closed",
                            "smooth from zero, homogeneous, closed",
                        ],
                    );
                    assignments.run(purpose, [t.id(), b.id(), 0], t, &fields, |t| {
                        Recipe::new(
                            (weight * (field(inverse) * field(&*b))).node().clone(),
                            t.id(),
                        )
                        .filled(conditions.clone())
                    })?;
                } else {
                    let purpose = Self::fill_purpose(
                        level,
                        homogeneous,
                        ["smooth, closed", "smooth, homogeneous, closed"],
                    );
                    assignments.run(purpose, [t.id(), x.id(), b.id()], t, &fields, |t| {
                        let value = field(&*x)
                            + weight * (field(inverse) * (field(&*b) - closed.operator(x)));
                        Recipe::new(value.node().clone(), t.id()).filled(conditions.clone())
                    })?;
                }
                std::mem::swap(&mut l.x, &mut l.t);
                continue;
            }
            let (t, x, b) = (&mut l.t, &l.x, &l.b);
            if from_zero && sweep == 0 {
                let purpose = Self::fill_purpose(
                    level,
                    homogeneous,
                    ["smooth from zero", "smooth from zero, homogeneous"],
                );
                assignments.run(purpose, [t.id(), b.id(), 0], t, &[b], |t| {
                    Recipe::new((factor * field(b)).node().clone(), t.id())
                        .filled(conditions.clone())
                })?;
            } else {
                assignments.run(purpose, [t.id(), x.id(), b.id()], t, &[x, b], |t| {
                    let value = field(x) + factor * (field(b) - laplacian(x));
                    Recipe::new(value.node().clone(), t.id()).filled(conditions.clone())
                })?;
            }
            std::mem::swap(&mut l.x, &mut l.t);
        }
        Ok(())
    }

    /// `r = b - lap(x)` on `level` (whose `x` has its ghosts filled).
    pub(crate) fn residual(&mut self, level: usize) -> SolverResult<()> {
        let Multigrid {
            levels,
            assignments,
            ..
        } = self;
        let Level {
            r,
            b,
            x,
            coefficients,
            ..
        } = &mut levels[level];
        match coefficients {
            Some(closed) => {
                let mut fields: Vec<&dyn BoundField> = vec![&*b, &*x];
                fields.extend(closed.fields());
                assignments.run(
                    "residual, closed",
                    [r.id(), b.id(), x.id()],
                    r,
                    &fields,
                    |r| Recipe::new((field(&*b) - closed.operator(x)).node().clone(), r.id()),
                )
            }
            None => assignments.run("residual", [r.id(), b.id(), x.id()], r, &[&*b, &*x], |r| {
                Recipe::new((field(&*b) - laplacian(&*x)).node().clone(), r.id())
            }),
        }
    }

    /// One V-cycle on `level` for `lap(x) = b` with the level's current `x`
    /// (with `from_zero`: with `x = 0`, whatever the field holds).
    ///
    /// Every assignment that writes a level's `x` fills its ghosts in the
    /// same call (as row epilogues where they fuse), with the level's
    /// conditions (homogeneous except on the finest level of a solve), so
    /// whatever reads `x` finds its ghosts filled. Zero fields need no
    /// fill: a homogeneous condition's ghosts of zero are zero.
    fn v_cycle(&mut self, level: usize, homogeneous: bool, from_zero: bool) -> SolverResult<()> {
        if level + 1 == self.levels.len() {
            // The steps are taken out while they run (no copy per cycle).
            match self.coarsest_steps.take() {
                Some(steps) => {
                    let solved = self.solve_coarsest(level, &steps, from_zero);
                    self.coarsest_steps = Some(steps);
                    solved?;
                }
                None => self.smooth(level, self.options.coarsest_sweeps, homogeneous, from_zero)?,
            }
            if self.singular {
                let conditions = self.conditions(level, homogeneous);
                let Multigrid {
                    levels,
                    assignments,
                    mean,
                    ..
                } = self;
                let purpose = Self::fill_purpose(
                    level,
                    homogeneous,
                    ["remove mean, filled", "remove mean, homogeneous"],
                );
                remove_mean(
                    &mut levels[level].x,
                    mean,
                    assignments,
                    purpose,
                    Some(conditions),
                )?;
            }
            return Ok(());
        }
        self.smooth(level, self.options.pre_smoothing, homogeneous, from_zero)?;
        self.residual(level)?;
        self.restrict_residual(level)?;
        // The coarse correction starts from zero.
        self.v_cycle(level + 1, true, true)?;
        self.correct(level, homogeneous)?;
        self.smooth(level, self.options.post_smoothing, homogeneous, false)
    }

    /// `b` of `level + 1` = the restriction of `level`'s residual `r`.
    pub(crate) fn restrict_residual(&mut self, level: usize) -> SolverResult<()> {
        let Multigrid {
            levels,
            assignments,
            ..
        } = self;
        let (fine, coarse) = levels.split_at_mut(level + 1);
        let ratio = refinement(&fine[level], &coarse[0]);
        let (r, b) = (&fine[level].r, &mut coarse[0].b);
        assignments.run("restrict", [b.id(), r.id(), 0], b, &[r], |b| {
            Recipe::new(restrict(r, ratio).node().clone(), b.id())
        })
    }

    /// `x` of `level` += the prolongation of `level + 1`'s `x` (whose
    /// ghosts are filled), then `x`'s ghosts filled.
    pub(crate) fn correct(&mut self, level: usize, homogeneous: bool) -> SolverResult<()> {
        let conditions = self.conditions(level, homogeneous);
        let purpose = Self::fill_purpose(level, homogeneous, ["correct", "correct, homogeneous"]);
        let Multigrid {
            levels,
            assignments,
            ..
        } = self;
        let (fine, coarse) = levels.split_at_mut(level + 1);
        let ratio = refinement(&fine[level], &coarse[0]);
        let (x, correction) = (&mut fine[level].x, &coarse[0].x);
        let own = x.id();
        assignments.run(purpose, [own, correction.id(), 0], x, &[correction], |x| {
            let value = Expr::<CellCentre>::symbol(own, x.name()) + prolongate(correction, ratio);
            Recipe::new(value.node().clone(), own).filled(conditions.clone())
        })
    }

    /// Checks `rhs` and `guess` (on the finest level's grid and cells,
    /// valid or active on the solver's device, `rhs` finite) and copies
    /// them into the finest level's `b` and `x`, `x`'s ghosts filled by the
    /// conditions.
    pub(crate) fn copy_in(
        &mut self,
        rhs: &SpatialField<CellCentre>,
        guess: &SpatialField<CellCentre>,
    ) -> SolverResult<()> {
        let own = self.levels[0].b.layout().patch().clone();
        for (what, field) in [("right-hand side", rhs), ("solution", guess)] {
            let patch = field.layout().patch();
            if patch.grid() != own.grid()
                || patch.cells() != own.cells()
                || patch.offset() != own.offset()
            {
                return Err(SolverError::Setup {
                    equation: "Poisson".into(),
                    reason: format!(
                        "the {what} '{}' has {:?} cells at offset {:?} on a {:?} grid, but the solver was built for {:?} cells at offset {:?}; build a Multigrid for that grid (on patches: give one field per owned patch, in patch order)",
                        field.name(),
                        patch.cells(),
                        patch.offset(),
                        patch.grid().cells(),
                        own.cells(),
                        own.offset()
                    ),
                });
            }
        }
        let device = self.device;
        for (what, field, valid) in [
            ("right-hand side", rhs, rhs.is_valid_on(device)),
            ("solution", guess, guess.active_device() == device),
        ] {
            if !valid {
                return Err(SolverError::Setup {
                    equation: "Poisson".into(),
                    reason: format!(
                        "the {what} '{}' is not {} on {device}, where the solver's levels are (its locations: {:?}); move the solver there with Multigrid::move_to or the field to {device}",
                        field.name(),
                        if what == "solution" {
                            "active"
                        } else {
                            "valid"
                        },
                        field.location_states()
                    ),
                });
            }
        }
        // On a GPU the field is scanned on the host only when its norm,
        // reduced on the device, is not finite.
        let suspect = device.is_cpu() || !norm(&mut self.assignments, rhs)?.is_finite();
        if suspect && let Some(index) = first_non_finite(rhs)? {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: format!(
                    "the right-hand side '{}' is not finite at cell {index:?}; the solve would return a meaningless solution",
                    rhs.name()
                ),
            });
        }
        let conditions = self.conditions.clone();
        let Level { b, x, .. } = &mut self.levels[0];
        copy_interior(rhs, b, &mut self.assignments, None)?;
        copy_interior(guess, x, &mut self.assignments, Some(conditions))
    }

    /// [`Self::copy_in`], then `b` made mean-free where the problem is
    /// singular; returns `b`'s norm.
    fn load(
        &mut self,
        rhs: &SpatialField<CellCentre>,
        guess: &SpatialField<CellCentre>,
    ) -> SolverResult<f64> {
        self.copy_in(rhs, guess)?;
        let Multigrid {
            levels,
            assignments,
            mean,
            ..
        } = self;
        let Level {
            b, coefficients, ..
        } = &mut levels[0];
        if self.singular {
            match coefficients {
                Some(closed) => {
                    remove_fluid_mean(b, closed, mean, assignments, "remove mean", None)?
                }
                None => remove_mean(b, mean, assignments, "remove mean", None)?,
            }
        }
        norm(assignments, b)
    }

    fn store(&mut self, solution: &mut SpatialField<CellCentre>) -> SolverResult<()> {
        let Multigrid {
            levels,
            assignments,
            mean,
            ..
        } = self;
        let Level {
            x, coefficients, ..
        } = &mut levels[0];
        if self.singular {
            match coefficients {
                Some(closed) => {
                    remove_fluid_mean(x, closed, mean, assignments, "remove mean", None)?
                }
                None => remove_mean(x, mean, assignments, "remove mean", None)?,
            }
        }
        self.fill_finest()?;
        self.copy_out(solution)
    }

    /// Fills the ghosts of the finest level's `x` with the conditions.
    pub(crate) fn fill_finest(&mut self) -> SolverResult<()> {
        let conditions = self.conditions.clone();
        let x = &mut self.levels[0].x;
        self.assignments
            .run("fill finest", [x.id(), 0, 0], x, &[], |x| {
                Recipe::ghosts(x, conditions)
            })
    }

    /// Copies the finest level's `x` into `solution` (every point both hold).
    pub(crate) fn copy_out(&mut self, solution: &mut SpatialField<CellCentre>) -> SolverResult<()> {
        copy_all(&self.levels[0].x, solution, &mut self.assignments)
    }

    /// Solves `lap(x) = rhs` by V-cycles, starting from `solution`'s values
    /// and leaving the result there (ghosts filled by the conditions).
    /// Both fields must be on the solver's device ([`Self::device`]):
    /// `rhs` valid there, `solution` active there.
    pub fn solve(
        &mut self,
        rhs: &SpatialField<CellCentre>,
        solution: &mut SpatialField<CellCentre>,
    ) -> SolverResult<SolveReport> {
        if self.order != SpaceOrder::Second {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: format!(
                    "Multigrid::solve runs V-cycles on the compact second-order Laplacian, but this solver was built for the order-{} operator; use solve_preconditioned_cg",
                    self.order.number()
                ),
            });
        }
        if self.levels[0].coefficients.is_some() {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: "Multigrid::solve runs V-cycles on the open Laplacian, but this solver has faces closed by bodies; use solve_preconditioned_cg".into(),
            });
        }
        let outcome = self.v_cycles(rhs, solution);
        self.assignments.synchronize()?;
        outcome
    }

    fn v_cycles(
        &mut self,
        rhs: &SpatialField<CellCentre>,
        solution: &mut SpatialField<CellCentre>,
    ) -> SolverResult<SolveReport> {
        let rhs_norm = self.load(rhs, solution)?;
        let target = self.options.relative_tolerance * rhs_norm.max(f64::MIN_POSITIVE);
        let Iterated {
            residuals,
            iterations,
        } = poisson_iteration::v_cycles(self, target, self.options.max_iterations)?;
        self.finish(solution, "multigrid", &residuals, iterations, target)?;
        Ok(SolveReport {
            iterations,
            residuals,
            rhs_norm,
        })
    }

    /// Stores the solution after checking the residuals stayed finite.
    fn finish(
        &mut self,
        solution: &mut SpatialField<CellCentre>,
        solver: &str,
        residuals: &[f64],
        iterations: usize,
        target: f64,
    ) -> SolverResult<()> {
        check_finite(solver, residuals, iterations, target)?;
        self.store(solution)
    }

    /// Solves `lap(x) = rhs` by conjugate gradients preconditioned with one
    /// V-cycle, starting from `solution`'s values (devices as
    /// [`Self::solve`]).
    pub fn solve_preconditioned_cg(
        &mut self,
        rhs: &SpatialField<CellCentre>,
        solution: &mut SpatialField<CellCentre>,
    ) -> SolverResult<SolveReport> {
        let outcome = self.preconditioned_cg(rhs, solution);
        self.assignments.synchronize()?;
        outcome
    }

    /// [`Self::solve_preconditioned_cg`] with its GPU work on `stream` (a
    /// graph node's), on the stream's GPU where the solver must be. The
    /// host waits for the stream before this returns.
    pub(crate) fn solve_preconditioned_cg_on(
        &mut self,
        rhs: &SpatialField<CellCentre>,
        solution: &mut SpatialField<CellCentre>,
        stream: &watershed_fields::GpuStream,
    ) -> SolverResult<SolveReport> {
        self.assignments.use_stream(stream);
        let outcome = self.solve_preconditioned_cg(rhs, solution);
        self.assignments.release_stream();
        outcome
    }

    /// Where the hierarchy's fields live.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Moves every field of the hierarchy to `device` (copying their
    /// values and freeing the old memory), so that solves run there: on a
    /// GPU each kernel is enqueued on a stream, and the host waits only
    /// for the reductions that steer the iteration. Nothing happens when
    /// the solver is there already; when a copy cannot be made (no such
    /// GPU, no memory left there) the solver stays where it was, whole.
    pub fn move_to(&mut self, device: Device) -> SolverResult<()> {
        if device == self.device {
            return Ok(());
        }
        if let Device::Gpu(ordinal) = device {
            watershed_fields::gpu::require_gpu(ordinal)?;
        }
        self.assignments.synchronize()?;
        let from = self.device;
        let cg = &mut self.cg;
        let mut fields: Vec<&mut dyn MovableField> = Vec::new();
        for l in self.levels.iter_mut() {
            fields.extend([
                &mut l.x as &mut dyn MovableField,
                &mut l.b,
                &mut l.r,
                &mut l.t,
            ]);
            if let Some(closed) = &mut l.coefficients {
                fields.extend(closed.fields_mut());
            }
        }
        fields.extend([
            &mut cg.x as &mut dyn MovableField,
            &mut cg.r,
            &mut cg.p,
            &mut cg.q,
        ]);
        // First a copy of every field there, keeping the old ones: if one
        // cannot be made (memory), the copies made are dropped and the
        // solver stays whole where it was.
        for n in 0..fields.len() {
            if let Err(error) = fields[n].validate(device) {
                for field in &mut fields[..n] {
                    let _ = field.remove(device);
                }
                return Err(error.into());
            }
        }
        for field in fields {
            field.activate(device)?;
            field.remove(from)?;
        }
        // Kernels prepared for the old memory and a stream of the old
        // device are of no use there.
        self.assignments = Assignments::default();
        self.device = device;
        Ok(())
    }

    fn preconditioned_cg(
        &mut self,
        rhs: &SpatialField<CellCentre>,
        solution: &mut SpatialField<CellCentre>,
    ) -> SolverResult<SolveReport> {
        let rhs_norm = self.load(rhs, solution)?;
        let target = self.options.relative_tolerance * rhs_norm.max(f64::MIN_POSITIVE);
        let Iterated {
            residuals,
            iterations,
        } = poisson_iteration::preconditioned_cg(self, target, self.options.max_iterations)?;
        self.cg_end()?;
        self.finish(
            solution,
            "multigrid-preconditioned CG",
            &residuals,
            iterations,
            target,
        )?;
        Ok(SolveReport {
            iterations,
            residuals,
            rhs_norm,
        })
    }

    /// `z = M r`: one V-cycle from zero on the residual equation, leaving
    /// `z` in the finest level's `x`. The V-cycle reads the finest `b` and
    /// never writes it, so CG's `r` is lent as that `b` for the cycle (a
    /// swap, undone after it) instead of copied.
    fn precondition(&mut self) -> SolverResult<()> {
        self.lend_residual_as_rhs();
        let outcome = self.v_cycle(0, true, true);
        self.lend_residual_as_rhs();
        outcome
    }

    /// Swaps CG's `r` and the finest level's `b` (its own inverse): a
    /// V-cycle from zero then preconditions `r`.
    pub(crate) fn lend_residual_as_rhs(&mut self) {
        std::mem::swap(&mut self.cg.r, &mut self.levels[0].b);
    }

    /// One V-cycle from zero with homogeneous conditions on the loaded
    /// finest `b`: the coarse correction of a decomposed hierarchy
    /// (`crate::multigrid_patches`), agglomerated here.
    pub(crate) fn correction_cycle(&mut self) -> SolverResult<()> {
        self.v_cycle(0, true, true)
    }

    /// CG's start: its `x` from the finest level's (the loaded guess, its
    /// ghosts filled), then `r = b - A x`.
    pub(crate) fn cg_begin(&mut self) -> SolverResult<()> {
        // CG keeps its own x and r; the V-cycles use the levels' fields.
        copy_all(&self.levels[0].x, &mut self.cg.x, &mut self.assignments)?;
        let order = self.order;
        let Multigrid {
            levels,
            cg,
            assignments,
            ..
        } = self;
        let (r, b, x) = (&mut cg.r, &levels[0].b, &cg.x);
        match &levels[0].coefficients {
            Some(blocked) => {
                let mut fields: Vec<&dyn BoundField> = vec![b, x];
                fields.extend(blocked.fields());
                assignments.run(
                    "cg residual, closed faces",
                    [r.id(), b.id(), x.id()],
                    r,
                    &fields,
                    |r| Recipe::new((field(b) - blocked.operator(x)).node().clone(), r.id()),
                )
            }
            None => assignments.run("cg residual", [r.id(), b.id(), x.id()], r, &[b, x], |r| {
                Recipe::new((field(b) - operator(order, x)).node().clone(), r.id())
            }),
        }
    }

    /// `p = z` (the finest level's `x` after a V-cycle, ghosts included).
    pub(crate) fn cg_first_direction(&mut self) -> SolverResult<()> {
        copy_all(&self.levels[0].x, &mut self.cg.p, &mut self.assignments)
    }

    /// `q = A p` (`p`'s ghosts filled).
    pub(crate) fn cg_search(&mut self) -> SolverResult<()> {
        let order = self.order;
        let Multigrid {
            cg,
            assignments,
            levels,
            ..
        } = self;
        let (p, q) = (&cg.p, &mut cg.q);
        match &levels[0].coefficients {
            Some(blocked) => {
                let mut fields: Vec<&dyn BoundField> = vec![p];
                fields.extend(blocked.fields());
                assignments.run("cg q, closed faces", [q.id(), p.id(), 0], q, &fields, |q| {
                    Recipe::new(blocked.operator(p).node().clone(), q.id())
                })
            }
            None => assignments.run("cg q", [q.id(), p.id(), 0], q, &[p], |q| {
                Recipe::new(operator(order, p).node().clone(), q.id())
            }),
        }
    }

    /// `x += alpha p`, `r -= alpha q`.
    pub(crate) fn cg_step(&mut self, alpha: f64) -> SolverResult<()> {
        let Multigrid {
            cg, assignments, ..
        } = self;
        cg.alpha.set(alpha);
        let (alpha, p, q) = (&cg.alpha, &cg.p, &cg.q);
        let x = &mut cg.x;
        let own = x.id();
        assignments.run("cg x", [own, p.id(), 0], x, &[p], |x| {
            let value = Expr::<CellCentre>::symbol(own, x.name()) + alpha.expr() * field(p);
            Recipe::new(value.node().clone(), own)
        })?;
        let r = &mut cg.r;
        let own = r.id();
        assignments.run("cg r", [own, q.id(), 0], r, &[q], |r| {
            let value = Expr::<CellCentre>::symbol(own, r.name()) - alpha.expr() * field(q);
            Recipe::new(value.node().clone(), own)
        })
    }

    /// `p = z + beta p`, its ghosts filled with the homogeneous conditions.
    pub(crate) fn cg_direction(&mut self, beta: f64) -> SolverResult<()> {
        let homogeneous = self.homogeneous.clone();
        let Multigrid {
            cg,
            assignments,
            levels,
            ..
        } = self;
        cg.beta.set(beta);
        let z = &levels[0].x;
        let (beta, p) = (&cg.beta, &mut cg.p);
        let own = p.id();
        assignments.run("cg p", [own, z.id(), 0], p, &[z], |p| {
            let value = field(z) + beta.expr() * Expr::<CellCentre>::symbol(own, p.name());
            Recipe::new(value.node().clone(), own).filled(homogeneous)
        })
    }

    /// Waits for the work enqueued on the hierarchy's GPU stream (nothing
    /// on the CPU): before the host reads its fields.
    pub(crate) fn synchronize(&self) -> SolverResult<()> {
        self.assignments.synchronize()
    }

    /// An event after the work enqueued on the hierarchy's GPU stream
    /// (`None` on the CPU, or before any): what another stream waits for
    /// before it reads or writes the hierarchy's fields.
    pub(crate) fn record(&self) -> SolverResult<Option<watershed_fields::ValidationEvent>> {
        self.assignments.record()
    }

    /// CG's `x` back into the finest level's, where the solution is stored from.
    pub(crate) fn cg_end(&mut self) -> SolverResult<()> {
        copy_all(&self.cg.x, &mut self.levels[0].x, &mut self.assignments)
    }

    /// The field a decomposed hierarchy reduces, exchanges or fills.
    pub(crate) fn vector(&self, which: Vector) -> &SpatialField<CellCentre> {
        select(&self.levels, &self.cg, which)
    }

    /// [`Self::vector`], to write.
    pub(crate) fn vector_mut(&mut self, which: Vector) -> &mut SpatialField<CellCentre> {
        select_mut(&mut self.levels, &mut self.cg, which)
    }

    /// This hierarchy's part of the inner product `which`.
    pub(crate) fn product_here(&mut self, which: Product) -> SolverResult<f64> {
        let (a, b) = match which {
            Product::ResidualZ => (&self.cg.r, &self.levels[0].x),
            Product::DirectionImage => (&self.cg.p, &self.cg.q),
        };
        dot(&mut self.assignments, a, b)
    }

    /// The interior sum of the squares of `which`.
    pub(crate) fn squares_here(&mut self, which: Vector) -> SolverResult<f64> {
        let Multigrid {
            levels,
            cg,
            assignments,
            ..
        } = self;
        let v = select(levels, cg, which);
        squares(assignments, v)
    }

    /// The interior sum of `which`.
    pub(crate) fn sum_here(&mut self, which: Vector) -> SolverResult<f64> {
        let Multigrid {
            levels,
            cg,
            assignments,
            ..
        } = self;
        let v = select(levels, cg, which);
        sum(assignments, v)
    }

    /// With bodies closing faces: the number of the finest level's
    /// interior fluid cells.
    pub(crate) fn fluid_cells_here(&self) -> SolverResult<f64> {
        match &self.levels[0].coefficients {
            Some(closed) => Ok(closed.fluid_cells),
            None => Err(closed_faces_needed("a count of fluid cells")),
        }
    }

    /// With bodies closing faces: the interior sum of `which` over the
    /// finest level's fluid cells (a singular problem's mean over every
    /// patch is formed from these).
    pub(crate) fn fluid_sum_here(&mut self, which: Vector) -> SolverResult<f64> {
        let Multigrid {
            levels,
            cg,
            assignments,
            ..
        } = self;
        let Some(closed) = &levels[0].coefficients else {
            return Err(closed_faces_needed("a sum over the fluid"));
        };
        let v = select(levels, cg, which);
        fluid_sum(v, closed, assignments)
    }

    /// With bodies closing faces: subtracts `value` from `which` (the
    /// finest level's `x` or `b`, or CG's `r`) on the fluid cells.
    pub(crate) fn subtract_on_fluid_here(&mut self, which: Vector, value: f64) -> SolverResult<()> {
        self.mean.set(value);
        let Multigrid {
            levels,
            cg,
            assignments,
            mean,
            ..
        } = self;
        let Level {
            x, b, coefficients, ..
        } = &mut levels[0];
        let (target, closed) = match which {
            Vector::Solution(0) => (x, &*coefficients),
            Vector::Rhs(0) => (b, &*coefficients),
            Vector::CgResidual => (&mut cg.r, &*coefficients),
            _ => {
                return Err(SolverError::Setup {
                    equation: "Poisson".into(),
                    reason: format!(
                        "a mean over the fluid is removed from the finest level's x or b or CG's r, not from {which:?}"
                    ),
                });
            }
        };
        let Some(closed) = closed else {
            return Err(closed_faces_needed("a mean over the fluid"));
        };
        subtract_on_fluid(target, closed, mean, assignments, "remove mean", None)
    }

    /// Subtracts `value` from the interior of `which` (a mean worked out
    /// over every patch).
    pub(crate) fn subtract(&mut self, which: Vector, value: f64) -> SolverResult<()> {
        self.mean.set(value);
        let Multigrid {
            levels,
            cg,
            assignments,
            mean,
            ..
        } = self;
        let x = select_mut(levels, cg, which);
        subtract_mean(x, mean, assignments, "remove mean", None)
    }

    /// Fills the ghosts of `which` on the physical sides (after an exchange
    /// filled those across seams, so that corners read the new values):
    /// a level's `x` with its conditions, CG's `p` with the homogeneous ones.
    pub(crate) fn refill(&mut self, which: Vector, homogeneous: bool) -> SolverResult<()> {
        let (conditions, purpose) = match which {
            Vector::Solution(level) => (
                self.conditions(level, homogeneous),
                Self::fill_purpose(level, homogeneous, ["refill", "refill, homogeneous"]),
            ),
            _ => (self.homogeneous.clone(), "refill, homogeneous"),
        };
        let Multigrid {
            levels,
            cg,
            assignments,
            ..
        } = self;
        let x = select_mut(levels, cg, which);
        assignments.run(purpose, [x.id(), 0, 0], x, &[], |x| {
            Recipe::ghosts(x, conditions)
        })
    }

    /// Removes the mean of CG's `r` (a singular problem's), over the fluid
    /// where bodies close faces.
    fn remove_residual_mean(&mut self) -> SolverResult<()> {
        let Multigrid {
            cg,
            assignments,
            mean,
            levels,
            ..
        } = self;
        match &levels[0].coefficients {
            Some(blocked) => {
                remove_fluid_mean(&mut cg.r, blocked, mean, assignments, "remove mean", None)
            }
            None => remove_mean(&mut cg.r, mean, assignments, "remove mean", None),
        }
    }

    /// The error of a solve that ran out of iterations.
    pub(crate) fn out_of_iterations(
        &self,
        what: &str,
        residual: f64,
        iterations: usize,
        target: f64,
    ) -> SolverError {
        SolverError::NotConverged {
            solver: self.describe(what),
            residual,
            iterations,
            target,
        }
    }
}

/// A vector of a hierarchy, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vector {
    /// A level's right-hand side `b`.
    Rhs(usize),
    /// A level's solution or correction `x` (on the finest, after a
    /// preconditioning cycle, CG's `z`).
    Solution(usize),
    /// A level's residual `r`.
    Residual(usize),
    /// CG's residual `r`.
    CgResidual,
    /// CG's search direction `p`.
    CgDirection,
}

/// The field of `which` among `levels` and `cg`.
fn select<'a>(
    levels: &'a [Level],
    cg: &'a ConjugateGradientVectors,
    which: Vector,
) -> &'a SpatialField<CellCentre> {
    match which {
        Vector::Rhs(level) => &levels[level].b,
        Vector::Solution(level) => &levels[level].x,
        Vector::Residual(level) => &levels[level].r,
        Vector::CgResidual => &cg.r,
        Vector::CgDirection => &cg.p,
    }
}

/// [`select`], to write.
fn select_mut<'a>(
    levels: &'a mut [Level],
    cg: &'a mut ConjugateGradientVectors,
    which: Vector,
) -> &'a mut SpatialField<CellCentre> {
    match which {
        Vector::Rhs(level) => &mut levels[level].b,
        Vector::Solution(level) => &mut levels[level].x,
        Vector::Residual(level) => &mut levels[level].r,
        Vector::CgResidual => &mut cg.r,
        Vector::CgDirection => &mut cg.p,
    }
}

impl PoissonSpace for Multigrid {
    fn v_cycle(&mut self) -> SolverResult<()> {
        self.v_cycle(0, false, false)
    }

    fn residual_norm(&mut self) -> SolverResult<f64> {
        self.residual(0)?;
        norm(&mut self.assignments, &self.levels[0].r)
    }

    fn begin_cg(&mut self) -> SolverResult<f64> {
        self.cg_begin()?;
        norm(&mut self.assignments, &self.cg.r)
    }

    fn precondition(&mut self) -> SolverResult<()> {
        Multigrid::precondition(self)
    }

    fn first_direction(&mut self) -> SolverResult<()> {
        self.cg_first_direction()
    }

    fn search(&mut self) -> SolverResult<()> {
        self.cg_search()
    }

    fn product(&mut self, which: Product) -> SolverResult<f64> {
        self.product_here(which)
    }

    fn advance(&mut self, alpha: f64) -> SolverResult<f64> {
        self.cg_step(alpha)?;
        if self.singular {
            self.remove_residual_mean()?;
        }
        norm(&mut self.assignments, &self.cg.r)
    }

    fn direction(&mut self, beta: f64) -> SolverResult<()> {
        self.cg_direction(beta)
    }

    fn not_converged(
        &self,
        what: &str,
        residual: f64,
        iterations: usize,
        target: f64,
    ) -> SolverError {
        self.out_of_iterations(what, residual, iterations, target)
    }
}

/// An error when the last of `residuals` is not finite: `solver`
/// diverged.
pub(crate) fn check_finite(
    solver: &str,
    residuals: &[f64],
    iterations: usize,
    target: f64,
) -> SolverResult<()> {
    match residuals.last() {
        Some(&last) if !last.is_finite() => Err(SolverError::NotConverged {
            solver: format!(
                "{solver} (the residual is no longer finite: the iteration diverged; check the initial guess and the smoothing weight)"
            ),
            residual: last,
            iterations,
            target,
        }),
        _ => Ok(()),
    }
}

/// The interior dot product of `a` and `b` (prepared once per pair).
fn dot(
    assignments: &mut Assignments,
    a: &SpatialField<CellCentre>,
    b: &SpatialField<CellCentre>,
) -> SolverResult<f64> {
    assignments.reduce("dot", [a.id(), b.id()], a.active_device(), &[a, b], || {
        PreparedReduction::new(
            field(a) * field(b),
            Reduction::Sum,
            ReduceRegion::Interior,
            Parallelism::Rayon,
        )
    })
}

/// The interior L2 norm of `a` (prepared once per field).
fn norm(assignments: &mut Assignments, a: &SpatialField<CellCentre>) -> SolverResult<f64> {
    Ok(squares(assignments, a)?.sqrt())
}

/// The interior sum of the squares of `a` (prepared once per field).
fn squares(assignments: &mut Assignments, a: &SpatialField<CellCentre>) -> SolverResult<f64> {
    assignments.reduce("norm", [a.id(), 0], a.active_device(), &[a], || {
        PreparedReduction::new(
            a,
            Reduction::SumOfSquares,
            ReduceRegion::Interior,
            Parallelism::Rayon,
        )
    })
}

/// The interior sum of `x` (prepared once per field).
fn sum(assignments: &mut Assignments, x: &SpatialField<CellCentre>) -> SolverResult<f64> {
    assignments.reduce("sum", [x.id(), 0], x.active_device(), &[x], || {
        PreparedReduction::new(
            x,
            Reduction::Sum,
            ReduceRegion::Interior,
            Parallelism::Rayon,
        )
    })
}

/// Subtracts `x`'s interior mean from `x` (through the parameter `mean`,
/// so the kernel is the same for every mean), then fills `x`'s ghosts with
/// `fill` if given (`purpose` names the variant).
fn remove_mean(
    x: &mut SpatialField<CellCentre>,
    mean: &Parameter,
    assignments: &mut Assignments,
    purpose: &'static str,
    fill: Option<BoundaryConditions>,
) -> SolverResult<()> {
    let n = x.layout().interior_len() as f64;
    mean.set(sum(assignments, x)? / n);
    subtract_mean(x, mean, assignments, purpose, fill)
}

/// Subtracts the parameter `mean` from `x`'s interior, then fills `x`'s
/// ghosts with `fill` if given (`purpose` names the variant).
fn subtract_mean(
    x: &mut SpatialField<CellCentre>,
    mean: &Parameter,
    assignments: &mut Assignments,
    purpose: &'static str,
    fill: Option<BoundaryConditions>,
) -> SolverResult<()> {
    let own = x.id();
    assignments.run(purpose, [own, 0, 0], x, &[], |x| {
        let value = Expr::<CellCentre>::symbol(own, x.name()) - mean.expr();
        Recipe {
            fill,
            ..Recipe::new(value.node().clone(), own)
        }
    })
}

/// Copies the interior of `from` into `to` (a language assignment), then
/// fills `to`'s ghosts with `fill` if given.
fn copy_interior(
    from: &SpatialField<CellCentre>,
    to: &mut SpatialField<CellCentre>,
    assignments: &mut Assignments,
    fill: Option<BoundaryConditions>,
) -> SolverResult<()> {
    let purpose = if fill.is_some() {
        "copy interior, filled"
    } else {
        "copy interior"
    };
    assignments.run(purpose, [to.id(), from.id(), 0], to, &[from], |to| Recipe {
        fill,
        ..Recipe::new(field(from).node().clone(), to.id())
    })
}

/// Copies every point both fields hold (a language assignment over the
/// intersection of their allocations).
fn copy_all(
    from: &SpatialField<CellCentre>,
    to: &mut SpatialField<CellCentre>,
    assignments: &mut Assignments,
) -> SolverResult<()> {
    let region = from
        .layout()
        .allocated()
        .intersect(&to.layout().allocated());
    assignments.run("copy all", [to.id(), from.id(), 0], to, &[from], |to| {
        Recipe::new(field(from).node().clone(), to.id()).with_options(AssignOptions {
            region: Region::Box(region),
            ..AssignOptions::default()
        })
    })
}

/// The Laplacian of `order` applied to `x`: compact, or the wide
/// fourth-order `sum_a div4_a(grad4_a(x))` over the active axes.
fn operator(order: SpaceOrder, x: &SpatialField<CellCentre>) -> Expr<'_, CellCentre> {
    match order {
        SpaceOrder::Second => laplacian(x),
        SpaceOrder::Fourth => {
            let active = x.layout().patch().grid().active_dimensions();
            let mut sum: Expr<'_, CellCentre> = Expr::constant(0.0);
            for axis in (0..3).filter(|&a| active[a]) {
                sum = sum + on_face!(axis, F => divergence4::<F>(gradient4::<F>(x)));
            }
            sum
        }
    }
}

/// The grids of a hierarchy on `grid`, finest first: every active axis
/// halved while every active count is even and at least 4.
pub(crate) fn coarsened_grids(grid: &Grid) -> SolverResult<Vec<Grid>> {
    let active = grid.active_dimensions();
    let mut grids = vec![grid.clone()];
    let mut current = grid.clone();
    loop {
        let cells = current.cells();
        let can = (0..3)
            .filter(|&a| active[a])
            .all(|a| cells[a].is_multiple_of(2) && cells[a] >= 4);
        if !can {
            return Ok(grids);
        }
        let coarse_cells = [0, 1, 2].map(|a| if active[a] { cells[a] / 2 } else { cells[a] });
        let spacing = [0, 1, 2].map(|a| {
            if active[a] {
                current.spacing()[a] * 2.0
            } else {
                current.spacing()[a]
            }
        });
        current = Grid::from_spacing(coarse_cells, spacing, current.origin())?
            .with_periodic(grid.periodic());
        grids.push(current.clone());
    }
}

/// How many times finer `fine` is than `coarse` along each axis (1 or 2).
/// The error of a fluid-only operation on a hierarchy without bodies.
fn closed_faces_needed(what: &str) -> SolverError {
    SolverError::Setup {
        equation: "Poisson".into(),
        reason: format!(
            "{what} needs faces closed by bodies (block_bodies), and this hierarchy has none"
        ),
    }
}

fn refinement(fine: &Level, coarse: &Level) -> [usize; 3] {
    let (f, c) = (
        fine.x.layout().interior_extent(),
        coarse.x.layout().interior_extent(),
    );
    [0, 1, 2].map(|a| f[a] / c[a].max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use watershed_operators::Side;

    /// The V-cycles start their corrections (and the preconditioner its
    /// `z`) from zero without reading the levels' `x`: poisoning every
    /// level's `x` and `t` with NaN before a solve changes no bit of the
    /// result. A first sweep that still read `x` would spread the NaN.
    #[test]
    fn corrections_from_zero_never_read_what_x_held() {
        let grid = Grid::new([32, 32, 1], [1.0 / 32.0; 3], [0.0; 3])
            .unwrap()
            .with_periodic([true, false, false]);
        let patch = grid.whole_domain(1);
        let walls = BoundaryConditions::new()
            .with(Side::MINUS_Y, BoundaryCondition::Dirichlet(0.0))
            .with(Side::PLUS_Y, BoundaryCondition::Neumann(0.0));
        let mut rhs = SpatialField::<CellCentre>::new("rhs", &patch, Device::Cpu).unwrap();
        let layout = rhs.layout().clone();
        let values = rhs.values_mut().unwrap();
        for index in layout.interior() {
            let [x, y, _] = layout.coordinate(index);
            values[layout.linear_index(index)] =
                (2.0 * std::f64::consts::PI * x).sin() * y + 0.25 * y * y;
        }
        let solve = |poison: bool| {
            let mut multigrid =
                Multigrid::new(&patch, walls.clone(), MultigridOptions::default()).unwrap();
            if poison {
                for level in &mut multigrid.levels {
                    level.x.fill(f64::NAN).unwrap();
                    level.t.fill(f64::NAN).unwrap();
                }
            }
            let mut solution =
                SpatialField::<CellCentre>::new("solution", &patch, Device::Cpu).unwrap();
            let report = multigrid
                .solve_preconditioned_cg(&rhs, &mut solution)
                .unwrap();
            (solution.values().unwrap().to_vec(), report.iterations)
        };
        let (clean, iterations) = solve(false);
        let (poisoned, poisoned_iterations) = solve(true);
        assert!(iterations > 1, "the solve should take several iterations");
        assert_eq!(iterations, poisoned_iterations);
        assert!(
            clean
                .iter()
                .zip(&poisoned)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "a level's old x reached the solution"
        );
    }
}
