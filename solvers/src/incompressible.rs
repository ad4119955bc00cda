//! Incompressible Navier-Stokes on the staggered grid with a pressure
//! projection every stage.
//!
//! Velocity components live on the faces (u on x faces, v on y faces, w on
//! z faces); the projection potential and the pressure on cell centres. The
//! momentum right-hand sides are language expressions in the graph:
//!
//! `rhs_u = -(u du/dx + v_u du/dy + w_u du/dz) + nu lap(u) + f_x`
//!
//! (advective form with centred derivatives; `v_u` is `v` averaged to the x
//! faces through the cell centres), followed by the same Shu-Osher update
//! nodes as the transport solver, which write the provisional velocity
//! `u*`. The same graph then projects it: `lap(psi) = div(u*)` by
//! multigrid-preconditioned CG (a solve node, `projection.rs`), then
//! `u = u* - grad(psi)` into STATE_NP1, which leaves `div(u)` equal to the
//! Poisson residual. `psi` has zero normal derivative on walls, so the
//! normal velocity on walls is untouched; the pressure is `psi / (b dt)`.
//! The norms of `div(u*)` and `div(u)` and the speeds `max |u|` of the
//! CFL limit are graph reductions. One stage is
//! one execution of the graph; the first step starts with an execution of
//! zero length (`u* = u`), which projects the initial velocity.

use crate::assignment_memo::Assignments;
use crate::body::Body;
use crate::boundary::{BoundaryCondition, BoundaryConditions};
use crate::convection::{ConvectionForm, momentum_convection};
use crate::error::{SolverError, SolverResult};
use crate::flow_patches::{FlowPatches, MomentumFailure, plane_sum};
use crate::flow_projection::{PatchProjection, ProjectionFailure};
use crate::flow_reductions::PatchReductions;
use crate::immersed::Immersed;
use crate::immersed_nodes::{ForceReductions, ForcingTags};
use crate::integrator::{Stage, TimeIntegrator};
use crate::multigrid::{Multigrid, MultigridOptions, first_non_finite};
use crate::patched::EXCHANGE_TRACK;
use crate::projection::{PoissonSolve, PoissonState, lock_state};
use crate::span_recording::SpanRecording;
use crate::stages::{
    StageParameters, advance_levels, not_finite_in, reads_start_level, update_expression,
};
use crate::staggered::{SpaceOrder, difference_to_whole, weighted};
use crate::stepping::{self, StabilityLimit, Stepping, TimeStep};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{
    Context, ExecutionMode, ExpressionGraph, Factory, GraphLocation, GraphOptions,
    LanguageExpression, LanguageReduction, PlacementPolicy, RecordedEvent, Symbols, Tag,
};
use watershed_fields::on_face;
use watershed_fields::ranks::RankLink;
use watershed_fields::{CellCentre, Patch, PatchLayout, SpatialField};
use watershed_operators::{
    BoundField, Expr, FaceLocation, Mask, Parallelism, Parameter, PreparedReduction, ReduceRegion,
    Reduction, Side, abs, cond, field, interior_sum, on, shift,
};

mod patch_state;

const NAMES: [&str; 3] = ["u", "v", "w"];

/// How the last projection went.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProjectionReport {
    /// CG iterations of the Poisson solve.
    pub iterations: usize,
    /// L2 norm of `div(u*)` before the projection.
    pub divergence_before: f64,
    /// L2 norm of `div(u)` after it.
    pub divergence_after: f64,
    /// Residual reduction of the solve (final / initial). The solve starts
    /// from the previous pressure correction, so its initial residual can
    /// be far below the right-hand side's norm, and this ratio above the
    /// solver's tolerance; see [`Self::relative_residual`].
    pub residual_reduction: f64,
    /// Final residual over the norm of the right-hand side `div(u*)`: what
    /// the solve's `relative_tolerance` bounds.
    pub relative_residual: f64,
}

/// The Poisson solves of a flow since it was built (its initial
/// projection included): how many, their CG iterations, and the largest
/// final relative residual ([`ProjectionReport::relative_residual`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProjectionTotals {
    /// Solves, one per projection.
    pub solves: u64,
    /// CG iterations of all of them.
    pub iterations: u64,
    /// The most iterations one solve took.
    pub most_iterations: usize,
    /// The largest final residual over the right-hand side's norm.
    pub worst_relative_residual: f64,
}

impl ProjectionTotals {
    /// Counts `report`'s solve.
    fn add(&mut self, report: &ProjectionReport) {
        self.solves += 1;
        self.iterations += report.iterations as u64;
        self.most_iterations = self.most_iterations.max(report.iterations);
        self.worst_relative_residual = self.worst_relative_residual.max(report.relative_residual);
    }
}

/// The trace track of a decomposed flow's Poisson solves on the patches
/// (the divergence of `u*`, the multigrid and its exchanges and waits).
pub const POISSON_TRACK: &str = "Poisson solve on patches";

/// The pressure solve's options unless [`IncompressibleFlowBuilder::poisson_options`]
/// sets them: multigrid-preconditioned CG to a relative residual of 1e-10,
/// with V(2,2) cycles on a grid of `dimensions` 2 (a CG iteration or two
/// more than V(3,3), but less time per solve: the cavity's forward Euler
/// step 10-14 % faster at 64^2, 4-8 % at 128^2; 2026-11-23) and V(3,3) in
/// 3D (where V(2,2) made the 3D Taylor-Green solve 3-10 % slower).
pub fn default_poisson_options(dimensions: usize) -> MultigridOptions {
    let smoothing = if dimensions <= 2 { 2 } else { 3 };
    MultigridOptions {
        relative_tolerance: 1e-10,
        pre_smoothing: smoothing,
        post_smoothing: smoothing,
        ..Default::default()
    }
}

/// What an open side ([`IncompressibleFlowBuilder::outflow`]) does with
/// the velocity that leaves through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outflow {
    /// Every component has a zero normal gradient; the normal component's
    /// boundary faces follow the momentum equation.
    ZeroGradient,
    /// The normal component's boundary faces are carried out by
    /// `du/dt + U_c du/dn = 0` (one-sided difference, the stage's own
    /// Runge-Kutta weights), `U_c` the mean outward speed through the side
    /// at the start of the step (Orlanski's condition with a fixed phase
    /// speed); the tangential components have a zero normal gradient. It
    /// lets structures leave with less of them reflected.
    Convective,
}

/// Options of an incompressible flow.
pub struct IncompressibleFlowBuilder {
    patch: Patch,
    viscosity: f64,
    conditions: [BoundaryConditions; 3],
    invalid_axis: Option<usize>,
    body_force: [f64; 3],
    integrator: TimeIntegrator,
    mode: ExecutionMode,
    /// `None`: [`default_poisson_options`] for the grid's dimensions.
    poisson: Option<MultigridOptions>,
    placement: PlacementPolicy,
    convection: ConvectionForm,
    order: SpaceOrder,
    /// With patches: the projection whole on every rank instead of on the
    /// patches ([`Self::replicated_projection`]).
    replicated_projection: bool,
    enstrophy: bool,
    /// Open outflow sides, by [`Side`] index (-x, +x, -y, +y, -z, +z).
    outflow: [Option<Outflow>; 6],
    /// Immersed bodies.
    bodies: Vec<Body>,
    /// The patch layout the momentum stages run on, and this rank's link
    /// ([`Self::patches`]).
    patches: Option<(PatchLayout, Rc<dyn RankLink>)>,
}

impl IncompressibleFlowBuilder {
    /// A flow on `patch` (one patch covering the domain, at least one ghost
    /// layer) with kinematic viscosity `viscosity`.
    pub fn new(patch: &Patch, viscosity: f64) -> Self {
        IncompressibleFlowBuilder {
            patch: patch.clone(),
            viscosity,
            conditions: std::array::from_fn(|_| BoundaryConditions::new()),
            invalid_axis: None,
            body_force: [0.0; 3],
            integrator: TimeIntegrator::SspRk3,
            mode: ExecutionMode::Serial,
            poisson: None,
            placement: PlacementPolicy::Cpu,
            convection: ConvectionForm::default(),
            order: SpaceOrder::Second,
            enstrophy: false,
            outflow: [None; 6],
            bodies: Vec::new(),
            patches: None,
            replicated_projection: false,
        }
    }

    /// Runs the flow on the patches of `layout` that the rank of `link`
    /// owns, its state with it: each patch's momentum graph keeps the
    /// velocity's time levels and computes the stages' right-hand sides
    /// and updates (see [`crate::flow_patches`]), the projection's Poisson
    /// solve runs on the patches with a [`crate::PatchedMultigrid`], and a
    /// graph per patch corrects the velocity (`crate::flow_projection`).
    /// The flow gives the same bits on any number of ranks for one layout,
    /// and the undecomposed flow's values to the Poisson tolerance (the
    /// solver's inner products add per-patch sums in patch order); with
    /// [`Self::replicated_projection`] the projection runs whole on every
    /// rank instead, and the flow gives the undecomposed flow's bits. At
    /// the end of every step a graph per patch reduces the speeds for the
    /// next time step, the divergence, the enstrophy and the bodies'
    /// forces, and [`IncompressibleFlow::kinetic_energy`] adds the
    /// patches' sums (each combined in patch order:
    /// `crate::flow_reductions`). The velocity and `psi` are gathered into
    /// the flow's own graph over the whole domain, on every rank, when
    /// something reads them (dumps, checkpoints, a case's lines:
    /// [`IncompressibleFlow::gather_whole`]); what reads the flow sees the
    /// whole domain as before. The builder's patch stays the whole
    /// domain; the layout must decompose its grid with no more ghost
    /// layers than it has. A convective outflow's speed is the mean over
    /// its whole side of that velocity (the patches' sums over their parts
    /// of the side added in patch order), the same on every rank. Immersed bodies are forced on the
    /// patches, the solve on the patches closes their faces
    /// ([`crate::PatchedMultigrid`]), and a velocity written into the flow
    /// between steps (a restart) is where the patches continue from.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use watershed_fields::{GhostWidth, Grid, PatchLayout, XFace, ranks::SingleProcess};
    /// use watershed_solvers::IncompressibleFlowBuilder;
    /// let grid = Grid::new([16, 16, 1], [1.0; 3], [0.0; 3])?.with_periodic([true, true, false]);
    /// let layout = PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(1))?;
    /// let build = || IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01);
    /// let mut whole = build().build()?;
    /// let mut parts = build().patches(layout, Rc::new(SingleProcess)).build()?;
    /// for flow in [&whole, &parts] {
    ///     flow.set_velocity::<XFace>(|[_, y, _]| (6.28 * y).sin())?;
    /// }
    /// whole.step(0.01)?;
    /// parts.step(0.01)?;
    /// assert_eq!(parts.momentum_graphs().len(), 4);
    /// let (a, b) = (whole.kinetic_energy()?, parts.kinetic_energy()?);
    /// assert!((a - b).abs() <= 1e-9 * a);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn patches(mut self, layout: PatchLayout, link: Rc<dyn RankLink>) -> Self {
        self.patches = Some((layout, link));
        self
    }

    /// With [`Self::patches`]: solves the projection on the whole domain,
    /// replicated on every rank, instead of on the patches. The flow then
    /// gives the undecomposed flow's bits on any layout (a check of the
    /// decomposed momentum, or a run that must reproduce one process
    /// exactly), but the solve, nine tenths of a step, does not get
    /// faster with more ranks; the state stays in the flow's own graph,
    /// each stage's momentum taking its windows from it and giving back
    /// `u*`.
    pub fn replicated_projection(mut self) -> Self {
        self.replicated_projection = true;
        self
    }

    /// Immerses a solid body in the flow (see [`crate::body`] and
    /// `crate::immersed`): faces inside it take its velocity, the fluid
    /// faces next to it are forced towards it by interpolation (direct
    /// forcing), and the projection leaves its faces alone, so no flow goes
    /// through it. Its force ([`IncompressibleFlow::body_force`]) is
    /// reduced in the graph at every stage. Needs the second-order
    /// projection; a body may not cut a non-periodic side (it stays two
    /// cells off it or covers it whole).
    pub fn body(mut self, body: Body) -> Self {
        self.bodies.push(body);
        self
    }

    /// Makes `side` an open outflow with a zero normal gradient of every
    /// velocity component. The normal component's boundary faces are then
    /// advanced by the momentum equation like interior faces (their ghosts
    /// mirror them), and the projection potential is zero on the side
    /// (Dirichlet): the projection gives every cell zero divergence, the
    /// last ones included, so the outflow carries out exactly the mass the
    /// other sides bring in (to the solver's tolerance), and the Poisson
    /// problem is no longer singular. The pressure is relative to its
    /// value there. Replaces the side's velocity conditions; a periodic
    /// side is refused by [`Self::build`].
    pub fn outflow(self, side: Side) -> Self {
        self.outflow_of(side, Outflow::ZeroGradient)
    }

    /// [`Self::outflow`] of the given kind ([`Outflow`]).
    pub fn outflow_of(mut self, side: Side, kind: Outflow) -> Self {
        self.outflow[2 * side.axis + usize::from(side.plus)] = Some(kind);
        self
    }

    /// Also reduces the enstrophy `Omega = mean |omega|^2 / 2` of every
    /// stage's projected velocity in the graph ([`IncompressibleFlow::enstrophy`]):
    /// the vorticity on the cell edges, by differences of the flow's order,
    /// averaged over the edges. On a periodic box `2 nu Omega` is the
    /// kinetic-energy dissipation of the viscous term (exactly so at second
    /// order); what `-dK/dt` has beyond it is the scheme's own.
    pub fn track_enstrophy(mut self) -> Self {
        self.enstrophy = true;
        self
    }

    /// The form of the convective term (default
    /// [`ConvectionForm::SkewSymmetric`], which conserves kinetic energy;
    /// see [`crate::convection`]).
    pub fn convection(mut self, form: ConvectionForm) -> Self {
        self.convection = form;
        self
    }

    /// The order of every spatial operator of the flow (default second):
    /// convection, viscous term and projection. Fourth order needs a patch
    /// with 3 ghost layers ([`SpaceOrder::ghost_layers_for_flow`]); its
    /// projection solves the wide `div4(grad4(psi)) = div4(u*)` by CG
    /// preconditioned with the compact second-order multigrid, so that the
    /// projected velocity's fourth-order divergence vanishes, which the
    /// conservation of the fourth-order convective forms needs.
    pub fn space_order(mut self, order: SpaceOrder) -> Self {
        self.order = order;
        self
    }

    /// Boundary conditions of velocity component `axis` (0 = u on x faces).
    /// Walls: Dirichlet 0 for every component; a moving lid: Dirichlet with
    /// the lid speed for the tangential component.
    /// An axis outside 0..=2 is reported by [`Self::build`].
    pub fn velocity_conditions(mut self, axis: usize, conditions: BoundaryConditions) -> Self {
        match self.conditions.get_mut(axis) {
            Some(slot) => *slot = conditions,
            None => {
                self.invalid_axis.get_or_insert(axis);
            }
        }
        self
    }

    /// A constant body force per unit mass.
    pub fn body_force(mut self, force: [f64; 3]) -> Self {
        self.body_force = force;
        self
    }

    /// The time integrator (SSP-RK3 by default).
    pub fn integrator(mut self, integrator: TimeIntegrator) -> Self {
        self.integrator = integrator;
        self
    }

    /// Serial or threaded graph execution.
    pub fn mode(mut self, mode: ExecutionMode) -> Self {
        self.mode = mode;
        self
    }

    /// Where the graph's nodes run (default: all on the CPU). Every node
    /// of a step can run on a GPU, the pressure solve included
    /// ([`PlacementPolicy::Gpu`] puts the whole step there; the multigrid's
    /// levels move to the GPU at the first solve): the host then waits
    /// only for the reductions (the solve's dot products and norms, the
    /// divergence and speed maxima) and at the end of each stage.
    pub fn placement(mut self, placement: PlacementPolicy) -> Self {
        self.placement = placement;
        self
    }

    /// Options of the pressure solve (default: multigrid-preconditioned CG
    /// to a relative residual of 1e-10, with V(2,2) cycles in 2D and V(3,3)
    /// in 3D; see [`default_poisson_options`]).
    pub fn poisson_options(mut self, options: MultigridOptions) -> Self {
        self.poisson = Some(options);
        self
    }

    /// Builds the graph and the pressure solver.
    pub fn build(self) -> SolverResult<IncompressibleFlow> {
        let grid = self.patch.grid();
        let active: Vec<usize> = (0..3).filter(|&a| grid.active_dimensions()[a]).collect();
        let setup = |reason: String| {
            Err(SolverError::Setup {
                equation: "incompressible flow".into(),
                reason,
            })
        };
        if active.len() < 2 {
            return setup("needs a 2D or 3D grid".into());
        }
        if let Some(axis) = self.invalid_axis {
            return setup(format!(
                "velocity_conditions was given axis {axis}; axes are 0 (u), 1 (v) and 2 (w)"
            ));
        }
        if !(self.viscosity.is_finite() && self.viscosity >= 0.0) {
            return setup(format!(
                "the viscosity {} must be finite and not negative",
                self.viscosity
            ));
        }
        if let Some(f) = self.body_force.iter().find(|f| !f.is_finite()) {
            return setup(format!("the body force {f} is not finite"));
        }
        if !self.convection.supports(self.order) {
            return setup(format!(
                "the {} convection form is second order only; use space_order 2 or another form ({})",
                self.convection.name(),
                ConvectionForm::NAMES[..3].join(", ")
            ));
        }
        let ghosts = self.patch.ghosts();
        let needed = self.order.ghost_layers_for_flow();
        for &axis in &active {
            for (side, width) in [("-", ghosts.minus[axis]), ("+", ghosts.plus[axis])] {
                if width < needed {
                    return setup(format!(
                        "the patch has {width} ghost layers on side {side}{}; at space order {} the momentum stencils and the pressure projection read {needed} beyond the interior: build the patch with at least {needed} ghost layers",
                        ["x", "y", "z"][axis],
                        self.order.number()
                    ));
                }
            }
        }
        let mut conditions = self.conditions.clone();
        for side in watershed_operators::Side::ALL {
            if self.outflow[2 * side.axis + usize::from(side.plus)].is_none() {
                continue;
            }
            if grid.periodic()[side.axis] {
                return setup(format!(
                    "side {} is an outflow, but the grid is periodic along its axis",
                    side.name()
                ));
            }
            for component in conditions.iter_mut() {
                *component = component
                    .clone()
                    .with(side, BoundaryCondition::Neumann(0.0));
            }
        }
        let convective: Vec<(Side, Parameter)> = watershed_operators::Side::ALL
            .into_iter()
            .filter(|s| self.outflow[2 * s.axis + usize::from(s.plus)] == Some(Outflow::Convective))
            .map(|s| (s, Parameter::new(&format!("U_c {}", s.name()), 0.0)))
            .collect();
        let immersed = if self.bodies.is_empty() {
            None
        } else {
            if self.order != SpaceOrder::Second {
                return setup(format!(
                    "immersed bodies need space order 2 (this flow has order {}): their forcing and the projection's closed faces are second order",
                    self.order.number()
                ));
            }
            let immersed = Immersed::new(self.bodies.clone(), grid)?;
            immersed.check_fluid_regions(self.outflow.map(|o| o.is_some()))?;
            Some(immersed)
        };
        let forcing: Vec<Option<ForcingTags>> = (0..3)
            .map(|axis| {
                immersed
                    .as_ref()
                    .filter(|_| active.contains(&axis))
                    .map(|_| ForcingTags::new(axis, &active))
            })
            .collect();
        let poisson = self
            .poisson
            .unwrap_or_else(|| default_poisson_options(active.len()));
        poisson.validate()?;
        let parameters = StageParameters::default();
        let mut factory = Factory::new();
        let tags = |context: Context| NAMES.map(|n| Tag::new(n, context.clone()));
        let (now, next, start) = (
            tags(Context::StateN),
            tags(Context::StateNp1),
            tags(Context::Other("STATE_N_START".into())),
        );
        let recipe = MomentumRecipe {
            active: active.clone(),
            conditions: conditions.clone(),
            terms: MomentumTerms {
                form: self.convection,
                order: self.order,
                active: active.clone(),
                spacing: grid.spacing(),
                viscosity: self.viscosity,
                force: 0.0,
                convective: convective.clone(),
            },
            body_force: self.body_force,
            integrator: self.integrator,
            parameters: parameters.clone(),
            now: now.clone(),
            start: start.clone(),
        };
        let split = self.split(needed)?;
        // With patches, unless replicated: div(u*) in a graph of its own,
        // the solve on the patches after it, and the state itself on the
        // patches: each patch's momentum graph keeps its levels, a graph per
        // patch corrects the velocity, a graph per patch reduces it after
        // each step, and this graph receives the velocity and psi when
        // something reads the whole domain.
        // Replicated, this graph keeps the state and the projection, and
        // receives u* from the patches every stage.
        let decomposed = split.is_some() && !self.replicated_projection;
        let replicated = split.is_some() && !decomposed;
        let mut correction_factory = Factory::new();
        let mut divergence_factory = Factory::new();
        // With bodies and the solve on patches: the graphs forcing each
        // patch's unforced velocity, before the divergence graphs.
        let mut forcing_factory = Factory::new();
        for &axis in &active {
            if decomposed {
                // The velocity the patches hold at the end of a step, with
                // the conditions of what a stage writes.
                let location = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
                factory.placeholder(now[axis].clone(), location)?;
                let conditions = conditions[axis].clone().with_time(&parameters.state_time);
                on_face!(axis, F => attach_conditions::<F>(&mut factory, &now[axis], conditions)?);
            } else {
                recipe.declare_state(&mut factory, axis)?;
            }
            if split.is_none() {
                // With bodies the stage writes the unforced velocity, which
                // the forcing node below turns into u*.
                let written = match &forcing[axis] {
                    Some(tags) => tags.free.clone(),
                    None => provisional_tags()[axis].clone(),
                };
                recipe.register_update(&mut factory, axis, &written)?;
            }
        }
        // The projection, in the same graph: the stage's update writes the
        // provisional velocity u*, whose walls take the velocity
        // conditions; div(u*) -> psi -> u = u* - grad(psi), walls again.
        let (divergence_tag, psi_tag, pressure_tag) =
            (Tag::none("div(u*)"), Tag::none("psi"), Tag::none("p"));
        let divergence_before = Parameter::new("|div(u*)|^2", 0.0);
        let divergence_after = Parameter::new("|div(u)|^2", 0.0);
        let pressure_scale = Parameter::new("1/(b dt)", 0.0);
        let provisional_tags = provisional_tags();
        // What the patches' momentum is gathered into in this graph.
        let gathered_tags: [Tag; 3] = std::array::from_fn(|axis| match &forcing[axis] {
            Some(tags) => tags.free.clone(),
            None => provisional_tags[axis].clone(),
        });
        for &axis in &active {
            // What a stage writes is at the state time.
            let conditions = conditions[axis].clone().with_time(&parameters.state_time);
            let (provisional, corrected) = (&provisional_tags[axis], &next[axis]);
            if replicated {
                // Gathered from the patches' momentum graphs: u*, or with
                // bodies the unforced velocity the forcing node below
                // turns into u* (as in the whole flow's graph).
                let location = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
                factory.placeholder(gathered_tags[axis].clone(), location)?;
            }
            if decomposed {
                // The divergence graphs on the patches read u*; with
                // bodies the forcing graphs make it first from the
                // unforced velocity. The correction graphs take u* from
                // the divergence graphs, forced.
                let location = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
                divergence_factory.placeholder(provisional.clone(), location)?;
                on_face!(axis, F => attach_conditions::<F>(&mut divergence_factory, provisional, conditions.clone())?);
                if let Some(tags) = &forcing[axis] {
                    forcing_factory.placeholder(tags.free.clone(), location)?;
                    tags.declare(&mut forcing_factory, location)?;
                    on_face!(axis, F => attach_conditions::<F>(&mut forcing_factory, &tags.free, conditions.clone())?);
                    forcing_factory
                        .register(on_face!(axis, F => tags.expression::<F>(provisional)))?;
                }
            }
            // On the patches u* (forced where bodies are) comes from the
            // divergence graph of its patch.
            let location = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
            let home = if decomposed {
                correction_factory.placeholder(provisional.clone(), location)?;
                &mut correction_factory
            } else {
                &mut factory
            };
            on_face!(axis, F => attach_conditions::<F>(home, provisional, conditions.clone())?);
            match &forcing[axis] {
                // The correction leaves the solid faces alone.
                Some(tags) if decomposed => home.placeholder(tags.open.clone(), location)?,
                Some(tags) => {
                    tags.declare(home, location)?;
                    on_face!(axis, F => attach_conditions::<F>(home, &tags.free, conditions.clone())?);
                    home.register(on_face!(axis, F => tags.expression::<F>(provisional)))?;
                }
                None => {}
            }
            let (from, psi, order) = (provisional.clone(), psi_tag.clone(), self.order);
            let open = forcing[axis].as_ref().map(|tags| tags.open.clone());
            home.register(on_face!(axis, F => {
                LanguageExpression::new::<F>(corrected.clone(), move |s| {
                    let correction = order.gradient::<F>(s.field::<CellCentre>(&psi));
                    match &open {
                        // Closed (solid) faces keep their velocity.
                        Some(open) => s.field::<F>(&from) - s.field::<F>(open) * correction,
                        None => s.field::<F>(&from) - correction,
                    }
                })
                .checking_finite()
            }))?;
            on_face!(axis, F => attach_conditions::<F>(home, corrected, conditions)?);
        }
        let order = self.order;
        let divergence_of = |velocity: [Tag; 3], dims: Vec<usize>| {
            move |s: &mut Symbols| -> Expr<'static, CellCentre> {
                let mut sum: Expr<'static, CellCentre> = Expr::constant(0.0);
                for &axis in &dims {
                    sum = sum
                        + on_face!(axis, F => order.divergence::<F>(s.field::<F>(&velocity[axis])));
                }
                sum
            }
        };
        let divergence_home = if decomposed {
            &mut divergence_factory
        } else {
            &mut factory
        };
        divergence_home.register(LanguageExpression::new::<CellCentre>(
            divergence_tag.clone(),
            divergence_of(provisional_tags.clone(), active.clone()),
        ))?;
        let div = divergence_tag.clone();
        divergence_home.register_reduction(LanguageReduction::new::<CellCentre>(
            Tag::none("|div(u*)|"),
            &divergence_before,
            Reduction::SumOfSquares,
            move |s| s.field(&div),
        ))?;
        // The projection potential: zero normal derivative on walls and
        // inflows (the normal velocity there is given), zero on outflows.
        let mut walls = BoundaryConditions::new();
        for side in watershed_operators::Side::ALL {
            let open = self.outflow[2 * side.axis + usize::from(side.plus)].is_some();
            walls = walls.with(
                side,
                if open {
                    BoundaryCondition::Dirichlet(0.0)
                } else {
                    BoundaryCondition::Neumann(0.0)
                },
            );
        }
        let poisson_state = if decomposed {
            // Written by the solve on the patches before this graph runs.
            factory.placeholder(psi_tag.clone(), watershed_fields::LocationKind::CellCentre)?;
            None
        } else {
            let mut multigrid =
                Multigrid::with_order(&self.patch, walls.clone(), poisson, self.order)?;
            if let Some(immersed) = &immersed {
                multigrid.block_bodies(immersed)?;
            }
            let (solve, state) =
                PoissonSolve::new(divergence_tag.clone(), psi_tag.clone(), multigrid);
            factory.register(solve)?;
            Some(state)
        };
        if decomposed {
            // The solved psi, its seams exchanged between the correction
            // graphs and its physical ghosts given the projection's
            // conditions, as the whole domain's psi takes them.
            correction_factory
                .placeholder(psi_tag.clone(), watershed_fields::LocationKind::CellCentre)?;
            attach_conditions::<CellCentre>(&mut correction_factory, &psi_tag, walls.clone())?;
        }
        // What the step's diagnostics read: the corrected velocity, which
        // with the state on the patches this graph receives as `now`.
        let current = if decomposed { &now } else { &next };
        let (psi, scale) = (psi_tag.clone(), pressure_scale.clone());
        factory.register(LanguageExpression::new::<CellCentre>(
            pressure_tag.clone(),
            move |s| scale.expr::<CellCentre>() * s.field::<CellCentre>(&psi),
        ))?;
        // The step's reductions of the new velocity: in this graph, or with
        // the state on the patches in a graph per patch
        // (`crate::flow_reductions`), whose velocity has the conditions of
        // what a stage writes.
        let mut reductions_factory = Factory::new();
        if decomposed {
            for &axis in &active {
                let location = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
                reductions_factory.placeholder(now[axis].clone(), location)?;
                let conditions = conditions[axis].clone().with_time(&parameters.state_time);
                on_face!(axis, F => attach_conditions::<F>(&mut reductions_factory, &now[axis], conditions)?);
            }
        }
        // In the order this graph's roots always had them.
        let (mut divergence_roots, mut speed_roots, mut vorticity_roots) =
            (Vec::new(), Vec::new(), Vec::new());
        let reductions_home = if decomposed {
            &mut reductions_factory
        } else {
            &mut factory
        };
        let after = Tag::none("|div(u)|");
        reductions_home.register_reduction(LanguageReduction::new::<CellCentre>(
            after.clone(),
            &divergence_after,
            Reduction::SumOfSquares,
            divergence_of(current.clone(), active.clone()),
        ))?;
        divergence_roots.push(after);

        // The CFL limit's speeds: max |u| of each new velocity component,
        // reduced in the graph where the velocity lives. The driver reads
        // them in `stable_time_step` while the velocity is unchanged since.
        let speeds = NAMES.map(|n| Parameter::new(&format!("max |{n}|"), 0.0));
        let speed_tags = NAMES.map(|n| Tag::none(&format!("max |{n}|")));
        for &axis in &active {
            let velocity = current[axis].clone();
            reductions_home.register_reduction(on_face!(axis, F => LanguageReduction::new::<F>(
                speed_tags[axis].clone(),
                &speeds[axis],
                Reduction::Max,
                move |s| abs(s.field::<F>(&velocity)),
            )))?;
            speed_roots.push(speed_tags[axis].clone());
        }
        let mut vorticity = Vec::new();
        if self.enstrophy {
            for (a, b) in edge_pairs(&active) {
                let sum_of_squares = Parameter::new(&format!("|omega_{a}{b}|^2"), 0.0);
                let tag = Tag::none(&format!("|omega_{a}{b}|^2"));
                let velocity = current.clone();
                let (order, spacing) = (self.order, grid.spacing());
                reductions_home.register_reduction(
                    on_face!(a, F => LanguageReduction::new::<F>(
                        tag.clone(),
                        &sum_of_squares,
                        Reduction::SumOfSquares,
                        move |s| edge_vorticity::<F>(s, &velocity, b, order, spacing),
                    )),
                )?;
                vorticity_roots.push(tag);
                vorticity.push(sum_of_squares);
            }
        }

        let mut roots: Vec<Tag> = active.iter().map(|&a| current[a].clone()).collect();
        roots.push(pressure_tag.clone());
        // With the state on the patches, their graphs reduce the velocity.
        let mut reduction_roots = Vec::new();
        reduction_home(decomposed, &mut reduction_roots, &mut roots).append(&mut divergence_roots);
        if !decomposed {
            roots.push(Tag::none("|div(u*)|"));
        }
        if replicated {
            // The state levels stay here (the patches copy their windows
            // from them), though no node of this graph reads them.
            roots.extend(active.iter().map(|&a| now[a].clone()));
            if reads_start_level(self.integrator) {
                roots.extend(active.iter().map(|&a| start[a].clone()));
            }
        }
        reduction_home(decomposed, &mut reduction_roots, &mut roots).append(&mut speed_roots);
        // The force on each body whose band fits (`crate::immersed`), in
        // the graph that reduces the new velocity: with the state on the
        // patches, each patch's, which forms the pressure from `psi` for
        // them as this graph does.
        let mut forces = Vec::new();
        let mut unforced = Vec::new();
        if let Some(immersed) = &immersed {
            let fitting = (0..immersed.bodies().len()).any(|n| immersed.band(n).is_ok());
            if decomposed && fitting {
                reductions_factory
                    .placeholder(psi_tag.clone(), watershed_fields::LocationKind::CellCentre)?;
                let (psi, scale) = (psi_tag.clone(), pressure_scale.clone());
                reductions_factory.register(LanguageExpression::new::<CellCentre>(
                    pressure_tag.clone(),
                    move |s| scale.expr::<CellCentre>() * s.field::<CellCentre>(&psi),
                ))?;
            }
            for (n, body) in immersed.bodies().iter().enumerate() {
                match immersed.band(n) {
                    Ok(_) => {
                        let (home, home_roots) = if decomposed {
                            (&mut reductions_factory, &mut reduction_roots)
                        } else {
                            (&mut factory, &mut roots)
                        };
                        let mut reductions = ForceReductions::register(
                            home,
                            immersed,
                            n,
                            current,
                            &pressure_tag,
                            &active,
                            grid.spacing(),
                            self.viscosity,
                        )?;
                        home_roots.extend(reductions.roots.iter().cloned());
                        reductions.sum_fluid_weight(
                            immersed,
                            &watershed_fields::FieldLayout::new(
                                &self.patch,
                                watershed_fields::LocationKind::CellCentre,
                            ),
                        );
                        forces.push(reductions);
                    }
                    Err(why) => unforced.push((body.name().to_string(), why)),
                }
            }
        }
        reduction_home(decomposed, &mut reduction_roots, &mut roots).append(&mut vorticity_roots);
        // `div(u*)` is kept rather than taken from the pool per execution:
        // the solve's prepared copy of it into the finest multigrid level
        // binds it by field id, and a scratch field is a new field (a new
        // id) in every execution. The provisional velocities are scratch.
        let persistent = if decomposed {
            vec![pressure_tag.clone()]
        } else {
            vec![
                psi_tag.clone(),
                pressure_tag.clone(),
                divergence_tag.clone(),
            ]
        };
        let options = GraphOptions {
            persistent,
            placement: self.placement.clone(),
            // With the state on the patches this graph only receives the
            // whole domain for a read: no memory until one comes
            // (`patch_state`).
            deferred_storage: decomposed,
            ..GraphOptions::default()
        };
        let graph = ExpressionGraph::build(&factory, &roots, &self.patch, &options)?;
        if decomposed {
            graph.fill_placeholder(&psi_tag)?;
        }
        for &axis in &active {
            // Receives the step's start value after the first stage, which
            // does not read it (see `crate::stages`).
            if reads_start_level(self.integrator) && !decomposed {
                graph.fill_placeholder(&start[axis])?;
            }
            // A flow starts at rest unless its velocity is set.
            graph.fill_placeholder(&now[axis])?;
            if replicated {
                graph.fill_placeholder(&gathered_tags[axis])?;
            }
        }
        let projection = match &split {
            Some((layout, link)) if decomposed => {
                let on_patches =
                    |factory: &Factory,
                     roots: &[Tag],
                     persistent: &[Tag],
                     fill: &dyn Fn(&ExpressionGraph) -> SolverResult<()>| {
                        per_patch_graphs(
                            (layout, link),
                            factory,
                            roots,
                            persistent,
                            self.placement.clone(),
                            fill,
                        )
                    };
                // One divergence graph per owned patch; the norm of
                // div(u*) adds the patches' sums in patch order.
                let divergence = on_patches(
                    &divergence_factory,
                    &[divergence_tag.clone(), Tag::none("|div(u*)|")],
                    std::slice::from_ref(&divergence_tag),
                    &|graph| {
                        for &axis in &active {
                            graph.fill_placeholder(&provisional_tags[axis])?;
                        }
                        Ok(())
                    },
                )?;
                // With bodies, one forcing graph per owned patch: u* from
                // the unforced velocity, whose seams it exchanges first
                // (a forced face interpolates from its outward neighbour).
                let forced = match &immersed {
                    Some(immersed) => {
                        let roots: Vec<Tag> = active
                            .iter()
                            .map(|&a| provisional_tags[a].clone())
                            .collect();
                        Some(on_patches(&forcing_factory, &roots, &roots, &|graph| {
                            for &axis in &active {
                                if let Some(tags) = &forcing[axis] {
                                    graph.fill_placeholder(&tags.free)?;
                                    on_face!(axis, F => tags.fill::<F>(graph, immersed)?);
                                }
                            }
                            Ok(())
                        })?)
                    }
                    None => None,
                };
                // With the state on the patches, one correction graph per
                // owned patch.
                let roots: Vec<Tag> = active.iter().map(|&a| next[a].clone()).collect();
                let correction = on_patches(&correction_factory, &roots, &roots, &|graph| {
                    for &axis in &active {
                        graph.fill_placeholder(&provisional_tags[axis])?;
                        if let (Some(tags), Some(immersed)) = (&forcing[axis], &immersed) {
                            on_face!(axis, F => tags.fill::<F>(graph, immersed)?);
                        }
                    }
                    graph.fill_placeholder(&psi_tag)?;
                    Ok(())
                })?;
                Some(PatchProjection::new(
                    layout,
                    link.clone(),
                    walls.clone(),
                    poisson,
                    self.order,
                    immersed.as_ref(),
                    forced,
                    divergence,
                    correction,
                    divergence_tag,
                    &active,
                    gathered_tags.clone(),
                    psi_tag.clone(),
                    match self.placement {
                        PlacementPolicy::Gpu(ordinal) => watershed_fields::Device::Gpu(ordinal),
                        _ => watershed_fields::Device::Cpu,
                    },
                )?)
            }
            _ => None,
        };
        // With the state on the patches, one graph per owned patch reduces
        // the new velocity after a step's last stage.
        let reductions = match &split {
            Some((layout, link)) if decomposed => {
                let graphs = per_patch_graphs(
                    (layout, link),
                    &reductions_factory,
                    &reduction_roots,
                    &[],
                    self.placement.clone(),
                    &|graph| {
                        for &axis in &active {
                            graph.fill_placeholder(&now[axis])?;
                        }
                        if let Some(immersed) = &immersed
                            && !forces.is_empty()
                        {
                            graph.fill_placeholder(&psi_tag)?;
                            for reductions in &forces {
                                reductions.fill_weights(graph, immersed, &active)?;
                            }
                        }
                        Ok(())
                    },
                )?;
                let psi = (!forces.is_empty()).then(|| psi_tag.clone());
                Some(PatchReductions::new(graphs, &active, now.clone(), psi))
            }
            _ => None,
        };
        let patches = match split {
            Some((layout, link)) => Some(FlowPatches::build(layout, link, &active, |patch| {
                let levels = decomposed.then_some(&next);
                recipe.patch_graph(patch, &provisional_tags, levels, self.placement.clone())
            })?),
            None => None,
        };
        // The patches and `graph` hold the same (zero) velocity and `psi`:
        // nothing needs taking from `graph`, whose storage then waits for
        // a read.
        let state_on_patches = if decomposed {
            let versions = active
                .iter()
                .map(|&a| graph.field_version(&now[a]))
                .collect::<Result<Vec<_>, _>>()?;
            Some(versions)
        } else {
            None
        };
        if let Some(projection) = &projection {
            projection.follow_whole_psi(graph.field_version(&psi_tag)?);
        }
        let mut immersed_faces = [(0, 0); 3];
        if let Some(immersed) = &immersed {
            for &axis in &active {
                if let Some(tags) = &forcing[axis] {
                    immersed_faces[axis] = if decomposed {
                        // This graph holds no forcing: the counts of the
                        // whole domain's faces.
                        let kind = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
                        let faces = immersed.forcing(
                            axis,
                            &watershed_fields::FieldLayout::new(&self.patch, kind),
                        )?;
                        (faces.solid, faces.forced)
                    } else {
                        on_face!(axis, F => tags.fill::<F>(&graph, immersed)?)
                    };
                }
            }
            if !decomposed {
                for reductions in &forces {
                    reductions.fill_weights(&graph, immersed, &active)?;
                }
            }
        }
        Ok(IncompressibleFlow {
            graph,
            parameters,
            pressure_scale,
            divergence_before,
            divergence_after,
            speeds,
            speeds_of: Cell::new([None; 3]),
            vorticity,
            vorticity_of: Cell::new(None),
            active,
            now,
            next,
            start,
            provisional: provisional_tags,
            gathered: gathered_tags,
            psi: psi_tag,
            pressure: pressure_tag,
            conditions,
            walls,
            convective,
            order: self.order,
            convection: self.convection,
            viscosity: self.viscosity,
            integrator: self.integrator,
            mode: self.mode,
            poisson: poisson_state,
            projection,
            time: 0.0,
            steps: 0,
            last: ProjectionReport::default(),
            totals: ProjectionTotals::default(),
            prepared: Mutex::new(Assignments::default()),
            immersed,
            immersed_faces,
            free: forcing
                .iter()
                .map(|f| f.as_ref().map(|t| t.free.clone()))
                .collect(),
            forces,
            unforced,
            body_force: self.body_force,
            last_dt: None,
            force_sums_of: Cell::new(None),
            patches,
            reductions,
            whole: Cell::new(WholeState::Current),
            root_reads: Cell::new(false),
            pressure_written: Cell::new(false),
            patch_velocity_current: Cell::new(false),
            state_on_patches: RefCell::new(state_on_patches),
            recording: SpanRecording::default(),
        })
    }

    /// The patch layout and link of a flow whose momentum runs on patches
    /// ([`Self::patches`]), checked against the whole domain; `None` for an
    /// undecomposed flow.
    fn split(&self, needed: usize) -> SolverResult<Option<(PatchLayout, Rc<dyn RankLink>)>> {
        let Some((layout, link)) = &self.patches else {
            return Ok(None);
        };
        let refuse = |reason: String| {
            Err(SolverError::Setup {
                equation: "incompressible flow on patches".into(),
                reason,
            })
        };
        let grid = self.patch.grid();
        if layout.grid() != grid {
            return refuse(format!(
                "the patch layout decomposes a grid of {:?} cells, the flow's grid has {:?}; decompose the flow's own grid",
                layout.grid().cells(),
                grid.cells()
            ));
        }
        if self.patch.offset() != [0; 3] || self.patch.cells() != grid.cells() {
            return refuse(format!(
                "the flow's patch (cells {:?} at {:?}) is not the whole domain of {:?} cells: build the flow on the whole domain and give the layout to `patches`",
                self.patch.cells(),
                self.patch.offset(),
                grid.cells()
            ));
        }
        let (part, whole) = (layout.patch(0)?.ghosts(), self.patch.ghosts());
        for axis in (0..3).filter(|&a| grid.active_dimensions()[a]) {
            let sides = [
                (part.minus[axis], whole.minus[axis]),
                (part.plus[axis], whole.plus[axis]),
            ];
            for (have, most) in sides {
                if have < needed || have > most {
                    return refuse(format!(
                        "the layout's patches have {have} ghost layers along {}; they need at least the {needed} the momentum stencils read and at most the whole domain's {most}",
                        ["x", "y", "z"][axis]
                    ));
                }
            }
        }
        Ok(Some((layout.clone(), link.clone())))
    }
}

/// The pairs `(a, b)`, `a < b`, of active axes: one vorticity component
/// each, on the edges along the third axis.
fn edge_pairs(active: &[usize]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for (n, &a) in active.iter().enumerate() {
        for &b in &active[n + 1..] {
            pairs.push((a, b));
        }
    }
    pairs
}

/// The vorticity component `d u_b / d x_a - d u_a / d x_b` on the edges
/// whole along `x_a` and `x_b`, numbered like the faces `F` (normal to
/// `x_a`) below them along `x_b`, by differences of `order`.
fn edge_vorticity<F: FaceLocation>(
    s: &mut Symbols,
    velocity: &[Tag; 3],
    b: usize,
    order: SpaceOrder,
    spacing: [f64; 3],
) -> Expr<'static, F> {
    let a = F::AXIS;
    let along_a: Expr<'static, F> = s.field(&velocity[a]);
    let along_b: Expr<'static, F> =
        on_face!(b, G => watershed_operators::relabel::<G, F>(s.field::<G>(&velocity[b])));
    let d_b_dx_a = weighted(order, |n| difference_to_whole(&along_b, a, n, spacing[a]));
    let d_a_dx_b = weighted(order, |n| difference_to_whole(&along_a, b, n, spacing[b]));
    d_b_dx_a - d_a_dx_b
}

/// The provisional velocity `u*` of a stage, before its projection.
/// One graph per patch of `layout` that the rank of `link` owns, built
/// from `factory` for `roots` (keeping `persistent`), with `placement`;
/// `fill` then provides each graph's placeholders.
fn per_patch_graphs(
    (layout, link): (&PatchLayout, &Rc<dyn RankLink>),
    factory: &Factory,
    roots: &[Tag],
    persistent: &[Tag],
    placement: PlacementPolicy,
    fill: &dyn Fn(&ExpressionGraph) -> SolverResult<()>,
) -> SolverResult<PatchedGraphs> {
    let options = GraphOptions {
        persistent: persistent.to_vec(),
        placement,
        ..GraphOptions::default()
    };
    PatchedGraphs::build(layout.clone(), link.clone(), |patch| {
        let graph = ExpressionGraph::build(factory, roots, patch, &options)?;
        fill(&graph)?;
        Ok::<_, SolverError>(graph)
    })
}

/// Where a step's reduction goes: with the state on the patches
/// (`decomposed`) to the patches' reductions graphs, else to the flow's
/// own graph.
fn reduction_home<'a>(
    decomposed: bool,
    on_patches: &'a mut Vec<Tag>,
    whole: &'a mut Vec<Tag>,
) -> &'a mut Vec<Tag> {
    if decomposed { on_patches } else { whole }
}

/// The error of a flow whose state should be on patches but has none (a
/// construction fault, not a user's).
/// Where a decomposed flow's whole-domain fields (its own graph's) stand
/// against its patches; the same on every rank, since every change is
/// collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WholeState {
    /// They hold the patches' state (or the flow's state lives there).
    Current,
    /// The patches stepped or were written since: a read gathers.
    Stale,
    /// Gathered onto rank 0 alone ([`IncompressibleFlow::on_root_with_whole`]):
    /// current on rank 0 for its reads there, behind elsewhere; any other
    /// read gathers onto every rank.
    OnRoot,
}

fn state_not_on_patches() -> SolverError {
    SolverError::Setup {
        equation: "incompressible flow on patches".into(),
        reason: "the flow's state is on patches, but it has no patches or no projection on them"
            .into(),
    }
}

fn provisional_tags() -> [Tag; 3] {
    NAMES.map(|n| Tag::none(&format!("{n}*")))
}

fn attach_conditions<F: GraphLocation>(
    factory: &mut Factory,
    tag: &Tag,
    conditions: BoundaryConditions,
) -> SolverResult<()> {
    factory.attach_modifier(tag.clone(), conditions.modifier::<F>(tag))?;
    Ok(())
}

/// What registers the momentum stages of a flow's components on a graph
/// of the whole domain or of one patch: the state levels (placeholders
/// with their conditions) and each component's right-hand side and
/// update.
struct MomentumRecipe {
    active: Vec<usize>,
    conditions: [BoundaryConditions; 3],
    /// The terms; `force` is set per component from `body_force`.
    terms: MomentumTerms,
    body_force: [f64; 3],
    integrator: TimeIntegrator,
    parameters: StageParameters,
    now: [Tag; 3],
    start: [Tag; 3],
}

impl MomentumRecipe {
    /// The state levels of component `axis` a stage reads: `now` with its
    /// conditions at the right-hand side's time, and `start` when the
    /// integrator reads it.
    fn declare_state(&self, factory: &mut Factory, axis: usize) -> SolverResult<()> {
        let location = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
        factory.placeholder(self.now[axis].clone(), location)?;
        if reads_start_level(self.integrator) {
            factory.placeholder(self.start[axis].clone(), location)?;
        }
        // The state a stage reads is at the right-hand side's time.
        let conditions = self.conditions[axis]
            .clone()
            .with_time(&self.parameters.time);
        on_face!(axis, F => attach_conditions::<F>(factory, &self.now[axis], conditions)?);
        Ok(())
    }

    /// Component `axis`'s right-hand side and the stage update writing
    /// `written`.
    fn register_update(
        &self,
        factory: &mut Factory,
        axis: usize,
        written: &Tag,
    ) -> SolverResult<()> {
        let rhs = Tag::none(&format!("rhs_{}", NAMES[axis]));
        let terms = MomentumTerms {
            force: self.body_force[axis],
            ..self.terms.clone()
        };
        let velocity = self.now.clone();
        let expression = on_face!(axis, F => momentum::<F>(rhs.clone(), velocity, terms));
        factory.register(expression)?;
        let update = on_face!(axis, F => update_expression::<F>(
            &self.now[axis],
            written,
            &self.start[axis],
            &rhs,
            &self.parameters,
            self.integrator
        ));
        factory.register(update)?;
        Ok(())
    }

    /// The momentum graph of one patch: every component's stage update
    /// into `provisional` (kept after each execution for the gather), with
    /// the conditions of what a stage writes on the patch's physical sides.
    /// With `next` (the state on the patches) it also holds the level the
    /// corrected velocity is copied into, to rotate the levels with.
    fn patch_graph(
        &self,
        patch: &Patch,
        provisional: &[Tag; 3],
        next: Option<&[Tag; 3]>,
        placement: PlacementPolicy,
    ) -> SolverResult<ExpressionGraph> {
        let mut factory = Factory::new();
        for &axis in &self.active {
            self.declare_state(&mut factory, axis)?;
            if let Some(next) = next {
                let location = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
                factory.placeholder(next[axis].clone(), location)?;
            }
            self.register_update(&mut factory, axis, &provisional[axis])?;
            let conditions = self.conditions[axis]
                .clone()
                .with_time(&self.parameters.state_time);
            on_face!(axis, F => attach_conditions::<F>(&mut factory, &provisional[axis], conditions)?);
        }
        let mut roots: Vec<Tag> = self
            .active
            .iter()
            .map(|&a| provisional[a].clone())
            .collect();
        let persistent = roots.clone();
        if let Some(next) = next {
            // No node reads the level; it stays for the rotation.
            roots.extend(self.active.iter().map(|&a| next[a].clone()));
        }
        let options = GraphOptions {
            persistent,
            placement,
            ..GraphOptions::default()
        };
        let graph = ExpressionGraph::build(&factory, &roots, patch, &options)?;
        for &axis in &self.active {
            if reads_start_level(self.integrator) {
                graph.fill_placeholder(&self.start[axis])?;
            }
            graph.fill_placeholder(&self.now[axis])?;
            if let Some(next) = next {
                graph.fill_placeholder(&next[axis])?;
            }
        }
        Ok(graph)
    }
}

/// The momentum right-hand side of component `F`: `-(u . grad) u_F + nu
/// lap(u_F) + f`, the convective term in `form` and every operator of
/// `order`.
#[derive(Clone)]
struct MomentumTerms {
    form: ConvectionForm,
    order: SpaceOrder,
    active: Vec<usize>,
    spacing: [f64; 3],
    viscosity: f64,
    force: f64,
    /// Convective outflow sides and their speeds `U_c`.
    convective: Vec<(Side, Parameter)>,
}

fn momentum<F: FaceLocation + GraphLocation>(
    rhs: Tag,
    velocity: [Tag; 3],
    terms: MomentumTerms,
) -> LanguageExpression {
    LanguageExpression::new::<F>(rhs, move |s| {
        let convection = momentum_convection::<F>(
            terms.form,
            terms.order,
            s,
            &velocity,
            &terms.active,
            terms.spacing,
        );
        let u: Expr<'static, F> = s.field(&velocity[F::AXIS]);
        let mut value = -convection;
        if terms.viscosity != 0.0 {
            value = value + terms.viscosity * terms.order.laplacian(u);
        }
        if terms.force != 0.0 {
            value = value + terms.force;
        }
        // On a convective outflow normal to this component, its boundary
        // faces follow du/dt = -U_c du/dn instead (one-sided: the face
        // and its inner neighbour).
        for (side, speed) in &terms.convective {
            if side.axis != F::AXIS {
                continue;
            }
            let mut inward = [0isize; 3];
            inward[side.axis] = if side.plus { -1 } else { 1 };
            let u: Expr<'static, F> = s.field(&velocity[F::AXIS]);
            let outward_derivative =
                (u.clone() - shift(u, inward)) * (1.0 / terms.spacing[side.axis]);
            let carried = -1.0 * speed.expr::<F>() * outward_derivative;
            value = cond(on(&Mask::<F>::boundary(*side)), carried).otherwise(value);
        }
        value
    })
}

/// An incompressible flow advancing in time.
pub struct IncompressibleFlow {
    /// Every stage: momentum, update, projection, pressure.
    graph: ExpressionGraph,
    parameters: StageParameters,
    /// `1 / (b dt)` of the stage: the pressure is `psi` times it.
    pressure_scale: Parameter,
    /// `|div(u*)|^2` and `|div(u)|^2` of the last stage (graph reductions).
    divergence_before: Parameter,
    divergence_after: Parameter,
    /// `max |u|` per component of the last stage's velocity (graph
    /// reductions), and the version of the current velocity they hold for
    /// ([`ExpressionGraph::field_version`]); `None` until a stage ran.
    speeds: [Parameter; 3],
    speeds_of: Cell<[Option<u64>; 3]>,
    /// With [`IncompressibleFlowBuilder::track_enstrophy`]: the sums of the
    /// squared vorticity components of the last stage (graph reductions),
    /// and the version of `u` they hold for.
    vorticity: Vec<Parameter>,
    vorticity_of: Cell<Option<u64>>,
    active: Vec<usize>,
    now: [Tag; 3],
    next: [Tag; 3],
    start: [Tag; 3],
    provisional: [Tag; 3],
    /// What the flow's graph receives the patches' momentum into (with
    /// patches and the projection replicated): `provisional`, or with
    /// bodies the unforced velocity.
    gathered: [Tag; 3],
    psi: Tag,
    pressure: Tag,
    conditions: [BoundaryConditions; 3],
    walls: BoundaryConditions,
    /// Convective outflow sides and their speeds `U_c`, set before each
    /// step from the mean outward normal velocity.
    convective: Vec<(Side, Parameter)>,
    order: SpaceOrder,
    convection: ConvectionForm,
    viscosity: f64,
    integrator: TimeIntegrator,
    mode: ExecutionMode,
    /// The Poisson solve node's multigrid, reports and failures (`None`
    /// when the solve runs on patches, in `projection`).
    poisson: Option<Arc<Mutex<PoissonState>>>,
    /// With patches (not replicated): the projection's solve on them.
    projection: Option<PatchProjection>,
    time: f64,
    steps: u64,
    last: ProjectionReport,
    /// Every projection's solve since the flow was built.
    totals: ProjectionTotals,
    /// The time step's speed reductions and the kinetic energy, prepared
    /// once ([`crate::prepared`]); a mutex because those queries take
    /// `&self`.
    prepared: Mutex<Assignments>,
    /// The immersed bodies on the grid, if any, and per component the
    /// counts of solid and forced interior faces.
    immersed: Option<Immersed>,
    immersed_faces: [(usize, usize); 3],
    /// Per component, the unforced stage result (with bodies).
    free: Vec<Option<Tag>>,
    /// The force reductions of the bodies whose band fits, and why the
    /// others have none.
    forces: Vec<ForceReductions>,
    unforced: Vec<(String, String)>,
    body_force: [f64; 3],
    /// The last step's dt, when its forces are valid (the step started
    /// from a velocity whose weighted momentum the graph had reduced).
    last_dt: Option<f64>,
    /// The version of the first velocity component whose bodies' weighted
    /// momentum a restart put back ([`IncompressibleFlow::restore_force_sums`]):
    /// the next step's force is then known as if no restart had happened.
    force_sums_of: Cell<Option<u64>>,
    /// With [`IncompressibleFlowBuilder::patches`]: the momentum graphs of
    /// this rank's patches; `graph` then holds the projection (replicated)
    /// or what reads the whole domain at a step's end (the state on the
    /// patches).
    patches: Option<FlowPatches>,
    /// With the projection on the patches the state lives on the patches
    /// (`crate::flow_patches`), and `graph` receives the velocity and
    /// `psi` at the end of each step. The versions of its velocity
    /// components when the patches last gave it theirs or took it from
    /// there: a different one means the velocity was written since
    /// (initial values, a restart), and the next stage takes it from
    /// here. `None` for a flow whose state lives in `graph`.
    state_on_patches: RefCell<Option<Vec<Option<u64>>>>,
    /// With the state on the patches: the graphs reducing the velocity
    /// after a step's last stage (`crate::flow_reductions`).
    reductions: Option<PatchReductions>,
    /// With the state on the patches: whether the patches stepped since
    /// `graph` last received their velocity and `psi`.
    whole: Cell<WholeState>,
    /// Rank 0 is inside [`IncompressibleFlow::on_root_with_whole`]: its
    /// readers take the whole domain as it was gathered onto it.
    root_reads: Cell<bool>,
    /// With the state on the patches: whether the whole domain's pressure
    /// was written (a restart from whole-domain files) since a stage last
    /// formed it from `psi`; a patch's pressure is then cut from there.
    pressure_written: Cell<bool>,
    /// With the state on the patches: whether the reductions graphs hold
    /// the patches' current velocity with its seams exchanged (after a
    /// step, a write on the patches or [`IncompressibleFlow::refresh_patches`]).
    patch_velocity_current: Cell<bool>,
    /// When recording for a trace: the work of a decomposed flow outside
    /// its graphs (the state's seams, the Poisson solves, the step's
    /// gather) since [`IncompressibleFlow::start_recording`].
    recording: SpanRecording,
}

impl std::fmt::Debug for IncompressibleFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncompressibleFlow")
            .field("dimensions", &self.active.len())
            .field("viscosity", &self.viscosity)
            .field("time", &self.time)
            .field("steps", &self.steps)
            .finish()
    }
}

impl IncompressibleFlow {
    /// The graph of a stage: momentum and projection, or the projection
    /// alone when the momentum runs on patches ([`Self::momentum_graphs`]).
    /// With the state on the patches (the projection on them too), what
    /// reads the whole domain: its velocity, `psi` and pressure are those
    /// of the last [`Self::gather_whole`], which the flow's readers
    /// ([`Self::with_velocity`], ...) make first, and its fields are not
    /// even allocated before the first such read
    /// ([`ExpressionGraph::holds_storage`]); read its fields through the
    /// flow's readers, not through this graph.
    pub fn graph(&self) -> &ExpressionGraph {
        &self.graph
    }

    /// Current time.
    pub fn time(&self) -> f64 {
        self.time
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Sets the clock (time and steps taken), e.g. when restarting from a
    /// checkpoint. With a non-zero clock the first step does not project the
    /// initial velocity again. The time must be finite.
    pub fn set_clock(&mut self, time: f64, steps: u64) -> SolverResult<()> {
        if !time.is_finite() {
            return Err(SolverError::TimeStep(format!(
                "set_clock: time = {time} must be finite"
            )));
        }
        self.time = time;
        self.steps = steps;
        Ok(())
    }

    /// The order of the flow's spatial operators.
    pub fn space_order(&self) -> SpaceOrder {
        self.order
    }

    /// The form of the convective term.
    pub fn convection_form(&self) -> ConvectionForm {
        self.convection
    }

    /// The axes the flow has velocity components on (0 = x, ...).
    pub fn active_axes(&self) -> &[usize] {
        &self.active
    }

    /// Runs `f` on the projection potential `psi` of the last stage (the
    /// pressure solve's starting guess for the next one, so part of the
    /// state a restart needs).
    pub fn with_projection_potential<R>(
        &self,
        f: impl FnOnce(&SpatialField<CellCentre>) -> R,
    ) -> SolverResult<R> {
        self.gather_whole()?;
        Ok(self.graph.with_field::<CellCentre, _>(&self.psi, f)?)
    }

    /// Runs `f` on the projection potential, mutably (to restore it from a
    /// checkpoint).
    pub fn with_projection_potential_mut<R>(
        &self,
        f: impl FnOnce(&mut SpatialField<CellCentre>) -> R,
    ) -> SolverResult<R> {
        self.gather_whole()?;
        Ok(self.graph.with_field_mut::<CellCentre, _>(&self.psi, f)?)
    }

    /// Runs `f` on the pressure of the last stage (zero on the interior
    /// after the projection of the initial velocity, which has no time
    /// step to scale `psi` by).
    pub fn with_pressure<R>(
        &self,
        f: impl FnOnce(&SpatialField<CellCentre>) -> R,
    ) -> SolverResult<R> {
        self.gather_whole()?;
        Ok(self.graph.with_field::<CellCentre, _>(&self.pressure, f)?)
    }

    /// Runs `f` on the pressure, mutably (to restore it from a checkpoint).
    pub fn with_pressure_mut<R>(
        &self,
        f: impl FnOnce(&mut SpatialField<CellCentre>) -> R,
    ) -> SolverResult<R> {
        self.gather_whole()?;
        self.pressure_written.set(true);
        Ok(self
            .graph
            .with_field_mut::<CellCentre, _>(&self.pressure, f)?)
    }

    /// Runs `f` on velocity component `F`, mutably (e.g. to restore it from
    /// a checkpoint).
    pub fn with_velocity_mut<F: GraphLocation + FaceLocation, R>(
        &self,
        f: impl FnOnce(&mut SpatialField<F>) -> R,
    ) -> SolverResult<R> {
        self.gather_whole()?;
        Ok(self.graph.with_field_mut::<F, _>(&self.now[F::AXIS], f)?)
    }

    /// The enstrophy `Omega = mean |omega|^2 / 2` of the current velocity,
    /// reduced in the graph by the last stage (see
    /// [`IncompressibleFlowBuilder::track_enstrophy`]); `None` when the flow
    /// does not track it or the velocity was written since (before the
    /// first step, after a restart).
    pub fn enstrophy(&self) -> SolverResult<Option<f64>> {
        if self.vorticity.is_empty() {
            return Ok(None);
        }
        let version = self.graph.field_version(&self.now[self.active[0]])?;
        if version.is_none() || version != self.vorticity_of.get() {
            return Ok(None);
        }
        let edges = self.interior_len(self.active[0])?;
        let sum: f64 = self.vorticity.iter().map(Parameter::get).sum();
        Ok(Some(0.5 * sum / edges as f64))
    }

    /// With [`IncompressibleFlowBuilder::patches`]: the momentum graphs of
    /// the patches this rank owns, in patch order, with their indices in
    /// the layout (empty for an undecomposed flow, whose [`Self::graph`]
    /// holds the momentum).
    pub fn momentum_graphs(&self) -> Vec<(usize, &ExpressionGraph)> {
        self.patches
            .as_ref()
            .map(FlowPatches::graphs)
            .unwrap_or_default()
    }

    /// With the projection on the patches: the graphs of its parts on the
    /// patches this rank owns, each with its part's name (`"forcing"`
    /// with bodies, `"divergence"`, `"correction"`, then the step's
    /// `"reductions"`) and its patch's index
    /// in the layout, in that order and patch order (empty otherwise):
    /// for timings and traces.
    pub fn projection_graphs(&self) -> Vec<(&'static str, usize, &ExpressionGraph)> {
        let mut graphs = self
            .projection
            .as_ref()
            .map(PatchProjection::graphs)
            .unwrap_or_default();
        if let (Some(reductions), Some(patches)) = (&self.reductions, &self.patches) {
            graphs.extend(
                patches
                    .owned()
                    .zip(reductions.graphs())
                    .map(|(index, graph)| ("reductions", index, graph)),
            );
        }
        graphs
    }

    /// With [`IncompressibleFlowBuilder::patches`]: the patches whose
    /// momentum this rank runs; `None` for an undecomposed flow.
    pub fn owned_patches(&self) -> Option<std::ops::Range<usize>> {
        self.patches.as_ref().map(FlowPatches::owned)
    }

    /// With [`IncompressibleFlowBuilder::patches`]: this rank and the
    /// number of ranks sharing the patches; `None` for an undecomposed
    /// flow.
    pub fn rank(&self) -> Option<(usize, usize)> {
        self.patches.as_ref().map(FlowPatches::rank)
    }

    /// With [`IncompressibleFlowBuilder::patches`]: the layout of the
    /// patches; `None` for an undecomposed flow.
    pub fn patch_layout(&self) -> Option<&PatchLayout> {
        self.patches.as_ref().map(FlowPatches::layout)
    }

    /// With [`IncompressibleFlowBuilder::patches`]: the wall time this rank
    /// spent moving velocities between the whole domain and its patches
    /// and between the patches (the state's seams, the windows a stage
    /// takes of a velocity written into the flow, the gathers, the
    /// Poisson solve's exchanges and the step's reductions across patches;
    /// waits for other ranks included). `None` for an undecomposed flow.
    pub fn exchange_time(&self) -> Option<Duration> {
        let solve = self
            .projection
            .as_ref()
            .map_or(Duration::ZERO, PatchProjection::exchange_time);
        let reductions = self
            .reductions
            .as_ref()
            .map_or(Duration::ZERO, PatchReductions::exchange_time);
        self.patches
            .as_ref()
            .map(|p| p.exchange_time() + solve + reductions)
    }

    /// Records every following piece of a decomposed flow's work outside
    /// its graphs, timed from `epoch` (the graphs' epoch: one timeline),
    /// until [`Self::take_recording`]: the exchange of the state's seams,
    /// the step's reductions on the patches (their seams exchanged) and
    /// each gather of the velocity and `psi` ([`Self::gather_whole`]) on
    /// the [`EXCHANGE_TRACK`], each Poisson solve on the [`POISSON_TRACK`].
    /// Nothing is recorded for an undecomposed flow, whose work is all in
    /// its graph.
    pub fn start_recording(&self, epoch: Instant) {
        self.recording.start(epoch);
    }

    /// What [`Self::start_recording`] recorded since; recording stops.
    pub fn take_recording(&self) -> Vec<RecordedEvent> {
        self.recording.take()
    }

    /// With [`IncompressibleFlowBuilder::patches`] (projection not
    /// replicated): the Poisson solver's levels in all and on patches.
    pub fn projection_levels(&self) -> Option<(usize, usize)> {
        self.projection.as_ref().map(PatchProjection::levels)
    }

    /// With [`IncompressibleFlowBuilder::patches`] (projection not
    /// replicated): where the Poisson solve on the patches runs, the GPU
    /// of a flow placed there ([`IncompressibleFlowBuilder::placement`]
    /// with [`PlacementPolicy::Gpu`]), else the CPU.
    pub fn projection_device(&self) -> Option<watershed_fields::Device> {
        self.projection.as_ref().map(PatchProjection::device)
    }

    /// With [`IncompressibleFlowBuilder::patches`] (projection not
    /// replicated): the wall time this rank spent in the Poisson solves on
    /// the patches, which run between graph executions (their exchanges
    /// and waits included).
    pub fn projection_solve_time(&self) -> Option<Duration> {
        self.projection.as_ref().map(PatchProjection::solve_time)
    }

    /// Every projection's Poisson solve since the flow was built (its
    /// initial projection included): count, iterations, worst residual.
    pub fn projection_totals(&self) -> ProjectionTotals {
        self.totals
    }

    /// The last projection's solve and divergences.
    pub fn last_projection(&self) -> &ProjectionReport {
        &self.last
    }

    fn component<F: GraphLocation, R>(
        &self,
        axis: usize,
        f: impl FnOnce(&SpatialField<F>) -> R,
    ) -> SolverResult<R> {
        self.gather_whole()?;
        Ok(self.graph.with_field::<F, _>(&self.now[axis], f)?)
    }

    /// Runs `f` on velocity component `axis` (0 = u on x faces, ...),
    /// over the whole domain (for a decomposed flow, after
    /// [`Self::gather_whole`]: collective).
    pub fn with_velocity<F: GraphLocation + FaceLocation, R>(
        &self,
        f: impl FnOnce(&SpatialField<F>) -> R,
    ) -> SolverResult<R> {
        self.component::<F, R>(F::AXIS, f)
    }

    /// Runs `f` on velocity component `F` over this rank's patch of the
    /// flow that has `patch`'s cells, its ghosts included and holding the
    /// whole domain's values there (the seams exchanged and the physical
    /// ghosts filled after the last step, for its reductions), when the
    /// flow's state lives on patches and its velocity was not written
    /// since that step; `None` otherwise (read the whole domain with
    /// [`Self::with_velocity`]). Not collective: what a solver on the same
    /// patch reads of the flow without any gather
    /// ([`crate::TransportSolver::carry_by`]).
    pub fn with_patch_velocity<F: GraphLocation + FaceLocation, R>(
        &self,
        patch: &Patch,
        f: impl FnOnce(&SpatialField<F>) -> R,
    ) -> SolverResult<Option<R>> {
        let (Some(patches), Some(reductions)) = (&self.patches, &self.reductions) else {
            return Ok(None);
        };
        // The reductions graphs hold the patches' velocity, which the
        // whole domain's has not overwritten since.
        if !self.patch_velocity_current.get() || self.whole_velocity_written()? {
            return Ok(None);
        }
        let layout = patches.layout();
        for (index, graph) in patches.owned().zip(reductions.graphs()) {
            let own = layout.patch(index)?;
            if own.grid() == patch.grid()
                && own.offset() == patch.offset()
                && own.cells() == patch.cells()
            {
                return Ok(Some(graph.with_field::<F, _>(&self.now[F::AXIS], f)?));
            }
        }
        Ok(None)
    }

    /// Sets velocity component `F` from `f(x, y, z)` at its face positions,
    /// then applies its boundary conditions at the flow's time (values
    /// given as expressions of time included).
    pub fn set_velocity<F: GraphLocation + FaceLocation>(
        &self,
        f: impl Fn([f64; 3]) -> f64,
    ) -> SolverResult<()> {
        if let Some(patches) = &self.patches
            && self.state_on_patches.borrow().is_some()
        {
            return self.set_velocity_on_patches::<F>(patches, f);
        }
        // The component's boundary conditions at the flow's time, so that
        // the state (and a dump of it) holds them from the start.
        self.gather_whole()?;
        self.parameters.time.set(self.time);
        let conditions = self.conditions[F::AXIS]
            .clone()
            .with_time(&self.parameters.time);
        self.graph
            .with_field_mut::<F, _>(&self.now[F::AXIS], |u| -> SolverResult<()> {
                let layout = u.layout().clone();
                let values = u.values_mut()?;
                for index in layout.allocated() {
                    values[layout.linear_index(index)] = f(layout.coordinate(index));
                }
                conditions.apply(u)?;
                match conditions.non_finite_value::<F>(u.layout(), u.name())? {
                    None => Ok(()),
                    Some((side, point, what)) => Err(SolverError::NonFiniteInput {
                        field: NAMES[F::AXIS].to_string(),
                        cell: point,
                        detail: format!(
                            "the boundary condition of {} on side {}: {what} is not finite at {point:?} at t = {:e}; an expression of the boundary value evaluated outside its domain?",
                            NAMES[F::AXIS],
                            side.name(),
                            self.time
                        ),
                    }),
                }
            })?
    }

    /// `0.5 * mean(|u|^2)`: each component's squares averaged over its
    /// interior points.
    pub fn kinetic_energy(&self) -> SolverResult<f64> {
        if let Some(patches) = &self.patches
            && self.state_on_patches.borrow().is_some()
        {
            return self.kinetic_energy_on_patches(patches);
        }
        let mut energy = 0.0;
        for &axis in &self.active {
            let mean_square = |count: usize, sum: f64| sum / count as f64;
            energy += 0.5
                * on_face!(axis, F => self.component::<F, _>(axis, |u| {
                    interior_sum(field(u) * field(u))
                        .map(|s| mean_square(u.layout().interior_len(), s))
                })??);
        }
        Ok(energy)
    }

    /// [`Self::kinetic_energy`] of a flow whose state lives on the
    /// patches: each component's squares summed over each patch's
    /// interior, added in patch order (collective), so the same bits on
    /// any number of ranks for one layout. Where the whole domain's
    /// velocity was written since the patches last took it (initial
    /// values, a restart), they take it first.
    fn kinetic_energy_on_patches(&self, patches: &FlowPatches) -> SolverResult<f64> {
        self.patches_take_written_velocity(patches)?;
        let sums = patches.sums_of_squares(&self.now)?;
        let mut energy = 0.0;
        for (&axis, sum) in self.active.iter().zip(sums) {
            energy += 0.5 * (sum / self.interior_len(axis)? as f64);
        }
        Ok(energy)
    }

    /// With the state on the patches: where the whole domain's velocity
    /// was written since the patches last took it (initial values, a
    /// restart), each patch takes its window of it (not collective).
    fn patches_take_written_velocity(&self, patches: &FlowPatches) -> SolverResult<()> {
        if self.whole_velocity_written()? {
            patches.take_state(&self.graph, &self.now)?;
            *self.state_on_patches.borrow_mut() = Some(self.whole_velocity_versions()?);
            self.patch_velocity_current.set(false);
        }
        Ok(())
    }

    /// With the state on the patches: whether the whole domain's velocity
    /// was written since the patches last took it or gave it theirs.
    fn whole_velocity_written(&self) -> SolverResult<bool> {
        let versions = self.whole_velocity_versions()?;
        Ok(versions.contains(&None) || self.state_on_patches.borrow().as_ref() != Some(&versions))
    }

    /// The number of interior points of velocity component `axis` over
    /// the whole domain (its layout only: nothing is gathered).
    fn interior_len(&self, axis: usize) -> SolverResult<usize> {
        Ok(self.whole_layout(axis).interior_len())
    }

    /// The layout of velocity component `axis` over the whole domain
    /// (nothing is read or allocated).
    fn whole_layout(&self, axis: usize) -> watershed_fields::FieldLayout {
        let kind = on_face!(axis, F => <F as watershed_fields::Location>::KIND);
        watershed_fields::FieldLayout::new(self.graph.patch(), kind)
    }

    /// The interior maximum of `|u|` (prepared once per field).
    fn max_abs<F: GraphLocation>(&self, u: &SpatialField<F>) -> SolverResult<f64> {
        let mut prepared = self
            .prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The time levels rotate, so the current velocity is a different
        // field (id) from step to step: it is read under one fixed id per
        // location, and the reduction is prepared once.
        let leaf = CURRENT_VELOCITY_LEAF - F::KIND as u64;
        let current = ReadAs { id: leaf, field: u };
        prepared.reduce(
            "max |u|",
            [leaf, 0],
            watershed_fields::Device::Cpu,
            &[&current],
            || {
                PreparedReduction::of_node(
                    abs(Expr::<F>::symbol(leaf, u.name())).node(),
                    F::KIND,
                    &[&current],
                    Reduction::Max,
                    ReduceRegion::Interior,
                    Parallelism::Rayon,
                )
            },
        )
    }

    /// The error for velocity component `axis` no longer finite at `cell`
    /// after a stage of step `self.steps + 1`.
    fn diverged(&self, axis: usize, cell: [isize; 3], dt: f64) -> SolverError {
        let limit = self.scheme_limit().ok().flatten();
        let scheme = format!(
            "{:?} with {} convection at space order {}",
            self.integrator,
            self.convection.name(),
            self.order.number()
        );
        let cause = match limit {
            Some(limit) if dt > limit => format!(
                "dt = {dt:e} exceeds the explicit stability limit of {scheme} (about {limit:.3e}): reduce the time step (cfl, diffusion_number)"
            ),
            Some(limit) => format!(
                "dt = {dt:e} is within the explicit stability limit of {scheme} (about {limit:.3e}); check the boundary values, the body force and the pressure solve"
            ),
            None if self.viscosity == 0.0 && !matches!(self.integrator, TimeIntegrator::SspRk3) => {
                format!(
                    "{scheme} and no viscosity: central convection is unstable with this integrator for every dt; use ssp-rk3"
                )
            }
            None => format!(
                "dt = {dt:e}: {scheme} has no explicit limit that covers this flow's convection without viscous damping; reduce cfl or use ssp-rk3"
            ),
        };
        SolverError::Diverged {
            equation: format!("momentum ({})", NAMES[axis]),
            cell,
            step: self.steps + 1,
            time: self.time + dt,
            cause,
        }
    }

    /// Runs the graph once (`stage`: which stage of the step, `None` for
    /// the projection of the initial velocity, whose update copies it) and
    /// moves the projected velocity to STATE_N.
    fn run_stage(&mut self, stage: Option<usize>, dt: f64) -> SolverResult<()> {
        self.speeds_of.set([None; 3]);
        self.vorticity_of.set(None);
        if self.state_on_patches.borrow().is_some() {
            return self.run_stage_on_patches(stage, dt);
        }
        if let Some(patches) = &self.patches {
            // Later stages read the step's start level.
            let start = (stage.is_some_and(|index| index > 0)
                && reads_start_level(self.integrator))
            .then_some(&self.start);
            let levels = [&self.now, &self.provisional, &self.gathered];
            if let Err(failure) = patches.run_momentum(&self.graph, levels, start, self.mode) {
                return Err(self.momentum_error(failure, dt));
            }
        }
        if let Err(error) = self.graph.execute(self.mode) {
            if let Some(poisson) = &self.poisson
                && let Some(failure) = lock_state(poisson).take_failure()
            {
                return Err(failure);
            }
            // The stage updates and the corrections check what they write.
            if let Some((node, cell)) = not_finite_in(&error)
                && let Some(axis) = (0..3).find(|&a| {
                    node == self.next[a].name.as_ref()
                        || node == self.provisional[a].name.as_ref()
                        || self.free[a]
                            .as_ref()
                            .is_some_and(|t| node == t.name.as_ref())
                })
            {
                return Err(self.diverged(axis, cell, dt));
            }
            return Err(error.into());
        }
        for &axis in &self.active {
            match stage {
                Some(index) => advance_levels(
                    &self.graph,
                    self.integrator,
                    index,
                    &self.start[axis],
                    &self.now[axis],
                    &self.next[axis],
                )?,
                None => self
                    .graph
                    .rotate_fields(&[self.now[axis].clone(), self.next[axis].clone()])?,
            }
            // The speed reduction read what is now the current velocity.
            let mut speeds_of = self.speeds_of.get();
            speeds_of[axis] = self.graph.field_version(&self.now[axis])?;
            self.speeds_of.set(speeds_of);
        }
        self.vorticity_of.set(self.speeds_of.get()[self.active[0]]);
        self.record_projection()
    }

    /// A stage of a flow whose state lives on the patches (see
    /// `crate::flow_patches`): the state's seams exchanged (or its windows
    /// taken from `graph` where the velocity was written there), the
    /// momentum, the solve and the correction on the patches, the levels
    /// rotated there; after a step's last stage (and the initial
    /// projection) the velocity and `psi` gathered into `graph`, which
    /// forms the pressure and reduces the speeds, divergence and
    /// enstrophy of the whole domain.
    fn run_stage_on_patches(&mut self, stage: Option<usize>, dt: f64) -> SolverResult<()> {
        let patches = self.patches.as_ref().ok_or_else(state_not_on_patches)?;
        let versions = self
            .active
            .iter()
            .map(|&a| self.graph.field_version(&self.now[a]))
            .collect::<Result<Vec<_>, _>>()?;
        let from_whole =
            versions.contains(&None) || self.state_on_patches.borrow().as_ref() != Some(&versions);
        self.patch_velocity_current.set(false);
        let started = Instant::now();
        let prepared = patches.prepare_state(&self.graph, &self.now, from_whole);
        self.recording.record(
            EXCHANGE_TRACK,
            "seams of the velocity",
            started,
            Instant::now(),
        );
        let momentum = prepared.and_then(|()| patches.execute(self.mode));
        if let Err(failure) = momentum {
            return Err(self.momentum_error(failure, dt));
        }
        // The patches now hold the velocity `graph` holds, until one of
        // them is written again.
        *self.state_on_patches.borrow_mut() = Some(versions);
        let (Some(patches), Some(projection)) = (&self.patches, &mut self.projection) else {
            return Err(state_not_on_patches());
        };
        let graphs: Vec<&ExpressionGraph> = patches.graphs().into_iter().map(|(_, g)| g).collect();
        let started = Instant::now();
        let solved = projection.solve(&graphs, &self.provisional, &self.graph, self.mode);
        self.recording.record(
            POISSON_TRACK,
            "div(u*), the solve and its exchanges",
            started,
            Instant::now(),
        );
        let corrected = solved
            .and_then(|()| projection.correct(&self.provisional, self.mode))
            .and_then(|corrected| Ok(patches.take_corrected(corrected, &self.next)?));
        if let Err(failure) = corrected {
            return Err(self.projection_error(failure, dt));
        }
        for (_, graph) in patches.graphs() {
            for &axis in &self.active {
                match stage {
                    Some(index) => advance_levels(
                        graph,
                        self.integrator,
                        index,
                        &self.start[axis],
                        &self.now[axis],
                        &self.next[axis],
                    )?,
                    None => {
                        graph.rotate_fields(&[self.now[axis].clone(), self.next[axis].clone()])?
                    }
                }
            }
        }
        self.pressure_written.set(false);
        let last = stage.is_none_or(|index| index + 1 == self.integrator.stages().len());
        if last {
            // The new velocity's speeds, divergence and enstrophy, reduced
            // on the patches; `graph` is now behind the patches.
            let reductions = self.reductions.as_ref().ok_or_else(state_not_on_patches)?;
            let started = Instant::now();
            reductions.reduce(patches, projection, self.mode)?;
            self.recording.record(
                EXCHANGE_TRACK,
                "the step's reductions on the patches",
                started,
                Instant::now(),
            );
            self.whole.set(WholeState::Stale);
            self.patch_velocity_current.set(true);
            let mut reduced = [None; 3];
            for &axis in &self.active {
                reduced[axis] = self.graph.field_version(&self.now[axis])?;
            }
            self.speeds_of.set(reduced);
            self.vorticity_of.set(reduced[self.active[0]]);
        }
        self.record_projection()
    }

    /// With [`IncompressibleFlowBuilder::patches`] (the projection not
    /// replicated), the flow's state lives on the patches: this brings
    /// the whole domain's velocity, `psi` and pressure up to date, the
    /// velocity and `psi` of every patch of every rank gathered in patch
    /// order into [`Self::graph`], which then forms the pressure. Nothing
    /// when they are current (no
    /// step since the last gather) or the flow is not decomposed.
    ///
    /// Collective when it gathers: every rank must call it at the same
    /// point. The readers of the whole domain ([`Self::with_velocity`],
    /// [`Self::with_pressure`], [`Self::with_projection_potential`] and
    /// their `_mut` forms, [`Self::set_velocity`]) call it themselves, so
    /// ranks that step and read the same flow in the same order need
    /// nothing more; a rank that skips a read another rank makes (it
    /// writes nothing, say) calls this instead. What rank 0 alone reads
    /// (to write a file) goes through [`Self::on_root_with_whole`], which
    /// forms nothing on the other ranks. The speeds and the enstrophy the
    /// patches reduced stay valid for the velocity gathered.
    pub fn gather_whole(&self) -> SolverResult<()> {
        match self.whole.get() {
            WholeState::Current => return Ok(()),
            // Rank 0's reads inside `on_root_with_whole`.
            WholeState::OnRoot if self.root_reads.get() => return Ok(()),
            WholeState::OnRoot | WholeState::Stale => {}
        }
        let (Some(patches), Some(projection)) = (&self.patches, &self.projection) else {
            return Err(state_not_on_patches());
        };
        let before = self.whole_versions_by_axis()?;
        let started = Instant::now();
        patches.gather(&self.now, &self.graph, &self.now)?;
        projection.gather_psi(&self.graph)?;
        self.recording.record(
            EXCHANGE_TRACK,
            "gather of the velocity and psi",
            started,
            Instant::now(),
        );
        self.whole.set(WholeState::Current);
        self.whole_received(before)
    }

    /// The versions of the whole domain's velocity components, by axis
    /// (nothing is read or allocated).
    fn whole_versions_by_axis(&self) -> SolverResult<[Option<u64>; 3]> {
        let mut versions = [None; 3];
        for &axis in &self.active {
            versions[axis] = self.graph.field_version(&self.now[axis])?;
        }
        Ok(versions)
    }

    /// Runs `f` on rank 0 only, with the whole domain's velocity, `psi`
    /// and pressure gathered onto rank 0 alone when the flow's state
    /// lives on the patches (collective: every rank calls it at the same
    /// point; the others send their patches and hold no whole field).
    /// Inside `f` rank 0 reads the whole domain through the flow's
    /// readers ([`Self::with_velocity`], ...) without any further
    /// gather, so `f` must make no collective call. Returns `f`'s result
    /// on rank 0 (and on an undecomposed flow, which has no ranks), `None`
    /// on the others: what writes a file of the whole domain.
    pub fn on_root_with_whole<R>(&self, f: impl FnOnce() -> R) -> SolverResult<Option<R>> {
        let root = self.rank().is_none_or(|(rank, _)| rank == 0);
        if self.whole.get() == WholeState::Stale {
            let (Some(patches), Some(projection)) = (&self.patches, &self.projection) else {
                return Err(state_not_on_patches());
            };
            let before = self.whole_versions_by_axis()?;
            let started = Instant::now();
            let received = patches.gather_to_root(&self.now, &self.graph, &self.now)?;
            let received_psi = projection.gather_psi_to_root(&self.graph)?;
            self.recording.record(
                EXCHANGE_TRACK,
                "gather of the velocity and psi onto rank 0",
                started,
                Instant::now(),
            );
            self.whole.set(WholeState::OnRoot);
            if received && received_psi {
                self.whole_received(before)?;
            }
        }
        if !root {
            return Ok(None);
        }
        self.root_reads.set(true);
        let result = f();
        self.root_reads.set(false);
        Ok(Some(result))
    }

    /// After the whole domain's velocity and `psi` arrived from the
    /// patches: forms the pressure, and carries the tokens of what the
    /// patches reduced and hold over to the velocity received.
    /// `before`: the versions of the whole domain's velocity before it
    /// arrived.
    fn whole_received(&self, before: [Option<u64>; 3]) -> SolverResult<()> {
        self.graph.execute(self.mode)?;
        let mut versions = Vec::with_capacity(self.active.len());
        let mut after = [None; 3];
        for &axis in &self.active {
            after[axis] = self.graph.field_version(&self.now[axis])?;
            versions.push(after[axis]);
        }
        // What was reduced from the patches' velocity holds for the same
        // velocity in `graph`.
        let speeds_of = self.speeds_of.get();
        if self
            .active
            .iter()
            .all(|&a| before[a].is_some() && speeds_of[a] == before[a])
        {
            self.speeds_of.set(after);
        }
        if before[self.active[0]].is_some() && self.vorticity_of.get() == before[self.active[0]] {
            self.vorticity_of.set(after[self.active[0]]);
        }
        *self.state_on_patches.borrow_mut() = Some(versions);
        Ok(())
    }

    /// The error of a failed momentum on the patches: a non-finite `u*`
    /// as divergence at its global point.
    fn momentum_error(&self, failure: MomentumFailure, dt: f64) -> SolverError {
        match failure {
            MomentumFailure::Solver(error) => error,
            MomentumFailure::Graph { error, offset } => {
                if let Some((node, cell)) = not_finite_in(&error)
                    && let Some(axis) = (0..3).find(|&a| node == self.provisional[a].name.as_ref())
                {
                    let global = [0, 1, 2].map(|a| cell[a] + offset[a]);
                    return self.diverged(axis, global, dt);
                }
                (*error).into()
            }
        }
    }

    /// The error of a failed projection on the patches: a non-finite
    /// corrected velocity as divergence at its global point.
    fn projection_error(&self, failure: ProjectionFailure, dt: f64) -> SolverError {
        match failure {
            ProjectionFailure::Solver(error) => error,
            ProjectionFailure::Graph(error) => (*error).into(),
            ProjectionFailure::Patch { error, offset } => {
                if let Some((node, cell)) = not_finite_in(&error)
                    && let Some(axis) = (0..3).find(|&a| node == self.next[a].name.as_ref())
                {
                    let global = [0, 1, 2].map(|a| cell[a] + offset[a]);
                    return self.diverged(axis, global, dt);
                }
                (*error).into()
            }
        }
    }

    /// The last projection's report, from the solve and the divergence
    /// reductions.
    fn record_projection(&mut self) -> SolverResult<()> {
        let state = self.poisson.as_ref().map(|p| lock_state(p));
        let report = match (&state, &self.projection) {
            (Some(state), _) => state.report(),
            (None, Some(projection)) => projection.report(),
            (None, None) => {
                return Err(SolverError::Setup {
                    equation: "incompressible flow".into(),
                    reason: "the flow has no Poisson solve".into(),
                });
            }
        };
        let first = report.residuals.first().copied().unwrap_or(0.0);
        let last = report.residuals.last().copied().unwrap_or(0.0);
        self.last = ProjectionReport {
            iterations: report.iterations,
            divergence_before: self.divergence_before.get().sqrt(),
            divergence_after: self.divergence_after.get().sqrt(),
            residual_reduction: if first > 0.0 { last / first } else { 0.0 },
            relative_residual: if report.rhs_norm > 0.0 {
                last / report.rhs_norm
            } else {
                0.0
            },
        };
        self.totals.add(&self.last);
        Ok(())
    }

    /// Advances one step of `dt`, projecting after every stage.
    pub fn step(&mut self, dt: f64) -> SolverResult<()> {
        if !(dt.is_finite() && dt > 0.0) {
            return Err(SolverError::TimeStep(format!(
                "dt = {dt} must be finite and positive"
            )));
        }
        if self.time + dt == self.time {
            return Err(SolverError::TimeStep(format!(
                "dt = {dt:e} is too small to move the time t = {} (t + dt == t in f64)",
                self.time
            )));
        }
        self.set_outflow_speeds()?;
        if self.steps == 0 && self.time == 0.0 {
            if let Some((axis, cell)) = self.first_non_finite_velocity()? {
                return Err(SolverError::NonFiniteInput {
                    field: NAMES[axis].to_string(),
                    cell,
                    detail: format!(
                        "the initial velocity component {} is not finite",
                        NAMES[axis]
                    ),
                });
            }
            // Start from a divergence-free field: a stage of zero length
            // (u* = u) and its projection; no pressure without a time step.
            let copy = Stage {
                a: 0.0,
                b: 1.0,
                c: 0.0,
            };
            self.parameters.set(&copy, self.time, 0.0);
            self.pressure_scale.set(0.0);
            self.run_stage(None, dt)?;
        }
        // The bodies' weighted momentum at the start of the step, when the
        // graph reduced it from this very velocity.
        let first = self.active[0];
        let version = self.graph.field_version(&self.now[first])?;
        let momentum_known = version.is_some()
            && (version == self.speeds_of.get()[first] || version == self.force_sums_of.get());
        self.force_sums_of.set(None);
        for reductions in &mut self.forces {
            reductions.previous = reductions.momentum();
        }
        self.last_dt = None;
        for (index, stage) in self.integrator.stages().iter().enumerate() {
            self.parameters
                .set_stage(self.integrator, index, self.time, dt);
            let factor = stage.b * dt;
            self.pressure_scale
                .set(if factor > 0.0 { 1.0 / factor } else { 0.0 });
            self.run_stage(Some(index), dt)?;
        }
        self.time += dt;
        self.steps += 1;
        self.last_dt = momentum_known.then_some(dt);
        Ok(())
    }

    /// The immersed bodies (empty without).
    pub fn bodies(&self) -> &[Body] {
        self.immersed.as_ref().map_or(&[], Immersed::bodies)
    }

    /// The smallest signed distance to the bodies at `x` (negative inside
    /// one), or `None` without bodies.
    pub fn body_distance(&self, x: [f64; 3]) -> Option<f64> {
        self.immersed.as_ref().map(|i| i.nearest(x).0)
    }

    /// Per velocity component, the interior faces inside bodies (which
    /// hold the body's velocity) and the forced ones next to them.
    pub fn immersed_faces(&self) -> [(usize, usize); 3] {
        self.immersed_faces
    }

    /// The sums the graph reduced, at the last stage, for the weighted
    /// momentum of each body whose force is computed (three per body, in
    /// the bodies' order): the state a checkpoint keeps beside the fields
    /// so that the first step after a restart has its force. Empty without
    /// such bodies.
    pub fn force_sums(&self) -> Vec<f64> {
        self.forces
            .iter()
            .flat_map(ForceReductions::momentum_sums)
            .collect()
    }

    /// Puts back what [`Self::force_sums`] gave, after the velocity it was
    /// reduced from has been restored: the next step then computes the
    /// bodies' forces, with the bits of a run that was never interrupted.
    /// Any later write to the velocity makes them unknown again. Errors,
    /// naming both counts, when `sums` is not three per body of this flow.
    pub fn restore_force_sums(&mut self, sums: &[f64]) -> SolverResult<()> {
        if sums.len() != 3 * self.forces.len() {
            return Err(SolverError::Setup {
                equation: "the bodies' weighted momentum".into(),
                reason: format!(
                    "{} values given, this flow reduces {} (three per body whose force it computes: {:?}); restart with the bodies the checkpoint was written with",
                    sums.len(),
                    3 * self.forces.len(),
                    self.forces
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                ),
            });
        }
        for (reductions, chunk) in self.forces.iter().zip(sums.chunks_exact(3)) {
            reductions.restore_momentum_sums([chunk[0], chunk[1], chunk[2]]);
        }
        let first = self.active[0];
        self.force_sums_of
            .set(self.graph.field_version(&self.now[first])?);
        Ok(())
    }

    /// Why the force on body `name` is never computed (no such body, or
    /// its force band does not fit the grid), or `None` when it is.
    pub fn force_unavailable(&self, name: &str) -> Option<String> {
        if let Some((_, why)) = self.unforced.iter().find(|(n, _)| n == name) {
            return Some(why.clone());
        }
        if self.forces.iter().any(|f| f.name == name) {
            return None;
        }
        let known: Vec<&str> = self.bodies().iter().map(Body::name).collect();
        Some(format!(
            "the flow has no body of that name (its bodies: {known:?})"
        ))
    }

    /// The force per unit density the fluid exerts on body `name` over
    /// the last step (per unit depth in 2D), from the graph's reductions
    /// of the step's last stage (`crate::immersed`). An error names why
    /// there is none: no such body, its force band does not fit, or no
    /// step has run from a velocity the graph reduced (before the first
    /// step, right after a restart or a write to the velocity).
    pub fn body_force(&self, name: &str) -> SolverResult<[f64; 3]> {
        let unavailable = |reason: String| SolverError::Setup {
            equation: format!("force on body '{name}'"),
            reason,
        };
        if let Some(why) = self.force_unavailable(name) {
            return Err(unavailable(why));
        }
        let Some(reductions) = self.forces.iter().find(|f| f.name == name) else {
            return Err(unavailable("no force reductions".into()));
        };
        let Some(dt) = self.last_dt else {
            return Err(unavailable(
                "no step has run since the velocity was set: the force needs the weighted momentum at a step's start and end".into(),
            ));
        };
        Ok(reductions.force(dt, self.body_force, &self.active))
    }

    /// The first velocity component (its axis) and interior point that is
    /// not finite.
    fn first_non_finite_velocity(&self) -> SolverResult<Option<(usize, [isize; 3])>> {
        if let Some(patches) = &self.patches
            && self.state_on_patches.borrow().is_some()
        {
            self.patches_take_written_velocity(patches)?;
            return Ok(self
                .first_non_finite_on_patches(patches, None)?
                .map(|found| (found.point.axis, found.point.cell)));
        }
        for &axis in &self.active {
            let bad = on_face!(axis, F => self.component::<F, _>(axis, first_non_finite)??);
            if let Some(cell) = bad {
                return Ok(Some((axis, cell)));
            }
        }
        Ok(None)
    }

    /// The largest stable `dt` for a Courant number `cfl` and a diffusion
    /// number `diffusion_number`.
    ///
    /// The speed is the largest of the interior velocities (the boundary
    /// faces included, the mirrored ghosts not) and the Dirichlet boundary
    /// values, so that an impulsively started lid limits the first step.
    /// After a stage, the interior maxima are the graph's own reductions of
    /// the new velocity (no pass over the velocity here); a velocity
    /// written since (initial values, a restart) is reduced on the spot.
    pub fn stable_time_step(&self, cfl: f64, diffusion_number: f64) -> SolverResult<f64> {
        let grid = self.graph.patch().grid();
        let mut limit =
            StabilityLimit::new(grid, cfl, diffusion_number, self.integrator, self.order)?;
        let mut speeds = [0.0f64; 3];
        for &axis in &self.active {
            let speed = &mut speeds[axis];
            let version = self.graph.field_version(&self.now[axis])?;
            let largest = if version.is_some() && version == self.speeds_of.get()[axis] {
                // The graph's reduction of this very velocity.
                self.speeds[axis].get()
            } else if let Some(patches) = self
                .patches
                .as_ref()
                .filter(|_| self.state_lives_on_patches())
            {
                // Never reduced on the patches (a flow starting at rest):
                // each patch's interior maximum, the largest of all.
                self.patches_take_written_velocity(patches)?;
                self.max_abs_on_patches(patches, axis)?
            } else {
                // Written since (initial values, a restart): reduce it now.
                on_face!(axis, F => self.component::<F, _>(axis, |u| self.max_abs(u))??)
            };
            *speed = speed.max(largest);
            for side in watershed_operators::Side::ALL {
                if let Some(BoundaryCondition::Dirichlet(value)) = self.conditions[axis].get(side) {
                    *speed = speed.max(value.abs());
                }
            }
        }
        limit.convection(speeds, true);
        limit.diffusion(self.viscosity);
        limit.time_step("the flow is at rest and inviscid; use a fixed dt")
    }

    /// The explicit stability limit of the scheme alone (integrator,
    /// order, dimension), for the current velocity; `None` when the scheme
    /// has none for it (see `StabilityLimit::scheme_limit`).
    fn scheme_limit(&self) -> SolverResult<Option<f64>> {
        let grid = self.graph.patch().grid();
        let mut limit = StabilityLimit::new(grid, 1.0, 0.5, self.integrator, self.order)?;
        let mut speeds = [0.0f64; 3];
        for &axis in &self.active {
            speeds[axis] = if self.state_on_patches.borrow().is_some() {
                // A failing rank must not gather (the others would wait
                // for it): the speeds the patches reduced last.
                self.speeds[axis].get()
            } else {
                on_face!(axis, F => self.component::<F, _>(axis, |u| self.max_abs(u))??)
            };
        }
        limit.convection(speeds, true);
        limit.diffusion(self.viscosity);
        Ok(limit.scheme_limit())
    }

    /// Advances to `end_time` with `dt` from [`Self::stable_time_step`];
    /// returns the steps taken.
    pub fn advance(&mut self, end_time: f64, cfl: f64, diffusion_number: f64) -> SolverResult<u64> {
        stepping::advance(
            self,
            end_time,
            TimeStep::Limited {
                cfl,
                diffusion_number,
            },
        )
    }

    /// Sets each convective outflow's `U_c` to the mean outward normal
    /// velocity through it (0 where the flow goes in).
    /// With the state on the patches, the patches' sums over their parts
    /// of the side, added in patch order (collective); the patches take a
    /// velocity written into the whole domain first.
    fn set_outflow_speeds(&self) -> SolverResult<()> {
        for (side, speed) in &self.convective {
            let axis = side.axis;
            // The points of the side: the last interior plane there (the
            // layout only: nothing is gathered).
            let interior = self.whole_layout(axis).interior();
            let count = interior.len() / (interior.hi[axis] - interior.lo[axis]).max(1) as usize;
            let sum = match &self.patches {
                Some(patches) if self.state_on_patches.borrow().is_some() => {
                    self.patches_take_written_velocity(patches)?;
                    patches.side_sum(&self.now, *side)?
                }
                _ => on_face!(axis, F => self.component::<F, _>(axis, |u| -> SolverResult<f64> {
                    Ok(plane_sum(u.layout(), u.values()?, *side))
                })??),
            };
            let mean = sum / count.max(1) as f64;
            let outward = if side.plus { mean } else { -mean };
            speed.set(outward.max(0.0));
        }
        Ok(())
    }

    /// The walls' condition on the projection potential.
    pub fn pressure_conditions(&self) -> &BoundaryConditions {
        &self.walls
    }
}

/// The leaf id under which [`IncompressibleFlow::max_abs`] reads the
/// current velocity (minus the location's number): no field or tag has it.
const CURRENT_VELOCITY_LEAF: u64 = u64::MAX - 0x7e10;

/// `field` bound under another id.
struct ReadAs<'f, F: GraphLocation> {
    id: u64,
    field: &'f SpatialField<F>,
}

impl<F: GraphLocation> BoundField for ReadAs<'_, F> {
    fn id(&self) -> u64 {
        self.id
    }
    fn name(&self) -> &str {
        self.field.name()
    }
    fn layout(&self) -> &watershed_fields::FieldLayout {
        self.field.layout()
    }
    fn cpu_values(&self) -> watershed_fields::FieldResult<&[f64]> {
        self.field.values()
    }
    fn gpu_buffer(
        &self,
        device: watershed_fields::Device,
    ) -> watershed_fields::FieldResult<watershed_fields::GpuBuffer> {
        BoundField::gpu_buffer(self.field, device)
    }
}

impl Stepping for IncompressibleFlow {
    fn time(&self) -> f64 {
        self.time
    }

    fn steps(&self) -> u64 {
        self.steps
    }

    fn stable_time_step(&self, cfl: f64, diffusion_number: f64) -> SolverResult<f64> {
        IncompressibleFlow::stable_time_step(self, cfl, diffusion_number)
    }

    fn step(&mut self, dt: f64) -> SolverResult<()> {
        IncompressibleFlow::step(self, dt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use watershed_fields::{Grid, XFace, YFace};

    fn swirl() -> IncompressibleFlow {
        let patch = Grid::new([12, 12, 1], [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
        let flow = IncompressibleFlowBuilder::new(&patch, 1e-6)
            .velocity_conditions(0, walls.clone())
            .velocity_conditions(1, walls)
            .build()
            .unwrap();
        flow.set_velocity::<XFace>(|[x, y, _]| (std::f64::consts::PI * x).sin() * (3.0 * y).cos())
            .unwrap();
        flow.set_velocity::<YFace>(|[x, y, _]| -0.5 * (2.0 * x).cos() * y)
            .unwrap();
        flow
    }

    /// After a stage the speeds are the graph reduction's parameters (a
    /// value planted in them shows), and any write to the velocity sends
    /// `stable_time_step` back to reducing the velocity itself.
    #[test]
    fn the_speeds_come_from_the_graph_until_the_velocity_is_written() {
        let mut flow = swirl();
        let fresh = flow.stable_time_step(0.5, 0.25).unwrap();
        flow.step(fresh).unwrap();
        let reduced = flow.stable_time_step(0.5, 0.25).unwrap();
        let h = 1.0 / 12.0;
        flow.speeds[1].set(1000.0);
        let planted = flow.stable_time_step(0.5, 0.25).unwrap();
        assert_eq!(planted, 0.5 * h / 1000.0);
        // A write (even one that changes nothing) makes the planted value stale.
        flow.with_velocity_mut::<YFace, _>(|_| ()).unwrap();
        assert_eq!(flow.stable_time_step(0.5, 0.25).unwrap(), reduced);
    }
}
