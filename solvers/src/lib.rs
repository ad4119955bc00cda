//! # watershed-solvers
//!
//! The Wasatch layer of Watershed: transport equations defined in a few lines
//! of Rust and advanced in time through the expression graph.
//!
//! ## Crate layout
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`incompressible`] | [`IncompressibleFlow`]: staggered Navier-Stokes with a multigrid pressure projection every stage |
//! | `flow_projection` | a decomposed flow's Poisson solve on the patches, between the divergence and the correction |
//! | `flow_reductions` | a decomposed flow's step reductions (speeds, `|div u|`, enstrophy) on its patches, combined in patch order |
//! | `flow_patches` | a flow's momentum stages on the patches of a decomposed grid, gathered into the whole domain's graphs |
//! | [`convection`] | [`ConvectionForm`]: the momentum convection of Morinishi et al. (divergence, advective, skew-symmetric) at second and fourth order |
//! | [`staggered`] | [`SpaceOrder`] and the half-point averages and differences the conservative forms are built from |
//! | [`integrator`] | forward Euler, SSP-RK2, SSP-RK3 in Shu-Osher form |
//! | [`body`] | [`Body`], [`Shape`]: solid bodies by signed distance, at rest or spinning |
//! | `immersed_nodes` | the graph nodes of bodies: forcing of the provisional velocity, force reductions |
//! | `immersed` | what the grid makes of bodies: solid and forced faces (direct forcing), the projection's closed faces, the force weights |
//! | [`boundary`] | Dirichlet, Neumann, flux and periodic conditions in ghost points |
//! | [`boundary_value`] | [`BoundaryExpression`]: boundary values as language expressions of position, time and parameters |
//! | [`multigrid`] | [`Multigrid`]: geometric multigrid for `lap(x) = b`, as a solver and as a CG preconditioner |
//! | [`multigrid_patches`] | [`PatchedMultigrid`]: the multigrid on the patches of a decomposed grid, fine levels exchanged across seams, coarse levels agglomerated, reductions in patch order |
//! | `poisson_iteration` | the V-cycle and preconditioned-CG loops, written once for the whole domain and for patches |
//! | `multigrid_bodies` | the multigrid's faces closed by bodies: open fractions per level, the operator and diagonal with them |
//! | `coarsest` | the step weights that solve the multigrid's coarsest level exactly |
//! | `windows` | copying a patch's box of points from or into a whole-domain field, row by row |
//! | [`transport`] | [`TransportEquation`]: diffusion, convection (central, upwind, limited), sources, density |
//! | [`solver`] | [`TransportSolver`]: the graph, the stages, fixed or stability-limited `dt` |
//! | [`patched`] | [`PatchedTransport`]: one transport solver per patch of a decomposed grid, seams exchanged after each stage, reductions in patch order, the whole domain's bits on any number of ranks |
//! | `projection` | the projection's Poisson solve as a graph node (`ExpressionKind::IterativeSolve`) |
//! | `span_recording` | timed spans of work outside the graphs (exchanges, gathers, a solve on patches) for a run's trace |
//! | [`stages`] | [`StageParameters`], the language update node, the rotation of time levels |
//! | [`symbols`] | [`SolverSymbols`]: `s.solution("Y")`, `s.given("u")` in user expressions, no `Context` spelled |
//! | [`error`] | [`SolverError`] |

#![warn(missing_docs)]

mod assignment_memo;
pub mod body;
pub mod boundary;
pub mod boundary_value;
mod coarsest;
pub mod convection;
pub mod error;
mod flow_patches;
mod flow_projection;
mod flow_reductions;
mod immersed;
mod immersed_nodes;
pub mod incompressible;
pub mod integrator;
pub mod multigrid;
mod multigrid_bodies;
pub mod multigrid_patches;
pub mod patched;
mod poisson_iteration;
mod projection;
pub mod solver;
mod span_recording;
pub mod stages;
pub mod staggered;
mod stepping;
pub mod symbols;
pub mod transport;
pub mod windows;

pub use body::{Body, Shape};
pub use boundary::{BoundaryCondition, BoundaryConditions};
pub use boundary_value::{BoundaryExpression, BoundaryPoint};
pub use convection::ConvectionForm;
pub use error::{SolverError, SolverResult};
pub use incompressible::{
    IncompressibleFlow, IncompressibleFlowBuilder, Outflow, ProjectionReport, ProjectionTotals,
    default_poisson_options,
};
pub use integrator::{Stage, TimeIntegrator};
pub use multigrid::{Multigrid, MultigridOptions, SolveReport};
pub use multigrid_patches::PatchedMultigrid;
pub use patched::PatchedTransport;
pub use solver::{TransportSolver, TransportSolverBuilder};
pub use stages::StageParameters;
pub use staggered::SpaceOrder;
pub use stepping::TimeStep;
pub use symbols::SolverSymbols;
pub use transport::{ConvectiveScheme, Diffusivity, Source, TransportEquation};
pub use watershed_exprgraph as exprgraph;
