//! How a case is set up from its options: its graph options and execution
//! mode, its integrator by name, its patch layout, its configuration
//! loaded in layers.

use crate::case::CaseOptions;
use crate::config::{CaseConfig, Loaded, load, to_text};
use crate::error::{CaseError, CaseResult, ConfigOrigin};
use watershed_exprgraph::ExecutionMode;
use watershed_fields::{GhostWidth, Grid, PatchLayout};
use watershed_solvers::{IncompressibleFlow, IncompressibleFlowBuilder, TimeIntegrator};

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

/// A case's patch layout from its `patches` setting: the counts given,
/// or, for `[0, 0, 0]`, as many patches as the run has ranks, laid out by
/// [`PatchLayout::automatic`].
pub fn patch_layout(
    grid: &Grid,
    patches: [usize; 3],
    ghosts: GhostWidth,
    options: &CaseOptions,
) -> CaseResult<PatchLayout> {
    Ok(if patches == [0, 0, 0] {
        PatchLayout::automatic(grid, options.rank_link().ranks(), ghosts)?
    } else {
        PatchLayout::new(grid, patches, ghosts)?
    })
}

/// `builder` (a flow on the whole domain of `grid`) on the patches of the
/// `patches` setting ([`patch_layout`], `ghosts` layers each; see
/// `IncompressibleFlowBuilder::patches`), its projection replicated with
/// `replicate_projection`, when they are more than one or the run has
/// several ranks; unchanged otherwise, so that one patch in one process
/// keeps the single graph.
pub fn flow_on_patches(
    builder: IncompressibleFlowBuilder,
    grid: &Grid,
    patches: [usize; 3],
    replicate_projection: bool,
    ghosts: usize,
    options: &CaseOptions,
) -> CaseResult<IncompressibleFlowBuilder> {
    let link = options.rank_link();
    let layout = patch_layout(grid, patches, GhostWidth::uniform(ghosts), options)?;
    Ok(
        match (layout.len() > 1 || link.ranks() > 1, replicate_projection) {
            (false, _) => builder,
            (true, false) => builder.patches(layout, link),
            (true, true) => builder.patches(layout, link).replicated_projection(),
        },
    )
}

/// The graphs of `flow` named for timings and traces: `momentum` (its
/// whole stage), or `projection` and each patch's momentum graph on this
/// rank (`momentum patch k`) when the momentum runs on patches, and with
/// the projection on the patches its parts' graphs there (`forcing patch
/// k` with bodies, `divergence patch k`, `correction patch k`).
pub fn flow_graphs(
    flow: &IncompressibleFlow,
) -> Vec<(String, &watershed_exprgraph::ExpressionGraph)> {
    let main = if flow.momentum_graphs().is_empty() {
        "momentum"
    } else {
        "projection"
    };
    let mut graphs = vec![(main.to_string(), flow.graph())];
    for (index, graph) in flow.momentum_graphs() {
        graphs.push((format!("momentum patch {index}"), graph));
    }
    for (part, index, graph) in flow.projection_graphs() {
        graphs.push((format!("{part} patch {index}"), graph));
    }
    graphs
}

/// What a flow's `Simulation::poisson_on_patches` reports: the time in
/// its Poisson solve on the patches, its levels in all and on the patches
/// (`None` when the solve is not on patches).
pub fn flow_poisson_on_patches(
    flow: &IncompressibleFlow,
) -> Option<(std::time::Duration, usize, usize)> {
    let (levels, on_patches) = flow.projection_levels()?;
    Some((flow.projection_solve_time()?, levels, on_patches))
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

/// The effective configuration of `case` as TOML.
pub fn config_text_of<C: CaseConfig>(case: &str, options: &CaseOptions) -> CaseResult<String> {
    let loaded = load_config::<C>(case, options)?;
    to_text(case, &loaded)
}
