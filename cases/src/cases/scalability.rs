//! `exprlib-scalability` and `wasatch-scalability`: the test graphs of
//! sections 5.2 and 5.3 of the thesis, as runnable cases and as the graphs
//! `watershed bench` times.

use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::checkpoint::RankCheckpoint;
use crate::checkpoint::{load_graph_field, save_field, save_graph_field};
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, Simulation, Stop};
use crate::error::{CaseError, CaseResult};
use crate::setup::config_text_of;
use crate::setup::{case_execution_mode, integrator};
use crate::solver_state::{
    dump_own_patch_solutions, dump_patched_solution, load_own_patch_solutions,
    load_patched_solution, patch_graphs, save_own_patch_solutions, save_patched_solution,
};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::path::Path;
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{
    Context, ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression,
    NativeExpression, PlacementPolicy, Symbols, Tag,
};
use watershed_fields::io::read_field_window;
use watershed_fields::{
    CellCentre, GhostWidth, Grid, HostMemory, LocationKind, Patch, PatchLayout, SpatialField,
    XFace, YFace, ZFace,
};
use watershed_io::dumps::{DumpedField, dump_field, dump_graph_field};
use watershed_io::rank_dumps::create_patch_group;
use watershed_operators::{Expr, FaceLocation, divergence, exp, gradient, interpolate_to_face};
use watershed_solvers::{
    BoundaryConditions, Diffusivity, PatchedTransport, TransportEquation, TransportSolver,
    TransportSolverBuilder,
};

/// Name of the ExprLib case.
pub const EXPRLIB: &str = "exprlib-scalability";
/// Name of the Wasatch case.
pub const WASATCH: &str = "wasatch-scalability";

/// The ExprLib registry entry.
pub const EXPRLIB_INFO: CaseInfo = CaseInfo {
    name: EXPRLIB,
    description: "thesis 5.2: N PDEs as a fine-grained graph (fluxes, sources, RHS, update); diffusion / independent / coupled / coupled-shared",
    documented_config: ScalabilityConfig::<ExprLibKind>::DOCUMENTED,
    prepare: prepare_exprlib,
    config_text: |o| config_text_of::<ScalabilityConfig<ExprLibKind>>(EXPRLIB, o),
};

/// The Wasatch registry entry.
pub const WASATCH_INFO: CaseInfo = CaseInfo {
    name: WASATCH,
    description: "thesis 5.3: N PDEs with coupled sources through the transport solver and its time integrator",
    documented_config: ScalabilityConfig::<WasatchKind>::DOCUMENTED,
    prepare: prepare_wasatch,
    config_text: |o| config_text_of::<ScalabilityConfig<WasatchKind>>(WASATCH, o),
};

/// Which of the two cases a configuration belongs to.
pub trait Kind: Clone + std::fmt::Debug + PartialEq + Default + Send + Sync + 'static {
    /// True for the Wasatch case.
    const WASATCH: bool;
}

/// Marks the ExprLib configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExprLibKind;
impl Kind for ExprLibKind {
    const WASATCH: bool = false;
}

/// Marks the Wasatch configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WasatchKind;
impl Kind for WasatchKind {
    const WASATCH: bool = true;
}

/// Configuration of both cases; the Wasatch one adds the integrator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, bound = "")]
pub struct ScalabilityConfig<K: Kind> {
    /// Equations.
    pub pdes: usize,
    /// Cells per side.
    pub cells: usize,
    /// One of [`VARIANTS`].
    pub variant: String,
    /// Steps of a run.
    pub steps: u64,
    /// Fixed time step.
    pub dt: f64,
    /// Fusion on or off.
    pub fusion: bool,
    /// Time integrator (Wasatch only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integrator: Option<String>,
    /// Patches along x, y, z: the transport solver's equations (Wasatch)
    /// or the hand-built graph (ExprLib, [`PatchedGraphs`]) on each patch.
    pub patches: [usize; 3],
    /// Overlap the seam exchange with interior work: each stage's with
    /// the next stage's (Wasatch), each step's with its own (ExprLib,
    /// [`PatchedGraphs::exchange_and_execute`]). The same bits either way;
    /// off by default.
    pub overlap_exchange: bool,
    #[serde(skip)]
    kind: std::marker::PhantomData<K>,
}

impl<K: Kind> Default for ScalabilityConfig<K> {
    fn default() -> Self {
        ScalabilityConfig {
            pdes: if K::WASATCH { 20 } else { 30 },
            cells: 32,
            variant: "coupled".into(),
            steps: if K::WASATCH { 50 } else { 100 },
            dt: 1e-6,
            fusion: true,
            integrator: K::WASATCH.then(|| "forward-euler".to_string()),
            patches: [1, 1, 1],
            overlap_exchange: false,
            kind: std::marker::PhantomData,
        }
    }
}

impl<K: Kind> CaseConfig for ScalabilityConfig<K> {
    const DOCUMENTED: &'static str = if K::WASATCH {
        include_str!("../../configs/wasatch-scalability.toml")
    } else {
        include_str!("../../configs/exprlib-scalability.toml")
    };

    fn check_ranges(&self) -> Option<RangeProblem> {
        let integrator = match (&self.integrator, K::WASATCH) {
            (Some(name), true) => one_of("integrator", name, &crate::setup::INTEGRATORS),
            (None, true) => Some((
                "integrator".into(),
                "(missing)".into(),
                format!("one of {:?}", crate::setup::INTEGRATORS),
            )),
            (Some(name), false) => Some((
                "integrator".into(),
                format!("\"{name}\""),
                "none: exprlib-scalability updates with its own forward-Euler node".into(),
            )),
            (None, false) => None,
        };
        in_range("pdes", self.pdes, 1, 200)
            .or_else(|| in_range("cells", self.cells, 4, 256))
            .or_else(|| one_of("variant", &self.variant, &VARIANTS))
            .or_else(|| in_range("steps", self.steps, 1, 1_000_000_000))
            .or_else(|| in_range("dt", self.dt, 1e-300, 1.0))
            .or(integrator)
    }
}

/// The variants of both cases: no source (`"diffusion"`), `exp(phi_i)`
/// (`"independent"`), `sum_j exp(phi_j)` written out in each equation's
/// source (`"coupled"`; the engine's common-subexpression elimination
/// computes it once), and the same sum as one expression every equation
/// reads (`"coupled-shared"`, the thesis' formulation). The two coupled
/// variants compute the same bits.
pub const VARIANTS: [&str; 4] = ["diffusion", "independent", "coupled", "coupled-shared"];

/// The tag of the one source of the `"coupled-shared"` variant.
pub fn shared_source() -> Tag {
    Tag::none("coupled_source")
}

/// Whether `variant` couples every equation to every other.
fn coupled(variant: &str) -> bool {
    matches!(variant, "coupled" | "coupled-shared")
}

/// phi_i at STATE_N.
pub fn phi(i: usize) -> Tag {
    Tag::new(&format!("phi{i}"), Context::StateN)
}

/// phi_i at STATE_NP1.
pub fn phi_next(i: usize) -> Tag {
    Tag::new(&format!("phi{i}"), Context::StateNp1)
}

/// The diffusivity field's tag.
pub fn gamma() -> Tag {
    Tag::none("gamma")
}

/// The diffusivity (periodic).
pub fn gamma_value([x, y, z]: [f64; 3]) -> f64 {
    1.0 + 0.1 * (2.0 * PI * x).sin() + 0.2 * (2.0 * PI * y).sin() * (2.0 * PI * z).sin()
}

/// The initial phi_i (periodic).
pub fn initial_phi(i: usize) -> impl Fn([f64; 3]) -> f64 {
    move |[x, y, z]| {
        (2.0 * PI * (i + 1) as f64 * x).sin() * (2.0 * PI * y).cos() + 0.1 * (2.0 * PI * z).sin()
    }
}

/// The source of equation `i` as a language expression of the inputs.
fn source_expression(
    variant: &str,
    i: usize,
    pdes: usize,
    field: &mut dyn FnMut(&Tag) -> Expr<'static, CellCentre>,
) -> Option<Expr<'static, CellCentre>> {
    let inputs: Vec<usize> = match variant {
        "independent" => vec![i],
        _ if coupled(variant) => (0..pdes).collect(),
        _ => return None,
    };
    inputs
        .into_iter()
        .map(|j| exp(field(&phi(j))))
        .reduce(|a, b| a + b)
}

/// The `"coupled-shared"` variant's one source, [`shared_source`]: the sum
/// of `exp(phi_j)` over the `pdes` equations, which every equation reads.
fn shared_source_expression(pdes: usize) -> LanguageExpression {
    LanguageExpression::new::<CellCentre>(shared_source(), move |s| {
        source_expression("coupled", 0, pdes, &mut |t| s.field::<CellCentre>(t))
            .unwrap_or_else(|| 0.0 * s.field::<CellCentre>(&phi(0)))
    })
}

/// Gamma on the faces of type `F`: the field interpolated, or the constant.
fn face_diffusivity<F: FaceLocation>(
    s: &mut Symbols,
    diffusivity: ExprLibDiffusivity,
) -> Expr<'static, F> {
    match diffusivity {
        ExprLibDiffusivity::Field => interpolate_to_face::<F>(s.field(&gamma())),
        ExprLibDiffusivity::Constant(value) => Expr::constant(value),
    }
}

/// The diffusivity of the ExprLib equations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExprLibDiffusivity {
    /// The periodic field [`gamma_value`], interpolated to the faces (the
    /// case's and the benchmarks' default).
    Field,
    /// One value everywhere: the flux is `-Gamma grad(phi)` and the
    /// right-hand side the 7-point Laplacian times Gamma, the equations of
    /// the Devito anchor (`benches/devito_exprlib.py`, Gamma = 0.1).
    Constant(f64),
}

/// The ExprLib factory: per equation three flux expressions, a source (in
/// the source variants), a right-hand side and a forward-Euler update
/// `phi_next = phi + dt rhs`, with the diffusivity field.
pub fn exprlib_factory(pdes: usize, variant: &str, dt: f64) -> CaseResult<Factory> {
    exprlib_factory_with(pdes, variant, dt, ExprLibDiffusivity::Field)
}

/// [`exprlib_factory`] with the diffusivity chosen.
pub fn exprlib_factory_with(
    pdes: usize,
    variant: &str,
    dt: f64,
    diffusivity: ExprLibDiffusivity,
) -> CaseResult<Factory> {
    factory_of(pdes, variant, dt, diffusivity, false)
}

/// The ExprLib factory; with `native_sources` each source is a native
/// (CPU-only) node computing the same sum of exponentials with `f64::exp`.
fn factory_of(
    pdes: usize,
    variant: &str,
    dt: f64,
    diffusivity: ExprLibDiffusivity,
    native_sources: bool,
) -> CaseResult<Factory> {
    if !VARIANTS.contains(&variant) {
        return Err(CaseError::Usage(format!(
            "the ExprLib graph has no variant \"{variant}\": use one of {VARIANTS:?}"
        )));
    }
    let mut factory = Factory::new();
    if diffusivity == ExprLibDiffusivity::Field {
        factory.placeholder(gamma(), LocationKind::CellCentre)?;
    }
    for i in 0..pdes {
        factory.placeholder(phi(i), LocationKind::CellCentre)?;
    }
    let shared = variant == "coupled-shared";
    if shared && native_sources {
        factory.register(native_exp_sum(
            &shared_source(),
            (0..pdes).map(phi).collect(),
        ))?;
    } else if shared {
        factory.register(shared_source_expression(pdes))?;
    }
    for i in 0..pdes {
        let flux = |axis: &str| Tag::none(&format!("flux_{axis}{i}"));
        let (fx, fy, fz) = (flux("x"), flux("y"), flux("z"));
        let p = phi(i);
        factory.register(LanguageExpression::new::<XFace>(fx.clone(), move |s| {
            -(face_diffusivity::<XFace>(s, diffusivity) * gradient::<XFace>(s.field(&p)))
        }))?;
        let p = phi(i);
        factory.register(LanguageExpression::new::<YFace>(fy.clone(), move |s| {
            -(face_diffusivity::<YFace>(s, diffusivity) * gradient::<YFace>(s.field(&p)))
        }))?;
        let p = phi(i);
        factory.register(LanguageExpression::new::<ZFace>(fz.clone(), move |s| {
            -(face_diffusivity::<ZFace>(s, diffusivity) * gradient::<ZFace>(s.field(&p)))
        }))?;
        let source = if shared {
            shared_source()
        } else {
            Tag::none(&format!("source{i}"))
        };
        let has_source = variant != "diffusion";
        if shared {
            // Registered once, above.
        } else if has_source && native_sources {
            let inputs: Vec<Tag> = if coupled(variant) {
                (0..pdes).map(phi).collect()
            } else {
                vec![phi(i)]
            };
            factory.register(native_exp_sum(&source, inputs))?;
        } else if has_source {
            let variant = variant.to_string();
            factory.register(LanguageExpression::new::<CellCentre>(
                source.clone(),
                move |s| {
                    source_expression(&variant, i, pdes, &mut |t| s.field::<CellCentre>(t))
                        .unwrap_or_else(|| 0.0 * s.field::<CellCentre>(&phi(i)))
                },
            ))?;
        }
        let rhs = Tag::none(&format!("rhs{i}"));
        let src = source.clone();
        factory.register(LanguageExpression::new::<CellCentre>(
            rhs.clone(),
            move |s| {
                let div = -(divergence::<XFace>(s.field(&fx))
                    + divergence::<YFace>(s.field(&fy))
                    + divergence::<ZFace>(s.field(&fz)));
                if has_source {
                    div + s.field::<CellCentre>(&src)
                } else {
                    div
                }
            },
        ))?;
        let p = phi(i);
        factory.register(LanguageExpression::new::<CellCentre>(
            phi_next(i),
            move |s| {
                let current: Expr<'static, CellCentre> = s.field(&p);
                current + dt * s.field::<CellCentre>(&rhs)
            },
        ))?;
    }
    Ok(factory)
}

/// Builds the ExprLib graph on `patch` with gamma and every phi_i set.
pub fn exprlib_graph(
    patch: &Patch,
    pdes: usize,
    variant: &str,
    dt: f64,
    fusion: bool,
) -> CaseResult<ExpressionGraph> {
    exprlib_graph_placed(patch, pdes, variant, dt, fusion, PlacementPolicy::Cpu)
}

/// [`exprlib_graph`] with its nodes placed by `placement`.
pub fn exprlib_graph_placed(
    patch: &Patch,
    pdes: usize,
    variant: &str,
    dt: f64,
    fusion: bool,
    placement: PlacementPolicy,
) -> CaseResult<ExpressionGraph> {
    let factory = exprlib_factory(pdes, variant, dt)?;
    exprlib_graph_from(factory, patch, pdes, fusion, placement)
}

/// [`exprlib_graph_placed`] for stepping in time: each phi_next also gets
/// its periodic ghosts (a language modifier fused into its update), so
/// that [`ExpressionGraph::rotate_fields`] can make it the next phi by a
/// pointer swap, with no copy and, on a GPU, no trip through the host.
pub fn exprlib_stepping_graph(
    patch: &Patch,
    pdes: usize,
    variant: &str,
    dt: f64,
    fusion: bool,
    placement: PlacementPolicy,
) -> CaseResult<ExpressionGraph> {
    let factory = exprlib_factory(pdes, variant, dt)?;
    exprlib_graph_from(
        stepping_factory(factory, pdes)?,
        patch,
        pdes,
        fusion,
        placement,
    )
}

/// The fused CPU ExprLib graph with the diffusivity chosen: for stepping
/// ([`exprlib_stepping_graph`]) when `stepping`, else as [`exprlib_graph`].
pub fn exprlib_graph_with(
    patch: &Patch,
    pdes: usize,
    variant: &str,
    dt: f64,
    diffusivity: ExprLibDiffusivity,
    stepping: bool,
) -> CaseResult<ExpressionGraph> {
    let mut factory = exprlib_factory_with(pdes, variant, dt, diffusivity)?;
    if stepping {
        factory = stepping_factory(factory, pdes)?;
    }
    exprlib_graph_from(factory, patch, pdes, true, PlacementPolicy::Cpu)
}

/// A native (CPU-only) node writing the sum of `exp` of `inputs` into
/// `output` at every allocated point.
fn native_exp_sum(output: &Tag, inputs: Vec<Tag>) -> NativeExpression {
    let target = output.clone();
    let read = inputs.clone();
    NativeExpression::new(
        &output.name,
        vec![(output.clone(), LocationKind::CellCentre)],
        inputs,
        move |context| {
            let mut sum: Vec<f64> = Vec::new();
            for tag in &read {
                let values = context.input::<CellCentre>(tag)?.values()?;
                if sum.is_empty() {
                    sum = values.iter().map(|v| v.exp()).collect();
                } else {
                    sum.iter_mut().zip(values).for_each(|(s, v)| *s += v.exp());
                }
            }
            let written = context.output::<CellCentre>(&target)?.values_mut()?;
            written.copy_from_slice(&sum);
            Ok(())
        },
    )
}

/// The thesis' heterogeneous ExprLib graph (section 5.2's CPU-GPU runs):
/// `variant` ("independent" or "coupled") with every source a native,
/// CPU-only node (`f64::exp`), fused when `fusion` and placed by
/// `placement`; `host_memory` as [`GraphOptions::host_memory`] (pinned or
/// pageable host memory for the fields that cross).
///
/// Under [`PlacementPolicy::Heterogeneous`] the fine-grained graph
/// (`fusion` false) keeps each source on the CPU and puts the rest on the
/// GPU, copying every source over once per execution; fused, each
/// equation's update is one node whose only producer is CPU-only, so the
/// thesis' rule keeps it on the CPU too.
pub fn exprlib_heterogeneous_graph(
    patch: &Patch,
    pdes: usize,
    variant: &str,
    dt: f64,
    fusion: bool,
    placement: PlacementPolicy,
    host_memory: Option<HostMemory>,
) -> CaseResult<ExpressionGraph> {
    if variant == "diffusion" {
        return Err(CaseError::Usage(
            "the heterogeneous ExprLib graph needs sources: variant \"independent\", \"coupled\" or \"coupled-shared\", not \"diffusion\"".into(),
        ));
    }
    let factory = factory_of(pdes, variant, dt, ExprLibDiffusivity::Field, true)?;
    let options = GraphOptions {
        placement,
        host_memory,
        ..Default::default()
    };
    exprlib_graph_from_options(factory, patch, pdes, fusion, options)
}

/// `factory` with the periodic ghosts of every phi_next attached.
fn stepping_factory(mut factory: Factory, pdes: usize) -> CaseResult<Factory> {
    for i in 0..pdes {
        // No condition on any side: the grid's periodic axes are filled.
        let ghosts = BoundaryConditions::new().modifier::<CellCentre>(&phi_next(i));
        factory.attach_modifier(phi_next(i), ghosts)?;
    }
    Ok(factory)
}

fn exprlib_graph_from(
    factory: Factory,
    patch: &Patch,
    pdes: usize,
    fusion: bool,
    placement: PlacementPolicy,
) -> CaseResult<ExpressionGraph> {
    let options = GraphOptions {
        placement,
        ..Default::default()
    };
    exprlib_graph_from_options(factory, patch, pdes, fusion, options)
}

/// The ExprLib graph of `factory` built with `options` (its roots,
/// persistent fields and fusion set here), gamma and every phi_i filled.
fn exprlib_graph_from_options(
    factory: Factory,
    patch: &Patch,
    pdes: usize,
    fusion: bool,
    options: GraphOptions,
) -> CaseResult<ExpressionGraph> {
    let roots: Vec<Tag> = (0..pdes).map(phi_next).collect();
    let options = GraphOptions {
        no_fusion: !fusion,
        persistent: roots.clone(),
        ..options
    };
    let graph = ExpressionGraph::build(&factory, &roots, patch, &options)?;
    if graph.field_info(&gamma()).is_some() {
        graph.set_field::<CellCentre>(&gamma(), gamma_value)?;
    }
    for i in 0..pdes {
        graph.set_field::<CellCentre>(&phi(i), initial_phi(i))?;
    }
    Ok(graph)
}

/// One forward-Euler step of every equation, written as plain loops over
/// the periodic grid: the reference the cases' checks compare with.
/// `phis` and `gamma` are interior values (x fastest).
pub fn reference_step(
    n: usize,
    h: f64,
    gamma: &[f64],
    phis: &[Vec<f64>],
    variant: &str,
    dt: f64,
) -> Vec<Vec<f64>> {
    let at = |i: isize, j: isize, k: isize| {
        let w = |v: isize| v.rem_euclid(n as isize) as usize;
        w(i) + n * (w(j) + n * w(k))
    };
    let sources: Vec<f64> = if coupled(variant) {
        (0..n * n * n)
            .map(|c| phis.iter().map(|p| p[c].exp()).sum())
            .collect()
    } else {
        Vec::new()
    };
    phis.iter()
        .map(|p| {
            let mut next = vec![0.0; n * n * n];
            for k in 0..n as isize {
                for j in 0..n as isize {
                    for i in 0..n as isize {
                        let c = at(i, j, k);
                        let mut divergence = 0.0;
                        for (di, dj, dk) in [(1, 0, 0), (0, 1, 0), (0, 0, 1)] {
                            let plus = at(i + di, j + dj, k + dk);
                            let minus = at(i - di, j - dj, k - dk);
                            let flux_plus = -0.5 * (gamma[c] + gamma[plus]) * (p[plus] - p[c]) / h;
                            let flux_minus =
                                -0.5 * (gamma[minus] + gamma[c]) * (p[c] - p[minus]) / h;
                            divergence += (flux_plus - flux_minus) / h;
                        }
                        let source = match variant {
                            "independent" => p[c].exp(),
                            _ if coupled(variant) => sources[c],
                            _ => 0.0,
                        };
                        next[c] = p[c] + dt * (-divergence + source);
                    }
                }
            }
            next
        })
        .collect()
}

/// Interior values of a cell field, x fastest.
fn interior(field: &watershed_fields::SpatialField<CellCentre>) -> CaseResult<Vec<f64>> {
    let layout = field.layout();
    let values = field.values()?;
    Ok(layout
        .interior()
        .iter()
        .map(|i| values[layout.linear_index(i)])
        .collect())
}

fn relative_difference(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let mut largest: f64 = 0.0;
    let mut difference: f64 = 0.0;
    for (x, y) in a.iter().zip(b) {
        for (u, v) in x.iter().zip(y) {
            largest = largest.max(v.abs());
            difference = difference.max((u - v).abs());
            if !u.is_finite() {
                difference = f64::INFINITY;
            }
        }
    }
    difference / largest.max(f64::MIN_POSITIVE)
}

const CHECK_TOLERANCE: f64 = 1e-12;

/// The running ExprLib test: the hand-built graph on each patch of its
/// layout this rank owns, the solutions' seams exchanged after each step.
pub struct ExprLib {
    config: ScalabilityConfig<ExprLibKind>,
    grid: Grid,
    graphs: PatchedGraphs,
    /// Each equation's `[phi, phi_next]`, rotated after every step.
    levels: Vec<[Tag; 2]>,
    /// Every `phi`, exchanged together after every step (or, with
    /// `overlap_exchange`, at the start of the next one, during its
    /// interior work).
    phis: Vec<Tag>,
    /// With `overlap_exchange`: the phis' seam ghosts are not yet
    /// exchanged (the next step exchanges them; [`ExprLib::settle`]
    /// before anything else reads them).
    seams_pending: std::cell::Cell<bool>,
    mode: ExecutionMode,
    steps: u64,
}

fn prepare_exprlib(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<ScalabilityConfig<ExprLibKind>>(EXPRLIB, options)?;
    let c = loaded.config.clone();
    let grid = Grid::new([c.cells; 3], [1.0; 3], [0.0; 3])?.with_periodic([true; 3]);
    let layout = crate::setup::patch_layout(&grid, c.patches, GhostWidth::uniform(1), options)?;
    // Every patch's phi and gamma are set from their functions at global
    // coordinates, ghosts included, as one graph over the whole domain sets
    // them: the first step reads the same values.
    let graphs = PatchedGraphs::build(layout, options.rank_link(), |patch| {
        exprlib_stepping_graph(
            patch,
            c.pdes,
            &c.variant,
            c.dt,
            c.fusion,
            options.placement.clone(),
        )
    })?;
    Ok(Prepared {
        config_text: crate::config::to_text(EXPRLIB, &loaded)?,
        stop: Stop::Steps(c.steps),
        simulation: Box::new(ExprLib {
            levels: (0..c.pdes).map(|i| [phi(i), phi_next(i)]).collect(),
            phis: (0..c.pdes).map(phi).collect(),
            seams_pending: std::cell::Cell::new(false),
            config: c,
            grid,
            graphs,
            mode: case_execution_mode(options),
            steps: 0,
        }),
    })
}

impl ExprLib {
    /// Makes each phi_next (its periodic ghosts filled by its modifier
    /// where the patch spans an axis) the next phi, a pointer swap
    /// wherever the fields live, then fills the seams from the other
    /// patches.
    fn advance_state(&self) -> CaseResult<()> {
        for level in &self.levels {
            self.graphs.rotate_fields(level)?;
        }
        self.graphs.exchange(&self.phis)?;
        Ok(())
    }

    /// Exchanges the phis' seams an overlapped step left for the next one,
    /// so that every allocated point holds one patch's value (collective).
    fn settle(&self) -> CaseResult<()> {
        if self.seams_pending.get() {
            self.graphs.exchange(&self.phis)?;
            self.seams_pending.set(false);
        }
        Ok(())
    }

    /// The interiors of `tag` over the whole domain (collective).
    fn whole_interior(&self, tag: &Tag) -> CaseResult<Vec<f64>> {
        interior(&self.graphs.whole_field(tag)?)
    }
}

impl Simulation for ExprLib {
    fn case(&self) -> &str {
        EXPRLIB
    }
    fn grid(&self) -> &Grid {
        &self.grid
    }
    fn time(&self) -> f64 {
        self.steps as f64 * self.config.dt
    }
    fn steps(&self) -> u64 {
        self.steps
    }
    fn cell_updates_per_step(&self) -> u64 {
        (self.grid.total_cells() * self.config.pdes) as u64
    }
    fn next_dt(&self) -> CaseResult<f64> {
        Ok(self.config.dt)
    }
    fn step(&mut self, _dt: f64) -> CaseResult<()> {
        if self.config.overlap_exchange {
            // The seams the last step left travel while the interior is
            // computed; this step's are left for the next. (The first
            // step, and the first after a restart, read the ghosts the
            // state was set or loaded with, as a run without overlap does.)
            if self.seams_pending.get() {
                self.graphs.exchange_and_execute(&self.phis, self.mode)?;
            } else {
                self.graphs.execute(self.mode)?;
            }
            for level in &self.levels {
                self.graphs.rotate_fields(level)?;
            }
            self.seams_pending.set(true);
        } else {
            self.graphs.execute(self.mode)?;
            self.advance_state()?;
        }
        self.steps += 1;
        Ok(())
    }
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        let mut written = Vec::new();
        for i in 0..self.config.pdes.min(4) {
            let name = format!("phi{i}");
            written.push(match self.graphs.gather_field::<CellCentre>(&phi(i))? {
                Some(whole) => dump_field(group, &name, &whole)?,
                // A follower rank: rank 0 writes the gathered field.
                None => DumpedField {
                    name,
                    location: LocationKind::CellCentre,
                    extent: self.grid.cells(),
                    components: 1,
                    derived: None,
                },
            });
        }
        Ok(written)
    }
    fn dump_own_patches(&self, root: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        let mut fields = Vec::new();
        for (index, graph) in self.graphs.owned().zip(self.graphs.graphs()) {
            let patch = self.graphs.layout().patch(index)?;
            let group = create_patch_group(root, index, patch.offset(), patch.cells())?;
            fields = (0..self.config.pdes.min(4))
                .map(|i| dump_graph_field::<CellCentre>(graph, &phi(i), &group, &format!("phi{i}")))
                .collect::<Result<_, _>>()?;
        }
        Ok(fields)
    }
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        self.settle()?;
        for i in 0..self.config.pdes {
            if let Some(whole) = self.graphs.gather_field::<CellCentre>(&phi(i))? {
                save_field(group, &format!("phi{i}"), &whole)?;
            }
        }
        Ok(())
    }
    fn load_state(&mut self, group: &hdf5::Group, _time: f64, step: u64) -> CaseResult<()> {
        for i in 0..self.config.pdes {
            let name = format!("phi{i}");
            for graph in self.graphs.graphs() {
                graph.with_field_mut::<CellCentre, _>(&phi(i), |field| -> CaseResult<()> {
                    let part: SpatialField<CellCentre> =
                        read_field_window(group, &name, field.layout().patch())?;
                    field.values_mut()?.copy_from_slice(part.values()?);
                    Ok(())
                })??;
            }
        }
        // Loaded with their ghosts, as written once settled.
        self.seams_pending.set(false);
        self.steps = step;
        Ok(())
    }
    fn save_own_patches(&self, root: &hdf5::Group) -> CaseResult<()> {
        self.settle()?;
        for (index, graph) in self.graphs.owned().zip(self.graphs.graphs()) {
            let patch = self.graphs.layout().patch(index)?;
            let group = create_patch_group(root, index, patch.offset(), patch.cells())?;
            for i in 0..self.config.pdes {
                save_graph_field::<CellCentre>(graph, &phi(i), &group, &format!("phi{i}"))?;
            }
        }
        Ok(())
    }
    fn load_own_patches(
        &mut self,
        patches: &RankCheckpoint,
        _shared: &hdf5::Group,
        _time: f64,
        step: u64,
    ) -> CaseResult<()> {
        patches.check_patch_count(self.graphs.layout().len())?;
        for (index, graph) in self.graphs.owned().zip(self.graphs.graphs()) {
            let (_file, group) = patches.patch(index)?;
            for i in 0..self.config.pdes {
                load_graph_field::<CellCentre>(graph, &phi(i), &group, &format!("phi{i}"))?;
            }
        }
        self.seams_pending.set(false);
        self.steps = step;
        Ok(())
    }
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)> {
        let one = self.graphs.layout().len() == 1;
        self.graphs
            .owned()
            .zip(self.graphs.graphs())
            .map(|(index, graph)| {
                let name = if one {
                    "exprlib".to_string()
                } else {
                    format!("exprlib patch {index}")
                };
                (name, graph)
            })
            .collect()
    }
    fn patch_layout(&self) -> Option<&PatchLayout> {
        Some(self.graphs.layout())
    }
    fn exchange_time(&self) -> Option<std::time::Duration> {
        (self.graphs.layout().len() > 1).then(|| self.graphs.exchange_time())
    }
    fn interior_during_exchanges(&self) -> Option<std::time::Duration> {
        (self.config.overlap_exchange && self.graphs.layout().len() > 1)
            .then(|| self.graphs.interior_during_exchanges())
    }
    fn finish(&mut self, _output: Option<&Path>) -> CaseResult<CaseCheck> {
        self.settle()?;
        let c = &self.config;
        let phis: Vec<Vec<f64>> = (0..c.pdes)
            .map(|i| self.whole_interior(&phi(i)))
            .collect::<CaseResult<_>>()?;
        let gamma_values = self.whole_interior(&gamma())?;
        let expected = reference_step(
            c.cells,
            1.0 / c.cells as f64,
            &gamma_values,
            &phis,
            &c.variant,
            c.dt,
        );
        self.graphs.execute(self.mode)?;
        let computed: Vec<Vec<f64>> = (0..c.pdes)
            .map(|i| self.whole_interior(&phi_next(i)))
            .collect::<CaseResult<_>>()?;
        let difference = relative_difference(&computed, &expected);
        Ok(CaseCheck {
            name: format!("one step of the {} graph vs a hand-written loop", c.variant),
            passed: difference <= CHECK_TOLERANCE,
            figure: format!(
                "max relative difference {difference:.2e} (allowed {CHECK_TOLERANCE:e})"
            ),
            files: Vec::new(),
        })
    }
}

/// The running Wasatch test.
pub struct Wasatch {
    config: ScalabilityConfig<WasatchKind>,
    grid: Grid,
    transport: PatchedTransport,
    threads: usize,
    /// Where the solver's nodes run (the probe of the check runs there too).
    placement: PlacementPolicy,
}

impl Wasatch {
    /// The solutions a dump shows: the first four equations' (`phi0` ...).
    fn shown(&self) -> Vec<String> {
        (0..self.config.pdes.min(4))
            .map(|i| format!("phi{i}"))
            .collect()
    }

    /// Every equation's solution (`phi0` ...): the state.
    fn equations(&self) -> Vec<String> {
        (0..self.config.pdes).map(|i| format!("phi{i}")).collect()
    }
}

/// A [`TransportSolverBuilder`] with the ExprLib equations on `patch`:
/// `pdes` equations `phi0`, `phi1`, ... with `diffusivity` (the field's
/// placeholder [`gamma`] registered when it is
/// [`ExprLibDiffusivity::Field`]) and the sources of `variant` (one of
/// [`VARIANTS`]); the caller picks the integrator and the mode.
///
/// ```
/// use watershed_cases::cases::scalability::{ExprLibDiffusivity, exprlib_solver_builder};
/// use watershed_fields::Grid;
/// use watershed_solvers::TimeIntegrator;
/// let grid = Grid::new([8; 3], [1.0; 3], [0.0; 3]).unwrap().with_periodic([true; 3]);
/// let solver = exprlib_solver_builder(&grid.whole_domain(1), 3, "coupled-shared", ExprLibDiffusivity::Constant(0.1))
///     .unwrap()
///     .integrator(TimeIntegrator::ForwardEuler)
///     .build()
///     .unwrap();
/// assert_eq!(solver.equation_names(), ["phi0", "phi1", "phi2"]);
/// assert!(exprlib_solver_builder(&grid.whole_domain(1), 3, "shared", ExprLibDiffusivity::Constant(0.1)).is_err());
/// ```
pub fn exprlib_solver_builder(
    patch: &Patch,
    pdes: usize,
    variant: &str,
    diffusivity: ExprLibDiffusivity,
) -> CaseResult<TransportSolverBuilder> {
    if !VARIANTS.contains(&variant) {
        return Err(CaseError::Usage(format!(
            "the ExprLib equations have no variant \"{variant}\": use one of {VARIANTS:?}"
        )));
    }
    let solution = |j: usize| TransportEquation::new(&format!("phi{j}")).solution_tag();
    let mut builder = TransportSolverBuilder::new(patch);
    let shared = variant == "coupled-shared";
    if shared {
        builder
            .factory_mut()
            .register(shared_source_expression(pdes))?;
    }
    for i in 0..pdes {
        let mut equation =
            TransportEquation::new(&format!("phi{i}")).diffusion(match diffusivity {
                ExprLibDiffusivity::Field => Diffusivity::Field(gamma()),
                ExprLibDiffusivity::Constant(value) => Diffusivity::Constant(value),
            });
        if shared {
            equation = equation.source(shared_source());
        } else if variant != "diffusion" {
            let variant = variant.to_string();
            equation = equation.source_expression(move |s| {
                source_expression(&variant, i, pdes, &mut |t| s.field::<CellCentre>(t))
                    .unwrap_or_else(|| 0.0 * s.field::<CellCentre>(&solution(i)))
            });
        }
        builder = builder.equation(equation);
    }
    if diffusivity == ExprLibDiffusivity::Field {
        builder
            .factory_mut()
            .placeholder(gamma(), LocationKind::CellCentre)?;
    }
    Ok(builder)
}

/// The Wasatch test's solver on `patch`, its diffusivity set (the
/// initial values are the caller's: set over every patch, then exchanged).
fn wasatch_solver(
    c: &ScalabilityConfig<WasatchKind>,
    patch: &Patch,
    mode: ExecutionMode,
    integrator_name: &str,
    placement: PlacementPolicy,
) -> CaseResult<TransportSolver> {
    let builder = exprlib_solver_builder(patch, c.pdes, &c.variant, ExprLibDiffusivity::Field)?;
    let solver = builder
        .integrator(integrator(integrator_name))
        .mode(mode)
        .graph_options(GraphOptions {
            no_fusion: !c.fusion,
            placement,
            ..Default::default()
        })
        .build()?;
    solver
        .graph()
        .set_field::<CellCentre>(&gamma(), gamma_value)?;
    Ok(solver)
}

fn prepare_wasatch(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<ScalabilityConfig<WasatchKind>>(WASATCH, options)?;
    let c = loaded.config.clone();
    let grid = Grid::new([c.cells; 3], [1.0; 3], [0.0; 3])?.with_periodic([true; 3]);
    let layout = crate::setup::patch_layout(&grid, c.patches, GhostWidth::uniform(1), options)?;
    let mut failure = None;
    let built = PatchedTransport::build(layout, options.rank_link(), |patch| {
        wasatch_solver(
            &c,
            patch,
            case_execution_mode(options),
            c.integrator.as_deref().unwrap_or("forward-euler"),
            options.placement.clone(),
        )
        .map_err(|e| {
            let reason = e.to_string();
            failure = Some(e);
            watershed_solvers::SolverError::Setup {
                equation: "(wasatch-scalability)".into(),
                reason,
            }
        })
    });
    if let Some(error) = failure {
        return Err(error);
    }
    let mut transport = built?;
    transport.set_overlap(c.overlap_exchange)?;
    for i in 0..c.pdes {
        transport.set_initial_condition(&format!("phi{i}"), initial_phi(i))?;
    }
    Ok(Prepared {
        config_text: crate::config::to_text(WASATCH, &loaded)?,
        stop: Stop::Steps(c.steps),
        simulation: Box::new(Wasatch {
            config: c,
            grid,
            transport,
            threads: options.threads,
            placement: options.placement.clone(),
        }),
    })
}

impl Simulation for Wasatch {
    fn case(&self) -> &str {
        WASATCH
    }
    fn grid(&self) -> &Grid {
        &self.grid
    }
    fn time(&self) -> f64 {
        self.transport.time()
    }
    fn steps(&self) -> u64 {
        self.transport.steps()
    }
    fn cell_updates_per_step(&self) -> u64 {
        (self.grid.total_cells() * self.config.pdes) as u64
    }
    fn next_dt(&self) -> CaseResult<f64> {
        Ok(self.config.dt)
    }
    fn step(&mut self, dt: f64) -> CaseResult<()> {
        Ok(self.transport.step(dt)?)
    }
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        self.shown()
            .iter()
            .map(|name| dump_patched_solution(&self.transport, name, group, name))
            .collect()
    }
    fn dump_own_patches(&self, root: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        let shown = self.shown();
        let names: Vec<&str> = shown.iter().map(String::as_str).collect();
        dump_own_patch_solutions(&self.transport, &names, root)
    }
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        for i in 0..self.config.pdes {
            save_patched_solution(&self.transport, &format!("phi{i}"), group)?;
        }
        Ok(())
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        self.transport.set_clock(time, step)?;
        for i in 0..self.config.pdes {
            load_patched_solution(&self.transport, &format!("phi{i}"), group)?;
        }
        Ok(())
    }
    fn save_own_patches(&self, root: &hdf5::Group) -> CaseResult<()> {
        let names = self.equations();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        save_own_patch_solutions(&self.transport, &names, root)
    }
    fn load_own_patches(
        &mut self,
        patches: &RankCheckpoint,
        _shared: &hdf5::Group,
        time: f64,
        step: u64,
    ) -> CaseResult<()> {
        self.transport.set_clock(time, step)?;
        let names = self.equations();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        load_own_patch_solutions(&self.transport, &names, patches)
    }
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)> {
        patch_graphs("wasatch", &self.transport)
    }
    fn patched(&self) -> Option<&PatchedTransport> {
        Some(&self.transport)
    }
    fn finish(&mut self, _output: Option<&Path>) -> CaseResult<CaseCheck> {
        // A forward-Euler copy of the solver, started from the current state,
        // takes one step; the reference loop takes the same step.
        let c = &self.config;
        let mut probe = wasatch_solver(
            c,
            &self.grid.whole_domain(1),
            crate::setup::execution_mode(self.threads),
            "forward-euler",
            self.placement.clone(),
        )?;
        let mut phis = Vec::new();
        for i in 0..c.pdes {
            let name = format!("phi{i}");
            let values = interior(&self.transport.whole_solution(&name)?)?;
            probe.with_solution_mut(&name, |field| -> CaseResult<()> {
                let layout = field.layout().clone();
                let out = field.values_mut()?;
                for (k, index) in layout.interior().iter().enumerate() {
                    out[layout.linear_index(index)] = values[k];
                }
                Ok(())
            })??;
            phis.push(values);
        }
        probe.set_clock(self.transport.time(), self.transport.steps())?;
        let gamma_values = probe
            .graph()
            .with_field::<CellCentre, _>(&gamma(), interior)??;
        let expected = reference_step(
            c.cells,
            1.0 / c.cells as f64,
            &gamma_values,
            &phis,
            &c.variant,
            c.dt,
        );
        probe.step(c.dt)?;
        let computed: Vec<Vec<f64>> = (0..c.pdes)
            .map(|i| probe.with_solution(&format!("phi{i}"), interior)?)
            .collect::<CaseResult<_>>()?;
        let difference = relative_difference(&computed, &expected);
        Ok(CaseCheck {
            name: format!(
                "one forward-Euler step of the {} transport graph vs a hand-written loop",
                c.variant
            ),
            passed: difference <= CHECK_TOLERANCE,
            figure: format!(
                "max relative difference {difference:.2e} (allowed {CHECK_TOLERANCE:e})"
            ),
            files: Vec::new(),
        })
    }
}
