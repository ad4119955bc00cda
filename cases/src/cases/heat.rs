//! `heat`: the 3D heat equation against its exact solution, and with
//! `--convergence` the observed order of accuracy over three grids.

use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::checkpoint::RankCheckpoint;
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, RunControl, Simulation, Stop, run};
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
use watershed_exprgraph::ExpressionGraph;
use watershed_fields::{GhostWidth, Grid};
use watershed_io::csv::write_csv;
use watershed_io::dumps::DumpedField;
use watershed_io::plot::{Mark, Series, line_chart};
use watershed_solvers::{Diffusivity, PatchedTransport, TransportEquation, TransportSolverBuilder};

/// The case's name.
pub const NAME: &str = "heat";

/// The registry entry.
pub const INFO: CaseInfo = CaseInfo {
    name: NAME,
    description: "3D heat equation vs its exact solution; --convergence: observed order over three grids (PNG)",
    documented_config: HeatConfig::DOCUMENTED,
    prepare,
    config_text: |o| config_text_of::<HeatConfig>(NAME, o),
};

/// Configuration (see `cases/configs/heat.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeatConfig {
    /// Cells per side.
    pub cells: usize,
    /// Diffusivity.
    pub diffusivity: f64,
    /// End time.
    pub end_time: f64,
    /// Diffusion number.
    pub diffusion_number: f64,
    /// Time integrator.
    pub integrator: String,
    /// Largest allowed relative max-norm error.
    pub error_tolerance: f64,
    /// Smallest allowed observed order (convergence study).
    pub minimum_order: f64,
    /// Patches along x, y, z (each dividing `cells`): the cube decomposed
    /// into equal patches, spread over the ranks of an MPI run.
    pub patches: [usize; 3],
    /// Overlap each stage's seam exchange with the next stage's interior
    /// work (the same bits either way; off by default).
    pub overlap_exchange: bool,
}

impl Default for HeatConfig {
    fn default() -> Self {
        HeatConfig {
            cells: 16,
            diffusivity: 0.1,
            end_time: 0.01,
            diffusion_number: 0.1,
            integrator: "ssp-rk3".into(),
            error_tolerance: 0.01,
            minimum_order: 1.8,
            patches: [1, 1, 1],
            overlap_exchange: false,
        }
    }
}

impl CaseConfig for HeatConfig {
    const DOCUMENTED: &'static str = include_str!("../../configs/heat.toml");

    fn check_ranges(&self) -> Option<RangeProblem> {
        in_range("cells", self.cells, 4, 512)
            .or_else(|| in_range("diffusivity", self.diffusivity, 1e-12, 1e6))
            .or_else(|| in_range("end_time", self.end_time, 1e-12, 1e6))
            .or_else(|| in_range("diffusion_number", self.diffusion_number, 1e-6, 0.5))
            .or_else(|| one_of("integrator", &self.integrator, &crate::setup::INTEGRATORS))
            .or_else(|| in_range("error_tolerance", self.error_tolerance, 1e-15, 1.0))
            .or_else(|| in_range("minimum_order", self.minimum_order, 0.0, 10.0))
    }
}

/// The exact solution at (x, y, z, t).
pub fn exact(alpha: f64, [x, y, z]: [f64; 3], t: f64) -> f64 {
    let k = 2.0 * PI;
    (k * x).sin() * (k * y).sin() * (k * z).sin() * (-3.0 * k * k * alpha * t).exp()
}

/// The running heat equation.
pub struct Heat {
    config: HeatConfig,
    grid: Grid,
    transport: PatchedTransport,
}

fn build(config: &HeatConfig, cells: usize, options: &CaseOptions) -> CaseResult<Heat> {
    let grid = Grid::new([cells; 3], [1.0; 3], [0.0; 3])?.with_periodic([true; 3]);
    let layout =
        crate::setup::patch_layout(&grid, config.patches, GhostWidth::uniform(1), options)?;
    let mut transport = PatchedTransport::build(layout, options.rank_link(), |patch| {
        TransportSolverBuilder::new(patch)
            .equation(
                TransportEquation::new("T").diffusion(Diffusivity::Constant(config.diffusivity)),
            )
            .integrator(integrator(&config.integrator))
            .mode(case_execution_mode(options))
            .graph_options(solver_graph_options(options))
            .build()
    })?;
    transport.set_overlap(config.overlap_exchange)?;
    let alpha = config.diffusivity;
    transport.set_initial_condition("T", |p| exact(alpha, p, 0.0))?;
    Ok(Heat {
        config: config.clone(),
        grid,
        transport,
    })
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<HeatConfig>(NAME, options)?;
    let heat = build(&loaded.config, loaded.config.cells, options)?;
    Ok(Prepared {
        config_text: crate::config::to_text(NAME, &loaded)?,
        stop: Stop::EndTime(loaded.config.end_time),
        simulation: Box::new(heat),
    })
}

impl Heat {
    /// Max-norm error against the exact solution, relative to the exact
    /// amplitude at the current time.
    pub fn relative_error(&self) -> CaseResult<f64> {
        let alpha = self.config.diffusivity;
        let t = self.transport.time();
        let amplitude = (-12.0 * PI * PI * alpha * t).exp();
        let errors = self.transport.over_patch_interiors(1, |_, solver| {
            let largest = solver.with_solution(
                "T",
                |field| -> Result<f64, watershed_fields::FieldError> {
                    let layout = field.layout();
                    let values = field.values()?;
                    Ok(layout
                        .interior()
                        .iter()
                        .map(|i| {
                            (values[layout.linear_index(i)] - exact(alpha, layout.coordinate(i), t))
                                .abs()
                        })
                        .fold(0.0, f64::max))
                },
            )??;
            Ok(vec![largest])
        })?;
        let error = errors.iter().map(|e| e[0]).fold(0.0, f64::max);
        Ok(error / amplitude)
    }
}

impl Simulation for Heat {
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
        let h = self.grid.spacing()[0];
        Ok(self.config.diffusion_number * h * h / self.config.diffusivity)
    }
    fn step(&mut self, dt: f64) -> CaseResult<()> {
        Ok(self.transport.step(dt)?)
    }
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        Ok(vec![dump_patched_solution(
            &self.transport,
            "T",
            group,
            "T",
        )?])
    }
    fn dump_own_patches(&self, root: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        dump_own_patch_solutions(&self.transport, &["T"], root)
    }
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        save_patched_solution(&self.transport, "T", group)
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        self.transport.set_clock(time, step)?;
        load_patched_solution(&self.transport, "T", group)
    }
    fn save_own_patches(&self, root: &hdf5::Group) -> CaseResult<()> {
        save_own_patch_solutions(&self.transport, &["T"], root)
    }
    fn load_own_patches(
        &mut self,
        patches: &RankCheckpoint,
        shared: &hdf5::Group,
        time: f64,
        step: u64,
    ) -> CaseResult<()> {
        self.transport.set_clock(time, step)?;
        load_own_patch_solutions(&self.transport, &["T"], patches)?;
        let _ = shared;
        Ok(())
    }
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)> {
        patch_graphs(NAME, &self.transport)
    }
    fn patched(&self) -> Option<&PatchedTransport> {
        Some(&self.transport)
    }
    fn finish(&mut self, _output: Option<&Path>) -> CaseResult<CaseCheck> {
        let error = self.relative_error()?;
        Ok(CaseCheck {
            name: format!(
                "max-norm error vs the exact solution on {0}^3",
                self.config.cells
            ),
            passed: error <= self.config.error_tolerance,
            figure: format!(
                "relative error {error:.3e} at t = {:.4e} (allowed {:e})",
                self.transport.time(),
                self.config.error_tolerance
            ),
            files: Vec::new(),
        })
    }
}

/// The convergence study: the case on `cells`, `2 cells` and `4 cells`,
/// each to the end time with `dt` proportional to `h^2`; returns the check
/// on the observed orders and writes a CSV and a PNG into `output`.
pub fn convergence_study(options: &CaseOptions, output: Option<&Path>) -> CaseResult<CaseCheck> {
    let loaded = crate::setup::load_config::<HeatConfig>(NAME, options)?;
    let config = loaded.config;
    let mut rows = Vec::new();
    for factor in [1usize, 2, 4] {
        let cells = config.cells.checked_mul(factor).ok_or_else(|| {
            crate::error::CaseError::Usage(format!("cells = {} is too large", config.cells))
        })?;
        let mut heat = build(&config, cells, options)?;
        let control = RunControl::new(Stop::EndTime(config.end_time), "");
        run(&mut heat, &control, None, &mut |_| {})?;
        let error = heat.relative_error()?;
        rows.push(vec![1.0 / cells as f64, error]);
        tracing::info!(cells, error, "convergence study grid done");
    }
    let orders: Vec<f64> = rows
        .windows(2)
        .map(|w| (w[0][1] / w[1][1]).log2())
        .collect();
    let mut files = Vec::new();
    if let Some(dir) = output {
        let csv = dir.join(format!("{NAME}_convergence.csv"));
        write_csv(&csv, "h,relative_max_error", &rows)?;
        files.push(csv);
        let png = dir.join(format!("{NAME}_convergence.png"));
        let first = &rows[0];
        line_chart(
            &png,
            "Heat equation: error against grid spacing",
            "log10 h",
            "log10 relative max error",
            &[
                Series {
                    label: "Watershed".into(),
                    points: rows.iter().map(|r| (r[0].log10(), r[1].log10())).collect(),
                    mark: Mark::Points,
                },
                Series {
                    label: "slope 2".into(),
                    points: rows
                        .iter()
                        .map(|r| (r[0].log10(), (first[1] * (r[0] / first[0]).powi(2)).log10()))
                        .collect(),
                    mark: Mark::Line,
                },
            ],
        )?;
        files.push(png);
    }
    let worst = orders.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(CaseCheck {
        name: format!(
            "observed order of the heat equation on {}^3, {}^3, {}^3",
            config.cells,
            2 * config.cells,
            4 * config.cells
        ),
        passed: worst >= config.minimum_order,
        figure: format!(
            "errors {:?}, observed orders {:?} (required >= {})",
            rows.iter()
                .map(|r| format!("{:.3e}", r[1]))
                .collect::<Vec<_>>(),
            orders.iter().map(|o| format!("{o:.3}")).collect::<Vec<_>>(),
            config.minimum_order
        ),
        files,
    })
}
