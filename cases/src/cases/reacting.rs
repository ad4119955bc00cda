//! `reacting-species`: coupled species with different diffusivities and a
//! nonlinear reaction, carried by a prescribed or a computed flow.

use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::cases::advection::{bounds_and_mass, scheme};
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, Simulation, Stop};
use crate::error::CaseResult;
use crate::setup::config_text_of;
use crate::setup::{case_execution_mode, integrator, solver_graph_options};
use crate::solver_state::{
    dump_flow, dump_solution, load_flow, load_solution, save_flow, save_solution,
};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::path::Path;
use watershed_exprgraph::{ExpressionGraph, Tag};
use watershed_fields::{CellCentre, Grid, LocationKind, XFace, YFace};
use watershed_io::dumps::{DumpedField, dump_graph_field};
use watershed_solvers::{
    Diffusivity, IncompressibleFlow, IncompressibleFlowBuilder, TransportEquation, TransportSolver,
    TransportSolverBuilder,
};

/// The case's name.
pub const NAME: &str = "reacting-species";

/// The species.
pub const SPECIES: [&str; 3] = ["A", "B", "C"];

/// The registry entry.
pub const INFO: CaseInfo = CaseInfo {
    name: NAME,
    description: "species A + B -> 2C with different diffusivities in a prescribed or computed flow",
    documented_config: ReactingConfig::DOCUMENTED,
    prepare,
    config_text: |o| config_text_of::<ReactingConfig>(NAME, o),
    decomposes: false,
};

/// Configuration (see `cases/configs/reacting-species.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReactingConfig {
    /// Cells per side.
    pub cells: usize,
    /// "prescribed" or "computed".
    pub flow: String,
    /// Velocity scale.
    pub speed: f64,
    /// Viscosity of the computed flow.
    pub viscosity: f64,
    /// Reaction rate constant.
    pub rate: f64,
    /// Diffusivities of A, B, C.
    pub diffusivities: Vec<f64>,
    /// Convective scheme.
    pub scheme: String,
    /// End time.
    pub end_time: f64,
    /// Courant number.
    pub cfl: f64,
    /// Diffusion number.
    pub diffusion_number: f64,
    /// Time integrator.
    pub integrator: String,
}

impl Default for ReactingConfig {
    fn default() -> Self {
        ReactingConfig {
            cells: 64,
            flow: "prescribed".into(),
            speed: 1.0,
            viscosity: 0.01,
            rate: 20.0,
            diffusivities: vec![1e-3, 2e-3, 5e-4],
            scheme: "limited".into(),
            end_time: 0.5,
            cfl: 0.4,
            diffusion_number: 0.2,
            integrator: "ssp-rk3".into(),
        }
    }
}

impl CaseConfig for ReactingConfig {
    const DOCUMENTED: &'static str = include_str!("../../configs/reacting-species.toml");

    fn check_ranges(&self) -> Option<RangeProblem> {
        if self.diffusivities.len() != SPECIES.len() {
            return Some((
                "diffusivities".into(),
                format!("{:?}", self.diffusivities),
                "three values (A, B, C)".into(),
            ));
        }
        let diffusivity = self
            .diffusivities
            .iter()
            .find_map(|&d| in_range("diffusivities", d, 0.0, 10.0));
        in_range("cells", self.cells, 8, 2048)
            .or_else(|| one_of("flow", &self.flow, &["prescribed", "computed"]))
            .or_else(|| in_range("speed", self.speed, 0.0, 100.0))
            .or_else(|| in_range("viscosity", self.viscosity, 1e-9, 100.0))
            .or_else(|| in_range("rate", self.rate, 0.0, 1e4))
            .or(diffusivity)
            .or_else(|| one_of("scheme", &self.scheme, &["central", "upwind", "limited"]))
            .or_else(|| in_range("end_time", self.end_time, 1e-12, 1e6))
            .or_else(|| in_range("cfl", self.cfl, 1e-6, 1.0))
            .or_else(|| in_range("diffusion_number", self.diffusion_number, 1e-6, 0.5))
            .or_else(|| one_of("integrator", &self.integrator, &crate::setup::INTEGRATORS))
    }
}

/// The running case.
pub struct Reacting {
    config: ReactingConfig,
    grid: Grid,
    solver: TransportSolver,
    flow: Option<IncompressibleFlow>,
    velocity: [Tag; 3],
    /// [total mass, mass of A minus mass of B] at the start.
    invariants: [f64; 2],
}

fn velocity_x(speed: f64) -> impl Fn([f64; 3]) -> f64 {
    move |[x, y, _]| speed * (2.0 * PI * x).sin() * (2.0 * PI * y).cos()
}

fn velocity_y(speed: f64) -> impl Fn([f64; 3]) -> f64 {
    move |[x, y, _]| -speed * (2.0 * PI * x).cos() * (2.0 * PI * y).sin()
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<ReactingConfig>(NAME, options)?;
    let config = loaded.config.clone();
    let n = config.cells;
    let grid = Grid::new([n, n, 1], [1.0; 3], [0.0; 3])?.with_periodic([true, true, false]);
    let patch = grid.whole_domain(2);
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let tags: Vec<Tag> = SPECIES
        .iter()
        .map(|s| TransportEquation::new(s).solution_tag())
        .collect();
    let mut builder = TransportSolverBuilder::new(&patch);
    for (index, species) in SPECIES.iter().enumerate() {
        let (a, b, k) = (tags[0].clone(), tags[1].clone(), config.rate);
        // A + B -> 2 C: A and B lose k A B each, C gains 2 k A B.
        let weight = if index == 2 { 2.0 } else { -1.0 };
        builder = builder.equation(
            TransportEquation::new(species)
                .diffusion(Diffusivity::Constant(config.diffusivities[index]))
                .convection(velocity.clone(), scheme(&config.scheme, "van-leer"))
                .source_expression(move |s| {
                    (weight * k) * s.field::<CellCentre>(&a) * s.field::<CellCentre>(&b)
                }),
        );
    }
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
        .set_field::<XFace>(&velocity[0], velocity_x(config.speed))?;
    solver
        .graph()
        .set_field::<YFace>(&velocity[1], velocity_y(config.speed))?;
    solver.set_initial_condition("A", |[x, _, _]| 0.5 * (1.0 + (2.0 * PI * x).cos()))?;
    solver.set_initial_condition("B", |[x, _, _]| 0.5 * (1.0 - (2.0 * PI * x).cos()))?;
    solver.set_initial_condition("C", |_| 0.0)?;
    let flow = if config.flow == "computed" {
        let flow = IncompressibleFlowBuilder::new(&patch, config.viscosity)
            .integrator(integrator(&config.integrator))
            .mode(case_execution_mode(options))
            .placement(options.placement.clone())
            .build()?;
        flow.set_velocity::<XFace>(velocity_x(config.speed))?;
        flow.set_velocity::<YFace>(velocity_y(config.speed))?;
        solver.carry_by(&flow, &velocity)?;
        Some(flow)
    } else {
        None
    };
    let mut case = Reacting {
        config,
        grid,
        solver,
        flow,
        velocity,
        invariants: [0.0; 2],
    };
    case.invariants = case.invariants()?;
    Ok(Prepared {
        config_text: crate::config::to_text(NAME, &loaded)?,
        stop: Stop::EndTime(case.config.end_time),
        simulation: Box::new(case),
    })
}

impl Reacting {
    /// [total mass, mass of A minus mass of B].
    fn invariants(&self) -> CaseResult<[f64; 2]> {
        let masses: Vec<f64> = SPECIES
            .iter()
            .map(|s| bounds_and_mass(&self.solver, s).map(|(_, _, m)| m))
            .collect::<CaseResult<_>>()?;
        Ok([masses.iter().sum(), masses[0] - masses[1]])
    }
}

impl Simulation for Reacting {
    fn case(&self) -> &str {
        NAME
    }
    fn grid(&self) -> &Grid {
        &self.grid
    }
    fn time(&self) -> f64 {
        self.solver.time()
    }
    fn steps(&self) -> u64 {
        self.solver.steps()
    }
    fn cell_updates_per_step(&self) -> u64 {
        (self.grid.total_cells() * SPECIES.len()) as u64
    }
    fn next_dt(&self) -> CaseResult<f64> {
        let (cfl, d) = (self.config.cfl, self.config.diffusion_number);
        let mut dt = self.solver.stable_time_step(cfl, d)?;
        if let Some(flow) = &self.flow {
            dt = dt.min(flow.stable_time_step(cfl, d)?);
        }
        Ok(dt)
    }
    fn step(&mut self, dt: f64) -> CaseResult<()> {
        // The species' velocity placeholders always hold the flow's current
        // velocity (carried after every step, at setup and at a restart), so
        // `next_dt` sees it and a restart resumes from the same state.
        if let Some(flow) = &mut self.flow {
            self.solver.step(dt)?;
            flow.step(dt)?;
            self.solver.carry_by(flow, &self.velocity)?;
        } else {
            self.solver.step(dt)?;
        }
        Ok(())
    }
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        let mut written = Vec::new();
        for species in SPECIES {
            written.push(dump_solution(
                &self.solver,
                species,
                group,
                &format!("Y_{species}"),
            )?);
        }
        match &self.flow {
            Some(flow) => written.extend(dump_flow(flow, group)?),
            None => {
                written.push(dump_graph_field::<XFace>(
                    self.solver.graph(),
                    &self.velocity[0],
                    group,
                    "u",
                )?);
                written.push(dump_graph_field::<YFace>(
                    self.solver.graph(),
                    &self.velocity[1],
                    group,
                    "v",
                )?);
            }
        }
        Ok(written)
    }
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        for species in SPECIES {
            save_solution(&self.solver, species, group)?;
        }
        if let Some(flow) = &self.flow {
            save_flow(flow, group, "flow_")?;
        }
        crate::checkpoint::save_series(group, "invariants", &self.invariants)
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        for species in SPECIES {
            load_solution(&self.solver, species, group)?;
        }
        if let Some(flow) = &mut self.flow {
            load_flow(flow, group, "flow_", time, step)?;
            self.solver.carry_by(flow, &self.velocity)?;
        }
        if let [a, b] = crate::checkpoint::load_series(group, "invariants")?[..] {
            self.invariants = [a, b];
        }
        Ok(self.solver.set_clock(time, step)?)
    }
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)> {
        let mut graphs = vec![("species".into(), self.solver.graph())];
        if let Some(flow) = &self.flow {
            graphs.push(("momentum".into(), flow.graph()));
        }
        graphs
    }
    fn finish(&mut self, _output: Option<&Path>) -> CaseResult<CaseCheck> {
        let [total, difference] = self.invariants()?;
        let [total0, difference0] = self.invariants;
        let total_drift = (total - total0).abs() / total0.abs().max(f64::MIN_POSITIVE);
        let difference_drift =
            (difference - difference0).abs() / total0.abs().max(f64::MIN_POSITIVE);
        let mut lowest = f64::INFINITY;
        for species in SPECIES {
            lowest = lowest.min(bounds_and_mass(&self.solver, species)?.0);
        }
        let (_, _, produced) = bounds_and_mass(&self.solver, "C")?;
        let tolerance = 1e-10;
        let bounded = self.config.scheme == "central" || lowest >= -1e-12;
        Ok(CaseCheck {
            name:
                "total mass and mass(A) - mass(B) conserved, C produced, no negative mass fraction"
                    .into(),
            passed: total_drift <= tolerance
                && difference_drift <= tolerance
                && produced > 0.0
                && bounded,
            figure: format!(
                "total mass drift {total_drift:.2e}, A - B drift {difference_drift:.2e} (allowed {tolerance:e}); mass of C {produced:.4e}; lowest mass fraction {lowest:.2e}"
            ),
            files: Vec::new(),
        })
    }
}
