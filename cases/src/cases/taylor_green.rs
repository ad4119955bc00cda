//! `taylor-green`: the decaying Taylor-Green vortex, 2D against the exact
//! decay, 3D with the kinetic energy K(t), its dissipation rate -dK/dt and
//! the enstrophy-based dissipation 2 nu Omega over time, at Re = 1600
//! against the DNS of the HiOCFD workshop (`super::tgv_reference`);
//! inviscid, against the energy it must keep.

use super::tgv_reference;
use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::checkpoint::{load_series, save_series};
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, Simulation, Stop};
use crate::error::CaseResult;
use crate::setup::config_text_of;
use crate::setup::{case_execution_mode, integrator};
use crate::solver_state::{dump_flow, load_flow, save_flow};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::path::Path;
use watershed_exprgraph::ExpressionGraph;
use watershed_fields::{Grid, XFace, YFace};
use watershed_io::csv::SeriesLayout;
use watershed_io::csv::write_csv;
use watershed_io::dumps::DumpedField;
use watershed_io::plot::{Mark, Series, line_chart};
use watershed_solvers::{
    ConvectionForm, IncompressibleFlow, IncompressibleFlowBuilder, SolverError, SpaceOrder,
};

/// The case's name.
pub const NAME: &str = "taylor-green";

/// The registry entry.
pub const INFO: CaseInfo = CaseInfo {
    name: NAME,
    description: "Taylor-Green vortex: 2D decay vs the exact rate; 3D K, -dK/dt and 2 nu Omega, Re = 1600 vs the DNS; inviscid energy (CSV, PNG)",
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
    /// Reynolds number (1 / nu); ignored when `inviscid`.
    pub re: f64,
    /// nu = 0: the check is the kinetic energy's drift.
    pub inviscid: bool,
    /// End time.
    pub end_time: f64,
    /// Courant number.
    pub cfl: f64,
    /// Diffusion number.
    pub diffusion_number: f64,
    /// Time integrator.
    pub integrator: String,
    /// Form of the convective term ([`ConvectionForm::NAMES`]).
    pub convection: String,
    /// Order of the spatial operators: 2 or 4.
    pub space_order: usize,
    /// Relative tolerance of the 2D decay, the 3D initial dissipation rate
    /// and the inviscid energy drift.
    pub tolerance: f64,
    /// 3D, Re = 1600, run past t = 10: the largest relative difference of
    /// the peak -dK/dt from the DNS's 0.012858 (unset: the documented
    /// table for the resolution and order, [`default_peak_tolerance`]).
    pub peak_tolerance: Option<f64>,
    /// ... and of the peak's time from the DNS's 8.97 (absolute; unset:
    /// the table of [`default_peak_tolerance`]).
    pub peak_time_tolerance: Option<f64>,
    /// Patches along x, y, z that the momentum stages run on (see
    /// `IncompressibleFlowBuilder::patches`); `[0, 0, 0]`: one per rank.
    pub patches: [usize; 3],
    /// With several patches, the projection whole on every rank instead
    /// of on the patches (`IncompressibleFlowBuilder::replicated_projection`).
    pub replicate_projection: bool,
}

impl Default for TaylorGreenConfig {
    fn default() -> Self {
        TaylorGreenConfig {
            dimensions: 2,
            cells: 32,
            re: 20.0,
            inviscid: false,
            end_time: 1.0,
            cfl: 0.3,
            diffusion_number: 0.2,
            integrator: "ssp-rk3".into(),
            convection: "skew-symmetric".into(),
            space_order: 2,
            tolerance: 0.002,
            peak_tolerance: None,
            peak_time_tolerance: None,
            patches: [1, 1, 1],
            replicate_projection: false,
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
            .or_else(|| one_of("integrator", &self.integrator, &crate::setup::INTEGRATORS))
            .or_else(|| one_of("convection", &self.convection, &ConvectionForm::NAMES))
            .or_else(|| in_range("space_order", self.space_order, 2, 4))
            .or_else(|| one_of("space_order", &self.space_order.to_string(), &["2", "4"]))
            .or_else(|| in_range("tolerance", self.tolerance, 1e-12, 1.0))
            .or_else(|| {
                self.peak_tolerance
                    .and_then(|t| in_range("peak_tolerance", t, 1e-6, 1.0))
            })
            .or_else(|| {
                self.peak_time_tolerance
                    .and_then(|t| in_range("peak_time_tolerance", t, 1e-6, 10.0))
            })
    }
}

/// The peak -dK/dt's allowed relative difference from the DNS at Re =
/// 1600 and the allowed difference of its time from 8.97, by resolution
/// and order, when the configuration sets none: what the skew-symmetric
/// form reached with SSP-RK3 at CFL 0.3 (docs/benchmarks.md, "The
/// Taylor-Green vortex at Re = 1600 against the DNS": second order -30.0 %
/// at t = 9.78 on 32^3, -7.6 % at 8.36 on 64^3; fourth order -16.1 % at
/// 9.05, +11.5 % at 8.27; second order on 128^3 +5.8 % at 8.61) with a
/// margin. Fourth order on 128^3 and finer is not measured yet: it gets
/// the second order's 128^3 entry.
pub fn default_peak_tolerance(cells: usize, order: SpaceOrder) -> (f64, f64) {
    let table: &[(usize, (f64, f64))] = match order {
        SpaceOrder::Second => &[(32, (0.35, 1.0)), (64, (0.10, 0.8)), (128, (0.08, 0.5))],
        SpaceOrder::Fourth => &[(32, (0.20, 0.5)), (64, (0.15, 0.8)), (128, (0.08, 0.5))],
    };
    table
        .iter()
        .find(|(n, _)| cells <= *n)
        .or(table.last())
        .map_or((0.08, 0.5), |(_, t)| *t)
}

/// One diagnostic row: time, kinetic energy, enstrophy (`NaN` where the
/// flow has not reduced it: the initial state).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Diagnostics {
    time: f64,
    energy: f64,
    enstrophy: f64,
}

/// The running vortex.
pub struct TaylorGreen {
    config: TaylorGreenConfig,
    grid: Grid,
    flow: IncompressibleFlow,
    nu: f64,
    /// After every step, the initial state first.
    history: Vec<Diagnostics>,
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<TaylorGreenConfig>(NAME, options)?;
    let config = loaded.config.clone();
    let n = config.cells;
    let three = config.dimensions == 3;
    let l = 2.0 * PI;
    let order = SpaceOrder::from_number(config.space_order)?;
    let form = ConvectionForm::from_name(&config.convection)?;
    let grid = Grid::new(
        [n, n, if three { n } else { 1 }],
        [l, l, if three { l } else { 1.0 }],
        [0.0; 3],
    )?
    .with_periodic([true, true, three]);
    let nu = if config.inviscid {
        0.0
    } else {
        1.0 / config.re
    };
    let ghosts = order.ghost_layers_for_flow();
    let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(ghosts), nu)
        .integrator(integrator(&config.integrator))
        .convection(form)
        .space_order(order)
        .track_enstrophy()
        .mode(case_execution_mode(options))
        .placement(options.placement.clone());
    let flow = crate::setup::flow_on_patches(
        flow,
        &grid,
        config.patches,
        config.replicate_projection,
        ghosts,
        options,
    )?
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
            nu,
            history: vec![Diagnostics {
                time: 0.0,
                energy,
                enstrophy: f64::NAN,
            }],
        }),
        stop,
    })
}

impl TaylorGreen {
    /// Rows (time, K, -dK/dt, 2 nu Omega): the rate by centred differences
    /// of the history (one-sided at its ends), `2 nu Omega` from the
    /// flow's enstrophy (`NaN` for the initial state).
    pub fn energy_table(&self) -> Vec<[f64; 4]> {
        (0..self.history.len()).map(|i| self.row(i)).collect()
    }

    fn row(&self, i: usize) -> [f64; 4] {
        let h = &self.history;
        let (a, b) = (i.saturating_sub(1), (i + 1).min(h.len() - 1));
        let rate = if b > a {
            -(h[b].energy - h[a].energy) / (h[b].time - h[a].time)
        } else {
            f64::NAN
        };
        [h[i].time, h[i].energy, rate, 2.0 * self.nu * h[i].enstrophy]
    }

    /// The largest -dK/dt of the run and its time.
    fn peak(table: &[[f64; 4]]) -> (f64, f64) {
        table
            .iter()
            .filter(|r| r[2].is_finite())
            .fold((f64::NAN, f64::NEG_INFINITY), |best, r| {
                if r[2] > best.1 { (r[0], r[2]) } else { best }
            })
    }

    fn label(&self) -> String {
        format!(
            "Watershed {}^{}, order {}, {}",
            self.config.cells,
            self.config.dimensions,
            self.config.space_order,
            self.config.convection
        )
    }

    fn compares_with_dns(&self) -> bool {
        self.config.dimensions == 3
            && !self.config.inviscid
            && self.config.re == tgv_reference::REYNOLDS
    }

    fn write_outputs(&self, dir: &Path, table: &[[f64; 4]]) -> CaseResult<Vec<std::path::PathBuf>> {
        let mut files = Vec::new();
        let csv = dir.join(format!("{NAME}_energy.csv"));
        write_csv(
            &csv,
            HEADER,
            &table.iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
        )?;
        files.push(csv);
        let e0 = self.history.first().map_or(1.0, |h| h.energy);
        let mut energy = vec![Series {
            label: self.label(),
            points: table.iter().map(|r| (r[0], r[1])).collect(),
            mark: Mark::Line,
        }];
        let dns = if self.compares_with_dns() {
            tgv_reference::dns()
        } else {
            Vec::new()
        };
        let t_end = table.last().map_or(0.0, |r| r[0]);
        let dns_until = |rows: &[tgv_reference::DnsRow]| -> Vec<tgv_reference::DnsRow> {
            rows.iter().copied().filter(|r| r.time <= t_end).collect()
        };
        if self.config.dimensions == 2 && !self.config.inviscid {
            energy.push(Series {
                label: "exact: KE0 exp(-4 t / Re)".into(),
                points: table
                    .iter()
                    .map(|r| (r[0], e0 * (-4.0 * self.nu * r[0]).exp()))
                    .collect(),
                mark: Mark::Line,
            });
        }
        if !dns.is_empty() {
            energy.push(Series {
                label: "DNS 512^3 (HiOCFD C3.5)".into(),
                points: dns_until(&dns)
                    .iter()
                    .map(|r| (r.time, r.kinetic_energy))
                    .collect(),
                mark: Mark::Line,
            });
        }
        let title = if self.config.inviscid {
            "Taylor-Green vortex, inviscid".to_string()
        } else {
            format!("Taylor-Green vortex, Re = {}", self.config.re)
        };
        let png = dir.join(format!("{NAME}_energy.png"));
        line_chart(&png, &title, "t", "kinetic energy K", &energy)?;
        files.push(png);
        let mut rates = vec![Series {
            label: format!("{}: -dK/dt", self.label()),
            points: table
                .iter()
                .map(|r| (r[0], r[2]))
                .filter(|p| p.1.is_finite())
                .collect(),
            mark: Mark::Line,
        }];
        if !self.config.inviscid {
            rates.push(Series {
                label: "Watershed: 2 nu Omega".into(),
                points: table
                    .iter()
                    .map(|r| (r[0], r[3]))
                    .filter(|p| p.1.is_finite())
                    .collect(),
                mark: Mark::Line,
            });
        }
        if !dns.is_empty() {
            rates.push(Series {
                label: "DNS 512^3: -dK/dt".into(),
                points: dns_until(&dns)
                    .iter()
                    .map(|r| (r.time, r.dissipation_rate))
                    .collect(),
                mark: Mark::Line,
            });
        }
        let png = dir.join(format!("{NAME}_dissipation.png"));
        line_chart(&png, &title, "t", "dissipation rate", &rates)?;
        files.push(png);
        Ok(files)
    }
}

/// The columns of the energy CSV.
const HEADER: &str = "time,kinetic_energy,dissipation_rate,enstrophy_dissipation";

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
        self.history.push(Diagnostics {
            time: self.flow.time(),
            energy: self.flow.kinetic_energy()?,
            enstrophy: self.flow.enstrophy()?.unwrap_or(f64::NAN),
        });
        Ok(())
    }
    fn status(&self) -> String {
        self.history
            .last()
            .map_or(String::new(), |d| format!("K = {:.6e}", d.energy))
    }
    fn series(&self) -> Option<SeriesLayout> {
        Some(SeriesLayout {
            file_name: format!("{NAME}_energy.csv"),
            header: HEADER.into(),
        })
    }
    /// A row is complete once the step after it is known (its centred
    /// rate); [`Simulation::finish`] rewrites the file with the last one.
    fn series_rows(&self, from: usize) -> Vec<Vec<f64>> {
        let complete = self.history.len().saturating_sub(1);
        (from..complete).map(|i| self.row(i).to_vec()).collect()
    }
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        dump_flow(&self.flow, group)
    }
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        save_flow(&self.flow, group, "")?;
        self.save_shared_state(group)
    }
    fn flow(&self) -> Option<&IncompressibleFlow> {
        Some(&self.flow)
    }
    fn flow_mut(&mut self) -> Option<&mut IncompressibleFlow> {
        Some(&mut self.flow)
    }
    fn save_shared_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        let flat: Vec<f64> = self
            .history
            .iter()
            .flat_map(|d| [d.time, d.energy, d.enstrophy])
            .collect();
        save_series(group, DIAGNOSTICS, &flat)
    }
    fn load_shared_state(&mut self, group: &hdf5::Group) -> CaseResult<()> {
        // Checkpoints written before the enstrophy was tracked hold (t, K).
        self.history = if group.link_exists(DIAGNOSTICS) {
            load_series(group, DIAGNOSTICS)?
                .chunks_exact(3)
                .map(|c| Diagnostics {
                    time: c[0],
                    energy: c[1],
                    enstrophy: c[2],
                })
                .collect()
        } else {
            load_series(group, "energy_history")?
                .chunks_exact(2)
                .map(|c| Diagnostics {
                    time: c[0],
                    energy: c[1],
                    enstrophy: f64::NAN,
                })
                .collect()
        };
        Ok(())
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        load_flow(&mut self.flow, group, "", time, step)?;
        self.load_shared_state(group)
    }
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)> {
        crate::setup::flow_graphs(&self.flow)
    }
    fn exchange_time(&self) -> Option<std::time::Duration> {
        self.flow.exchange_time()
    }
    fn poisson_on_patches(&self) -> Option<(std::time::Duration, usize, usize)> {
        crate::setup::flow_poisson_on_patches(&self.flow)
    }
    fn finish(&mut self, output: Option<&Path>) -> CaseResult<CaseCheck> {
        let table = self.energy_table();
        let files = match output {
            Some(dir) => self.write_outputs(dir, &table)?,
            None => Vec::new(),
        };
        let (e0, last) = match (self.history.first(), self.history.last()) {
            (Some(first), Some(&last)) => (first.energy, last),
            _ => {
                return Err(SolverError::TimeStep("the run has no history".into()).into());
            }
        };
        let (t, e) = (last.time, last.energy);
        let tolerance = self.config.tolerance;
        if self.config.inviscid {
            let drift = (e / e0 - 1.0).abs();
            return Ok(CaseCheck {
                name: "inviscid: kinetic energy kept (relative drift)".into(),
                passed: drift <= tolerance,
                figure: format!(
                    "K/K0 = {:.12} at t = {t:.4}: drift {drift:.3e} (allowed {tolerance:e})",
                    e / e0
                ),
                files,
            });
        }
        if self.config.dimensions == 2 {
            let exact = (-4.0 * self.nu * t).exp();
            let ratio = e / e0;
            let error = (ratio - exact).abs() / exact;
            return Ok(CaseCheck {
                name: "2D kinetic-energy decay vs exp(-4 t / Re)".into(),
                passed: error <= tolerance,
                figure: format!(
                    "KE/KE0 = {ratio:.6} vs {exact:.6} at t = {t:.4}: relative difference {error:.2e} (allowed {tolerance:e})"
                ),
                files,
            });
        }
        let never_grows = self.history.windows(2).all(|w| w[1].energy <= w[0].energy);
        let grows = if never_grows {
            "non-increasing"
        } else {
            "GREW at some step"
        };
        let (dns_time, dns_peak) = tgv_reference::dns_peak();
        if self.compares_with_dns() && t >= 10.0 {
            let (peak_time, peak) = Self::peak(&table);
            let order = SpaceOrder::from_number(self.config.space_order)?;
            let (default, default_time) = default_peak_tolerance(self.config.cells, order);
            let allowed = self.config.peak_tolerance.unwrap_or(default);
            let allowed_time = self.config.peak_time_tolerance.unwrap_or(default_time);
            let error = (peak / dns_peak - 1.0).abs();
            let time_error = (peak_time - dns_time).abs();
            return Ok(CaseCheck {
                name:
                    "3D Re = 1600: peak -dK/dt and its time vs the DNS; kinetic energy never grows"
                        .into(),
                passed: never_grows && error <= allowed && time_error <= allowed_time,
                figure: format!(
                    "peak -dK/dt = {peak:.5e} at t = {peak_time:.2} vs DNS {dns_peak:.5e} at t = {dns_time:.2}: {:+.1} % (allowed {:.0} %), time off by {time_error:.2} (allowed {}); energy {grows}",
                    100.0 * (peak / dns_peak - 1.0),
                    100.0 * allowed,
                    allowed_time
                ),
                files,
            });
        }
        let initial_rate = table.get(1).map_or(f64::NAN, |r| r[2]);
        let exact_rate = 0.75 * self.nu;
        let error = (initial_rate - exact_rate).abs() / exact_rate;
        Ok(CaseCheck {
            name: "3D initial dissipation rate vs 3 / (4 Re); kinetic energy never grows".into(),
            passed: never_grows && error <= tolerance,
            figure: format!(
                "-dKE/dt(0) = {initial_rate:.6e} vs {exact_rate:.6e}: relative difference {error:.2e} (allowed {tolerance:e}); energy {grows}"
            ),
            files,
        })
    }
}

/// The checkpoint's dataset of (time, K, Omega) triples.
const DIAGNOSTICS: &str = "diagnostics_history";
