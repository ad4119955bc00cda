//! `cylinder`: the DFG benchmark "flow around a cylinder" of Schafer &
//! Turek (1996), 2D-1 (Re = 20, steady) and 2D-2 (Re = 100, periodic),
//! with the cylinder an immersed body ([`watershed_solvers::Body`]).
//!
//! The drag and lift come from the flow's force reductions
//! ([`IncompressibleFlow::body_force`]) after every step; the check
//! compares them, the recirculation length and pressure difference
//! (2D-1) or the Strouhal number (2D-2) with the published reference
//! intervals (`REFERENCE_2D1`, `REFERENCE_2D2`).

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
use watershed_operators::Side;
use watershed_solvers::{
    Body, BoundaryCondition, BoundaryConditions, BoundaryExpression, IncompressibleFlow,
    IncompressibleFlowBuilder, Outflow, Shape,
};

/// The case's name.
pub const NAME: &str = "cylinder";

/// The registry entry.
pub const INFO: CaseInfo = CaseInfo {
    name: NAME,
    description: "DFG flow around a cylinder (Schafer & Turek 1996), 2D-1 and 2D-2, immersed body; c_D, c_L, L_a, St vs the reference intervals (CSV, PNG)",
    documented_config: CylinderConfig::DOCUMENTED,
    prepare,
    config_text: |o| config_text_of::<CylinderConfig>(NAME, o),
};

/// Channel height.
pub const HEIGHT: f64 = 0.41;
/// Nominal channel length.
pub const LENGTH: f64 = 2.2;
/// Cylinder diameter and centre.
pub const DIAMETER: f64 = 0.1;
/// The cylinder's centre.
pub const CENTRE: [f64; 3] = [0.2, 0.2, 0.0];
/// Kinematic viscosity.
pub const VISCOSITY: f64 = 1e-3;

/// 2D-1 reference intervals (Schafer & Turek 1996, table 3): c_D, c_L,
/// L_a, Delta p.
pub const REFERENCE_2D1: [(&str, f64, f64); 4] = [
    ("c_D", 5.57, 5.59),
    ("c_L", 0.0104, 0.0110),
    ("L_a", 0.0842, 0.0852),
    ("Delta p", 0.1172, 0.1176),
];
/// 2D-2 reference intervals (table 4): c_D,max, c_L,max, St.
pub const REFERENCE_2D2: [(&str, f64, f64); 3] = [
    ("c_D,max", 3.22, 3.24),
    ("c_L,max", 0.99, 1.01),
    ("St", 0.295, 0.305),
];

/// Configuration (see `cases/configs/cylinder.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CylinderConfig {
    /// "2D-1" or "2D-2".
    pub benchmark: String,
    /// Cells across the channel.
    pub cells: usize,
    /// Latest end time.
    pub end_time: f64,
    /// Courant number.
    pub cfl: f64,
    /// Diffusion number.
    pub diffusion_number: f64,
    /// Time integrator.
    pub integrator: String,
    /// "convective" or "zero-gradient".
    pub outflow: String,
    /// 2D-1 steady test: relative change of c_D...
    pub steady_tolerance: f64,
    /// ... over this time.
    pub steady_window: f64,
    /// 2D-2: measure the periods after this time.
    pub statistics_from: f64,
    /// Allowed relative distance of c_D (2D-1) or c_D,max (2D-2) from its interval.
    pub drag_tolerance: f64,
    /// Allowed absolute distance of the 2D-1 c_L, or relative of the 2D-2
    /// c_L,max, from its interval.
    pub lift_tolerance: f64,
    /// Allowed relative distance of L_a and Delta p from their intervals.
    pub length_tolerance: f64,
    /// Allowed relative distance of St from its interval.
    pub strouhal_tolerance: f64,
    /// Patches along x, y, z that the momentum stages run on (see
    /// `IncompressibleFlowBuilder::patches`); `[0, 0, 0]`: one per rank.
    pub patches: [usize; 3],
    /// With several patches, the projection whole on every rank instead
    /// of on the patches (`IncompressibleFlowBuilder::replicated_projection`).
    pub replicate_projection: bool,
}

impl Default for CylinderConfig {
    fn default() -> Self {
        CylinderConfig {
            benchmark: "2D-1".into(),
            cells: 64,
            end_time: 8.0,
            cfl: 0.5,
            diffusion_number: 0.2,
            integrator: "ssp-rk3".into(),
            outflow: "convective".into(),
            steady_tolerance: 1e-5,
            steady_window: 0.5,
            statistics_from: 6.0,
            drag_tolerance: 0.02,
            lift_tolerance: 0.02,
            length_tolerance: 0.15,
            strouhal_tolerance: 0.05,
            patches: [1, 1, 1],
            replicate_projection: false,
        }
    }
}

impl CaseConfig for CylinderConfig {
    const DOCUMENTED: &'static str = include_str!("../../configs/cylinder.toml");

    fn check_ranges(&self) -> Option<RangeProblem> {
        one_of("benchmark", &self.benchmark, &["2D-1", "2D-2"])
            .or_else(|| in_range("cells", self.cells, 16, 512))
            .or_else(|| in_range("end_time", self.end_time, 1e-12, 1e6))
            .or_else(|| in_range("cfl", self.cfl, 1e-6, 1.0))
            .or_else(|| in_range("diffusion_number", self.diffusion_number, 1e-6, 0.5))
            .or_else(|| one_of("integrator", &self.integrator, &crate::setup::INTEGRATORS))
            .or_else(|| one_of("outflow", &self.outflow, &["convective", "zero-gradient"]))
            .or_else(|| in_range("steady_tolerance", self.steady_tolerance, 1e-14, 1.0))
            .or_else(|| in_range("steady_window", self.steady_window, 1e-6, 1e6))
            .or_else(|| in_range("statistics_from", self.statistics_from, 0.0, 1e6))
            .or_else(|| in_range("drag_tolerance", self.drag_tolerance, 0.0, 10.0))
            .or_else(|| in_range("lift_tolerance", self.lift_tolerance, 0.0, 10.0))
            .or_else(|| in_range("length_tolerance", self.length_tolerance, 0.0, 10.0))
            .or_else(|| in_range("strouhal_tolerance", self.strouhal_tolerance, 0.0, 10.0))
    }
}

impl CylinderConfig {
    /// The inflow's peak speed of the benchmark.
    pub fn peak_speed(&self) -> f64 {
        if self.benchmark == "2D-2" { 1.5 } else { 0.3 }
    }

    /// The mean inflow speed `2/3 U_max`.
    pub fn mean_speed(&self) -> f64 {
        2.0 / 3.0 * self.peak_speed()
    }

    fn steady(&self) -> bool {
        self.benchmark == "2D-1"
    }
}

/// How far `value` lies outside `[lo, hi]` (0 inside), relative to the
/// nearer end when `relative`.
pub fn distance_from(value: f64, lo: f64, hi: f64, relative: bool) -> f64 {
    let gap = if value < lo {
        lo - value
    } else if value > hi {
        value - hi
    } else {
        0.0
    };
    if relative {
        gap / if value < lo { lo.abs() } else { hi.abs() }
    } else {
        gap
    }
}

/// The running benchmark.
pub struct Cylinder {
    config: CylinderConfig,
    grid: Grid,
    flow: IncompressibleFlow,
    steady: SteadyState,
    /// (time, c_D, c_L) after every step with a force.
    history: Vec<[f64; 3]>,
    /// The one time step of the run (see [`fixed_time_step`]).
    dt: f64,
}

/// The time step of the whole run: the Courant limit of 1.5 times the
/// inflow's peak speed (the speed-up past the cylinder) and the diffusion
/// limit, shortened so that a whole number of steps ends at `end_time`.
/// One dt for every step, because the direct forcing's steady state
/// depends on dt: the projection after the forcing leaves a slip of
/// `b dt dp/dn` at the faces next to the body (2D-1 at 32 cells across:
/// c_D 5.51 at the Courant limit, 5.55 for a 5 % shorter step).
pub fn fixed_time_step(config: &CylinderConfig, h: f64) -> f64 {
    let convective = config.cfl * h / (1.5 * config.peak_speed());
    let diffusive = config.diffusion_number * h * h / VISCOSITY;
    let limit = convective.min(diffusive);
    config.end_time / (config.end_time / limit).ceil()
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<CylinderConfig>(NAME, options)?;
    let config = loaded.config.clone();
    if !config.steady() && config.statistics_from >= config.end_time {
        return Err(CaseError::Usage(format!(
            "statistics_from = {} is not before end_time = {}: 2D-2 measures the periods between them",
            config.statistics_from, config.end_time
        )));
    }
    let ny = config.cells;
    let h = HEIGHT / ny as f64;
    let nx = (LENGTH / h / 16.0).ceil() as usize * 16;
    let grid = Grid::new([nx, ny, 1], [nx as f64 * h, HEIGHT, 1.0], [0.0; 3])?;
    let peak = config.peak_speed();
    let inflow = BoundaryExpression::new("DFG parabolic inflow", move |p| {
        4.0 * peak * p.y.clone() * (HEIGHT - p.y.clone()) / (HEIGHT * HEIGHT)
    });
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), VISCOSITY)
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
        .body(
            Body::fixed(NAME, Shape::circle(CENTRE, 0.5 * DIAMETER))
                // The force's weight falls from 1 to 0 between 2 and 8
                // cells off the surface, or less where the bottom wall
                // (0.15 below the cylinder) is nearer than 11 cells.
                .force_band(2.0 * h, (8.0 * h).min(0.15 - 3.0 * h)),
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
    if let Some(why) = flow.force_unavailable(NAME) {
        return Err(CaseError::Usage(format!(
            "the cylinder's force cannot be computed on {ny} cells across: {why}"
        )));
    }
    Ok(Prepared {
        config_text: crate::config::to_text(NAME, &loaded)?,
        simulation: Box::new(Cylinder {
            steady: SteadyState::of("c_D", config.steady_tolerance, config.steady_window),
            history: Vec::new(),
            dt: fixed_time_step(&config, h),
            config,
            grid,
            flow,
        }),
        stop: Stop::EndTime(loaded.config.end_time),
    })
}

/// The 2D-2 statistics over the whole periods of the lift after a time:
/// the periods' count, St, and the largest c_D and c_L in them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Periodic {
    /// Whole periods measured.
    pub periods: usize,
    /// Strouhal number `D / (T U_mean)`.
    pub strouhal: f64,
    /// Largest drag coefficient.
    pub drag_max: f64,
    /// Largest lift coefficient.
    pub lift_max: f64,
}

/// The periods of `history` (time, c_D, c_L) after `from`: between the
/// first and the last upward crossing of c_L through its mean over that
/// time (linearly interpolated; on coarse grids the lift oscillates about
/// a mean that is not zero).
pub fn periodic_statistics(history: &[[f64; 3]], from: f64, mean_speed: f64) -> Option<Periodic> {
    let late: Vec<&[f64; 3]> = history.iter().filter(|r| r[0] >= from).collect();
    if late.is_empty() {
        return None;
    }
    let mean = late.iter().map(|r| r[2]).sum::<f64>() / late.len() as f64;
    let crossings: Vec<f64> = late
        .windows(2)
        .filter(|w| w[0][2] < mean && w[1][2] >= mean)
        .map(|w| w[0][0] + (w[1][0] - w[0][0]) * (mean - w[0][2]) / (w[1][2] - w[0][2]))
        .collect();
    if crossings.len() < 3 {
        return None;
    }
    let (first, last) = (crossings[0], crossings[crossings.len() - 1]);
    let periods = crossings.len() - 1;
    let period = (last - first) / periods as f64;
    let inside = late.iter().filter(|r| r[0] >= first && r[0] <= last);
    let (drag_max, lift_max) = inside.fold((f64::NEG_INFINITY, f64::NEG_INFINITY), |m, r| {
        (m.0.max(r[1]), m.1.max(r[2]))
    });
    Some(Periodic {
        periods,
        strouhal: DIAMETER / (period * mean_speed),
        drag_max,
        lift_max,
    })
}

impl Cylinder {
    /// `(c_D, c_L)` of the last step.
    pub fn coefficients(&self) -> CaseResult<(f64, f64)> {
        let force = self.flow.body_force(NAME)?;
        let u = self.config.mean_speed();
        let scale = 2.0 / (u * u * DIAMETER);
        Ok((force[0] * scale, force[1] * scale))
    }

    /// `u` along the centre line `y = 0.2` behind the cylinder:
    /// `(x, u)` at the x faces, interpolated linearly between the two
    /// rows of faces around it.
    pub fn wake_centreline(&self) -> CaseResult<Vec<(f64, f64)>> {
        let h = self.grid.spacing()[1];
        // Face rows sit at y = (j + 1/2) h.
        let below = ((CENTRE[1] / h) - 0.5).floor() as usize;
        let weight = CENTRE[1] / h - 0.5 - below as f64;
        let cells = self.grid.cells();
        // The two rows of cells around the line, every column (a window of
        // the flow: on patches, gathered from them).
        self.flow.with_velocity_window::<XFace, _>(
            [0, below, 0],
            [cells[0], 2, 1],
            |u| -> CaseResult<_> {
                let layout = u.layout();
                let values = u.values()?;
                let columns = layout.interior_extent()[0] as isize;
                Ok((0..columns)
                    .map(|i| {
                        let a = values[layout.linear_index([i, 0, 0])];
                        let b = values[layout.linear_index([i, 1, 0])];
                        (layout.coordinate([i, 0, 0])[0], a + weight * (b - a))
                    })
                    .filter(|&(x, _)| x > CENTRE[0] + 0.5 * DIAMETER)
                    .collect())
            },
        )?
    }

    /// The recirculation length: from the cylinder's back (x = 0.25) to
    /// where `u` on the centre line turns positive.
    pub fn recirculation_length(&self) -> CaseResult<Option<f64>> {
        let line = self.wake_centreline()?;
        Ok(line
            .windows(2)
            .find(|w| w[0].1 < 0.0 && w[1].1 >= 0.0)
            .map(|w| {
                let (x0, u0, x1, u1) = (w[0].0, w[0].1, w[1].0, w[1].1);
                x0 + (x1 - x0) * (-u0) / (u1 - u0) - (CENTRE[0] + 0.5 * DIAMETER)
            }))
    }

    /// The pressure difference between the cylinder's front (0.15, 0.2)
    /// and back (0.25, 0.2): on each of the two rows of cells around
    /// y = 0.2, the pressure extrapolated linearly to the surface point
    /// from the two nearest cells outside the body, then interpolated
    /// between the rows.
    pub fn pressure_difference(&self) -> CaseResult<f64> {
        let h = self.grid.spacing();
        let radius = 0.5 * DIAMETER;
        let below = ((CENTRE[1] / h[1]) - 0.5).floor() as usize;
        let weight = CENTRE[1] / h[1] - 0.5 - below as f64;
        let cells = self.grid.cells();
        // The two rows of cells around y = 0.2, every column (a window of
        // the flow: on patches, gathered from them).
        self.flow
            .with_pressure_window([0, below, 0], [cells[0], 2, 1], |p| -> CaseResult<f64> {
                let layout = p.layout();
                let values = p.values()?;
                let at = |i: isize, row: isize| values[layout.linear_index([i, row, 0])];
                // `side` -1: the front, outward to smaller x; +1: the back.
                let surface = |side: isize, row: isize| -> f64 {
                    let x_surface = CENTRE[0] + side as f64 * radius;
                    let mut i = (x_surface / h[0] - 0.5).floor() as isize;
                    if side > 0 {
                        i += 1;
                    }
                    // The first cell centre outside the body along the row.
                    while self
                        .flow
                        .body_distance(layout.coordinate([i, row, 0]))
                        .is_some_and(|d| d < 0.0)
                    {
                        i += side;
                    }
                    let (near, far) = (at(i, row), at(i + side, row));
                    let distance = (layout.coordinate([i, row, 0])[0] - x_surface).abs();
                    near + (near - far) * distance / h[0]
                };
                let row =
                    |side: isize| surface(side, 0) + weight * (surface(side, 1) - surface(side, 0));
                Ok(row(-1) - row(1))
            })?
    }
}

impl Simulation for Cylinder {
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
        Ok(self.dt)
    }
    fn step(&mut self, dt: f64) -> CaseResult<()> {
        self.flow.step(dt)?;
        // A step from a velocity whose weighted momentum is unknown (a
        // restart from a checkpoint written before the sums were kept)
        // has no force: it is not recorded.
        if let Ok((drag, lift)) = self.coefficients() {
            self.history.push([self.flow.time(), drag, lift]);
        }
        if !self.config.steady() {
            return Ok(());
        }
        // Steady when the drag settles (the kinetic energy of the whole
        // channel kept changing by 1e-5 per 0.5 time units at 32 and 64
        // cells across long after c_D had settled to 1e-6).
        let Some(&[time, drag, _]) = self.history.last() else {
            return Ok(());
        };
        self.steady.observe(time, || Ok(drag))
    }
    fn stop_reason(&self) -> Option<String> {
        self.steady.stop_reason()
    }
    fn status(&self) -> String {
        self.history.last().map_or(String::new(), |r| {
            format!("c_D {:.4} c_L {:.4}", r[1], r[2])
        })
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
        save_rows(group, "force_coefficients", &self.history)
    }
    fn load_shared_state(&mut self, group: &hdf5::Group) -> CaseResult<()> {
        self.steady.load(group)?;
        self.history = load_rows(group, "force_coefficients")?;
        Ok(())
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        load_flow(&mut self.flow, group, "", time, step)?;
        self.load_shared_state(group)
    }
    fn series(&self) -> Option<SeriesLayout> {
        Some(SeriesLayout {
            file_name: format!("{NAME}_forces.csv"),
            header: "time,c_D,c_L".into(),
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
        let mut files = Vec::new();
        if let Some(dir) = output {
            let png = dir.join(format!("{NAME}_forces.png"));
            let series = |column: usize, label: &str| Series {
                label: label.into(),
                points: self.history.iter().map(|r| (r[0], r[column])).collect(),
                mark: Mark::Line,
            };
            line_chart(
                &png,
                &format!(
                    "DFG {}, {} cells across: force coefficients",
                    self.config.benchmark, self.config.cells
                ),
                "t",
                "coefficient",
                &[series(1, "c_D"), series(2, "c_L")],
            )?;
            files.push(png);
        }
        let resolution = format!(
            "{} cells across (D/h = {:.1})",
            self.config.cells,
            DIAMETER / self.grid.spacing()[1]
        );
        if self.config.steady() {
            let (drag, lift) = self.coefficients()?;
            let length = self.recirculation_length()?;
            let dp = self.pressure_difference()?;
            // Read on every rank: a window of a decomposed flow is
            // gathered from every rank's patches (collective).
            let wake = self.wake_centreline()?;
            if let Some(dir) = output {
                let csv = dir.join(format!("{NAME}_wake.csv"));
                let rows: Vec<Vec<f64>> = wake.into_iter().map(|(x, u)| vec![x, u]).collect();
                write_csv(&csv, "x,u_on_y_0.2", &rows)?;
                files.push(csv);
            }
            let [d, l, a, p] = REFERENCE_2D1;
            let drag_off = distance_from(drag, d.1, d.2, true);
            let lift_off = distance_from(lift, l.1, l.2, false);
            let length_off = length.map_or(f64::INFINITY, |x| distance_from(x, a.1, a.2, true));
            let dp_off = distance_from(dp, p.1, p.2, true);
            let steady = if self.steady.is_steady() {
                "steady".to_string()
            } else {
                format!("NOT steady at t = {:.3}", self.flow.time())
            };
            return Ok(CaseCheck {
                name: "DFG 2D-1: c_D, c_L, L_a, Delta p vs Schafer & Turek's intervals".into(),
                passed: self.steady.is_steady()
                    && drag_off <= self.config.drag_tolerance
                    && lift_off <= self.config.lift_tolerance
                    && length_off <= self.config.length_tolerance
                    && dp_off <= self.config.length_tolerance,
                figure: format!(
                    "{resolution}: c_D {drag:.4} [{}, {}] off {:.2} %; c_L {lift:.4} [{}, {}] off {lift_off:.4}; L_a {} [{}, {}] off {:.1} %; Delta p {dp:.4} [{}, {}] off {:.1} %; {steady}",
                    d.1,
                    d.2,
                    100.0 * drag_off,
                    l.1,
                    l.2,
                    length.map_or("none (no recirculation)".into(), |x| format!("{x:.4}")),
                    a.1,
                    a.2,
                    100.0 * length_off,
                    p.1,
                    p.2,
                    100.0 * dp_off
                ),
                files,
            });
        }
        let [d, l, s] = REFERENCE_2D2;
        let Some(stats) = periodic_statistics(
            &self.history,
            self.config.statistics_from,
            self.config.mean_speed(),
        ) else {
            return Ok(CaseCheck {
                name: "DFG 2D-2: c_D,max, c_L,max, St vs Schafer & Turek's intervals".into(),
                passed: false,
                figure: format!(
                    "{resolution}: fewer than two whole periods of the lift after t = {} (up to t = {:.3}): run longer (end_time) or measure from earlier (statistics_from)",
                    self.config.statistics_from,
                    self.flow.time()
                ),
                files,
            });
        };
        let drag_off = distance_from(stats.drag_max, d.1, d.2, true);
        let lift_off = distance_from(stats.lift_max, l.1, l.2, true);
        let strouhal_off = distance_from(stats.strouhal, s.1, s.2, true);
        Ok(CaseCheck {
            name: "DFG 2D-2: c_D,max, c_L,max, St vs Schafer & Turek's intervals".into(),
            passed: drag_off <= self.config.drag_tolerance
                && lift_off <= self.config.lift_tolerance
                && strouhal_off <= self.config.strouhal_tolerance,
            figure: format!(
                "{resolution}, {} periods after t = {}: c_D,max {:.4} [{}, {}] off {:.2} %; c_L,max {:.4} [{}, {}] off {:.2} %; St {:.4} [{}, {}] off {:.2} %",
                stats.periods,
                self.config.statistics_from,
                stats.drag_max,
                d.1,
                d.2,
                100.0 * drag_off,
                stats.lift_max,
                l.1,
                l.2,
                100.0 * lift_off,
                stats.strouhal,
                s.1,
                s.2,
                100.0 * strouhal_off
            ),
            files,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_from_an_interval() {
        assert_eq!(distance_from(5.58, 5.57, 5.59, true), 0.0);
        assert!((distance_from(5.0, 4.0, 4.5, true) - 0.5 / 4.5).abs() < 1e-15);
        assert!((distance_from(3.0, 4.0, 4.5, true) - 0.25).abs() < 1e-15);
        assert!((distance_from(0.2, 0.0104, 0.011, false) - 0.189).abs() < 1e-12);
    }

    /// A sampled sine of known period and amplitude gives its frequency
    /// and maxima back.
    #[test]
    fn periods_of_a_sampled_sine() {
        let period = 1.0 / 3.0;
        let history: Vec<[f64; 3]> = (0..4000)
            .map(|n| {
                let t = n as f64 * 1e-3;
                let phase = 2.0 * std::f64::consts::PI * t / period;
                [t, 3.2 + 0.02 * (2.0 * phase).sin(), 0.1 + phase.sin()]
            })
            .collect();
        let stats = periodic_statistics(&history, 1.0, 1.0).unwrap();
        assert!(stats.periods >= 8);
        assert!(
            (stats.strouhal - DIAMETER / period).abs() < 1e-6,
            "{stats:?}"
        );
        assert!((stats.lift_max - 1.1).abs() < 1e-3);
        assert!((stats.drag_max - 3.22).abs() < 1e-3);
        assert!(periodic_statistics(&history[..1100], 1.0, 1.0).is_none());
    }
}
