//! A decomposed flow's state read and written patch by patch, so that no
//! rank forms the whole domain unless it writes a file of it (rank 0,
//! through `IncompressibleFlow::on_root_with_whole`; issue 51, plan step
//! 5 in `docs/architecture.md`).
//!
//! With the state on the patches ([`IncompressibleFlowBuilder::patches`]),
//! the flow's own graph only receives the whole domain's velocity, `psi`
//! and pressure for a read of the whole domain, and holds no memory until
//! one comes ([`watershed_exprgraph::GraphOptions::deferred_storage`]).
//! What a run needs besides goes to the patches directly:
//!
//! * [`IncompressibleFlow::set_velocity`] sets each owned patch's points
//!   (ghosts included, with the component's conditions on the domain's
//!   sides), then the step's reductions run on the patches as after a
//!   step, so the time step, a transport carried by the flow and the
//!   reads below find the velocity with its seams exchanged;
//! * a dump or checkpoint per rank reads each owned patch
//!   ([`IncompressibleFlow::with_patch_velocity`],
//!   [`IncompressibleFlow::with_patch_projection_potential`],
//!   [`IncompressibleFlow::with_patch_pressure`]) after one collective
//!   [`IncompressibleFlow::refresh_patches`];
//! * a case's line or rows (Ghia's centrelines, a wake line) is gathered
//!   from the patches as a window ([`IncompressibleFlow::with_velocity_window`],
//!   [`IncompressibleFlow::with_pressure_window`], collective);
//! * a restart from a checkpoint (per rank, or the windows of one file)
//!   puts each owned patch back
//!   ([`IncompressibleFlow::restore_patch_velocity`],
//!   [`IncompressibleFlow::restore_patch_projection_potential`],
//!   [`IncompressibleFlow::finish_patch_restore`]), with the pressure's
//!   scale `1/(b dt)` of the last stage, so that the pressure is formed
//!   from `psi` as before the checkpoint.
//!
//! Every value is the one the whole domain's path gives: a patch's points
//! are set from the same coordinates, its conditions apply on the same
//! sides, and the velocity's seams are exchanged before anything reads
//! across them.
//!
//! [`IncompressibleFlowBuilder::patches`]: crate::IncompressibleFlowBuilder::patches

use super::{IncompressibleFlow, NAMES, WholeState, state_not_on_patches};
use crate::error::{SolverError, SolverResult};
use crate::flow_patches::FlowPatches;
use crate::flow_projection::PatchProjection;
use crate::windows::{cut_window, paste_window, take_window};
use std::cell::Ref;
use watershed_exprgraph::{GraphLocation, Tag};
use watershed_fields::{CellCentre, Device, FieldLayout, Location, Patch, SpatialField};
use watershed_operators::FaceLocation;

/// The projection of a flow on patches and one owned patch's `psi`, on
/// the host.
type PatchPsi<'a> = (&'a PatchProjection, Ref<'a, SpatialField<CellCentre>>);

/// The first point of a decomposed flow's velocity that is not finite, or
/// whose boundary condition gives a value that is not.
pub(super) struct NonFinitePoint {
    /// The velocity component.
    pub(super) axis: usize,
    /// The point, in the whole domain's indices (zero for a condition).
    pub(super) cell: [isize; 3],
    /// The patch that holds it.
    patch: usize,
}

/// What each owned patch reports to the others about its velocity:
/// nothing found, a value that is not finite, or a boundary condition
/// that gives one (then the patch's rank holds the error).
const FOUND_NOTHING: f64 = 0.0;
const FOUND_VALUE: f64 = 1.0;
const FOUND_CONDITION: f64 = 2.0;
/// Values per patch: what was found, the component and the point.
const REPORT_LEN: usize = 5;

impl IncompressibleFlow {
    /// Whether the flow's state lives on its patches
    /// ([`IncompressibleFlowBuilder::patches`](crate::IncompressibleFlowBuilder::patches), the projection not
    /// replicated): its own graph then holds the whole domain only for
    /// reads, and the per-patch reads and restores below apply.
    pub fn state_lives_on_patches(&self) -> bool {
        self.patches.is_some() && self.state_on_patches.borrow().is_some()
    }

    /// [`Self::set_velocity`] of a flow whose state lives on `patches`:
    /// every point of each owned patch (ghosts included) from `f`, the
    /// component's conditions at the flow's time applied on the patch's
    /// sides that lie on the domain's, then the step's reductions on the
    /// patches (collective). A value or a boundary value that is not
    /// finite is found on every rank: the rank whose patch holds it
    /// returns the error naming the point, the others an error naming
    /// the patch.
    pub(super) fn set_velocity_on_patches<F: GraphLocation + FaceLocation>(
        &self,
        patches: &FlowPatches,
        f: impl Fn([f64; 3]) -> f64,
    ) -> SolverResult<()> {
        // A velocity written into the whole domain since the patches took
        // it (the other components) comes first.
        self.patches_take_written_velocity(patches)?;
        self.parameters.time.set(self.time);
        let conditions = self.conditions[F::AXIS]
            .clone()
            .with_time(&self.parameters.time);
        let mut failure = None;
        for (index, graph) in patches.graphs() {
            let offset = patches.layout().patch(index)?.offset();
            let bad =
                graph.with_field_mut::<F, _>(&self.now[F::AXIS], |u| -> SolverResult<_> {
                    let layout = u.layout().clone();
                    let values = u.values_mut()?;
                    for point in layout.allocated() {
                        values[layout.linear_index(point)] = f(layout.coordinate(point));
                    }
                    conditions.apply(u)?;
                    conditions.non_finite_value::<F>(&layout, u.name())
                })??;
            if let Some((side, point, what)) = bad
                && failure.is_none()
            {
                let cell = [0, 1, 2].map(|a| point[a] + offset[a] as isize);
                failure = Some(SolverError::NonFiniteInput {
                    field: NAMES[F::AXIS].to_string(),
                    cell,
                    detail: format!(
                        "the boundary condition of {} on side {}: {what} is not finite at {cell:?} at t = {:e}; an expression of the boundary value evaluated outside its domain?",
                        NAMES[F::AXIS],
                        side.name(),
                        self.time
                    ),
                });
            }
        }
        let condition = failure.is_some().then_some(F::AXIS);
        let found = self.first_non_finite_on_patches(patches, condition)?;
        if let Some(error) = failure {
            return Err(error);
        }
        match found {
            Some(bad) if bad.patch_reports_condition => Err(SolverError::NonFiniteInput {
                field: NAMES[bad.point.axis].to_string(),
                cell: bad.point.cell,
                detail: format!(
                    "the boundary condition of {} is not finite on patch {} (another rank's): that rank's message names the side",
                    NAMES[bad.point.axis], bad.point.patch
                ),
            }),
            // Left for the first step's check, as in the whole domain.
            Some(_) => {
                *self.state_on_patches.borrow_mut() = Some(self.whole_velocity_versions()?);
                self.whole.set(WholeState::Stale);
                self.patch_velocity_current.set(false);
                self.force_sums_of.set(None);
                self.speeds_of.set([None; 3]);
                self.vorticity_of.set(None);
                Ok(())
            }
            None => self.reduce_written_patches(),
        }
    }

    /// The versions of the whole domain's velocity components (nothing is
    /// read or allocated).
    pub(super) fn whole_velocity_versions(&self) -> SolverResult<Vec<Option<u64>>> {
        let mut versions = Vec::with_capacity(self.active.len());
        for &axis in &self.active {
            versions.push(self.graph.field_version(&self.now[axis])?);
        }
        Ok(versions)
    }

    /// After the patches' velocity was written directly: the patches hold
    /// the state and the whole domain is behind them; the step's
    /// reductions run on the patches (collective), so that the speeds
    /// and the patches' velocity with its seams are current. The
    /// enstrophy stays unknown until a step, as after a write to the
    /// whole domain, and so do the bodies' weighted momentum sums a
    /// restart put back.
    fn reduce_written_patches(&self) -> SolverResult<()> {
        let versions = self.whole_velocity_versions()?;
        *self.state_on_patches.borrow_mut() = Some(versions.clone());
        self.whole.set(WholeState::Stale);
        self.force_sums_of.set(None);
        self.vorticity_of.set(None);
        self.speeds_of.set([None; 3]);
        let (Some(patches), Some(projection), Some(reductions)) =
            (&self.patches, &self.projection, &self.reductions)
        else {
            return Err(state_not_on_patches());
        };
        // Its conditions at the state's time, as a write applied them.
        self.parameters.state_time.set(self.time);
        reductions.reduce(patches, projection, self.mode)?;
        self.patch_velocity_current.set(true);
        let mut reduced = [None; 3];
        for (&axis, version) in self.active.iter().zip(versions) {
            reduced[axis] = version;
        }
        self.speeds_of.set(reduced);
        Ok(())
    }

    /// The first velocity point of the owned patches that is not finite,
    /// in patch order over every rank (collective): each patch's first
    /// (component by component, its interior), gathered. `condition`:
    /// the component whose boundary condition this rank found not finite,
    /// reported first.
    pub(super) fn first_non_finite_on_patches(
        &self,
        patches: &FlowPatches,
        condition: Option<usize>,
    ) -> SolverResult<Option<PatchFinding>> {
        let mut mine = Vec::with_capacity(REPORT_LEN * patches.owned().len());
        for (index, graph) in patches.graphs() {
            let offset = patches.layout().patch(index)?.offset();
            let mut report = [FOUND_NOTHING; REPORT_LEN];
            if let Some(axis) = condition {
                report = [FOUND_CONDITION, axis as f64, 0.0, 0.0, 0.0];
            } else {
                for &axis in &self.active {
                    let bad = watershed_fields::on_face!(axis, F => {
                        graph.with_field::<F, _>(&self.now[axis], crate::multigrid::first_non_finite)??
                    });
                    if let Some(point) = bad {
                        let cell = [0, 1, 2].map(|a| (point[a] + offset[a] as isize) as f64);
                        report = [FOUND_VALUE, axis as f64, cell[0], cell[1], cell[2]];
                        break;
                    }
                }
            }
            mine.extend(report);
        }
        let all = patches.gather_per_patch(&mine, REPORT_LEN)?;
        Ok(all
            .chunks_exact(REPORT_LEN)
            .enumerate()
            .find(|(_, report)| report[0] != FOUND_NOTHING)
            .map(|(patch, report)| PatchFinding {
                patch_reports_condition: report[0] == FOUND_CONDITION,
                point: NonFinitePoint {
                    axis: report[1] as usize,
                    cell: [report[2] as isize, report[3] as isize, report[4] as isize],
                    patch,
                },
            }))
    }

    /// The largest `|u|` of velocity component `axis` over every patch's
    /// interior (collective): each owned patch's, the largest of all
    /// patches of all ranks; a maximum, so the whole domain's bit for bit.
    pub(super) fn max_abs_on_patches(
        &self,
        patches: &FlowPatches,
        axis: usize,
    ) -> SolverResult<f64> {
        let mut mine = Vec::with_capacity(patches.owned().len());
        for (_, graph) in patches.graphs() {
            let largest = watershed_fields::on_face!(axis, F => graph.with_field::<F, _>(
                &self.now[axis],
                |u| -> SolverResult<f64> {
                    let (layout, values) = (u.layout(), u.values()?);
                    Ok(layout
                        .interior()
                        .iter()
                        .fold(0.0f64, |m, p| m.max(values[layout.linear_index(p)].abs())))
                },
            )??);
            mine.push(largest);
        }
        let all = patches.gather_per_patch(&mine, 1)?;
        Ok(all.into_iter().fold(0.0f64, f64::max))
    }

    /// With the state on the patches: brings each owned patch up to date
    /// for the per-patch reads ([`Self::with_patch_velocity`],
    /// [`Self::with_patch_projection_potential`],
    /// [`Self::with_patch_pressure`]): a velocity written into the whole
    /// domain since (a restart from whole-domain files) goes to the
    /// patches, and where no step or write on the patches left the
    /// patches' velocity with its seams exchanged, it is copied as it is
    /// and its seams exchanged (nothing else: a velocity never set reads
    /// as the whole domain's, its boundary values unset). Collective:
    /// every rank calls it at the same point (a dump or checkpoint per
    /// rank calls it once before its patches). Nothing for a flow whose
    /// state lives on the whole domain.
    pub fn refresh_patches(&self) -> SolverResult<()> {
        let Some(patches) = &self.patches else {
            return Ok(());
        };
        if self.state_on_patches.borrow().is_none() {
            return Ok(());
        }
        self.patches_take_written_velocity(patches)?;
        if self.patch_velocity_current.get() {
            return Ok(());
        }
        let reductions = self.reductions.as_ref().ok_or_else(state_not_on_patches)?;
        reductions.take_velocity(patches)?;
        self.patch_velocity_current.set(true);
        Ok(())
    }

    /// The owned patch of this flow's layout that has `patch`'s cells, in
    /// the layout's order, or `None`.
    fn owned_patch_index(&self, patch: &Patch) -> SolverResult<Option<(usize, usize)>> {
        let Some(patches) = &self.patches else {
            return Ok(None);
        };
        let layout = patches.layout();
        for (position, index) in patches.owned().enumerate() {
            let own = layout.patch(index)?;
            if own.grid() == patch.grid()
                && own.offset() == patch.offset()
                && own.cells() == patch.cells()
            {
                return Ok(Some((position, index)));
            }
        }
        Ok(None)
    }

    /// Runs `f` on the projection potential `psi` of this rank's patch of
    /// the flow that has `patch`'s cells (its interior the last solve's;
    /// its ghosts as the solve left them; a `psi` written into the whole
    /// domain since, by a restart from whole-domain files, cut from
    /// there), when the flow's state lives on patches; `None` otherwise.
    /// Not collective.
    pub fn with_patch_projection_potential<R>(
        &self,
        patch: &Patch,
        f: impl FnOnce(&SpatialField<CellCentre>) -> R,
    ) -> SolverResult<Option<R>> {
        let Some((projection, psi)) = self.patch_psi(patch)? else {
            return Ok(None);
        };
        if projection.whole_psi_written(&self.graph)? {
            let part = self.cut_whole(&self.psi, psi.layout().patch())?;
            return Ok(Some(f(&part)));
        }
        Ok(Some(f(&psi)))
    }

    /// Runs `f` on the pressure of this rank's patch of the flow that has
    /// `patch`'s cells (`1/(b dt)` of the last stage times its `psi`, at
    /// every point `psi` holds, as the flow's graph forms it; a pressure
    /// written into the whole domain since, by a restart from
    /// whole-domain files, cut from there), when the flow's state lives
    /// on patches; `None` otherwise. Not collective.
    pub fn with_patch_pressure<R>(
        &self,
        patch: &Patch,
        f: impl FnOnce(&SpatialField<CellCentre>) -> R,
    ) -> SolverResult<Option<R>> {
        let Some((_, psi)) = self.patch_psi(patch)? else {
            return Ok(None);
        };
        if self.pressure_written.get() {
            // The whole domain's pressure was written (and is current:
            // no stage ran since).
            let part = self.cut_whole(&self.pressure, psi.layout().patch())?;
            return Ok(Some(f(&part)));
        }
        let mut pressure = SpatialField::<CellCentre>::new("p", psi.layout().patch(), Device::Cpu)?;
        let scale = self.pressure_scale.get();
        for (p, value) in pressure.values_mut()?.iter_mut().zip(psi.values()?) {
            *p = scale * value;
        }
        Ok(Some(f(&pressure)))
    }

    /// The projection and its `psi` on this rank's patch with `patch`'s
    /// cells, or `None` (no such patch, or the state not on patches).
    fn patch_psi(&self, patch: &Patch) -> SolverResult<Option<PatchPsi<'_>>> {
        let (Some(projection), Some((position, _))) =
            (&self.projection, self.owned_patch_index(patch)?)
        else {
            return Ok(None);
        };
        Ok(Ref::filter_map(projection.psi()?, |psi| psi.get(position))
            .ok()
            .map(|psi| (projection, psi)))
    }

    /// The whole domain's cell-centred field `tag` cut to `patch` (its
    /// ghosts included): a field written there and not yet on the
    /// patches.
    fn cut_whole(&self, tag: &Tag, patch: &Patch) -> SolverResult<SpatialField<CellCentre>> {
        let mut part = SpatialField::<CellCentre>::new(tag.name.as_ref(), patch, Device::Cpu)?;
        let offset = patch.offset().map(|o| o as isize);
        self.graph.with_field::<CellCentre, _>(tag, |whole| {
            take_window(whole, &mut part, offset, true)
        })??;
        Ok(part)
    }

    /// The factor `1/(b dt)` of the last stage by which the pressure is
    /// formed from `psi` (zero before the first step): what a checkpoint
    /// per rank keeps so that a restart forms the same pressure.
    pub fn pressure_scale(&self) -> f64 {
        self.pressure_scale.get()
    }

    /// Puts `stored` (velocity component `F` of a patch, from a
    /// checkpoint per rank) into this rank's patch with the same cells,
    /// at every point both hold. An error names the patch when this rank
    /// owns no patch with its cells, or the flow's state does not live on
    /// patches. Not collective; [`Self::finish_patch_restore`] ends a
    /// restart.
    pub fn restore_patch_velocity<F: GraphLocation + FaceLocation>(
        &self,
        stored: &SpatialField<F>,
    ) -> SolverResult<()> {
        let (patches, _) = self.restored_patch(stored.layout(), stored.name())?;
        // The reductions graphs' copy is behind until the restart ends.
        self.patch_velocity_current.set(false);
        let patch = stored.layout().patch();
        for (index, graph) in patches.graphs() {
            if patches.layout().patch(index)?.offset() == patch.offset() {
                graph
                    .with_field_mut::<F, _>(&self.now[F::AXIS], |to| copy_overlap(stored, to))??;
            }
        }
        Ok(())
    }

    /// Puts `stored` (the projection potential of a patch, from a
    /// checkpoint per rank) into this rank's patch with the same cells:
    /// its interior, the next solve's guess. Errors as
    /// [`Self::restore_patch_velocity`].
    pub fn restore_patch_projection_potential(
        &mut self,
        stored: &SpatialField<CellCentre>,
    ) -> SolverResult<()> {
        let (_, position) = self.restored_patch(stored.layout(), stored.name())?;
        let projection = self.projection.as_mut().ok_or_else(state_not_on_patches)?;
        projection.restore_psi(position, stored)
    }

    /// The flow's patches and the position among the owned ones of the
    /// patch that `layout` lies on, or the error naming it.
    fn restored_patch(
        &self,
        layout: &FieldLayout,
        name: &str,
    ) -> SolverResult<(&FlowPatches, usize)> {
        let patches = match &self.patches {
            Some(patches) if self.state_on_patches.borrow().is_some() => patches,
            _ => {
                return Err(SolverError::Setup {
                    equation: "the flow's restart on patches".into(),
                    reason: format!(
                        "`{name}` is a patch's field, but this flow's state does not live on patches (no patch layout, or the projection replicated); restore it from whole-domain fields"
                    ),
                });
            }
        };
        let patch = layout.patch();
        match self.owned_patch_index(patch)? {
            Some((position, _)) => Ok((patches, position)),
            None => Err(SolverError::Setup {
                equation: "the flow's restart on patches".into(),
                reason: format!(
                    "`{name}` was saved for a patch of {:?} cells from {:?} on a {:?}-cell grid; this rank owns no such patch of the flow's layout (patches {:?} of {:?}); restart with the layout the checkpoint was written with",
                    patch.cells(),
                    patch.offset(),
                    patch.grid().cells(),
                    patches.owned(),
                    patches.layout().counts()
                ),
            }),
        }
    }

    /// Ends a restart on the patches (collective): the pressure's scale
    /// `1/(b dt)` of the last stage before the checkpoint, the clock,
    /// and the step's reductions on the patches as after a step (the
    /// time step, the patches' velocity with its seams). The whole
    /// domain is gathered only when read.
    pub fn finish_patch_restore(
        &mut self,
        pressure_scale: f64,
        time: f64,
        steps: u64,
    ) -> SolverResult<()> {
        if !pressure_scale.is_finite() {
            return Err(SolverError::Setup {
                equation: "the flow's restart on patches".into(),
                reason: format!(
                    "the pressure's scale 1/(b dt) is {pressure_scale}; it must be finite"
                ),
            });
        }
        self.set_clock(time, steps)?;
        self.pressure_scale.set(pressure_scale);
        self.pressure_written.set(false);
        self.reduce_written_patches()
    }
}

impl IncompressibleFlow {
    /// Runs `f` on velocity component `F` over a box of the whole domain
    /// (`cells` cells from global cell `offset`): its interior points, a
    /// face field's as [`FieldLayout`] lays them out (the face after the
    /// box's last cell only where the box ends on a wall), indexed from
    /// the box's first cell, with the whole domain's values. What a case
    /// reads along a line or a few rows. With the state on the patches,
    /// every patch's points in the box are gathered onto every rank in
    /// patch order (collective) and the whole domain is never formed;
    /// otherwise the box is cut from the whole domain. An error names a
    /// box that does not lie in the grid.
    pub fn with_velocity_window<F: GraphLocation + FaceLocation, R>(
        &self,
        offset: [usize; 3],
        cells: [usize; 3],
        f: impl FnOnce(&SpatialField<F>) -> R,
    ) -> SolverResult<R> {
        let window = self.window(offset, cells)?;
        match &self.patches {
            Some(patches) if self.state_lives_on_patches() => {
                self.patches_take_written_velocity(patches)?;
                let graphs = patches.graphs();
                let part = patches.gather_window::<F>(&window, |position, give| {
                    let (_, graph) = graphs.get(position).ok_or_else(state_not_on_patches)?;
                    Ok(graph.with_field::<F, _>(&self.now[F::AXIS], |u| give(u))?)
                })?;
                Ok(f(&part))
            }
            _ => {
                let part = self.with_velocity::<F, _>(|u| cut_window(u, offset, cells))??;
                Ok(f(&part))
            }
        }
    }

    /// [`Self::with_velocity_window`] of the pressure (`1/(b dt)` of the
    /// last stage times `psi` gathered from the patches, as the flow's
    /// graph forms it; cut from the whole domain where that holds it).
    pub fn with_pressure_window<R>(
        &self,
        offset: [usize; 3],
        cells: [usize; 3],
        f: impl FnOnce(&SpatialField<CellCentre>) -> R,
    ) -> SolverResult<R> {
        let window = self.window(offset, cells)?;
        match (&self.patches, &self.projection) {
            (Some(patches), Some(projection))
                if self.state_lives_on_patches() && !self.pressure_written.get() =>
            {
                let psi = projection.psi()?;
                let mut part = patches.gather_window::<CellCentre>(&window, |position, give| {
                    give(psi.get(position).ok_or_else(state_not_on_patches)?);
                    Ok(())
                })?;
                let scale = self.pressure_scale.get();
                for value in part.values_mut()? {
                    *value *= scale;
                }
                Ok(f(&part))
            }
            _ => {
                let part = self.with_pressure(|p| cut_window(p, offset, cells))??;
                Ok(f(&part))
            }
        }
    }

    /// The box of `cells` cells from `offset` of the flow's grid, without
    /// ghosts, or the error naming it.
    fn window(&self, offset: [usize; 3], cells: [usize; 3]) -> SolverResult<Patch> {
        Ok(Patch::new(
            self.graph.patch().grid(),
            offset,
            cells,
            watershed_fields::GhostWidth::none(),
        )?)
    }
}

/// What [`IncompressibleFlow::first_non_finite_on_patches`] found.
pub(super) struct PatchFinding {
    /// The patch's rank found a boundary condition that gives a value
    /// that is not finite (and returns that error itself).
    patch_reports_condition: bool,
    pub(super) point: NonFinitePoint,
}

/// Copies every point `from` and `to` both hold (the same patch, with
/// perhaps other ghost widths).
fn copy_overlap<L: Location>(from: &SpatialField<L>, to: &mut SpatialField<L>) -> SolverResult<()> {
    let (wide, narrow) = (from.layout().ghosts(), to.layout().ghosts());
    let covers = (0..3).all(|a| wide.minus[a] >= narrow.minus[a] && wide.plus[a] >= narrow.plus[a]);
    if covers {
        take_window(from, to, [0; 3], true)
    } else {
        paste_window(from, to)
    }
}
