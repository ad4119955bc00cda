//! Geometric multigrid on the patches of a decomposed grid (issue 51): the
//! fine levels smoothed on patches with their seams exchanged, the coarse
//! levels agglomerated, as in hypre and Uintah, and every reduction added
//! in patch order, so that a solve gives the same bits on 1, 2 or 4 ranks.
//!
//! # Design
//!
//! * **Levels.** The hierarchy's grids are the whole domain's
//!   ([`crate::Multigrid`]'s rule: every active axis halved while its count
//!   is even and at least 4). Level `l` is decomposed into the layout's
//!   patch counts while its patches keep at least [`SMALLEST_PATCH_CELLS`]
//!   cells along every active axis, an even number (so that each coarse
//!   cell's children lie in one patch), and while at least two whole
//!   levels stay below. The first level that is not is the
//!   *agglomeration level* `D`; from there on one whole-domain
//!   [`crate::Multigrid`] (built on level `D`'s grid) holds the coarse
//!   hierarchy, replicated on every rank.
//! * **One V-cycle on the patches is the whole domain's, bit for bit.**
//!   Each owned patch keeps its own levels `0..=D` (a
//!   [`crate::Multigrid`] on the patch). Every writer of a level's `x`
//!   (a Jacobi sweep, a correction) fills the ghosts on the patch's
//!   physical sides as the whole domain does, and its own periodic images
//!   along an axis it spans (the exchange leaves those out); then the seam ghosts take
//!   their owners' values ([`watershed_fields::halo`]) and the physical
//!   sides are filled again, so corners read the new seam values: every
//!   allocated point of a patch holds what the whole domain holds there,
//!   and each kernel computes the whole domain's values on the patch. The
//!   restriction reads only the patch's own cells. At level `D` every
//!   rank gathers the restricted residuals of every patch (in patch
//!   order), runs the whole coarse cycle from zero, and takes back the
//!   window of the correction its patches cover, ghosts included, which
//!   the prolongation reads.
//! * **Reductions** (norms, CG's inner products, a singular problem's
//!   means) are per-patch partial results gathered from every rank and
//!   added in patch order: the same sums on any number of ranks, but
//!   summed in another order than the whole domain's, so a CG solve equals
//!   the undecomposed one only to rounding, while plain V-cycles on a
//!   problem with a Dirichlet side (no mean to remove) equal it bit for
//!   bit.
//! * **Costs.** Each Jacobi sweep, correction and CG direction exchanges
//!   one field's seams, except the last sweep of a preconditioning cycle
//!   (CG reads only the interior of its result; the direction built from
//!   it is exchanged instead); the agglomeration gathers level `D` (a few
//!   hundred cells on the usual grids) to every rank once per cycle.
//!   `cargo bench -p watershed-solvers --bench poisson_patches` times the
//!   solve against the whole domain's.
//!
//! * **On a GPU** ([`PatchedMultigrid::move_to`]): every patch's levels
//!   and CG's vectors live there and every kernel runs there, on each
//!   hierarchy's stream; an exchange's moves wait for those streams on the
//!   GPU (an event each), move the seams there (`watershed_operators::gpu_points`: copied
//!   between patches of one GPU, only the points a message carries
//!   crossing to the host), and the host waits for them. The agglomerated
//!   levels stay on the host: each cycle brings level `D`'s right-hand side
//!   down and sends each patch's window of the correction up. Inner
//!   products bring one partial sum per row down, added in the CPU's
//!   order, so the solve has the CPU's bits.
//!
//! Second and fourth order (the finest level then has 3 ghost layers and
//! exchanges them), on the CPU or a GPU. Immersed bodies close faces as on the
//! whole domain ([`PatchedMultigrid::block_bodies`]: each patch's levels
//! get the coefficients of their part of the grid; a singular problem's
//! means are over every patch's fluid cells), second order.

use crate::boundary::BoundaryConditions;
use crate::error::{SolverError, SolverResult};
use crate::immersed::Immersed;
use crate::multigrid::coarsened_grids;
use crate::multigrid::{Multigrid, MultigridOptions, SolveReport, Vector, check_finite};
use crate::multigrid_bodies::CLOSED_LEVELS;
use crate::poisson_iteration::{self, Iterated, PoissonSpace, Product};
use crate::staggered::SpaceOrder;
use crate::windows::{append_interior, append_interior_of, place_interior, take_window};
use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};
use watershed_fields::halo::{
    CopyRun, HaloBuffers, HaloFields, HaloPlan, HaloRoute, copy_runs_between, exchange_reusing,
    source_and_destination,
};
use watershed_fields::ranks::RankLink;
use watershed_fields::{
    CellCentre, Device, FieldLayout, FieldResult, GhostWidth, LocationKind, PatchLayout,
    SpatialField,
};
use watershed_operators::gpu_points::{
    PointBatch, copy_points_on_gpu, gather_points_on_gpu, scatter_points_on_gpu,
};

/// A level is smoothed on patches only while they keep at least this many
/// cells along every active axis; below, the seam exchanges of a sweep
/// cost more than the sweep, and the level is agglomerated (a 4^3 patch
/// has 152 ghost points for its 64 cells, an 8^3 patch 488 for 512).
pub const SMALLEST_PATCH_CELLS: usize = 8;

/// A multigrid Poisson solver for `lap(x) = b` on the patches of a layout
/// this rank owns (see the module docs): V-cycles or CG preconditioned by
/// one V-cycle, collective over the ranks of its link.
///
/// ```
/// use std::rc::Rc;
/// use watershed_fields::{CellCentre, Device, GhostWidth, Grid, PatchLayout, SpatialField};
/// use watershed_fields::ranks::SingleProcess;
/// use watershed_solvers::{BoundaryCondition, BoundaryConditions, MultigridOptions};
/// use watershed_solvers::{PatchedMultigrid, SpaceOrder};
/// use watershed_operators::Side;
/// let grid = Grid::new([32, 32, 1], [1.0; 3], [0.0; 3])?;
/// let layout = PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(1))?;
/// let walls = BoundaryConditions::new()
///     .with(Side::MINUS_X, BoundaryCondition::Dirichlet(0.0))
///     .with(Side::PLUS_X, BoundaryCondition::Dirichlet(0.0))
///     .with(Side::MINUS_Y, BoundaryCondition::Neumann(0.0))
///     .with(Side::PLUS_Y, BoundaryCondition::Neumann(0.0));
/// let mut poisson = PatchedMultigrid::new(
///     &layout, Rc::new(SingleProcess), walls, MultigridOptions::default(), SpaceOrder::Second,
/// )?;
/// // Levels 32 and 16 cells wide on patches, 8, 4 and 2 agglomerated.
/// assert_eq!((poisson.levels(), poisson.decomposed_levels()), (5, 2));
/// let mut rhs = Vec::new();
/// let mut solution = Vec::new();
/// for index in poisson.owned() {
///     let patch = layout.patch(index)?;
///     let mut b = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu)?;
///     b.fill(1.0)?;
///     rhs.push(b);
///     solution.push(SpatialField::<CellCentre>::new("x", &patch, Device::Cpu)?);
/// }
/// let report = poisson.solve_preconditioned_cg(&rhs, &mut solution)?;
/// assert!(report.residuals.last().unwrap() <= &(1e-8 * report.rhs_norm));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PatchedMultigrid {
    link: Rc<dyn RankLink>,
    layout: PatchLayout,
    owned: Range<usize>,
    /// One hierarchy per owned patch, in patch order: levels `0..=D`.
    patches: Vec<Multigrid>,
    /// The exchange of each level smoothed on patches (level 0 at least:
    /// CG's direction and the guess are exchanged there).
    routes: Vec<HaloRoute>,
    buffers: HaloBuffers,
    /// Levels `D..` on the whole domain, the same on every rank.
    coarse: Multigrid,
    /// Every patch of level `D`, in patch order: its offset in level
    /// `D`'s grid and its field layout (what the gather places).
    parts: Vec<([isize; 3], FieldLayout)>,
    /// The values each rank gives to the gather of level `D`.
    gather_counts: Vec<usize>,
    /// How many patches each rank owns (one partial result each).
    patch_counts: Vec<usize>,
    singular: bool,
    order: SpaceOrder,
    options: MultigridOptions,
    /// The conditions on the non-periodic sides.
    conditions: BoundaryConditions,
    /// Whether the grid has a non-periodic side, whose ghosts an exchange
    /// fills again (with none, the exchange writes every ghost point a
    /// writer's conditions left: see [`Self::exchange`]).
    physical_sides: bool,
    /// Interior cells of the finest level (for means).
    cells: f64,
    /// With bodies: the finest level's interior fluid cells, every patch's.
    fluid_cells: f64,
    /// Wall time in seam exchanges, gathers and reductions across ranks.
    exchange_time: Duration,
    /// Where the patches' levels live ([`Self::move_to`]); the
    /// agglomerated levels stay on the CPU.
    device: Device,
}

impl std::fmt::Debug for PatchedMultigrid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchedMultigrid")
            .field("patches", &self.layout.counts())
            .field("rank", &self.link.rank())
            .field("owned", &self.owned)
            .field("levels", &self.levels())
            .field("decomposed_levels", &self.decomposed_levels())
            .finish()
    }
}

impl PatchedMultigrid {
    /// A solver for `lap(x) = b` on the patches of `layout` the rank of
    /// `link` owns (only the layout's counts matter: the solver's levels
    /// keep their own ghost layers), with `conditions` on every
    /// non-periodic side and the Laplacian of `order` for CG (the V-cycles
    /// stay compact, as [`Multigrid::with_order`]).
    pub fn new(
        layout: &PatchLayout,
        link: Rc<dyn RankLink>,
        conditions: BoundaryConditions,
        options: MultigridOptions,
        order: SpaceOrder,
    ) -> SolverResult<Self> {
        let setup = |reason: String| SolverError::Setup {
            equation: "Poisson".into(),
            reason,
        };
        let grid = layout.grid();
        let grids = coarsened_grids(grid)?;
        let active = grid.active_dimensions();
        let counts = layout.counts();
        let finest_ghosts = match order {
            SpaceOrder::Second => 1,
            SpaceOrder::Fourth => 3,
        };
        // The agglomeration level: the first whose patches are too small
        // or odd, or with fewer than two whole levels below it.
        let mut agglomerated = 0;
        while agglomerated + 3 <= grids.len() {
            let cells = grids[agglomerated].cells();
            let fits = (0..3).filter(|&a| active[a]).all(|a| {
                let n = cells[a] / counts[a];
                n.is_multiple_of(2) && n >= SMALLEST_PATCH_CELLS
            });
            if !fits {
                break;
            }
            agglomerated += 1;
        }
        let ghosts = |level: usize| if level == 0 { finest_ghosts } else { 1 };
        let layouts = (0..=agglomerated)
            .map(|level| {
                PatchLayout::new(&grids[level], counts, GhostWidth::uniform(ghosts(level)))
            })
            .collect::<FieldResult<Vec<_>>>()?;
        let coarse_order = if agglomerated == 0 {
            order
        } else {
            SpaceOrder::Second
        };
        let coarse = Multigrid::with_order(
            &grids[agglomerated].whole_domain(ghosts(agglomerated)),
            conditions.clone(),
            options,
            coarse_order,
        )?;
        let singular = coarse.is_singular();
        let (rank, ranks) = (link.rank(), link.ranks());
        let owned = layout.owned_by(rank, ranks)?;
        let mut patches = Vec::with_capacity(owned.len());
        for index in owned.clone() {
            let levels = layouts
                .iter()
                .map(|l| l.patch(index))
                .collect::<FieldResult<Vec<_>>>()?;
            patches.push(Multigrid::on_patch(
                &levels,
                conditions.clone(),
                options,
                order,
                singular,
            )?);
        }
        if patches.is_empty() {
            return Err(setup(format!(
                "rank {rank} of {ranks} owns none of the {} patches of layout {counts:?}; use at most as many ranks as patches",
                layout.len()
            )));
        }
        let routes = layouts[..agglomerated.max(1)]
            .iter()
            .map(|l| {
                let plan = HaloPlan::new(l, LocationKind::CellCentre)?;
                // A patch's own periodic images (along an axis it spans)
                // are filled by every writer's conditions, before the
                // exchange: the exchange leaves them out.
                HaloRoute::new_without_own_images(&plan, l, rank, ranks)
            })
            .collect::<FieldResult<Vec<_>>>()?;
        let top = &layouts[agglomerated];
        let parts = (0..top.len())
            .map(|index| {
                let patch = top.patch(index)?;
                let offset = patch.offset().map(|o| o as isize);
                Ok((offset, FieldLayout::new(&patch, LocationKind::CellCentre)))
            })
            .collect::<FieldResult<Vec<_>>>()?;
        let owned_runs = (0..ranks)
            .map(|r| layout.owned_by(r, ranks).map(|run| run.len()))
            .collect::<FieldResult<Vec<_>>>()?;
        let per_patch = parts.first().map_or(0, |(_, l)| l.interior_len());
        Ok(PatchedMultigrid {
            layout: layout.clone(),
            owned,
            patches,
            routes,
            buffers: HaloBuffers::default(),
            coarse,
            parts,
            gather_counts: owned_runs.iter().map(|n| n * per_patch).collect(),
            patch_counts: owned_runs,
            singular,
            order,
            options,
            conditions,
            physical_sides: (0..3).any(|a| active[a] && !grid.periodic()[a]),
            cells: grid.cells().iter().product::<usize>() as f64,
            fluid_cells: 0.0,
            exchange_time: Duration::ZERO,
            device: Device::Cpu,
            link,
        })
    }

    /// The layout of the finest level's patches.
    pub fn layout(&self) -> &PatchLayout {
        &self.layout
    }

    /// The patches this rank owns (the fields a solve takes, in order).
    pub fn owned(&self) -> Range<usize> {
        self.owned.clone()
    }

    /// Levels in all, decomposed and agglomerated.
    pub fn levels(&self) -> usize {
        self.decomposed_levels() + self.coarse.levels()
    }

    /// Levels smoothed on patches; the coarser ones run on the whole
    /// domain on every rank.
    pub fn decomposed_levels(&self) -> usize {
        self.patches[0].levels() - 1
    }

    /// True when no side is Dirichlet (solutions are defined up to a
    /// constant).
    pub fn is_singular(&self) -> bool {
        self.singular
    }

    /// Wall time this rank spent in seam exchanges, the agglomeration's
    /// gathers and reductions across patches (waits for other ranks
    /// included), since the solver was built.
    pub fn exchange_time(&self) -> Duration {
        self.exchange_time
    }

    /// Moves every owned patch's levels (and CG's vectors) to `device`,
    /// where the solves then run: smoothing, residuals, transfers and
    /// CG's updates and inner products as kernels there, the seams
    /// exchanged there (`watershed_operators::gpu_points`: between patches
    /// of one GPU nothing crosses to the host; for another rank only the
    /// points sent and received). The agglomerated coarse levels stay on
    /// the CPU, replicated: each cycle brings level `D`'s right-hand side
    /// down and its correction's window up (a few hundred values a
    /// patch). The fields a solve takes must then be on `device` too. On
    /// error (no such GPU, memory) the solver stays where it was, whole.
    pub fn move_to(&mut self, device: Device) -> SolverResult<()> {
        if device == self.device {
            return Ok(());
        }
        let from = self.device;
        for index in 0..self.patches.len() {
            if let Err(error) = self.patches[index].move_to(device) {
                // Those already moved go back: the solver stays whole.
                for patch in &mut self.patches[..index] {
                    patch.move_to(from)?;
                }
                return Err(error);
            }
        }
        self.device = device;
        Ok(())
    }

    /// Where the patches' levels live ([`Self::move_to`]).
    pub fn device(&self) -> Device {
        self.device
    }

    /// Closes the faces of `immersed`'s bodies as [`Multigrid`] does on
    /// the whole domain (`crate::multigrid_bodies`): on the levels of each
    /// owned patch, and on the agglomerated levels that are among the
    /// closed ones, taken from a whole-domain hierarchy built for the
    /// purpose, so that every level has the undecomposed solver's
    /// coefficients. A singular problem's means are then taken over the
    /// fluid cells of every patch (its null space is a constant there).
    /// Solve with [`Self::solve_preconditioned_cg`]. Collective.
    pub(crate) fn block_bodies(&mut self, immersed: &Immersed) -> SolverResult<()> {
        for patch in &mut self.patches {
            patch.block_bodies_on_patch(immersed)?;
        }
        // Every patch's fluid cells (collective), for a singular
        // problem's means.
        self.fluid_cells = self.sum_over_patches(|p| p.fluid_cells_here())?;
        let first = self.decomposed_levels();
        if first < CLOSED_LEVELS {
            let ghosts = match self.order {
                SpaceOrder::Second => 1,
                SpaceOrder::Fourth => 3,
            };
            let mut whole = Multigrid::with_order(
                &self.layout.grid().whole_domain(ghosts),
                self.conditions.clone(),
                self.options,
                self.order,
            )?;
            whole.block_bodies(immersed)?;
            self.coarse.adopt_closed_levels(&mut whole, first)?;
        }
        Ok(())
    }

    /// Solves `lap(x) = rhs` by V-cycles, starting from `solution`'s
    /// values and leaving the result there (ghosts filled by the
    /// conditions and across seams); one field of each per owned patch,
    /// in patch order, on the CPU. Collective.
    pub fn solve(
        &mut self,
        rhs: &[SpatialField<CellCentre>],
        solution: &mut [SpatialField<CellCentre>],
    ) -> SolverResult<SolveReport> {
        if self.order != SpaceOrder::Second {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: format!(
                    "PatchedMultigrid::solve runs V-cycles on the compact second-order Laplacian, but this solver was built for the order-{} operator; use solve_preconditioned_cg",
                    self.order.number()
                ),
            });
        }
        if self.patches[0].has_closed_faces() {
            return Err(SolverError::Setup {
                equation: "Poisson".into(),
                reason: "PatchedMultigrid::solve runs V-cycles on the open Laplacian, but this solver has faces closed by bodies; use solve_preconditioned_cg".into(),
            });
        }
        let rhs_norm = self.load(rhs, solution)?;
        let target = self.options.relative_tolerance * rhs_norm.max(f64::MIN_POSITIVE);
        let Iterated {
            residuals,
            iterations,
        } = poisson_iteration::v_cycles(self, target, self.options.max_iterations)?;
        check_finite("multigrid on patches", &residuals, iterations, target)?;
        self.store(solution)?;
        Ok(SolveReport {
            iterations,
            residuals,
            rhs_norm,
        })
    }

    /// Solves `lap(x) = rhs` by conjugate gradients preconditioned with
    /// one V-cycle (fields as [`Self::solve`]). Collective.
    pub fn solve_preconditioned_cg(
        &mut self,
        rhs: &[SpatialField<CellCentre>],
        solution: &mut [SpatialField<CellCentre>],
    ) -> SolverResult<SolveReport> {
        let rhs_norm = self.load(rhs, solution)?;
        let target = self.options.relative_tolerance * rhs_norm.max(f64::MIN_POSITIVE);
        let Iterated {
            residuals,
            iterations,
        } = poisson_iteration::preconditioned_cg(self, target, self.options.max_iterations)?;
        for patch in &mut self.patches {
            patch.cg_end()?;
        }
        check_finite(
            "multigrid-preconditioned CG on patches",
            &residuals,
            iterations,
            target,
        )?;
        self.store(solution)?;
        Ok(SolveReport {
            iterations,
            residuals,
            rhs_norm,
        })
    }

    /// Copies `rhs` and the guess in (the guess's seams exchanged), makes
    /// `b` mean-free where the problem is singular; returns `|b|`.
    fn load(
        &mut self,
        rhs: &[SpatialField<CellCentre>],
        guess: &[SpatialField<CellCentre>],
    ) -> SolverResult<f64> {
        let owned = self.owned.len();
        for (what, given) in [("right-hand side", rhs.len()), ("solution", guess.len())] {
            if given != owned {
                return Err(SolverError::Setup {
                    equation: "Poisson".into(),
                    reason: format!(
                        "{given} {what} field(s) given, but rank {} owns {owned} patch(es) ({:?}); give one per owned patch, in patch order",
                        self.link.rank(),
                        self.owned
                    ),
                });
            }
        }
        for ((patch, b), x) in self.patches.iter_mut().zip(rhs).zip(guess) {
            patch.copy_in(b, x)?;
        }
        self.exchange(Vector::Solution(0), false)?;
        if self.singular {
            self.remove_mean(Vector::Rhs(0))?;
        }
        Ok(self
            .sum_over_patches(|p| p.squares_here(Vector::Rhs(0)))?
            .sqrt())
    }

    /// The solution out: mean-free where singular, ghosts filled.
    fn store(&mut self, solution: &mut [SpatialField<CellCentre>]) -> SolverResult<()> {
        if self.singular {
            self.remove_mean(Vector::Solution(0))?;
        }
        for patch in &mut self.patches {
            patch.fill_finest()?;
        }
        self.exchange(Vector::Solution(0), false)?;
        for (patch, x) in self.patches.iter_mut().zip(solution) {
            patch.copy_out(x)?;
            // On a GPU the solution is handed back once written.
            patch.synchronize()?;
        }
        Ok(())
    }

    /// Subtracts the interior mean of `which` over every patch: over
    /// their fluid cells where bodies close faces (the null space is a
    /// constant there).
    fn remove_mean(&mut self, which: Vector) -> SolverResult<()> {
        if self.patches[0].has_closed_faces() {
            let sum = self.sum_over_patches(|p| p.fluid_sum_here(which))?;
            let mean = sum / self.fluid_cells.max(1.0);
            for patch in &mut self.patches {
                patch.subtract_on_fluid_here(which, mean)?;
            }
            return Ok(());
        }
        let mean = self.sum_over_patches(|p| p.sum_here(which))? / self.cells;
        for patch in &mut self.patches {
            patch.subtract(which, mean)?;
        }
        Ok(())
    }

    /// `partial` of every patch of every rank, added in patch order.
    fn sum_over_patches(
        &mut self,
        mut partial: impl FnMut(&mut Multigrid) -> SolverResult<f64>,
    ) -> SolverResult<f64> {
        let mine = self
            .patches
            .iter_mut()
            .map(&mut partial)
            .collect::<SolverResult<Vec<f64>>>()?;
        let started = Instant::now();
        let all = self.link.gather_in_rank_order(&mine, &self.patch_counts);
        self.exchange_time += started.elapsed();
        Ok(all?.iter().sum())
    }

    /// Fills the seam ghosts of `which` from the patches owning them,
    /// then its physical sides again (homogeneous conditions with
    /// `homogeneous`; on a grid periodic along every axis the exchange
    /// wrote every ghost point but a patch's own periodic images, which
    /// every writer of a vector fills with its periodic conditions, and
    /// which no seam ghost feeds).
    /// Nothing with one patch: its writers filled it.
    fn exchange(&mut self, which: Vector, homogeneous: bool) -> SolverResult<()> {
        if self.layout.len() == 1 {
            return Ok(());
        }
        let level = match which {
            Vector::Solution(level) | Vector::Rhs(level) | Vector::Residual(level) => level,
            Vector::CgResidual | Vector::CgDirection => 0,
        };
        let started = Instant::now();
        let mut batch = PointBatch::new();
        if let Device::Gpu(ordinal) = self.device {
            // The kernels that wrote the vector run on each hierarchy's
            // stream, the exchange's moves on another: they wait for
            // those on the GPU. The exchange ends with the host waiting
            // for its moves (`settle`), so later kernels follow them.
            for patch in &self.patches {
                if let Some(event) = patch.record()? {
                    batch.after(ordinal, &event).map_err(gpu_failure)?;
                }
            }
        }
        let mut fields = VectorFields {
            first: self.owned.start,
            patches: &mut self.patches,
            which,
            batch: RefCell::new(batch),
        };
        let exchanged = exchange_reusing(
            &self.routes[level],
            self.link.as_ref(),
            &mut fields,
            &mut self.buffers,
        );
        self.exchange_time += started.elapsed();
        exchanged?;
        if self.physical_sides {
            for patch in &mut self.patches {
                patch.refill(which, homogeneous)?;
            }
        }
        Ok(())
    }

    /// `sweeps` Jacobi sweeps on `level` of every patch, the seams
    /// exchanged after each but the last unless `ghosts_after`.
    fn smooth(
        &mut self,
        level: usize,
        sweeps: usize,
        homogeneous: bool,
        from_zero: bool,
        ghosts_after: bool,
    ) -> SolverResult<()> {
        if sweeps == 0 {
            if from_zero {
                for patch in &mut self.patches {
                    patch.smooth(level, 0, homogeneous, true)?;
                }
            }
            return Ok(());
        }
        for sweep in 0..sweeps {
            for patch in &mut self.patches {
                patch.smooth(level, 1, homogeneous, from_zero && sweep == 0)?;
            }
            if ghosts_after || sweep + 1 < sweeps {
                self.exchange(Vector::Solution(level), homogeneous)?;
            }
        }
        Ok(())
    }

    /// One V-cycle on `level` (see [`Multigrid`]'s), the agglomeration
    /// level handing over to the whole coarse hierarchy. With
    /// `ghosts_after` false the result's seam ghosts are left stale (its
    /// last exchange skipped): for a caller that reads only its interior.
    fn cycle(
        &mut self,
        level: usize,
        homogeneous: bool,
        from_zero: bool,
        ghosts_after: bool,
    ) -> SolverResult<()> {
        if level + 1 == self.patches[0].levels() {
            return self.agglomerate(level);
        }
        // The residual reads the smoothed values' ghosts.
        self.smooth(
            level,
            self.options.pre_smoothing,
            homogeneous,
            from_zero,
            true,
        )?;
        for patch in &mut self.patches {
            patch.residual(level)?;
            patch.restrict_residual(level)?;
        }
        // The prolongation reads the coarse correction's ghosts.
        self.cycle(level + 1, true, true, true)?;
        for patch in &mut self.patches {
            patch.correct(level, homogeneous)?;
        }
        let post = self.options.post_smoothing;
        if ghosts_after || post > 0 {
            self.exchange(Vector::Solution(level), homogeneous)?;
        }
        self.smooth(level, post, homogeneous, false, ghosts_after)
    }

    /// The coarse correction: `level`'s right-hand sides of every patch
    /// gathered into the whole coarse hierarchy, one V-cycle from zero
    /// there (on every rank), and each owned patch's window of the
    /// correction, ghosts included, copied back into its `level`.
    fn agglomerate(&mut self, level: usize) -> SolverResult<()> {
        let started = Instant::now();
        let rank = self.link.rank();
        let mut mine = Vec::with_capacity(self.gather_counts[rank]);
        for patch in &self.patches {
            let b = patch.vector(Vector::Rhs(level));
            match b.active_device() {
                Device::Cpu => append_interior(b, &mut mine)?,
                device => {
                    patch.synchronize()?;
                    append_interior_of(b.layout(), &b.values_on(device)?, &mut mine);
                }
            }
        }
        let all = self.link.gather_in_rank_order(&mine, &self.gather_counts)?;
        let whole = self.coarse.vector_mut(Vector::Rhs(0));
        let mut at = 0;
        for (offset, layout) in &self.parts {
            at = place_interior(&all, at, layout, *offset, whole)?;
        }
        self.exchange_time += started.elapsed();
        self.coarse.correction_cycle()?;
        let whole = self.coarse.vector(Vector::Solution(0));
        for (patch, index) in self.patches.iter_mut().zip(self.owned.clone()) {
            let x = patch.vector_mut(Vector::Solution(level));
            let offset = self.parts[index].0;
            match x.active_device() {
                Device::Cpu => take_window(whole, x, offset, true)?,
                device => {
                    // Every point is written: the host's copy needs no
                    // download, only a valid place to be written in.
                    let mut window =
                        SpatialField::<CellCentre>::new(x.name(), x.layout().patch(), Device::Cpu)?;
                    take_window(whole, &mut window, offset, true)?;
                    window.validate_on(device)?;
                    window.set_active(device)?;
                    x.copy_from(&window)?;
                }
            }
        }
        Ok(())
    }
}

impl PoissonSpace for PatchedMultigrid {
    fn v_cycle(&mut self) -> SolverResult<()> {
        // The residual norm after it reads the ghosts.
        self.cycle(0, false, false, true)
    }

    fn residual_norm(&mut self) -> SolverResult<f64> {
        for patch in &mut self.patches {
            patch.residual(0)?;
        }
        Ok(self
            .sum_over_patches(|p| p.squares_here(Vector::Residual(0)))?
            .sqrt())
    }

    fn begin_cg(&mut self) -> SolverResult<f64> {
        for patch in &mut self.patches {
            patch.cg_begin()?;
        }
        Ok(self
            .sum_over_patches(|p| p.squares_here(Vector::CgResidual))?
            .sqrt())
    }

    fn precondition(&mut self) -> SolverResult<()> {
        for patch in &mut self.patches {
            patch.lend_residual_as_rhs();
        }
        // CG reads only the interior of the preconditioned residual `z`:
        // its inner product with `r`, and the direction `p = z + beta p`,
        // whose own exchange fills `p`'s ghosts (`direction`,
        // `first_direction`). The last exchange of `z` is skipped.
        let outcome = self.cycle(0, true, true, false);
        for patch in &mut self.patches {
            patch.lend_residual_as_rhs();
        }
        outcome
    }

    fn first_direction(&mut self) -> SolverResult<()> {
        for patch in &mut self.patches {
            patch.cg_first_direction()?;
        }
        // `p = z` copied `z`'s stale seam ghosts (see `precondition`).
        self.exchange(Vector::CgDirection, true)
    }

    fn search(&mut self) -> SolverResult<()> {
        for patch in &mut self.patches {
            patch.cg_search()?;
        }
        Ok(())
    }

    fn product(&mut self, which: Product) -> SolverResult<f64> {
        self.sum_over_patches(|p| p.product_here(which))
    }

    fn advance(&mut self, alpha: f64) -> SolverResult<f64> {
        for patch in &mut self.patches {
            patch.cg_step(alpha)?;
        }
        if self.singular {
            self.remove_mean(Vector::CgResidual)?;
        }
        Ok(self
            .sum_over_patches(|p| p.squares_here(Vector::CgResidual))?
            .sqrt())
    }

    fn direction(&mut self, beta: f64) -> SolverResult<()> {
        for patch in &mut self.patches {
            patch.cg_direction(beta)?;
        }
        self.exchange(Vector::CgDirection, true)
    }

    fn not_converged(
        &self,
        what: &str,
        residual: f64,
        iterations: usize,
        target: f64,
    ) -> SolverError {
        SolverError::NotConverged {
            solver: format!(
                "{what} on {:?} patches ({} levels, {} of them on patches)",
                self.layout.counts(),
                self.levels(),
                self.decomposed_levels()
            ),
            residual,
            iterations,
            target,
        }
    }
}

/// One vector of every owned patch's hierarchy, as an exchange reads and
/// writes it.
struct VectorFields<'a> {
    first: usize,
    patches: &'a mut [Multigrid],
    which: Vector,
    /// The moves enqueued on a GPU, waited for in `settle`.
    batch: RefCell<PointBatch>,
}

impl VectorFields<'_> {
    fn position(&self, patch: usize) -> FieldResult<usize> {
        patch
            .checked_sub(self.first)
            .filter(|&k| k < self.patches.len())
            .ok_or_else(|| watershed_fields::FieldError::InvalidLayout {
                reason: format!(
                    "patch {patch} is not among the patches {}..{} this rank's multigrid holds",
                    self.first,
                    self.first + self.patches.len()
                ),
            })
    }
}

impl HaloFields for VectorFields<'_> {
    fn copy_runs(
        &mut self,
        source: usize,
        destination: usize,
        runs: &[CopyRun],
    ) -> FieldResult<()> {
        let (s, d) = (self.position(source)?, self.position(destination)?);
        let which = self.which;
        let (from, to) = source_and_destination(self.patches, s, d);
        let to = to.vector_mut(which);
        if let device @ Device::Gpu(_) = to.active_device() {
            // Point lists from the runs, copied on the GPU.
            let (mut points, mut at) = (Vec::new(), Vec::new());
            for run in runs {
                points.extend(run.from..run.from + run.len);
                at.extend(run.to..run.to + run.len);
            }
            let source = match from {
                Some(p) => p.vector(which).gpu_buffer(device)?,
                None => to.gpu_buffer(device)?,
            };
            let target = to.gpu_buffer_mut(device)?;
            return copy_points_on_gpu(
                &mut self.batch.borrow_mut(),
                &[source],
                &points,
                &[target],
                &at,
                "the multigrid's seams",
            )
            .map_err(gpu_failure);
        }
        let from = from.map(|p| p.vector(which).values()).transpose()?;
        copy_runs_between(from, to.values_mut()?, runs);
        Ok(())
    }

    fn read(&self, patch: usize, at: &[usize], out: &mut Vec<f64>) -> FieldResult<()> {
        let field = self.patches[self.position(patch)?].vector(self.which);
        if let device @ Device::Gpu(_) = field.active_device() {
            let start = out.len();
            out.resize(start + at.len(), 0.0);
            return gather_points_on_gpu(
                &mut self.batch.borrow_mut(),
                &[field.gpu_buffer(device)?],
                at,
                &mut out[start..],
                "the multigrid's seams",
            )
            .map_err(gpu_failure);
        }
        let values = field.values()?;
        out.extend(at.iter().map(|&i| values[i]));
        Ok(())
    }

    fn write(&mut self, patch: usize, at: &[usize], values: &[f64]) -> FieldResult<()> {
        let k = self.position(patch)?;
        let field = self.patches[k].vector_mut(self.which);
        if let device @ Device::Gpu(_) = field.active_device() {
            let target = field.gpu_buffer_mut(device)?;
            return scatter_points_on_gpu(
                &mut self.batch.borrow_mut(),
                &[target],
                at,
                values,
                "the multigrid's seams",
            )
            .map_err(gpu_failure);
        }
        let data = field.values_mut()?;
        for (&i, &v) in at.iter().zip(values) {
            data[i] = v;
        }
        Ok(())
    }

    fn settle(&mut self) -> FieldResult<()> {
        self.batch.get_mut().finish().map_err(gpu_failure)
    }
}

/// A failed move of points on a GPU, as the exchange reports it.
fn gpu_failure(error: watershed_operators::OperatorError) -> watershed_fields::FieldError {
    watershed_fields::FieldError::InvalidLayout {
        reason: error.to_string(),
    }
}
