//! Small helpers the cases share: execution modes, integrators by name,
//! filling graph fields from functions, loading a case's configuration.

use crate::config::{CaseConfig, Loaded, load};
use crate::error::{CaseError, CaseResult, ConfigOrigin};
use crate::registry::CaseOptions;
use watershed_exprgraph::{ExecutionMode, ExpressionGraph, GraphLocation, Tag};
use watershed_solvers::TimeIntegrator;

/// The graph options of a case's solver: its placement from the command
/// line (`--device`), everything else the defaults.
pub fn solver_graph_options(options: &CaseOptions) -> watershed_exprgraph::GraphOptions {
    watershed_exprgraph::GraphOptions {
        placement: options.placement.clone(),
        ..Default::default()
    }
}

/// Serial for one thread, threaded otherwise.
pub fn execution_mode(threads: usize) -> ExecutionMode {
    if threads <= 1 {
        ExecutionMode::Serial
    } else {
        ExecutionMode::Threaded(threads)
    }
}

/// A case's execution mode: [`execution_mode`] of its thread count, or,
/// with `adaptive_threads`, up to that many threads chosen by timing
/// (`ExecutionMode::Adaptive`).
pub fn case_execution_mode(options: &CaseOptions) -> ExecutionMode {
    if options.adaptive_threads && options.threads > 1 {
        ExecutionMode::Adaptive(options.threads)
    } else {
        execution_mode(options.threads)
    }
}

/// The integrators a configuration can name.
pub const INTEGRATORS: [&str; 3] = ["forward-euler", "ssp-rk2", "ssp-rk3"];

/// The integrator called `name` (one of [`INTEGRATORS`]; configurations are
/// range-checked before this is called).
pub fn integrator(name: &str) -> TimeIntegrator {
    match name {
        "forward-euler" => TimeIntegrator::ForwardEuler,
        "ssp-rk2" => TimeIntegrator::SspRk2,
        _ => TimeIntegrator::SspRk3,
    }
}

/// Sets every allocated point (ghosts included) of the graph's field `tag`
/// from `f(x, y, z)`.
pub fn fill_graph_field<L: GraphLocation>(
    graph: &ExpressionGraph,
    tag: &Tag,
    f: impl Fn([f64; 3]) -> f64,
) -> CaseResult<()> {
    graph.with_field_mut::<L, _>(tag, |field| -> CaseResult<()> {
        let layout = field.layout().clone();
        let values = field.values_mut()?;
        for index in layout.allocated() {
            values[layout.linear_index(index)] = f(layout.coordinate(index));
        }
        Ok(())
    })?
}

/// Loads a case's configuration from the options: the checkpoint's stored
/// text (when restarting), then the file, then the `--set`s.
pub fn load_config<C: CaseConfig>(case: &str, options: &CaseOptions) -> CaseResult<Loaded<C>> {
    let base = match &options.checkpoint_config {
        Some(text) => Some((
            toml::from_str::<C>(text).map_err(|e| CaseError::ConfigSyntax {
                case: case.into(),
                origin: ConfigOrigin::Checkpoint,
                message: e.to_string(),
            })?,
            ConfigOrigin::Checkpoint,
        )),
        None => None,
    };
    load(case, base, options.config_file.as_deref(), &options.sets)
}

use crate::checkpoint::{load_field, save_field};
use crate::derived::dump_derived_flow_fields;
use watershed_fields::on_face;
use watershed_io::dumps::{DumpedField, dump_field};
use watershed_solvers::IncompressibleFlow;

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

/// Linear interpolation of (position, value) samples sorted by position.
pub fn interpolate(samples: &[(f64, f64)], at: f64) -> f64 {
    if samples.len() < 2 {
        return samples.first().map_or(f64::NAN, |s| s.1);
    }
    let k = samples
        .iter()
        .position(|&(p, _)| p >= at)
        .unwrap_or(samples.len() - 1)
        .max(1);
    let ((p0, v0), (p1, v1)) = (samples[k - 1], samples[k]);
    if p1 == p0 {
        return v1;
    }
    v0 + (v1 - v0) * (at - p0) / (p1 - p0)
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
