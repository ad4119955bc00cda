//! `lid-driven-cavity`: steady flow in a square cavity driven by its lid,
//! checked against the centreline profiles of Ghia, Ghia and Shin (1982).
//!
//! Steady-state criterion: every `steady_window` time units the kinetic
//! energy is compared with its value one window before; the flow is steady
//! when the relative change is at most `steady_tolerance`.

use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, Simulation, Stop};
use crate::error::CaseResult;
use crate::setup::config_text_of;
use crate::setup::{case_execution_mode, integrator};
use crate::solver_state::{dump_flow, load_flow, save_flow};
use crate::steady::SteadyState;
use serde::{Deserialize, Serialize};
use std::path::Path;
use watershed_exprgraph::ExpressionGraph;
use watershed_fields::{Grid, XFace, YFace};
use watershed_io::csv::write_csv;
use watershed_io::dumps::DumpedField;
use watershed_io::plot::{Mark, Series, line_chart};
use watershed_operators::Side;
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, ConvectionForm, IncompressibleFlow,
    IncompressibleFlowBuilder, SpaceOrder,
};

/// The case's name.
pub const NAME: &str = "lid-driven-cavity";

/// The registry entry.
pub const INFO: CaseInfo = CaseInfo {
    name: NAME,
    description: "2D cavity flow to steady state; centreline profiles vs Ghia et al. (1982), Re 100/400/1000, PNG",
    documented_config: CavityConfig::DOCUMENTED,
    prepare,
    config_text: |o| config_text_of::<CavityConfig>(NAME, o),
};

/// Configuration (see `cases/configs/lid-driven-cavity.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CavityConfig {
    /// Reynolds number.
    pub re: f64,
    /// Cells per side.
    pub cells: usize,
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
    /// Largest allowed difference from Ghia's points.
    pub ghia_tolerance: f64,
    /// Form of the momentum convection ([`ConvectionForm::NAMES`]).
    pub convection: String,
    /// Order of the spatial operators: 2 or 4.
    pub space_order: usize,
    /// Patches along x, y, z that the momentum stages run on (see
    /// `IncompressibleFlowBuilder::patches`); `[0, 0, 0]`: one per rank.
    pub patches: [usize; 3],
    /// With several patches, the projection whole on every rank instead
    /// of on the patches (`IncompressibleFlowBuilder::replicated_projection`).
    pub replicate_projection: bool,
}

impl Default for CavityConfig {
    fn default() -> Self {
        CavityConfig {
            re: 100.0,
            cells: 64,
            end_time: 40.0,
            cfl: 0.5,
            diffusion_number: 0.2,
            steady_tolerance: 1e-4,
            steady_window: 1.0,
            integrator: "forward-euler".into(),
            ghia_tolerance: 0.02,
            convection: "skew-symmetric".into(),
            space_order: 2,
            patches: [1, 1, 1],
            replicate_projection: false,
        }
    }
}

impl CaseConfig for CavityConfig {
    const DOCUMENTED: &'static str = include_str!("../../configs/lid-driven-cavity.toml");

    fn check_ranges(&self) -> Option<RangeProblem> {
        in_range("re", self.re, 1.0, 1e4)
            .or_else(|| in_range("cells", self.cells, 8, 1024))
            .or_else(|| in_range("end_time", self.end_time, 1e-12, 1e6))
            .or_else(|| in_range("cfl", self.cfl, 1e-6, 1.0))
            .or_else(|| in_range("diffusion_number", self.diffusion_number, 1e-6, 0.5))
            .or_else(|| in_range("steady_tolerance", self.steady_tolerance, 1e-12, 1.0))
            .or_else(|| in_range("steady_window", self.steady_window, 1e-6, 1e6))
            .or_else(|| one_of("integrator", &self.integrator, &crate::setup::INTEGRATORS))
            .or_else(|| in_range("ghia_tolerance", self.ghia_tolerance, 1e-6, 1.0))
            .or_else(|| one_of("convection", &self.convection, &ConvectionForm::NAMES))
            .or_else(|| one_of("space_order", &self.space_order.to_string(), &["2", "4"]))
    }
}

/// Ghia's points for `re`: (table "u" or "v", coordinate, velocity).
pub fn ghia_table(re: f64) -> Vec<(String, f64, f64)> {
    include_str!("../../data/ghia.csv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let parts: Vec<&str> = l.split(',').collect();
            let table_re: f64 = parts.first()?.parse().ok()?;
            if (table_re - re).abs() > 1e-9 {
                return None;
            }
            Some((
                parts.get(1)?.to_string(),
                parts.get(2)?.parse().ok()?,
                parts.get(3)?.parse().ok()?,
            ))
        })
        .collect()
}

/// (position, velocity) samples along a line.
pub type Profile = Vec<(f64, f64)>;

/// The running cavity.
pub struct Cavity {
    config: CavityConfig,
    grid: Grid,
    flow: IncompressibleFlow,
    /// The steady-state test.
    steady: SteadyState,
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<CavityConfig>(NAME, options)?;
    let config = loaded.config.clone();
    let n = config.cells;
    let grid = Grid::new([n, n, 1], [1.0; 3], [0.0; 3])?;
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let order = SpaceOrder::from_number(config.space_order)?;
    let ghosts = order.ghost_layers_for_flow();
    let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(ghosts), 1.0 / config.re)
        .convection(ConvectionForm::from_name(&config.convection)?)
        .space_order(order)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0)),
        )
        .velocity_conditions(1, walls)
        .integrator(integrator(&config.integrator))
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
    let stop = Stop::EndTime(config.end_time);
    Ok(Prepared {
        config_text: crate::config::to_text(NAME, &loaded)?,
        simulation: Box::new(Cavity {
            steady: SteadyState::new(config.steady_tolerance, config.steady_window),
            config,
            grid,
            flow,
        }),
        stop,
    })
}

impl Cavity {
    /// (y, u) along x = 0.5 and (x, v) along y = 0.5, walls included:
    /// each line a window of the flow (on patches, gathered from them).
    pub fn centrelines(&self) -> CaseResult<(Profile, Profile)> {
        let n = self.config.cells;
        let half = n / 2;
        // u on the x faces at x = 0.5 (the first face of the column of
        // cells from n/2), every row.
        let u_line = self.flow.with_velocity_window::<XFace, _>(
            [half, 0, 0],
            [1, n, 1],
            |u| -> CaseResult<_> {
                let layout = u.layout();
                let values = u.values()?;
                let mut line = vec![(0.0, 0.0)];
                for j in 0..n as isize {
                    let index = [0, j, 0];
                    line.push((
                        layout.coordinate(index)[1],
                        values[layout.linear_index(index)],
                    ));
                }
                line.push((1.0, 1.0));
                Ok(line)
            },
        )??;
        let v_line = self.flow.with_velocity_window::<YFace, _>(
            [0, half, 0],
            [n, 1, 1],
            |v| -> CaseResult<_> {
                let layout = v.layout();
                let values = v.values()?;
                let mut line = vec![(0.0, 0.0)];
                for i in 0..n as isize {
                    let index = [i, 0, 0];
                    line.push((
                        layout.coordinate(index)[0],
                        values[layout.linear_index(index)],
                    ));
                }
                line.push((1.0, 0.0));
                Ok(line)
            },
        )??;
        Ok((u_line, v_line))
    }
}

impl Simulation for Cavity {
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
        self.steady.save(group)
    }
    fn load_shared_state(&mut self, group: &hdf5::Group) -> CaseResult<()> {
        self.steady.load(group)?;
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
        let (u_line, v_line) = self.centrelines()?;
        let table = ghia_table(self.config.re);
        let mut files = Vec::new();
        if let Some(dir) = output {
            let csv = dir.join(format!("{NAME}_centrelines.csv"));
            let rows: Vec<Vec<f64>> = u_line
                .iter()
                .zip(v_line.iter())
                .map(|(&(y, u), &(x, v))| vec![y, u, x, v])
                .collect();
            write_csv(&csv, "y,u_at_x_half,x,v_at_y_half", &rows)?;
            files.push(csv);
            for (name, line, axis) in [("u", &u_line, "y"), ("v", &v_line, "x")] {
                let png = dir.join(format!("{NAME}_{name}.png"));
                let reference: Vec<(f64, f64)> = table
                    .iter()
                    .filter(|(t, _, _)| t == name)
                    .map(|&(_, c, v)| (c, v))
                    .collect();
                let mut series = vec![Series {
                    label: format!("Watershed {0}x{0}", self.config.cells),
                    points: line.clone(),
                    mark: Mark::Line,
                }];
                if !reference.is_empty() {
                    series.push(Series {
                        label: "Ghia et al. (1982)".into(),
                        points: reference,
                        mark: Mark::Points,
                    });
                }
                line_chart(
                    &png,
                    &format!(
                        "Lid-driven cavity, Re = {}: {name} along the centreline",
                        self.config.re
                    ),
                    axis,
                    name,
                    &series,
                )?;
                files.push(png);
            }
        }
        let steady = if self.steady.is_steady() {
            "steady".to_string()
        } else {
            format!("NOT steady at t = {:.3}", self.flow.time())
        };
        if table.is_empty() {
            return Ok(CaseCheck {
                name: format!(
                    "steady state at Re = {} (Ghia's tables: 100, 400, 1000)",
                    self.config.re
                ),
                passed: self.steady.is_steady(),
                figure: steady,
                files,
            });
        }
        let worst = table
            .iter()
            .map(|(t, coordinate, reference)| {
                let line = if t == "u" { &u_line } else { &v_line };
                (interpolate(line, *coordinate) - reference).abs()
            })
            .fold(0.0, f64::max);
        Ok(CaseCheck {
            name: format!(
                "centreline velocities vs Ghia et al. (1982), Re = {}",
                self.config.re
            ),
            passed: self.steady.is_steady() && worst <= self.config.ghia_tolerance,
            figure: format!(
                "max |difference| = {worst:.4} (allowed {}), {steady}",
                self.config.ghia_tolerance
            ),
            files,
        })
    }
}

/// Linear interpolation of (position, value) samples sorted by position.
fn interpolate(samples: &[(f64, f64)], at: f64) -> f64 {
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
