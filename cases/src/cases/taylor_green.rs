//! `taylor-green`: the decaying Taylor-Green vortex, 2D against the exact
//! decay, 3D with kinetic energy and dissipation rate over time.

use crate::checkpoint::{load_series, save_series};
use crate::common::{case_execution_mode, dump_flow, integrator, load_flow, save_flow};
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, Simulation, Stop};
use crate::error::CaseResult;
use crate::output::DumpedField;
use crate::plot::{Mark, Series, line_chart, write_csv};
use crate::registry::{CaseInfo, CaseOptions, Prepared, config_text_of};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::path::Path;
use watershed_exprgraph::ExpressionGraph;
use watershed_fields::{Grid, XFace, YFace};
use watershed_solvers::{IncompressibleFlow, IncompressibleFlowBuilder};

/// The case's name.
pub const NAME: &str = "taylor-green";

/// The registry entry.
pub const INFO: CaseInfo = CaseInfo {
    name: NAME,
    description: "Taylor-Green vortex: 2D decay vs the exact rate; 3D kinetic energy and dissipation (CSV, PNG)",
    documented_config: TaylorGreenConfig::DOCUMENTED,
    prepare,
    config_text: |o| config_text_of::<TaylorGreenConfig>(NAME, o),
};

/// Configuration (see `cases/configs/taylor-green.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaylorGreenConfig {
    /// 2 or 3.
    pub dimensions: usize,
    /// Cells per side.
    pub cells: usize,
    /// Reynolds number (1 / nu).
    pub re: f64,
    /// End time.
    pub end_time: f64,
    /// Courant number.
    pub cfl: f64,
    /// Diffusion number.
    pub diffusion_number: f64,
    /// Time integrator.
    pub integrator: String,
    /// Relative tolerance of the check.
    pub tolerance: f64,
}

impl Default for TaylorGreenConfig {
    fn default() -> Self {
        TaylorGreenConfig {
            dimensions: 2,
            cells: 32,
            re: 20.0,
            end_time: 1.0,
            cfl: 0.3,
            diffusion_number: 0.2,
            integrator: "ssp-rk3".into(),
            tolerance: 0.002,
        }
    }
}

impl CaseConfig for TaylorGreenConfig {
    const DOCUMENTED: &'static str = include_str!("../../configs/taylor-green.toml");

    fn check_ranges(&self) -> Option<RangeProblem> {
        in_range("dimensions", self.dimensions, 2, 3)
            .or_else(|| in_range("cells", self.cells, 8, 512))
            .or_else(|| in_range("re", self.re, 1.0, 1e5))
            .or_else(|| in_range("end_time", self.end_time, 1e-12, 1e6))
            .or_else(|| in_range("cfl", self.cfl, 1e-6, 1.0))
            .or_else(|| in_range("diffusion_number", self.diffusion_number, 1e-6, 0.5))
            .or_else(|| one_of("integrator", &self.integrator, &crate::common::INTEGRATORS))
            .or_else(|| in_range("tolerance", self.tolerance, 1e-9, 1.0))
    }
}

/// The running vortex.
pub struct TaylorGreen {
    config: TaylorGreenConfig,
    grid: Grid,
    flow: IncompressibleFlow,
    /// (time, kinetic energy) after every step, the initial state first.
    history: Vec<(f64, f64)>,
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::common::load_config::<TaylorGreenConfig>(NAME, options)?;
    let config = loaded.config.clone();
    let n = config.cells;
    let three = config.dimensions == 3;
    let l = 2.0 * PI;
    let grid = Grid::new(
        [n, n, if three { n } else { 1 }],
        [l, l, if three { l } else { 1.0 }],
        [0.0; 3],
    )?
    .with_periodic([true, true, three]);
    let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 1.0 / config.re)
        .integrator(integrator(&config.integrator))
        .mode(case_execution_mode(options))
        .placement(options.placement.clone())
        .build()?;
    if three {
        flow.set_velocity::<XFace>(|[x, y, z]| x.sin() * y.cos() * z.cos())?;
        flow.set_velocity::<YFace>(|[x, y, z]| -x.cos() * y.sin() * z.cos())?;
    } else {
        flow.set_velocity::<XFace>(|[x, y, _]| x.sin() * y.cos())?;
        flow.set_velocity::<YFace>(|[x, y, _]| -x.cos() * y.sin())?;
    }
    let energy = flow.kinetic_energy()?;
    let stop = Stop::EndTime(config.end_time);
    Ok(Prepared {
        config_text: crate::config::to_text(NAME, &loaded)?,
        simulation: Box::new(TaylorGreen {
            config,
            grid,
            flow,
            history: vec![(0.0, energy)],
        }),
        stop,
    })
}

impl TaylorGreen {
    /// (time, kinetic energy, dissipation rate -dKE/dt by centred
    /// differences of the history).
    pub fn energy_table(&self) -> Vec<[f64; 3]> {
        let h = &self.history;
        (0..h.len())
            .map(|i| {
                let (a, b) = (i.saturating_sub(1), (i + 1).min(h.len() - 1));
                let rate = if b > a {
                    -(h[b].1 - h[a].1) / (h[b].0 - h[a].0)
                } else {
                    f64::NAN
                };
                [h[i].0, h[i].1, rate]
            })
            .collect()
    }
}

impl Simulation for TaylorGreen {
    fn case(&self) -> &str {
        NAME
    }
    fn grid(&self) -> &Grid {
        &self.grid
    }
    fn time(&self) -> f64 {
        self.flow.time()
    }
    fn steps(&self) -> u64 {
        self.flow.steps()
    }
    fn cell_updates_per_step(&self) -> u64 {
        self.grid.total_cells() as u64
    }
    fn next_dt(&self) -> CaseResult<f64> {
        Ok(self
            .flow
            .stable_time_step(self.config.cfl, self.config.diffusion_number)?)
    }
    fn step(&mut self, dt: f64) -> CaseResult<()> {
        self.flow.step(dt)?;
        self.history
            .push((self.flow.time(), self.flow.kinetic_energy()?));
        Ok(())
    }
    fn status(&self) -> String {
        self.history
            .last()
            .map_or(String::new(), |(_, e)| format!("KE = {e:.6e}"))
    }
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        dump_flow(&self.flow, group)
    }
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        save_flow(&self.flow, group, "")?;
        let flat: Vec<f64> = self.history.iter().flat_map(|&(t, e)| [t, e]).collect();
        save_series(group, "energy_history", &flat)
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        load_flow(&mut self.flow, group, "", time, step)?;
        let flat = load_series(group, "energy_history")?;
        self.history = flat.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        Ok(())
    }
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)> {
        vec![("momentum".into(), self.flow.graph())]
    }
    fn finish(&mut self, output: Option<&Path>) -> CaseResult<CaseCheck> {
        let table = self.energy_table();
        let nu = 1.0 / self.config.re;
        let mut files = Vec::new();
        let three = self.config.dimensions == 3;
        if let Some(dir) = output {
            let csv = dir.join(format!("{NAME}_energy.csv"));
            write_csv(
                &csv,
                "time,kinetic_energy,dissipation_rate",
                &table.iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
            )?;
            files.push(csv);
            let e0 = self.history.first().map_or(1.0, |h| h.1);
            let mut energy = vec![Series {
                label: format!("Watershed {}^{}", self.config.cells, self.config.dimensions),
                points: table.iter().map(|r| (r[0], r[1])).collect(),
                mark: Mark::Line,
            }];
            if !three {
                energy.push(Series {
                    label: "exact: KE0 exp(-4 t / Re)".into(),
                    points: table
                        .iter()
                        .map(|r| (r[0], e0 * (-4.0 * nu * r[0]).exp()))
                        .collect(),
                    mark: Mark::Line,
                });
            }
            let png = dir.join(format!("{NAME}_energy.png"));
            line_chart(
                &png,
                &format!("Taylor-Green vortex, Re = {}", self.config.re),
                "t",
                "kinetic energy",
                &energy,
            )?;
            files.push(png);
            let png = dir.join(format!("{NAME}_dissipation.png"));
            line_chart(
                &png,
                &format!("Taylor-Green vortex, Re = {}", self.config.re),
                "t",
                "dissipation rate -dKE/dt",
                &[Series {
                    label: format!("Watershed {}^{}", self.config.cells, self.config.dimensions),
                    points: table.iter().map(|r| (r[0], r[2])).collect(),
                    mark: Mark::Line,
                }],
            )?;
            files.push(png);
        }
        let (e0, (t, e)) = match (self.history.first(), self.history.last()) {
            (Some(first), Some(&last)) => (first.1, last),
            _ => (f64::NAN, (f64::NAN, f64::NAN)),
        };
        if !three {
            let exact = (-4.0 * nu * t).exp();
            let ratio = e / e0;
            let error = (ratio - exact).abs() / exact;
            return Ok(CaseCheck {
                name: "2D kinetic-energy decay vs exp(-4 t / Re)".into(),
                passed: error <= self.config.tolerance,
                figure: format!(
                    "KE/KE0 = {ratio:.6} vs {exact:.6} at t = {t:.4}: relative difference {error:.2e} (allowed {:e})",
                    self.config.tolerance
                ),
                files,
            });
        }
        let never_grows = self.history.windows(2).all(|w| w[1].1 <= w[0].1);
        let initial_rate = table.get(1).map_or(f64::NAN, |r| r[2]);
        let exact_rate = 0.75 * nu;
        let error = (initial_rate - exact_rate).abs() / exact_rate;
        Ok(CaseCheck {
            name: "3D initial dissipation rate vs 3 / (4 Re); kinetic energy never grows".into(),
            passed: never_grows && error <= self.config.tolerance,
            figure: format!(
                "-dKE/dt(0) = {initial_rate:.6e} vs {exact_rate:.6e}: relative difference {error:.2e} (allowed {:e}); energy {}",
                self.config.tolerance,
                if never_grows {
                    "non-increasing"
                } else {
                    "GREW at some step"
                }
            ),
            files,
        })
    }
}
