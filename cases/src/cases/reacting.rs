//! `reacting-species`: coupled species with different diffusivities and a
//! nonlinear reaction, carried by a prescribed or a computed flow.

use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::cases::advection::{patched_bounds_and_mass, scheme};
use crate::checkpoint::RankCheckpoint;
use crate::config::{CaseConfig, RangeProblem, in_range, one_of};
use crate::driver::{CaseCheck, Simulation, Stop};
use crate::error::CaseResult;
use crate::setup::config_text_of;
use crate::setup::{case_execution_mode, integrator, solver_graph_options};
use crate::solver_state::{
    dump_flow, dump_own_flow_patches, dump_patched_solution, dump_solution, load_flow,
    load_own_flow_patches, load_own_patch_solutions, load_patched_solution, patch_graphs,
    save_flow, save_own_flow_patches, save_own_patch_solutions, save_patched_solution,
};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::path::Path;
use watershed_exprgraph::{ExpressionGraph, Tag};
use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, Location, LocationKind, Patch, SpatialField, XFace, YFace,
};
use watershed_io::dumps::{DumpedField, dump_field, dump_graph_field};
use watershed_io::rank_dumps::create_patch_group;
use watershed_solvers::{
    Diffusivity, IncompressibleFlow, IncompressibleFlowBuilder, PatchedTransport,
    TransportEquation, TransportSolver, TransportSolverBuilder,
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
    /// Patches along x, y, z: the species on equal patches (each count
    /// dividing `cells`), spread over the ranks of the run, and the
    /// computed flow's momentum and projection on the same patches; the
    /// layout, not the rank count, fixes the bits. `[0, 0, 0]`: one per
    /// rank.
    pub patches: [usize; 3],
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
            patches: [1, 1, 1],
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
            .or_else(|| {
                (self.patches != [0, 0, 0])
                    .then(|| in_range("patches[2]", self.patches[2], 1, 1))
                    .flatten()
            })
    }
}

/// The running case.
pub struct Reacting {
    config: ReactingConfig,
    grid: Grid,
    /// The species, on the patches of `config.patches`.
    transport: PatchedTransport,
    /// The computed flow (`flow = "computed"`): on the same patches when
    /// decomposed, holding the whole domain's velocity on every rank.
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

/// The species' solver on `patch` of the grid, carried by the prescribed
/// velocity (which the computed flow, when there is one, replaces).
fn species_on(
    patch: &Patch,
    config: &ReactingConfig,
    options: &CaseOptions,
) -> watershed_solvers::SolverResult<TransportSolver> {
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let tags: Vec<Tag> = SPECIES
        .iter()
        .map(|s| TransportEquation::new(s).solution_tag())
        .collect();
    let mut builder = TransportSolverBuilder::new(patch);
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
    Ok(solver)
}

fn prepare(options: &CaseOptions) -> CaseResult<Prepared> {
    let loaded = crate::setup::load_config::<ReactingConfig>(NAME, options)?;
    let config = loaded.config.clone();
    let n = config.cells;
    let grid = Grid::new([n, n, 1], [1.0; 3], [0.0; 3])?.with_periodic([true, true, false]);
    let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
    let layout =
        crate::setup::patch_layout(&grid, config.patches, GhostWidth::uniform(2), options)?;
    let transport = PatchedTransport::build(layout, options.rank_link(), |patch| {
        species_on(patch, &config, options)
    })?;
    transport.set_initial_condition("A", |[x, _, _]| 0.5 * (1.0 + (2.0 * PI * x).cos()))?;
    transport.set_initial_condition("B", |[x, _, _]| 0.5 * (1.0 - (2.0 * PI * x).cos()))?;
    transport.set_initial_condition("C", |_| 0.0)?;
    let flow = if config.flow == "computed" {
        let builder = IncompressibleFlowBuilder::new(&grid.whole_domain(2), config.viscosity)
            .integrator(integrator(&config.integrator))
            .mode(case_execution_mode(options))
            .placement(options.placement.clone());
        let flow =
            crate::setup::flow_on_patches(builder, &grid, config.patches, false, 2, options)?
                .build()?;
        flow.set_velocity::<XFace>(velocity_x(config.speed))?;
        flow.set_velocity::<YFace>(velocity_y(config.speed))?;
        transport.carry_by(&flow, &velocity)?;
        Some(flow)
    } else {
        None
    };
    let mut case = Reacting {
        config,
        grid,
        transport,
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
    /// [total mass, mass of A minus mass of B], each species' mass summed
    /// over the patches in patch order (collective).
    fn invariants(&self) -> CaseResult<[f64; 2]> {
        let masses: Vec<f64> = SPECIES
            .iter()
            .map(|s| patched_bounds_and_mass(&self.transport, s).map(|(_, _, m)| m))
            .collect::<CaseResult<_>>()?;
        Ok([masses.iter().sum(), masses[0] - masses[1]])
    }

    /// The prescribed velocity component on faces `F` over the whole
    /// domain, as every patch's solver holds it at the same points: what
    /// a dump of the whole domain shows (no patch holds it whole).
    fn prescribed_velocity<F: Location>(
        &self,
        name: &str,
        value: impl Fn([f64; 3]) -> f64,
    ) -> CaseResult<SpatialField<F>> {
        let mut field = SpatialField::<F>::new(name, &self.grid.whole_domain(2), Device::Cpu)?;
        let layout = field.layout().clone();
        let values = field.values_mut()?;
        for index in layout.interior().iter() {
            values[layout.linear_index(index)] = value(layout.coordinate(index));
        }
        Ok(field)
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
        self.transport.time()
    }
    fn steps(&self) -> u64 {
        self.transport.steps()
    }
    fn cell_updates_per_step(&self) -> u64 {
        (self.grid.total_cells() * SPECIES.len()) as u64
    }
    fn next_dt(&self) -> CaseResult<f64> {
        let (cfl, d) = (self.config.cfl, self.config.diffusion_number);
        let mut dt = self.transport.stable_time_step(cfl, d)?;
        if let Some(flow) = &self.flow {
            dt = dt.min(flow.stable_time_step(cfl, d)?);
        }
        Ok(dt)
    }
    fn step(&mut self, dt: f64) -> CaseResult<()> {
        // The species' velocity placeholders always hold the flow's current
        // velocity (carried after every step, at setup and at a restart), so
        // `next_dt` sees it and a restart resumes from the same state.
        self.transport.step(dt)?;
        if let Some(flow) = &mut self.flow {
            flow.step(dt)?;
            self.transport.carry_by(flow, &self.velocity)?;
        }
        Ok(())
    }
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        let mut written = Vec::new();
        for species in SPECIES {
            written.push(dump_patched_solution(
                &self.transport,
                species,
                group,
                &format!("Y_{species}"),
            )?);
        }
        match &self.flow {
            Some(flow) => written.extend(dump_flow(flow, group)?),
            None => {
                let speed = self.config.speed;
                let u = self.prescribed_velocity::<XFace>("u", velocity_x(speed))?;
                written.push(dump_field(group, "u", &u)?);
                let v = self.prescribed_velocity::<YFace>("v", velocity_y(speed))?;
                written.push(dump_field(group, "v", &v)?);
            }
        }
        Ok(written)
    }
    fn dump_own_patches(&self, root: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        // The interiors are final after a step; a pending overlapped
        // exchange is settled first, as for every read of the solutions.
        self.transport.settle()?;
        let mut fields = Vec::new();
        for (index, solver) in self.transport.owned().zip(self.transport.solvers()) {
            let patch = self.transport.layout().patch(index)?;
            let group = create_patch_group(root, index, patch.offset(), patch.cells())?;
            fields.clear();
            for species in SPECIES {
                fields.push(dump_solution(
                    solver,
                    species,
                    &group,
                    &format!("Y_{species}"),
                )?);
            }
            if self.flow.is_none() {
                let graph = solver.graph();
                fields.push(dump_graph_field::<XFace>(
                    graph,
                    &self.velocity[0],
                    &group,
                    "u",
                )?);
                fields.push(dump_graph_field::<YFace>(
                    graph,
                    &self.velocity[1],
                    &group,
                    "v",
                )?);
            }
        }
        // The flow's pieces go into the same patch groups.
        if let Some(flow) = &self.flow {
            fields.extend(dump_own_flow_patches(flow, NAME, root)?);
        }
        Ok(fields)
    }
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        for species in SPECIES {
            save_patched_solution(&self.transport, species, group)?;
        }
        if let Some(flow) = &self.flow {
            save_flow(flow, group, "flow_")?;
        }
        self.save_shared_state(group)
    }
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()> {
        self.transport.set_clock(time, step)?;
        for species in SPECIES {
            load_patched_solution(&self.transport, species, group)?;
        }
        if let Some(flow) = &mut self.flow {
            load_flow(flow, group, "flow_", time, step)?;
            self.transport.carry_by(flow, &self.velocity)?;
        }
        self.load_shared_state(group)
    }
    fn save_own_patches(&self, root: &hdf5::Group) -> CaseResult<()> {
        save_own_patch_solutions(&self.transport, &SPECIES, root)?;
        match &self.flow {
            Some(flow) => save_own_flow_patches(flow, NAME, root),
            None => Ok(()),
        }
    }
    fn save_shared_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        crate::checkpoint::save_series(group, "invariants", &self.invariants)
    }
    fn load_shared_state(&mut self, group: &hdf5::Group) -> CaseResult<()> {
        if let [a, b] = crate::checkpoint::load_series(group, "invariants")?[..] {
            self.invariants = [a, b];
        }
        Ok(())
    }
    fn load_own_patches(
        &mut self,
        patches: &RankCheckpoint,
        shared: &hdf5::Group,
        time: f64,
        step: u64,
    ) -> CaseResult<()> {
        self.transport.set_clock(time, step)?;
        load_own_patch_solutions(&self.transport, &SPECIES, patches)?;
        if let Some(flow) = &mut self.flow {
            load_own_flow_patches(flow, NAME, patches, time, step)?;
            self.transport.carry_by(flow, &self.velocity)?;
        }
        self.load_shared_state(shared)
    }
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)> {
        let mut graphs = patch_graphs("species", &self.transport);
        if let Some(flow) = &self.flow {
            graphs.extend(crate::setup::flow_graphs(flow));
        }
        graphs
    }
    fn patched(&self) -> Option<&PatchedTransport> {
        Some(&self.transport)
    }
    /// The computed flow (none with the prescribed one); its work on the
    /// patches joins the trace. Files per rank are this case's own (above).
    fn flow(&self) -> Option<&IncompressibleFlow> {
        self.flow.as_ref()
    }
    fn exchange_time(&self) -> Option<std::time::Duration> {
        let species = (self.transport.layout().len() > 1).then(|| self.transport.exchange_time());
        let flow = self
            .flow
            .as_ref()
            .and_then(IncompressibleFlow::exchange_time);
        match (species, flow) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or_default() + b.unwrap_or_default()),
        }
    }
    fn poisson_on_patches(&self) -> Option<(std::time::Duration, usize, usize)> {
        self.flow
            .as_ref()
            .and_then(crate::setup::flow_poisson_on_patches)
    }
    fn finish(&mut self, _output: Option<&Path>) -> CaseResult<CaseCheck> {
        let [total, difference] = self.invariants()?;
        let [total0, difference0] = self.invariants;
        let total_drift = (total - total0).abs() / total0.abs().max(f64::MIN_POSITIVE);
        let difference_drift =
            (difference - difference0).abs() / total0.abs().max(f64::MIN_POSITIVE);
        let mut lowest = f64::INFINITY;
        for species in SPECIES {
            lowest = lowest.min(patched_bounds_and_mass(&self.transport, species)?.0);
        }
        let (_, _, produced) = patched_bounds_and_mass(&self.transport, "C")?;
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
