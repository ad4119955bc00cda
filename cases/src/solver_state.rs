//! A solver's fields in dumps and checkpoints: an incompressible flow's
//! velocity and pressure (with the derived fields for viewing), and a
//! transport equation's solution, on one patch or gathered from the
//! patches of a decomposed run (the same datasets either way, so a
//! checkpoint restarts on any patch layout).

use crate::checkpoint::{
    RankCheckpoint, check_saved_layout, load_field, load_series, save_field, save_series,
};
use crate::derived::dump_derived_flow_fields;
use crate::error::{CaseError, CaseResult};
use watershed_exprgraph::ExpressionGraph;
use watershed_fields::io::{read_field, read_field_window};
use watershed_fields::on_face;
use watershed_fields::{CellCentre, FieldLayout, Location, Patch, PatchLayout, SpatialField};
use watershed_io::dumps::{DumpedField, dump_field};
use watershed_io::rank_dumps::create_patch_group;
use watershed_solvers::windows::{cut_window, paste_window};
use watershed_solvers::{IncompressibleFlow, PatchedTransport};

/// Dumps the velocity components (`u`, `v`, `w` on their faces), the
/// pressure `p` of `flow`, and the cell-centred fields derived from them
/// for viewing ([`crate::derived`]). Collective for a decomposed flow:
/// rank 0 writes, the whole domain gathered onto it alone
/// ([`IncompressibleFlow::on_root_with_whole`]); the others send their
/// patches, hold no whole field and write nothing.
pub fn dump_flow(flow: &IncompressibleFlow, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
    let written = flow.on_root_with_whole(|| -> CaseResult<Vec<DumpedField>> {
        let mut written = Vec::new();
        for &axis in flow.active_axes() {
            let name = ["u", "v", "w"][axis];
            written.push(on_face!(axis, F => {
                flow.with_velocity::<F, _>(|u| dump_field(group, name, u))??
            }));
        }
        written.push(flow.with_pressure(|p| dump_field(group, "p", p))??);
        written.extend(dump_derived_flow_fields(flow, group, None)?);
        Ok(written)
    })?;
    written.unwrap_or_else(|| Ok(Vec::new()))
}

/// The dataset of a flow's checkpoint holding its bodies' weighted
/// momentum sums ([`IncompressibleFlow::force_sums`]).
const FORCE_SUMS: &str = "force_sums";

/// Saves the state of `flow` (velocity, projection potential, pressure,
/// all with ghosts, and its bodies' weighted momentum sums when it
/// computes forces) under names starting with `prefix`. Collective for a
/// decomposed flow: rank 0 writes, as for [`dump_flow`].
pub fn save_flow(flow: &IncompressibleFlow, group: &hdf5::Group, prefix: &str) -> CaseResult<()> {
    let saved = flow.on_root_with_whole(|| -> CaseResult<()> {
        for &axis in flow.active_axes() {
            let name = format!("{prefix}{}", ["u", "v", "w"][axis]);
            on_face!(axis, F => flow.with_velocity::<F, _>(|u| save_field(group, &name, u))??);
        }
        let (psi, p) = (format!("{prefix}psi"), format!("{prefix}p"));
        flow.with_projection_potential(|field| save_field(group, &psi, field))??;
        flow.with_pressure(|field| save_field(group, &p, field))??;
        save_series(
            group,
            &format!("{prefix}{PRESSURE_SCALE}"),
            &[flow.pressure_scale()],
        )?;
        save_force_sums(flow, group, &format!("{prefix}{FORCE_SUMS}"))
    })?;
    saved.unwrap_or(Ok(()))
}

/// Saves the bodies' weighted momentum sums of `flow` as dataset `name`
/// (nothing when it computes no force): without them the first step
/// after a restart would have no force, and a force history a gap.
fn save_force_sums(flow: &IncompressibleFlow, group: &hdf5::Group, name: &str) -> CaseResult<()> {
    let sums = flow.force_sums();
    if sums.is_empty() {
        return Ok(());
    }
    save_series(group, name, &sums)
}

/// Restores what [`save_force_sums`] saved, once the velocity is back; a
/// checkpoint written before they were kept has none, and the first step
/// after the restart then has no force.
fn load_force_sums(
    flow: &mut IncompressibleFlow,
    group: &hdf5::Group,
    name: &str,
) -> CaseResult<()> {
    if !group.link_exists(name) {
        return Ok(());
    }
    let sums = load_series(group, name)?;
    flow.restore_force_sums(&sums)
        .map_err(|e| CaseError::Restart {
            path: std::path::PathBuf::from(group.filename()),
            reason: format!("dataset {name}: {e}"),
        })
}

/// Restores what [`save_flow`] saved and sets the clock. A flow whose
/// state lives on the patches, from a checkpoint that keeps the
/// pressure's scale, reads only its own patches' windows into them
/// (nothing of the whole domain is formed on any rank); otherwise every
/// rank reads the whole fields.
pub fn load_flow(
    flow: &mut IncompressibleFlow,
    group: &hdf5::Group,
    prefix: &str,
    time: f64,
    step: u64,
) -> CaseResult<()> {
    let scale = format!("{prefix}{PRESSURE_SCALE}");
    if flow.state_lives_on_patches() && group.link_exists(&scale) {
        let scale = single_value(group, &scale)?;
        let Some(layout) = flow.patch_layout().cloned() else {
            return Err(CaseError::Usage(
                "a flow whose state lives on patches has no patch layout".into(),
            ));
        };
        let whole = flow.graph().patch().clone();
        for index in flow.owned_patches().unwrap_or_default() {
            let patch = layout.patch(index)?;
            for axis in flow.active_axes().to_vec() {
                let name = format!("{prefix}{}", ["u", "v", "w"][axis]);
                on_face!(axis, F => {
                    check_stored_layout::<F>(group, &name, &whole)?;
                    let stored: SpatialField<F> = read_field_window(group, &name, &patch)?;
                    flow.restore_patch_velocity::<F>(&stored)?
                });
            }
            let psi = format!("{prefix}psi");
            check_stored_layout::<CellCentre>(group, &psi, &whole)?;
            let stored: SpatialField<CellCentre> = read_field_window(group, &psi, &patch)?;
            flow.restore_patch_projection_potential(&stored)?;
        }
        flow.finish_patch_restore(scale, time, step)?;
        return load_force_sums(flow, group, &format!("{prefix}{FORCE_SUMS}"));
    }
    for axis in flow.active_axes().to_vec() {
        let name = format!("{prefix}{}", ["u", "v", "w"][axis]);
        on_face!(axis, F => flow.with_velocity_mut::<F, _>(|u| load_field(group, &name, u))??);
    }
    let (psi, p) = (format!("{prefix}psi"), format!("{prefix}p"));
    flow.with_projection_potential_mut(|field| load_field(group, &psi, field))??;
    flow.with_pressure_mut(|field| load_field(group, &p, field))??;
    flow.set_clock(time, step)?;
    load_force_sums(flow, group, &format!("{prefix}{FORCE_SUMS}"))
}

/// Refuses dataset `name` of `group` unless it was saved from the whole
/// domain `whole` with its ghost layers (what [`load_field`] checks),
/// reading its attributes alone.
fn check_stored_layout<L: Location>(
    group: &hdf5::Group,
    name: &str,
    whole: &Patch,
) -> CaseResult<()> {
    let from = watershed_fields::io::stored_layout::<L, f64>(group, name)?;
    check_saved_layout(group, name, &from, &FieldLayout::new(whole, L::KIND))
}

/// The one value of dataset `name` of `group` (a series of length 1).
fn single_value(group: &hdf5::Group, name: &str) -> CaseResult<f64> {
    match load_series(group, name)?[..] {
        [value] => Ok(value),
        ref values => Err(CaseError::Restart {
            path: std::path::PathBuf::from(group.filename()),
            reason: format!(
                "dataset {name} holds {} values, not 1: the file is damaged",
                values.len()
            ),
        }),
    }
}

/// The patch layout of a decomposed `flow`, or an error saying that
/// files per rank need one.
fn flow_layout<'a>(flow: &'a IncompressibleFlow, case: &str) -> CaseResult<&'a PatchLayout> {
    flow.patch_layout()
        .ok_or_else(|| CaseError::per_rank_refused(case))
}

/// For a dump per rank (`watershed_io::rank_dumps`): writes, for each
/// patch of a decomposed `flow` this rank owns, a group with what
/// [`dump_flow`] writes of the whole domain cut to the patch (the face
/// components' pieces as [`watershed_io::DumpPiece::extent`] says, the
/// pressure and the derived fields on its cells, computed for those cells
/// alone); returns what each patch holds. Collective (every rank calls it
/// once). With the state on the patches each patch's fields are read
/// there ([`IncompressibleFlow::refresh_patches`] first): nothing of the
/// whole domain is formed or gathered; otherwise (the projection
/// replicated) every rank holds the whole flow and cuts its patches out.
pub fn dump_own_flow_patches(
    flow: &IncompressibleFlow,
    case: &str,
    root: &hdf5::Group,
) -> CaseResult<Vec<DumpedField>> {
    let layout = flow_layout(flow, case)?;
    flow.refresh_patches()?;
    let mut written = Vec::new();
    for index in flow.owned_patches().unwrap_or_default() {
        let patch = layout.patch(index)?;
        let (offset, cells) = (patch.offset(), patch.cells());
        let group = create_patch_group(root, index, offset, cells)?;
        let mut fields = Vec::new();
        for &axis in flow.active_axes() {
            let name = ["u", "v", "w"][axis];
            fields.push(on_face!(axis, F => {
                patch_part(flow, &patch, name, |flow, f| flow.with_patch_velocity::<F, _>(&patch, f), |u| {
                    dump_field(&group, name, u)
                }, |flow| flow.with_velocity::<F, _>(|u| cut_window(u, offset, cells)))??
            }));
        }
        fields.push(patch_part(
            flow,
            &patch,
            "p",
            |flow, f| flow.with_patch_pressure(&patch, f),
            |p| dump_field(&group, "p", p),
            |flow| flow.with_pressure(|p| cut_window(p, offset, cells)),
        )??);
        fields.extend(dump_derived_flow_fields(
            flow,
            &group,
            Some((offset, cells)),
        )?);
        written = fields;
    }
    Ok(written)
}

/// `write` run on field `name` of `patch` of `flow`: the patch's own field
/// where the flow's state lives on the patches (`on_patch`), else the
/// patch cut from the whole domain (`cut`; every rank holds the whole
/// flow then, so this is not collective).
fn patch_part<L: Location, W>(
    flow: &IncompressibleFlow,
    patch: &Patch,
    name: &str,
    on_patch: impl FnOnce(
        &IncompressibleFlow,
        &mut dyn FnMut(&SpatialField<L>) -> W,
    ) -> watershed_solvers::SolverResult<Option<W>>,
    mut write: impl FnMut(&SpatialField<L>) -> W,
    cut: impl FnOnce(
        &IncompressibleFlow,
    ) -> watershed_solvers::SolverResult<
        watershed_solvers::SolverResult<SpatialField<L>>,
    >,
) -> CaseResult<W> {
    if let Some(done) = on_patch(flow, &mut |field| write(field))? {
        return Ok(done);
    }
    if flow.state_lives_on_patches() {
        return Err(CaseError::Usage(format!(
            "field {name} of patch {:?} from {:?} is not on this rank's patches of the flow",
            patch.cells(),
            patch.offset()
        )));
    }
    let part = cut(flow)??;
    Ok(write(&part))
}

/// The dataset of a flow's checkpoint (per rank, or after the prefix in
/// one file) holding its pressure scale `1/(b dt)` of the last stage
/// ([`IncompressibleFlow::pressure_scale`]), with which a restart on the
/// patches forms the pressure from `psi`.
const PRESSURE_SCALE: &str = "pressure_scale";

/// For a checkpoint per rank ([`crate::checkpoint`]): saves what
/// [`save_flow`] saves, cut to each patch of a decomposed `flow` this rank
/// owns, one group per patch (the bodies' momentum sums, the same on
/// every rank, at the file's root). Collective. With the state on the
/// patches each patch's fields are read there with the patch's ghost
/// layers (nothing of the whole domain is formed), and the pressure's
/// scale is kept at the root; otherwise cut from the whole domain with
/// its ghost layers.
pub fn save_own_flow_patches(
    flow: &IncompressibleFlow,
    case: &str,
    root: &hdf5::Group,
) -> CaseResult<()> {
    let layout = flow_layout(flow, case)?;
    flow.refresh_patches()?;
    for index in flow.owned_patches().unwrap_or_default() {
        let patch = layout.patch(index)?;
        let (offset, cells) = (patch.offset(), patch.cells());
        let group = create_patch_group(root, index, offset, cells)?;
        for &axis in flow.active_axes() {
            let name = ["u", "v", "w"][axis];
            on_face!(axis, F => patch_part(
                flow,
                &patch,
                name,
                |flow, f| flow.with_patch_velocity::<F, _>(&patch, f),
                |u| save_field(&group, name, u),
                |flow| flow.with_velocity::<F, _>(|u| cut_window(u, offset, cells)),
            )??);
        }
        patch_part(
            flow,
            &patch,
            "psi",
            |flow, f| flow.with_patch_projection_potential(&patch, f),
            |psi| save_field(&group, "psi", psi),
            |flow| flow.with_projection_potential(|f| cut_window(f, offset, cells)),
        )??;
        patch_part(
            flow,
            &patch,
            "p",
            |flow, f| flow.with_patch_pressure(&patch, f),
            |p| save_field(&group, "p", p),
            |flow| flow.with_pressure(|f| cut_window(f, offset, cells)),
        )??;
    }
    if flow.state_lives_on_patches() {
        save_series(root, PRESSURE_SCALE, &[flow.pressure_scale()])?;
    }
    // Every rank holds the same sums; each file keeps them.
    save_force_sums(flow, root, FORCE_SUMS)
}

/// Restores what [`save_own_flow_patches`] saved, whichever number of
/// ranks wrote it; the checkpoint's patch layout must be this run's; then
/// the clock is set. Collective. Where the flow's state lives on the
/// patches and the checkpoint keeps the pressure's scale, each rank reads
/// its own patches into them (nothing of the whole domain is formed);
/// otherwise (a checkpoint written before the scale was kept, or the
/// projection replicated) every rank reads every patch into its whole
/// fields, ghosts included. Either way each point gets the bits it was
/// saved with.
pub fn load_own_flow_patches(
    flow: &mut IncompressibleFlow,
    case: &str,
    patches: &RankCheckpoint,
    time: f64,
    step: u64,
) -> CaseResult<()> {
    let layout = flow_layout(flow, case)?.clone();
    patches.check_patch_count(layout.len())?;
    let (file, _) = patches.patch(0)?;
    if flow.state_lives_on_patches() && file.link_exists(PRESSURE_SCALE) {
        let scale = single_value(&file, PRESSURE_SCALE)?;
        for index in flow.owned_patches().unwrap_or_default() {
            let patch = layout.patch(index)?;
            let (_file, group) = patches.patch(index)?;
            let restart = |reason: String| CaseError::Restart {
                path: std::path::PathBuf::from(group.filename()),
                reason,
            };
            for axis in flow.active_axes().to_vec() {
                let name = ["u", "v", "w"][axis];
                on_face!(axis, F => {
                    let stored: SpatialField<F> = read_field(&group, name)?;
                    check_patch_field(&stored, &patch, &group, name).map_err(restart)?;
                    flow.restore_patch_velocity::<F>(&stored)?
                });
            }
            let stored: SpatialField<CellCentre> = read_field(&group, "psi")?;
            check_patch_field(&stored, &patch, &group, "psi").map_err(restart)?;
            flow.restore_patch_projection_potential(&stored)?;
        }
        flow.finish_patch_restore(scale, time, step)?;
        return load_force_sums(flow, &file, FORCE_SUMS);
    }
    for index in 0..layout.len() {
        let patch = layout.patch(index)?;
        let (offset, cells) = (patch.offset(), patch.cells());
        let (_file, group) = patches.patch(index)?;
        for axis in flow.active_axes().to_vec() {
            let name = ["u", "v", "w"][axis];
            on_face!(axis, F => flow.with_velocity_mut::<F, _>(|u| {
                load_patch_field(&group, name, offset, cells, u)
            })??);
        }
        flow.with_projection_potential_mut(|f| load_patch_field(&group, "psi", offset, cells, f))??;
        flow.with_pressure_mut(|f| load_patch_field(&group, "p", offset, cells, f))??;
    }
    flow.set_clock(time, step)?;
    load_force_sums(flow, &file, FORCE_SUMS)
}

/// Whether `stored` (dataset `name` of `group`) lies on `patch` with its
/// ghost layers (another space order has others); the reason naming both
/// when not.
fn check_patch_field<L: Location>(
    stored: &SpatialField<L>,
    patch: &Patch,
    group: &hdf5::Group,
    name: &str,
) -> Result<(), String> {
    let from = stored.layout().patch();
    if from.grid() == patch.grid()
        && from.offset() == patch.offset()
        && from.cells() == patch.cells()
        && from.ghosts() == patch.ghosts()
    {
        return Ok(());
    }
    Err(format!(
        "field {name} of {} was saved on a {:?}-cell grid (patch of {:?} cells from {:?}, ghosts {:?}); this run's patch has {:?} cells from {:?} on a {:?}-cell grid (ghosts {:?}); restart with the configuration the checkpoint was written with",
        group.name(),
        from.grid().cells(),
        from.cells(),
        from.offset(),
        from.ghosts(),
        patch.cells(),
        patch.offset(),
        patch.grid().cells(),
        patch.ghosts()
    ))
}

/// Reads dataset `name` of `group` (a patch of `cells` cells from
/// `offset`, saved with `whole`'s ghosts by [`save_own_flow_patches`])
/// into the same points of `whole`; another grid, patch or ghost width is
/// a restart error naming both.
fn load_patch_field<L: Location>(
    group: &hdf5::Group,
    name: &str,
    offset: [usize; 3],
    cells: [usize; 3],
    whole: &mut SpatialField<L>,
) -> CaseResult<()> {
    let stored: SpatialField<L> = read_field(group, name)?;
    let to = whole.layout();
    let expected = FieldLayout::new(
        &Patch::new(to.patch().grid(), offset, cells, to.ghosts())?,
        L::KIND,
    );
    let from = stored.layout();
    if from != &expected {
        return Err(CaseError::Restart {
            path: std::path::PathBuf::from(group.filename()),
            reason: format!(
                "field {name} of {} was saved on a {:?}-cell grid (patch of {:?} cells from {:?}, ghosts {:?}); this run's patch has {cells:?} cells from {offset:?} on a {:?}-cell grid (ghosts {:?}); restart with the configuration the checkpoint was written with",
                group.name(),
                from.patch().grid().cells(),
                from.patch().cells(),
                from.patch().offset(),
                from.ghosts(),
                to.patch().grid().cells(),
                to.ghosts()
            ),
        });
    }
    paste_window(&stored, whole)?;
    Ok(())
}

/// Dumps the solution of `equation` as dataset `name`.
pub fn dump_solution(
    solver: &watershed_solvers::TransportSolver,
    equation: &str,
    group: &hdf5::Group,
    name: &str,
) -> CaseResult<DumpedField> {
    Ok(solver.with_solution(equation, |field| dump_field(group, name, field))??)
}

/// Saves the solution of `equation` (with ghosts) as dataset `equation`.
pub fn save_solution(
    solver: &watershed_solvers::TransportSolver,
    equation: &str,
    group: &hdf5::Group,
) -> CaseResult<()> {
    solver.with_solution(equation, |field| save_field(group, equation, field))?
}

/// Restores the solution of `equation` saved by [`save_solution`].
pub fn load_solution(
    solver: &watershed_solvers::TransportSolver,
    equation: &str,
    group: &hdf5::Group,
) -> CaseResult<()> {
    solver.with_solution_mut(equation, |field| load_field(group, equation, field))?
}

/// Dumps the solution of `equation` of a decomposed run as dataset `name`:
/// the whole domain's field gathered from every patch onto rank 0, which
/// writes it (collective; the other ranks write nothing).
pub fn dump_patched_solution(
    transport: &PatchedTransport,
    equation: &str,
    group: &hdf5::Group,
    name: &str,
) -> CaseResult<DumpedField> {
    match transport.gather_solution(equation)? {
        Some(whole) => Ok(dump_field(group, name, &whole)?),
        // A follower rank: rank 0 writes the gathered field.
        None => Ok(DumpedField {
            name: name.into(),
            location: watershed_fields::LocationKind::CellCentre,
            extent: transport.layout().grid().cells(),
            components: 1,
            derived: None,
        }),
    }
}

/// Dumps the solutions of `equations` (each under its own name) of the
/// patches this rank owns, one group per patch, for a dump per rank
/// (`watershed_io::rank_dumps`); returns what each patch holds. No values
/// cross ranks.
pub fn dump_own_patch_solutions(
    transport: &PatchedTransport,
    equations: &[&str],
    root: &hdf5::Group,
) -> CaseResult<Vec<DumpedField>> {
    // The interiors are final after a step, but a pending overlapped
    // exchange is settled first, as for every read of the solutions.
    transport.settle()?;
    let mut fields = Vec::new();
    for (index, solver) in transport.owned().zip(transport.solvers()) {
        let patch = transport.layout().patch(index)?;
        let group = create_patch_group(root, index, patch.offset(), patch.cells())?;
        fields = equations
            .iter()
            .map(|equation| dump_solution(solver, equation, &group, equation))
            .collect::<CaseResult<Vec<_>>>()?;
    }
    Ok(fields)
}

/// Saves the solution of `equation` of a decomposed run, gathered over
/// the whole domain with its ghosts onto rank 0, as dataset `equation`:
/// what [`save_solution`] writes for one patch over the whole domain
/// (collective; the other ranks write nothing).
pub fn save_patched_solution(
    transport: &PatchedTransport,
    equation: &str,
    group: &hdf5::Group,
) -> CaseResult<()> {
    match transport.gather_solution(equation)? {
        Some(whole) => save_field(group, equation, &whole),
        // A follower rank: rank 0 writes the gathered field.
        None => Ok(()),
    }
}

/// Saves the solutions of `equations` (with their ghosts) of the patches
/// this rank owns, one group per patch of `root`, for a checkpoint per rank
/// ([`crate::checkpoint`]). No values cross ranks.
pub fn save_own_patch_solutions(
    transport: &PatchedTransport,
    equations: &[&str],
    root: &hdf5::Group,
) -> CaseResult<()> {
    // Ghosts are saved too: a pending overlapped exchange is settled.
    transport.settle()?;
    for (index, solver) in transport.owned().zip(transport.solvers()) {
        let patch = transport.layout().patch(index)?;
        let group = create_patch_group(root, index, patch.offset(), patch.cells())?;
        for equation in equations {
            save_solution(solver, equation, &group)?;
        }
    }
    Ok(())
}

/// Restores what [`save_own_patch_solutions`] saved onto the patches this
/// rank owns, each read from the file that holds it, whichever number of
/// ranks wrote them; the checkpoint's patch layout must be this run's.
/// Set the clock first: the conditions refill the ghosts at its time.
pub fn load_own_patch_solutions(
    transport: &PatchedTransport,
    equations: &[&str],
    patches: &RankCheckpoint,
) -> CaseResult<()> {
    patches.check_patch_count(transport.layout().len())?;
    transport.settle()?;
    for (index, solver) in transport.owned().zip(transport.solvers()) {
        let (_file, group) = patches.patch(index)?;
        for equation in equations {
            load_solution(solver, equation, &group)?;
        }
    }
    // The ghosts as the conditions and the seams give them.
    for equation in equations {
        transport.exchange(equation)?;
    }
    Ok(())
}

/// Restores what [`save_patched_solution`] (or [`save_solution`]) saved
/// onto the patches of `transport`, whatever layout wrote it: each rank
/// reads only its patches' part of the whole domain's dataset, ghosts
/// included. Set the clock first: the conditions refill the ghosts at its
/// time.
pub fn load_patched_solution(
    transport: &PatchedTransport,
    equation: &str,
    group: &hdf5::Group,
) -> CaseResult<()> {
    transport.with_solutions_mut(equation, |_, field| {
        let part: SpatialField<CellCentre> =
            read_field_window(group, equation, field.layout().patch())?;
        field.values_mut()?.copy_from_slice(part.values()?);
        Ok(())
    })?;
    Ok(())
}

/// The graphs of a decomposed run's patches on this rank, named `case`
/// (one patch) or `case patch k`.
pub fn patch_graphs<'a>(
    case: &str,
    transport: &'a PatchedTransport,
) -> Vec<(String, &'a ExpressionGraph)> {
    let one = transport.layout().len() == 1;
    transport
        .solvers()
        .iter()
        .zip(transport.owned())
        .map(|(solver, index)| {
            let name = if one {
                case.to_string()
            } else {
                format!("{case} patch {index}")
            };
            (name, solver.graph())
        })
        .collect()
}
