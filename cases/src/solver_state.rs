//! A solver's fields in dumps and checkpoints: an incompressible flow's
//! velocity and pressure (with the derived fields for viewing), and a
//! transport equation's solution, on one patch or gathered from the
//! patches of a decomposed run (the same datasets either way, so a
//! checkpoint restarts on any patch layout).

use crate::checkpoint::{RankCheckpoint, load_field, save_field};
use crate::derived::dump_derived_flow_fields;
use crate::error::CaseResult;
use watershed_exprgraph::ExpressionGraph;
use watershed_fields::io::read_field_window;
use watershed_fields::on_face;
use watershed_fields::{CellCentre, SpatialField};
use watershed_io::dumps::{DumpedField, dump_field};
use watershed_io::rank_dumps::create_patch_group;
use watershed_solvers::{IncompressibleFlow, PatchedTransport};

/// Dumps the velocity components (`u`, `v`, `w` on their faces), the
/// pressure `p` of `flow`, and the cell-centred fields derived from them
/// for viewing ([`crate::derived`]).
pub fn dump_flow(flow: &IncompressibleFlow, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
    let mut written = Vec::new();
    for &axis in flow.active_axes() {
        let name = ["u", "v", "w"][axis];
        written.push(on_face!(axis, F => {
            flow.with_velocity::<F, _>(|u| dump_field(group, name, u))??
        }));
    }
    written.push(flow.with_pressure(|p| dump_field(group, "p", p))??);
    written.extend(dump_derived_flow_fields(flow, group)?);
    Ok(written)
}

/// Saves the state of `flow` (velocity, projection potential, pressure,
/// all with ghosts) under names starting with `prefix`.
pub fn save_flow(flow: &IncompressibleFlow, group: &hdf5::Group, prefix: &str) -> CaseResult<()> {
    for &axis in flow.active_axes() {
        let name = format!("{prefix}{}", ["u", "v", "w"][axis]);
        on_face!(axis, F => flow.with_velocity::<F, _>(|u| save_field(group, &name, u))??);
    }
    let (psi, p) = (format!("{prefix}psi"), format!("{prefix}p"));
    flow.with_projection_potential(|field| save_field(group, &psi, field))??;
    flow.with_pressure(|field| save_field(group, &p, field))?
}

/// Restores what [`save_flow`] saved and sets the clock.
pub fn load_flow(
    flow: &mut IncompressibleFlow,
    group: &hdf5::Group,
    prefix: &str,
    time: f64,
    step: u64,
) -> CaseResult<()> {
    for axis in flow.active_axes().to_vec() {
        let name = format!("{prefix}{}", ["u", "v", "w"][axis]);
        on_face!(axis, F => flow.with_velocity_mut::<F, _>(|u| load_field(group, &name, u))??);
    }
    let (psi, p) = (format!("{prefix}psi"), format!("{prefix}p"));
    flow.with_projection_potential_mut(|field| load_field(group, &psi, field))??;
    flow.with_pressure_mut(|field| load_field(group, &p, field))??;
    flow.set_clock(time, step)?;
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
    if patches.patches() != transport.layout().len() {
        return Err(crate::error::CaseError::Restart {
            path: patches.path(),
            reason: format!(
                "it was written per rank on {} patches, this run has {}: restart it with its own patch layout (drop the --set patches=... that changes it)",
                patches.patches(),
                transport.layout().len()
            ),
        });
    }
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
