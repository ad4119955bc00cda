//! `advection`: a scalar carried by a rotating velocity with the central,
//! upwind or limited scheme; bounds and mass are reported and checked.

use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::checkpoint::RankCheckpoint;
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, Simulation, Stop};
use crate::error::CaseResult;
use crate::setup::config_text_of;
use crate::setup::{case_execution_mode, integrator, solver_graph_options};
use crate::solver_state::{
    dump_own_patch_solutions, dump_patched_solution, load_own_patch_solutions,
    load_patched_solution, patch_graphs, save_own_patch_solutions, save_patched_solution,
};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::path::Path;
use watershed_exprgraph::{ExpressionGraph, Tag};
use watershed_fields::{GhostWidth, Grid, LocationKind, Patch, XFace, YFace};
use watershed_io::dumps::DumpedField;
use watershed_operators::Limiter;
use watershed_solvers::{
    ConvectiveScheme, PatchedTransport, TransportEquation, TransportSolver, TransportSolverBuilder,
};

/// The case's name.
pub const NAME: &str = "advection";

/// The registry entry.
pub const INFO: CaseInfo = CaseInfo {
    name: NAME,
    description: "cosine bell in a rotating flow, central / upwind / limited schemes; bounds and mass",
    documented_config: AdvectionConfig::DOCUMENTED,
    prepare,
    config_text: |o| config_text_of::<AdvectionConfig>(NAME, o),
};

/// Configuration (see `cases/configs/advection.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdvectionConfig {
    /// Cells per side.
    pub cells: usize,
    /// Convective scheme.
    pub scheme: String,
    /// Limiter of the limited scheme.
    pub limiter: String,
    /// End time.
    pub end_time: f64,
    /// Courant number.
    pub cfl: f64,
    /// Time integrator.
    pub integrator: String,
    /// Largest allowed relative mass change.
    pub mass_tolerance: f64,
    /// Patches along x, y, z: the grid decomposed into equal patches (each
    /// count dividing `cells`), spread over the ranks of the run; the
    /// layout, not the rank count, fixes the bits.
    pub patches: [usize; 3],
    /// Overlap each stage's seam exchange with the next stage's interior
    /// work (the same bits either way; off by default).
    pub overlap_exchange: bool,
}

impl Default for AdvectionConfig {
    fn default() -> Self {
        AdvectionConfig {
            cells: 64,
            scheme: "limited".into(),
            limiter: "van-leer".into(),
            end_time: 1.0,
            cfl: 0.4,
            integrator: "ssp-rk3".into(),
            mass_tolerance: 1e-10,
            patches: [1, 1, 1],
            overlap_exchange: false,
        }
    }
}

impl CaseConfig for AdvectionConfig {
    const DOCUMENTED: &'static str = include_str!("../../configs/advection.toml");

    fn check_ranges(&self) -> Option<RangeProblem> {
        in_range("cells", self.cells, 8, 2048)
            .or_else(|| one_of("scheme", &self.scheme, &["central", "upwind", "limited"]))
            .or_else(|| {
                one_of(
                    "limiter",
                    &self.limiter,
                    &["minmod", "van-leer", "superbee"],
                )
            })
            .or_else(|| in_range("end_time", self.end_time, 1e-12, 1e6))
            .or_else(|| in_range("cfl", self.cfl, 1e-6, 1.0))
            .or_else(|| one_of("integrator", &self.integrator, &crate::setup::INTEGRATORS))
            .or_else(|| in_range("mass_tolerance", self.mass_tolerance, 1e-16, 1.0))
            .or_else(|| {
                (self.patches != [0, 0, 0])
                    .then(|| in_range("patches[2]", self.patches[2], 1, 1))
                    .flatten()
            })
    }
}

/// The scheme a configuration names.
pub fn scheme(name: &str, limiter: &str) -> ConvectiveScheme {
    match name {
        "central" => ConvectiveScheme::Central,
        "upwind" => ConvectiveScheme::Upwind,
        _ => ConvectiveScheme::Limited(match limiter {
            "minmod" => Limiter::Minmod,
            "superbee" => Limiter::Superbee,
            _ => Limiter::VanLeer,
        }),
    }
}

/// The cosine bell.
pub fn bell([x, y, _]: [f64; 3]) -> f64 {
    let r = ((x - 0.5).powi(2) + (y - 0.75).powi(2)).sqrt();
    if r < 0.15 {
        0.5 * (1.0 + (PI * r / 0.15).cos())
    } else {
        0.0
    }
}

/// Interior minimum, maximum and sum of a cell field times the cell area.
pub fn bounds_and_mass(solver: &TransportSolver, equation: &str) -> CaseResult<(f64, f64, f64)> {
    let area = {
        let s = solver.graph().patch().grid().spacing();
        s[0] * s[1] * s[2]
    };
    solver.with_solution(equation, |field| -> CaseResult<(f64, f64, f64)> {
        let layout = field.layout();
        let values = field.values()?;
        let (mut lo, mut hi, mut sum) = (f64::INFINITY, f64::NEG_INFINITY, 0.0);
        for index in layout.interior() {
            let v = values[layout.linear_index(index)];
            lo = lo.min(v);
            hi = hi.max(v);
            sum += v;
        }
        Ok((lo, hi, sum * area))
    })?
}

/// Interior minimum, maximum and mass of `equation` over every patch:
/// the bounds of every patch's, the mass summed in patch order.
pub fn patched_bounds_and_mass(
    transport: &PatchedTransport,
    equation: &str,
) -> CaseResult<(f64, f64, f64)> {
    let mut failure = None;
    let parts = transport.over_patch_interiors(3, |_, solver| {
        Ok(match bounds_and_mass(solver, equation) {
            Ok((lo, hi, mass)) => vec![lo, hi, mass],
            Err(error) => {
                failure = Some(error);
                vec![f64::NAN; 3]
            }
        })
    })?;
    if let Some(error) = failure {
        return Err(error);
    }
    Ok(parts.iter().fold(
        (f64::INFINITY, f64::NEG_INFINITY, 0.0),
        |(lo, hi, mass), p| (lo.min(p[0]), hi.max(p[1]), mass + p[2]),
    ))
}

/// The running case.
pub struct Advection {
    config: AdvectionConfig,
    grid: Grid,
    transport: PatchedTransport,
    initial_mass: f64,
}

/// The case's solver on `patch` of the grid, its velocity set.
fn solver_on(
    patch: &Patch,
    config: &AdvectionConfig,
    options: &CaseOptions,
) -> watershed_solvers::SolverResult<TransportSolver> {
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let mut builder = TransportSolverBuilder::new(patch).equation(
        TransportEquation::new("c")
            .convection(velocity.clone(), scheme(&config.scheme, &config.limiter)),
    );
    builder
        .factory_mut()
        .placeholder(velocity[0].clone(), LocationKind::XFace)?;
    builder
        .factory_mut()
        .placeholder(velocity[1].clone(), LocationKind::YFace)?;
    let solver = builder
        .integrator(integrator(&config.integrator))
        .mode(case_execution_mode(options))
        .graph_options(solver_graph_options(options))
        .build()?;
    solver
        .graph()
        .set_field::<XFace>(&velocity[0], |[_, y, _]| -2.0 * PI * (y - 0.5))?;
    solver
        .graph()
        .set_field::<YFace>(&velocity[1], |[x, _, _]| 2.0 * PI * (x - 0.5))?;
    Ok(solver)
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<AdvectionConfig>(NAME, options)?;
    let config = loaded.config.clone();
    let n = config.cells;
    let grid = Grid::new([n, n, 1], [1.0; 3], [0.0; 3])?.with_periodic([true, true, false]);
    let layout =
        crate::setup::patch_layout(&grid, config.patches, GhostWidth::uniform(2), options)?;
    let mut transport = PatchedTransport::build(layout, options.rank_link(), |patch| {
        solver_on(patch, &config, options)
    })?;
    transport.set_overlap(config.overlap_exchange)?;
    transport.set_initial_condition("c", bell)?;
    let (_, _, initial_mass) = patched_bounds_and_mass(&transport, "c")?;
    Ok(Prepared {
        config_text: crate::config::to_text(NAME, &loaded)?,
        stop: Stop::EndTime(config.end_time),
        simulation: Box::new(Advection {
            config,
            grid,
            transport,
            initial_mass,
        }),
    })
}

impl Simulation for Advection {
    fn case(&self) -> &str {
        NAME
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
        self.grid.total_cells() as u64
    }
    fn next_dt(&self) -> CaseResult<f64> {
        Ok(self.transport.stable_time_step(self.config.cfl, 0.5)?)
    }
    fn step(&mut self, dt: f64) -> CaseResult<()> {
        Ok(self.transport.step(dt)?)
    }
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        Ok(vec![dump_patched_solution(
            &self.transport,
            "c",
            group,
            "c",
        )?])
    }
    fn dump_own_patches(&self, root: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        dump_own_patch_solutions(&self.transport, &["c"], root)
    }
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        save_patched_solution(&self.transport, "c", group)?;
        crate::checkpoint::save_series(group, "initial_mass", &[self.initial_mass])
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        self.transport.set_clock(time, step)?;
        load_patched_solution(&self.transport, "c", group)?;
        if let Some(&mass) = crate::checkpoint::load_series(group, "initial_mass")?.first() {
            self.initial_mass = mass;
        }
        Ok(())
    }
    fn save_own_patches(&self, root: &hdf5::Group) -> CaseResult<()> {
        save_own_patch_solutions(&self.transport, &["c"], root)
    }
    fn save_shared_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        crate::checkpoint::save_series(group, "initial_mass", &[self.initial_mass])
    }
    fn load_own_patches(
        &mut self,
        patches: &RankCheckpoint,
        shared: &hdf5::Group,
        time: f64,
        step: u64,
    ) -> CaseResult<()> {
        self.transport.set_clock(time, step)?;
        load_own_patch_solutions(&self.transport, &["c"], patches)?;
        if let Some(&mass) = crate::checkpoint::load_series(shared, "initial_mass")?.first() {
            self.initial_mass = mass;
        }
        Ok(())
    }
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)> {
        patch_graphs(NAME, &self.transport)
    }
    fn patched(&self) -> Option<&PatchedTransport> {
        Some(&self.transport)
    }
    fn finish(&mut self, _output: Option<&Path>) -> CaseResult<CaseCheck> {
        let (lo, hi, mass) = patched_bounds_and_mass(&self.transport, "c")?;
        let drift = (mass - self.initial_mass).abs() / self.initial_mass;
        let bounded_scheme = self.config.scheme != "central";
        let tolerance = 1e-12;
        let bounded = lo >= -tolerance && hi <= 1.0 + tolerance;
        let mass_ok = drift <= self.config.mass_tolerance;
        Ok(CaseCheck {
            name: format!(
                "{} scheme: mass conserved{}",
                self.config.scheme,
                if bounded_scheme {
                    ", values within the initial bounds [0, 1]"
                } else {
                    " (central: bounds reported, not required)"
                }
            ),
            passed: mass_ok && (bounded || !bounded_scheme),
            figure: format!(
                "min {lo:.3e}, max {hi:.6}, relative mass change {drift:.2e} (allowed {:e})",
                self.config.mass_tolerance
            ),
            files: Vec::new(),
        })
    }
}
