//! `channel`: plane Poiseuille flow from a parabolic inflow to an open
//! outflow, checked against the exact parabola and for mass balance.
//!
//! The inflow is a boundary expression of y
//! ([`watershed_solvers::BoundaryExpression`]); the outflow is the flow
//! solver's open side ([`IncompressibleFlowBuilder::outflow_of`], convective
//! by default; the projection potential is zero there). The steady state is
//! detected as in the cavity: the kinetic energy changes by at most
//! `steady_tolerance` (relative) over `steady_window` time units.

use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::checkpoint::{load_rows, rows_from, save_rows};
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, Simulation, Stop};
use crate::error::{CaseError, CaseResult};
use crate::setup::config_text_of;
use crate::setup::{case_execution_mode, integrator};
use crate::solver_state::{dump_flow, load_flow, save_flow};
use crate::steady::SteadyState;
use serde::{Deserialize, Serialize};
use std::path::Path;
use watershed_exprgraph::ExpressionGraph;
use watershed_fields::{Grid, XFace};
use watershed_io::csv::SeriesLayout;
use watershed_io::csv::write_csv;
use watershed_io::dumps::DumpedField;
use watershed_io::plot::{Mark, Series, line_chart};
use watershed_operators::{Side, sin};
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, BoundaryExpression, IncompressibleFlow,
    IncompressibleFlowBuilder, Outflow,
};

/// The case's name.
pub const NAME: &str = "channel";

/// The registry entry.
pub const INFO: CaseInfo = CaseInfo {
    name: NAME,
    description: "2D channel from a parabolic inflow to an open outflow; developed profile vs the exact parabola, mass in = out (CSV, PNG)",
    documented_config: ChannelConfig::DOCUMENTED,
    prepare,
    config_text: |o| config_text_of::<ChannelConfig>(NAME, o),
};

/// Configuration (see `cases/configs/channel.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChannelConfig {
    /// Reynolds number U H / nu (U the inflow's peak speed).
    pub re: f64,
    /// Cells across the channel.
    pub cells: usize,
    /// Length in heights.
    pub length: f64,
    /// Latest end time.
    pub end_time: f64,
    /// Courant number.
    pub cfl: f64,
    /// Diffusion number.
    pub diffusion_number: f64,
    /// Relative kinetic-energy change that counts as steady.
    pub steady_tolerance: f64,
    /// Time between steady checks.
    pub steady_window: f64,
    /// Time integrator.
    pub integrator: String,
    /// Largest allowed RMS difference from the exact parabola.
    pub profile_tolerance: f64,
    /// Largest allowed relative difference of the flow rates out and in.
    pub mass_tolerance: f64,
    /// The outflow: "convective" or "zero-gradient" ([`Outflow`]).
    pub outflow: String,
    /// Relative amplitude `a` of a pulsating inflow, the peak speed
    /// `1 + a sin(2 pi t / T)` (0: steady).
    pub pulsation_amplitude: f64,
    /// Period `T` of the pulsation.
    pub pulsation_period: f64,
    /// Patches along x, y, z that the momentum stages run on (see
    /// `IncompressibleFlowBuilder::patches`); `[0, 0, 0]`: one per rank.
    pub patches: [usize; 3],
    /// With several patches, the projection whole on every rank instead
    /// of on the patches (`IncompressibleFlowBuilder::replicated_projection`).
    pub replicate_projection: bool,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            re: 5.0,
            cells: 16,
            length: 4.0,
            end_time: 30.0,
            cfl: 0.5,
            diffusion_number: 0.2,
            steady_tolerance: 1e-9,
            steady_window: 0.5,
            integrator: "ssp-rk3".into(),
            profile_tolerance: 0.005,
            mass_tolerance: 1e-8,
            outflow: "convective".into(),
            pulsation_amplitude: 0.0,
            pulsation_period: 1.0,
            patches: [1, 1, 1],
            replicate_projection: false,
        }
    }
}

impl CaseConfig for ChannelConfig {
    const DOCUMENTED: &'static str = include_str!("../../configs/channel.toml");

    fn check_ranges(&self) -> Option<RangeProblem> {
        in_range("re", self.re, 0.1, 1000.0)
            .or_else(|| in_range("cells", self.cells, 4, 1024))
            .or_else(|| in_range("length", self.length, 1.0, 64.0))
            .or_else(|| in_range("end_time", self.end_time, 1e-12, 1e6))
            .or_else(|| in_range("cfl", self.cfl, 1e-6, 1.0))
            .or_else(|| in_range("diffusion_number", self.diffusion_number, 1e-6, 0.5))
            .or_else(|| in_range("steady_tolerance", self.steady_tolerance, 1e-14, 1.0))
            .or_else(|| in_range("steady_window", self.steady_window, 1e-6, 1e6))
            .or_else(|| one_of("integrator", &self.integrator, &crate::setup::INTEGRATORS))
            .or_else(|| in_range("profile_tolerance", self.profile_tolerance, 1e-12, 1.0))
            .or_else(|| in_range("mass_tolerance", self.mass_tolerance, 1e-15, 1.0))
            .or_else(|| one_of("outflow", &self.outflow, &["convective", "zero-gradient"]))
            .or_else(|| in_range("pulsation_amplitude", self.pulsation_amplitude, 0.0, 0.9))
            .or_else(|| in_range("pulsation_period", self.pulsation_period, 1e-6, 1e6))
    }
}

/// The exact developed profile: u = 4 y (1 - y) (peak 1, height 1).
pub fn parabola(y: f64) -> f64 {
    4.0 * y * (1.0 - y)
}

/// The running channel.
pub struct Channel {
    config: ChannelConfig,
    grid: Grid,
    flow: IncompressibleFlow,
    /// Cells along the channel.
    along: usize,
    /// The steady-state test.
    steady: SteadyState,
    /// (time, flow rate in, flow rate out) after every step.
    history: Vec<[f64; 3]>,
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<ChannelConfig>(NAME, options)?;
    let config = loaded.config.clone();
    let n = config.cells;
    let along = config.length * n as f64;
    if (along - along.round()).abs() > 1e-9 {
        return Err(CaseError::Usage(format!(
            "length = {} times cells = {n} is not a whole number of cells along the channel; choose a length that is a multiple of 1/{n}",
            config.length
        )));
    }
    let along = along.round() as usize;
    let grid = Grid::new([along, n, 1], [config.length, 1.0, 1.0], [0.0; 3])?;
    let (amplitude, period) = (config.pulsation_amplitude, config.pulsation_period);
    let inflow = if amplitude == 0.0 {
        BoundaryExpression::new("parabolic inflow", |p| {
            4.0 * p.y.clone() * (1.0 - p.y.clone())
        })
    } else {
        BoundaryExpression::new("pulsating parabolic inflow", move |p| {
            4.0 * p.y.clone()
                * (1.0 - p.y.clone())
                * (1.0 + amplitude * sin(2.0 * std::f64::consts::PI / period * p.t.clone()))
        })
    };
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 1.0 / config.re)
        .velocity_conditions(
            0,
            walls.clone().with(
                Side::MINUS_X,
                BoundaryCondition::DirichletExpression(inflow),
            ),
        )
        .velocity_conditions(1, walls)
        .outflow_of(
            Side::PLUS_X,
            if config.outflow == "convective" {
                Outflow::Convective
            } else {
                Outflow::ZeroGradient
            },
        )
        .integrator(integrator(&config.integrator))
        .mode(case_execution_mode(options))
        .placement(options.placement.clone());
    let flow = crate::setup::flow_on_patches(
        flow,
        &grid,
        config.patches,
        config.replicate_projection,
        1,
        options,
    )?
    .build()?;
    Ok(Prepared {
        config_text: crate::config::to_text(NAME, &loaded)?,
        simulation: Box::new(Channel {
            steady: SteadyState::new(config.steady_tolerance, config.steady_window),
            history: Vec::new(),
            config,
            grid,
            flow,
            along,
        }),
        stop: Stop::EndTime(loaded.config.end_time),
    })
}

impl Channel {
    /// The flow rates through the inflow and outflow faces (each a column
    /// of faces, a window of the flow: on patches, gathered from them).
    pub fn flow_rates(&self) -> CaseResult<(f64, f64)> {
        let (n, along) = (self.config.cells, self.along);
        let h = 1.0 / self.config.cells as f64;
        // The column of faces at the first face of the window's cells; the
        // outflow face is the last of the domain, after its last cell.
        let rate = |first: usize, face: isize| -> CaseResult<f64> {
            self.flow.with_velocity_window::<XFace, _>(
                [first, 0, 0],
                [1, n, 1],
                |u| -> CaseResult<f64> {
                    let layout = u.layout();
                    let values = u.values()?;
                    Ok((0..n as isize)
                        .map(|j| values[layout.linear_index([face, j, 0])] * h)
                        .sum())
                },
            )?
        };
        Ok((rate(0, 0)?, rate(along - 1, 1)?))
    }

    /// (y, u) on the face column nearest x = 3/4 length.
    pub fn profile(&self) -> CaseResult<Vec<(f64, f64)>> {
        let column = 3 * self.along / 4;
        let n = self.config.cells;
        self.flow.with_velocity_window::<XFace, _>(
            [column, 0, 0],
            [1, n, 1],
            |u| -> CaseResult<_> {
                let layout = u.layout();
                let values = u.values()?;
                Ok((0..n as isize)
                    .map(|j| {
                        let index = [0, j, 0];
                        (
                            layout.coordinate(index)[1],
                            values[layout.linear_index(index)],
                        )
                    })
                    .collect())
            },
        )?
    }

    fn pulsating(&self) -> bool {
        self.config.pulsation_amplitude != 0.0
    }

    /// The inflow's rate at `t`: the midpoint sum of the parabola on the
    /// inflow faces, `2/3 + h^2 / 3`, times the pulsation.
    pub fn inflow_rate(&self, t: f64) -> f64 {
        let h = 1.0 / self.config.cells as f64;
        let pulse = 1.0
            + self.config.pulsation_amplitude
                * (2.0 * std::f64::consts::PI / self.config.pulsation_period * t).sin();
        (2.0 / 3.0 + h * h / 3.0) * pulse
    }
}

impl Simulation for Channel {
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
            .stable_time_step(self.config.cfl, self.config.diffusion_number)?
            // The inflow's peak speed, which the stability limit does not
            // see in a flow still at rest.
            .min(self.config.cfl / self.config.cells as f64))
    }
    fn step(&mut self, dt: f64) -> CaseResult<()> {
        self.flow.step(dt)?;
        let (inflow, outflow) = self.flow_rates()?;
        self.history.push([self.flow.time(), inflow, outflow]);
        if self.pulsating() {
            // No steady state: the run goes to its end time.
            return Ok(());
        }
        let flow = &self.flow;
        self.steady
            .observe(flow.time(), || Ok(flow.kinetic_energy()?))
    }
    fn stop_reason(&self) -> Option<String> {
        self.steady.stop_reason()
    }
    fn status(&self) -> String {
        self.steady.status()
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
        self.steady.save(group)?;
        save_rows(group, "flow_rates", &self.history)
    }
    fn load_shared_state(&mut self, group: &hdf5::Group) -> CaseResult<()> {
        self.steady.load(group)?;
        self.history = load_rows(group, "flow_rates")?;
        Ok(())
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        load_flow(&mut self.flow, group, "", time, step)?;
        self.load_shared_state(group)
    }
    fn series(&self) -> Option<SeriesLayout> {
        Some(SeriesLayout {
            file_name: format!("{NAME}_flow_rates.csv"),
            header: "time,inflow_rate,outflow_rate".into(),
        })
    }
    fn series_rows(&self, from: usize) -> Vec<Vec<f64>> {
        rows_from(&self.history, from)
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
        let profile = self.profile()?;
        let (inflow, outflow) = self.flow_rates()?;
        let rms = (profile
            .iter()
            .map(|&(y, u)| (u - parabola(y)).powi(2))
            .sum::<f64>()
            / profile.len() as f64)
            .sqrt();
        let imbalance = (outflow - inflow).abs() / inflow.abs().max(f64::MIN_POSITIVE);
        let mut files = Vec::new();
        if let Some(dir) = output {
            let csv = dir.join(format!("{NAME}_profile.csv"));
            let rows: Vec<Vec<f64>> = profile
                .iter()
                .map(|&(y, u)| vec![y, u, parabola(y)])
                .collect();
            write_csv(&csv, "y,u_at_three_quarters_length,exact_parabola", &rows)?;
            files.push(csv);
            let png = dir.join(format!("{NAME}_profile.png"));
            let mut walls_included = vec![(0.0, 0.0)];
            walls_included.extend(profile.iter().copied());
            walls_included.push((1.0, 0.0));
            let exact: Vec<(f64, f64)> = (0..=100)
                .map(|k| {
                    let y = k as f64 / 100.0;
                    (y, parabola(y))
                })
                .collect();
            line_chart(
                &png,
                &format!(
                    "Channel, Re = {}: u across the channel at x = {}",
                    self.config.re,
                    0.75 * self.config.length
                ),
                "y",
                "u",
                &[
                    Series {
                        label: "exact parabola".into(),
                        points: exact,
                        mark: Mark::Line,
                    },
                    Series {
                        label: format!("Watershed, {} cells across", self.config.cells),
                        points: walls_included,
                        mark: Mark::Points,
                    },
                ],
            )?;
            files.push(png);
        }
        if self.pulsating() {
            // Every step: the inflow faces hold the rate of the step's end
            // time, and the outflow carries it out.
            let worst_in = self
                .history
                .iter()
                .map(|&[t, q, _]| (q - self.inflow_rate(t)).abs())
                .fold(0.0, f64::max);
            let worst_balance = self
                .history
                .iter()
                .map(|&[_, q_in, q_out]| (q_out - q_in).abs() / q_in.abs().max(f64::MIN_POSITIVE))
                .fold(0.0, f64::max);
            return Ok(CaseCheck {
                name: "pulsating inflow: the rate in at every step's time, and out = in".into(),
                passed: !self.history.is_empty()
                    && worst_in <= 1e-12
                    && worst_balance <= self.config.mass_tolerance,
                figure: format!(
                    "{} steps: largest |rate in - Q(t)| {worst_in:.1e}, largest relative |out - in| {worst_balance:.1e} (allowed {:e})",
                    self.history.len(),
                    self.config.mass_tolerance
                ),
                files,
            });
        }
        let steady = if self.steady.is_steady() {
            "steady".to_string()
        } else {
            format!("NOT steady at t = {:.3}", self.flow.time())
        };
        Ok(CaseCheck {
            name: "developed profile vs the exact parabola; flow rate out vs in".into(),
            passed: self.steady.is_steady()
                && rms <= self.config.profile_tolerance
                && imbalance <= self.config.mass_tolerance,
            figure: format!(
                "rms difference {rms:.3e} (allowed {}), rates in {inflow:.9} out {outflow:.9} (relative difference {imbalance:.1e}, allowed {:e}), {steady}",
                self.config.profile_tolerance, self.config.mass_tolerance
            ),
            files,
        })
    }
}
