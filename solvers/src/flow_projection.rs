//! The projection of a decomposed flow on the patches (issue 51): the
//! Poisson solve, about nine tenths of a step, and the correction of the
//! velocity, what lets a flow on patches scale.
//!
//! With [`IncompressibleFlowBuilder::patches`](crate::IncompressibleFlowBuilder::patches)
//! a stage runs in these parts on every rank:
//!
//! 1. the momentum graphs of the owned patches compute `u*` from the
//!    state they keep (`crate::flow_patches`);
//! 2. here, a small graph on each owned patch (a [`PatchedGraphs`]) takes
//!    its momentum graph's `u*` (unforced where bodies are), whose seams
//!    and periodic images are exchanged, forces it where immersed bodies
//!    are (in forcing graphs of their own, after an exchange of the
//!    unforced velocity, since a forced face interpolates from its
//!    outward neighbour) and computes `div(u*)` on the patch: the whole
//!    domain's values point for point. The norm of `div(u*)` adds the
//!    patches' sums in patch order;
//! 3. each owned patch takes its `div(u*)` as right-hand side and its last
//!    `psi` as guess (or its window of the flow's `psi` where that was
//!    written since, a restart), and the [`PatchedMultigrid`] solves on the
//!    patches, across the ranks;
//! 4. a correction graph on each owned patch takes the divergence graph's
//!    `u*` and the solved `psi`, whose seams are exchanged (its physical
//!    ghosts take the projection's conditions in the graph, as the whole
//!    domain's `psi` takes them), and writes `u = u* - grad(psi)` (closed
//!    faces of bodies kept) with the velocity's conditions, into the
//!    momentum graph's next level;
//! 5. where the flow's whole domain is read, the owned patches' `psi`
//!    interiors are gathered in patch order into the whole domain's `psi`
//!    (its ghosts then take the projection's conditions), beside the
//!    velocity, and the flow's own graph forms the pressure. The speeds,
//!    the divergence, the enstrophy and the bodies' forces are reduced on
//!    the patches after each step (`crate::flow_reductions`).
//!
//! With the projection replicated this module takes no part: the flow's
//! own graph solves the whole domain's Poisson problem and corrects the
//! velocity from the gathered `u*` (forcing it there where bodies are).
//!
//! The solve runs between graph executions, on the thread that steps the
//! flow: MPI is called from that thread only. Its inner products add
//! per-patch sums in patch order, so the flow gives the same bits on any
//! number of ranks for one layout, and the undecomposed flow's values to
//! the solver's tolerance (with one patch, its bits).

use crate::assignment_memo::{Assignments, Recipe};
use crate::boundary::BoundaryConditions;
use crate::error::{SolverError, SolverResult};
use crate::immersed::Immersed;
use crate::multigrid::{MultigridOptions, SolveReport};
use crate::multigrid_patches::PatchedMultigrid;
use crate::staggered::SpaceOrder;
use crate::windows::{append_interior, copy_field, place_interior, take_window};
use std::cell::{Cell, Ref, RefCell};
use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{ExecutionMode, ExpressionGraph, GraphError, Tag};
use watershed_fields::ranks::RankLink;
use watershed_fields::{
    CellCentre, Device, FieldLayout, FieldResult, LocationKind, PatchLayout, SpatialField, on_face,
};
use watershed_operators::field;

/// The projection's solve on the patches one rank owns.
pub(crate) struct PatchProjection {
    link: Rc<dyn RankLink>,
    owned: Range<usize>,
    /// With bodies: `u*` forced on each owned patch from the unforced
    /// velocity (`gathered`).
    forced: Option<PatchedGraphs>,
    /// `div(u*)` and its norm on each owned patch.
    divergence: PatchedGraphs,
    /// The correction of the velocity on each owned patch, `u = u* -
    /// grad(psi)` with its conditions, from `u*` and `psi` (whose seams
    /// it exchanges).
    correction: PatchedGraphs,
    divergence_tag: Tag,
    /// The velocity components, and the tags the momentum's result is
    /// known by in the forcing graphs (the unforced velocity) or, without
    /// bodies, in the divergence graphs (`u*`).
    active: Vec<usize>,
    gathered: [Tag; 3],
    psi_tag: Tag,
    solver: PatchedMultigrid,
    /// Per owned patch: the right-hand side and the solution, on the
    /// solver's device (`psi` also on the host while someone reads it
    /// there: [`Self::psi`]).
    rhs: Vec<SpatialField<CellCentre>>,
    psi: RefCell<Vec<SpatialField<CellCentre>>>,
    /// The copies of windows between the graphs' fields and `rhs`, `psi`
    /// on a GPU.
    copies: RefCell<Assignments>,
    /// Where the solve runs: the flow's GPU when it is placed there (the
    /// solver and its fields move there before the first solve).
    device: Device,
    /// Every patch's offset and cell layout, in patch order.
    parts: Vec<([isize; 3], FieldLayout)>,
    /// The values each rank gives to the gather of `psi`.
    counts: Vec<usize>,
    /// The projection's conditions, filled into the whole `psi`'s ghosts.
    walls: BoundaryConditions,
    /// The version of the whole domain's `psi` when the patches' `psi`
    /// was last gathered into it or taken from it: a different one means
    /// it was written since (a restart), and the next solve's guess is
    /// taken from it.
    psi_gathered: Cell<Option<u64>>,
    report: SolveReport,
    /// Wall time copying windows and gathering `psi`.
    moving: Cell<Duration>,
    /// Wall time in the solves (their exchanges included).
    solving: Duration,
}

impl PatchProjection {
    /// The solve of `lap(psi) = div(u*)` on the patches of `layout` the rank
    /// of `link` owns, with `walls` and the Laplacian of `order`, the faces
    /// of `immersed`'s bodies closed; `divergence` computes
    /// `divergence_tag` on each owned patch from the components `active`
    /// of `u*`; with bodies `forced` makes `u*` from the unforced velocity
    /// `gathered`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        layout: &PatchLayout,
        link: Rc<dyn RankLink>,
        walls: BoundaryConditions,
        options: MultigridOptions,
        order: SpaceOrder,
        immersed: Option<&Immersed>,
        forced: Option<PatchedGraphs>,
        divergence: PatchedGraphs,
        correction: PatchedGraphs,
        divergence_tag: Tag,
        active: &[usize],
        gathered: [Tag; 3],
        psi_tag: Tag,
        device: Device,
    ) -> SolverResult<Self> {
        let mut solver =
            PatchedMultigrid::new(layout, link.clone(), walls.clone(), options, order)?;
        if let Some(immersed) = immersed {
            solver.block_bodies(immersed)?;
        }
        let owned = solver.owned();
        let mut rhs = Vec::with_capacity(owned.len());
        let mut psi = Vec::with_capacity(owned.len());
        for index in owned.clone() {
            let patch = layout.patch(index)?;
            rhs.push(SpatialField::new(
                "div(u*) on a patch",
                &patch,
                Device::Cpu,
            )?);
            psi.push(SpatialField::new("psi on a patch", &patch, Device::Cpu)?);
        }
        let parts = (0..layout.len())
            .map(|index| {
                let patch = layout.patch(index)?;
                let offset = patch.offset().map(|o| o as isize);
                Ok((offset, FieldLayout::new(&patch, LocationKind::CellCentre)))
            })
            .collect::<FieldResult<Vec<_>>>()?;
        let ranks = link.ranks();
        let counts = (0..ranks)
            .map(|rank| {
                Ok(layout
                    .owned_by(rank, ranks)?
                    .map(|index| parts[index].1.interior_len())
                    .sum())
            })
            .collect::<FieldResult<Vec<usize>>>()?;
        Ok(PatchProjection {
            link,
            owned,
            forced,
            divergence,
            correction,
            divergence_tag,
            active: active.to_vec(),
            gathered,
            psi_tag,
            solver,
            rhs,
            psi: RefCell::new(psi),
            copies: RefCell::new(Assignments::default()),
            device,
            parts,
            counts,
            walls,
            psi_gathered: Cell::new(None),
            report: SolveReport {
                iterations: 0,
                residuals: Vec::new(),
                rhs_norm: 0.0,
            },
            moving: Cell::new(Duration::ZERO),
            solving: Duration::ZERO,
        })
    }

    /// The graphs on the owned patches, named by part (`"forcing"` with
    /// bodies, `"divergence"`, `"correction"`), with their patch indices,
    /// in that order and patch order.
    pub(crate) fn graphs(&self) -> Vec<(&'static str, usize, &ExpressionGraph)> {
        let parts = [
            ("forcing", self.forced.as_ref()),
            ("divergence", Some(&self.divergence)),
            ("correction", Some(&self.correction)),
        ];
        parts
            .into_iter()
            .filter_map(|(name, graphs)| graphs.map(|g| (name, g)))
            .flat_map(|(name, graphs)| {
                self.owned
                    .clone()
                    .zip(graphs.graphs())
                    .map(move |(index, graph)| (name, index, graph))
            })
            .collect()
    }

    fn spent(&self, started: Instant) {
        self.moving.set(self.moving.get() + started.elapsed());
    }

    /// The solved `psi` of each owned patch, in patch order (its
    /// interior is the solution; its seam ghosts are stale), valid on the
    /// host: a solve on a GPU leaves it there, and it is brought down
    /// here, once per solve, for whoever reads it on the host (dumps,
    /// checkpoints, the bodies' forces).
    pub(crate) fn psi(&self) -> SolverResult<Ref<'_, Vec<SpatialField<CellCentre>>>> {
        for field in self.psi.borrow_mut().iter_mut() {
            if !field.is_valid_on(Device::Cpu) {
                field.validate_on(Device::Cpu)?;
            }
        }
        Ok(self.psi.borrow())
    }

    /// The report of the last solve that succeeded.
    pub(crate) fn report(&self) -> &SolveReport {
        &self.report
    }

    /// Where the solve runs ([`PatchedMultigrid::move_to`]).
    pub(crate) fn device(&self) -> Device {
        self.device
    }

    /// Moves the solver and its fields to [`Self::device`] if they are
    /// not there yet (before the first solve: a flow placed on a GPU is
    /// built without one, and refused only when it steps).
    fn move_to_device(&mut self) -> SolverResult<()> {
        let device = self.device;
        if self.solver.device() == device {
            return Ok(());
        }
        self.solver.move_to(device)?;
        for field in self.rhs.iter_mut().chain(self.psi.get_mut().iter_mut()) {
            field.validate_on(device)?;
            field.set_active(device)?;
        }
        for field in &mut self.rhs {
            field.remove_location(Device::Cpu)?;
        }
        Ok(())
    }

    /// Levels of the solver in all, and on patches.
    pub(crate) fn levels(&self) -> (usize, usize) {
        (self.solver.levels(), self.solver.decomposed_levels())
    }

    /// Wall time in the solves on the patches, their exchanges and
    /// reductions included.
    pub(crate) fn solve_time(&self) -> Duration {
        self.solving
    }

    /// Wall time in the solver's exchanges and reductions across patches,
    /// in the exchange of `u*`'s seams, and in moving windows and `psi`
    /// between the whole domain and the patches.
    pub(crate) fn exchange_time(&self) -> Duration {
        let of = |graphs: &Option<PatchedGraphs>| {
            graphs
                .as_ref()
                .map_or(Duration::ZERO, PatchedGraphs::exchange_time)
        };
        self.solver.exchange_time()
            + of(&self.forced)
            + self.correction.exchange_time()
            + self.divergence.exchange_time()
            + self.moving.get()
    }

    /// `div(u*)` on each owned patch from `momentum`'s `provisional`
    /// velocity (the owned patches' momentum graphs, in patch order), then
    /// `psi` solved on the patches (collective), its guess the last
    /// solution, or `whole`'s `psi` where that was written since it was
    /// last gathered. A graph's failure comes back as it is, for the flow
    /// to name the field. Then [`Self::correct`], and after a step's last
    /// stage [`Self::gather_psi`].
    pub(crate) fn solve(
        &mut self,
        momentum: &[&ExpressionGraph],
        provisional: &[Tag; 3],
        whole: &ExpressionGraph,
        mode: ExecutionMode,
    ) -> Result<(), ProjectionFailure> {
        self.move_to_device().map_err(ProjectionFailure::Solver)?;
        let graph_failure = |e: GraphError| ProjectionFailure::Graph(Box::new(e));
        let tags = |of: &[Tag; 3]| -> Vec<Tag> {
            self.active.iter().map(|&axis| of[axis].clone()).collect()
        };
        // u* (unforced with bodies) from the momentum graphs.
        let started = Instant::now();
        let (first, into) = match &self.forced {
            Some(forced) => (forced, &self.gathered),
            None => (&self.divergence, provisional),
        };
        for (from, to) in momentum.iter().zip(first.graphs()) {
            for &axis in &self.active {
                on_face!(axis, F => copy_field::<F>(from, &provisional[axis], to, &into[axis])
                    .map_err(graph_failure)?);
            }
        }
        self.spent(started);
        if let Some(forced) = &self.forced {
            // Forced u* on the interiors, then into the divergence graphs.
            forced
                .exchange_and_execute(&tags(&self.gathered), mode)
                .map_err(graph_failure)?;
            let started = Instant::now();
            for (from, to) in forced.graphs().iter().zip(self.divergence.graphs()) {
                for &axis in &self.active {
                    on_face!(axis, F => copy_field::<F>(from, &provisional[axis], to, &provisional[axis])
                        .map_err(graph_failure)?);
                }
            }
            self.spent(started);
        }
        self.divergence
            .exchange_and_execute(&tags(provisional), mode)
            .map_err(graph_failure)?;
        let started = Instant::now();
        let version = whole.field_version(&self.psi_tag)?;
        let guess_from_whole = version.is_none() || version != self.psi_gathered.get();
        // The patches' psi now follows the whole one's, until it is
        // written again.
        self.psi_gathered.set(version);
        let copies = self.copies.get_mut();
        for ((rhs, psi), (graph, index)) in self
            .rhs
            .iter_mut()
            .zip(self.psi.get_mut().iter_mut())
            .zip(self.divergence.graphs().iter().zip(self.owned.clone()))
        {
            let offset = self.parts[index].0;
            graph.with_field_in_place::<CellCentre, _>(&self.divergence_tag, |from| {
                copy_interior_where_active(copies, "div(u*) into the solve", from, rhs)
            })??;
            // Otherwise the patch's psi is the last solution (or what a
            // restart put on the patch), newer within a step.
            if guess_from_whole {
                let window = whole.with_field::<CellCentre, _>(&self.psi_tag, |from| {
                    let mut window = SpatialField::<CellCentre>::new(
                        "psi's window",
                        psi.layout().patch(),
                        Device::Cpu,
                    )?;
                    take_window(from, &mut window, offset, false)?;
                    Ok::<_, SolverError>(window)
                })??;
                copy_interior_where_active(copies, "psi's guess", &window, psi)?;
            }
        }
        self.spent(started);
        let started = Instant::now();
        let solved = self
            .solver
            .solve_preconditioned_cg(&self.rhs, self.psi.get_mut());
        self.solving += started.elapsed();
        self.report = solved?;
        Ok(())
    }

    /// Whether `whole`'s `psi` was written since the patches' `psi` last
    /// followed it (a restart from whole-domain files): the next solve
    /// takes its guess from there.
    pub(crate) fn whole_psi_written(&self, whole: &ExpressionGraph) -> SolverResult<bool> {
        let version = whole.field_version(&self.psi_tag)?;
        Ok(version.is_none() || version != self.psi_gathered.get())
    }

    /// The patches' `psi` follows `whole`'s at `version` (at the flow's
    /// build, where both are zero).
    pub(crate) fn follow_whole_psi(&self, version: Option<u64>) {
        self.psi_gathered.set(version);
    }

    /// Puts the interior of `stored` (a checkpoint's `psi` of the owned
    /// patch at `position`, the same cells) into that patch's `psi`, the
    /// next solve's guess.
    pub(crate) fn restore_psi(
        &mut self,
        position: usize,
        stored: &SpatialField<CellCentre>,
    ) -> SolverResult<()> {
        let psi = self
            .psi
            .get_mut()
            .get_mut(position)
            .ok_or_else(|| SolverError::Setup {
                equation: "the flow's restart on patches".into(),
                reason: format!("this rank owns no patch at position {position}"),
            })?;
        copy_interior_where_active(self.copies.get_mut(), "psi restored", stored, psi)
    }

    /// Gathers the owned patches' `psi` interiors in patch order into
    /// `whole`'s `psi`, whose ghosts then take the projection's
    /// conditions, as the whole domain's solve leaves them (collective).
    pub(crate) fn gather_psi(&self, whole: &ExpressionGraph) -> SolverResult<()> {
        let started = Instant::now();
        let mine = self.own_psi()?;
        let all = self.link.gather_in_rank_order(&mine, &self.counts)?;
        self.place_psi(&all, whole)?;
        self.spent(started);
        Ok(())
    }

    /// [`Self::gather_psi`] onto rank 0 alone (collective): `true` on
    /// rank 0, which received it; the others send theirs and leave
    /// `whole` alone.
    pub(crate) fn gather_psi_to_root(&self, whole: &ExpressionGraph) -> SolverResult<bool> {
        let started = Instant::now();
        let mine = self.own_psi()?;
        let received = match self.link.gather_to_root(&mine, &self.counts)? {
            Some(all) => {
                self.place_psi(&all, whole)?;
                true
            }
            None => false,
        };
        self.spent(started);
        Ok(received)
    }

    /// The owned patches' `psi` interiors, in patch order.
    fn own_psi(&self) -> SolverResult<Vec<f64>> {
        let mut mine = Vec::with_capacity(self.counts[self.link.rank()]);
        for psi in self.psi()?.iter() {
            append_interior(psi, &mut mine)?;
        }
        Ok(mine)
    }

    /// Places every patch's `psi` interior (`all`, in patch order) into
    /// `whole`'s `psi` and fills its ghosts with the projection's
    /// conditions.
    fn place_psi(&self, all: &[f64], whole: &ExpressionGraph) -> SolverResult<()> {
        let walls = &self.walls;
        let parts = &self.parts;
        whole.with_field_mut::<CellCentre, _>(&self.psi_tag, |psi| -> SolverResult<()> {
            let mut at = 0;
            for (offset, layout) in parts {
                at = place_interior(all, at, layout, *offset, psi)?;
            }
            walls.apply(psi)
        })??;
        self.psi_gathered.set(whole.field_version(&self.psi_tag)?);
        Ok(())
    }

    /// The velocity corrected on each owned patch (the flow's state on
    /// the patches): the divergence graphs' `u*` (`provisional`, forced
    /// where bodies are) and the solved `psi` into each correction graph,
    /// `psi`'s seams and periodic images exchanged (its physical ghosts
    /// take the projection's conditions in the graph), then every
    /// correction graph executed. Its graphs, in patch order, hold the
    /// corrected velocity. A graph's failure comes back with the patch's
    /// offset.
    pub(crate) fn correct(
        &mut self,
        provisional: &[Tag; 3],
        mode: ExecutionMode,
    ) -> Result<&[ExpressionGraph], ProjectionFailure> {
        let correction = &self.correction;
        let graph_failure = |e: GraphError| ProjectionFailure::Graph(Box::new(e));
        let started = Instant::now();
        // u* as the divergence graphs hold it: forced where bodies are,
        // its conditions applied.
        let copies = self.copies.get_mut();
        for ((from, to), psi) in self
            .divergence
            .graphs()
            .iter()
            .zip(correction.graphs())
            .zip(self.psi.get_mut().iter())
        {
            for &axis in &self.active {
                on_face!(axis, F => copy_field::<F>(from, &provisional[axis], to, &provisional[axis])
                    .map_err(graph_failure)?);
            }
            to.with_field_in_place_mut::<CellCentre, _>(&self.psi_tag, |into| {
                copy_interior_where_active(copies, "psi into the correction", psi, into)
            })
            .map_err(graph_failure)??;
        }
        self.spent(started);
        correction
            .exchange(std::slice::from_ref(&self.psi_tag))
            .map_err(graph_failure)?;
        for (graph, index) in correction.graphs().iter().zip(self.owned.clone()) {
            graph
                .execute(mode)
                .map_err(|error| ProjectionFailure::Patch {
                    error: Box::new(error),
                    offset: self.parts[index].0,
                })?;
        }
        Ok(correction.graphs())
    }
}

/// Why a decomposed projection failed.
pub(crate) enum ProjectionFailure {
    /// The divergence graph's execution.
    Graph(Box<GraphError>),
    /// A correction graph's execution; `offset` turns its points global.
    Patch {
        error: Box<GraphError>,
        offset: [isize; 3],
    },
    /// The solve, or moving fields.
    Solver(SolverError),
}

impl<E: Into<SolverError>> From<E> for ProjectionFailure {
    fn from(error: E) -> Self {
        ProjectionFailure::Solver(error.into())
    }
}

/// Copies the interior of `from` into `to` (the same patch; their ghost
/// layers may differ) where `to` is active: on the host as a window; on a
/// GPU as a copy kernel (`copies`' stream, waited for), `from` brought
/// there first if it is not valid there. A field on a GPU stays there.
fn copy_interior_where_active(
    copies: &mut Assignments,
    purpose: &'static str,
    from: &SpatialField<CellCentre>,
    to: &mut SpatialField<CellCentre>,
) -> SolverResult<()> {
    let device = to.active_device();
    if device == Device::Cpu {
        if from.is_valid_on(Device::Cpu) {
            return take_window(from, to, [0; 3], false);
        }
        return take_window(&on_host(from)?, to, [0; 3], false);
    }
    let staged;
    let from = if from.is_valid_on(device) {
        from
    } else {
        let mut there = on_host(from)?;
        there.validate_on(device)?;
        there.set_active(device)?;
        staged = there;
        &staged
    };
    copies.run(purpose, [to.id(), from.id(), 0], to, &[from], |to| {
        Recipe::new(field(from).node().clone(), to.id())
    })?;
    copies.synchronize()
}

/// A copy of `field` on the host (every allocated point), from wherever
/// it is active.
fn on_host(field: &SpatialField<CellCentre>) -> SolverResult<SpatialField<CellCentre>> {
    let mut copy =
        SpatialField::<CellCentre>::new(field.name(), field.layout().patch(), Device::Cpu)?;
    let values = field.values_on(field.active_device())?;
    copy.values_mut()?.copy_from_slice(&values);
    Ok(copy)
}
