//! Scalar transport equations defined in Rust:
//!
//! `d(phi)/dt = ( -div(F_convective + F_diffusive) + sum(sources) ) / rho`
//!
//! with `F_diffusive = -Gamma_face grad(phi)`, `F_convective = u phi_face`
//! (`phi_face` central, upwind or flux-limited) and the density `rho`
//! optional. [`TransportEquation::register`] adds the fine-grained,
//! Wasatch-style expressions to a factory: one flux per active direction,
//! the right-hand side (divergences plus sources); the solver adds the
//! update and the boundary conditions as a modifier of its result. Fusion
//! then merges the fluxes into the right-hand side.

use crate::boundary::BoundaryConditions;
use crate::error::{SolverError, SolverResult};
use crate::staggered::SpaceOrder;
use std::sync::Arc;
use watershed_exprgraph::{Context, Factory, GraphLocation, LanguageExpression, Symbols, Tag};
use watershed_fields::on_face;
use watershed_fields::{CellCentre, LocationKind, Patch};
use watershed_operators::{Expr, FaceLocation, Limiter, limited, upwind};

/// The diffusivity of an equation.
#[derive(Debug, Clone, PartialEq)]
pub enum Diffusivity {
    /// The same everywhere.
    Constant(f64),
    /// A cell field, interpolated to the faces.
    Field(Tag),
}

/// How the transported value is interpolated to the faces for convection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvectiveScheme {
    /// Linear interpolation (second order, not bounded).
    Central,
    /// The upwind cell (first order, bounded).
    Upwind,
    /// Flux-limited (second order where smooth, bounded).
    Limited(Limiter),
    /// Central, in the skew-symmetric form `(div(u I phi) + I^T(u grad
    /// phi)) / 2` (`I` the face interpolation, `I^T` its transpose, the
    /// interpolation back to the cells): conserves the scalar and its
    /// square for a velocity whose discrete divergence vanishes (at second
    /// order exactly: the two halves differ by `phi div(u)`), and its
    /// square for any velocity. Of the equation's order
    /// ([`TransportEquation::space_order`]).
    SkewSymmetric,
}

impl ConvectiveScheme {
    /// Whether the scheme exists at fourth order (central and
    /// skew-symmetric do; upwind and limited interpolation are their own,
    /// lower-order schemes).
    pub fn supports(self, order: SpaceOrder) -> bool {
        order == SpaceOrder::Second
            || matches!(
                self,
                ConvectiveScheme::Central | ConvectiveScheme::SkewSymmetric
            )
    }

    /// Whether the convection is a central difference (no upwinding).
    pub fn is_central(self) -> bool {
        matches!(
            self,
            ConvectiveScheme::Central | ConvectiveScheme::SkewSymmetric
        )
    }
}

/// A language source term: builds its expression from tags.
pub type SourceBuilder = Arc<dyn Fn(&mut Symbols) -> Expr<'static, CellCentre> + Send + Sync>;

/// A source term.
#[derive(Clone)]
pub enum Source {
    /// A cell field computed elsewhere in the graph (or a placeholder).
    Tag(Tag),
    /// An expression in the field language.
    Expression(SourceBuilder),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Tag(t) => write!(f, "Source::Tag({t})"),
            Source::Expression(_) => write!(f, "Source::Expression(..)"),
        }
    }
}

/// A scalar transport equation, built step by step.
///
/// The solution is `s.solution("Y")` in an expression ([`SolverSymbols`]),
/// a field the program provides (the velocity here) `Tag::none`, declared
/// as a placeholder and filled before the first step:
///
/// ```
/// use watershed_exprgraph::Tag;
/// use watershed_fields::{CellCentre, Grid, LocationKind, XFace};
/// use watershed_operators::Limiter;
/// use watershed_solvers::{
///     BoundaryCondition, BoundaryConditions, ConvectiveScheme, Diffusivity, SolverSymbols,
///     TimeStep, TransportEquation, TransportSolverBuilder,
/// };
/// let patch = Grid::new([32, 1, 1], [1.0; 3], [0.0; 3])?
///     .with_periodic([true, false, false])
///     .whole_domain(2); // the limited scheme reads two cells upwind
/// let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
/// let equation = TransportEquation::new("Y")
///     .diffusion(Diffusivity::Constant(1e-3))
///     .convection(velocity.clone(), ConvectiveScheme::Limited(Limiter::VanLeer))
///     .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0)))
///     .source_expression(|s| -0.1 * s.solution::<CellCentre>("Y"));
/// assert_eq!(equation.solution_tag().to_string(), "Y (STATE_N)");
/// let mut builder = TransportSolverBuilder::new(&patch).equation(equation);
/// builder.factory_mut().placeholder(velocity[0].clone(), LocationKind::XFace)?;
/// let mut solver = builder.build()?;
/// solver.graph().with_field_mut::<XFace, _>(&velocity[0], |u| u.fill(1.0))??;
/// solver.set_initial_condition("Y", |_| 1.0)?;
/// solver.advance(0.5, TimeStep::Fixed(0.01))?;
/// // A uniform Y carried and diffused stays uniform; the source decays it.
/// let y = solver.with_solution("Y", |y| y.values().map(|v| v[v.len() / 2]))??;
/// assert!((y - (-0.05f64).exp()).abs() < 1e-4, "{y}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`SolverSymbols`]: crate::SolverSymbols
#[derive(Debug, Clone)]
pub struct TransportEquation {
    name: String,
    density: Option<Tag>,
    diffusivity: Option<Diffusivity>,
    convection: Option<([Tag; 3], ConvectiveScheme)>,
    sources: Vec<Source>,
    boundary: BoundaryConditions,
    order: SpaceOrder,
}

impl TransportEquation {
    /// An equation for the solution variable `name` (no terms yet).
    pub fn new(name: &str) -> Self {
        TransportEquation {
            name: name.to_string(),
            density: None,
            diffusivity: None,
            convection: None,
            sources: Vec::new(),
            boundary: BoundaryConditions::new(),
            order: SpaceOrder::Second,
        }
    }

    /// The order of the diffusion and the central convection (default
    /// second): fourth order reads 3 ghost layers
    /// ([`SpaceOrder::ghost_layers_for_transport`]; a patch with fewer is
    /// the graph's `MissingGhosts` error) and refuses the upwind and
    /// limited schemes at build.
    pub fn space_order(mut self, order: SpaceOrder) -> Self {
        self.order = order;
        self
    }

    /// Divides the right-hand side by the cell field `density`.
    pub fn density(mut self, density: Tag) -> Self {
        self.density = Some(density);
        self
    }

    /// Adds diffusion with `diffusivity`.
    pub fn diffusion(mut self, diffusivity: Diffusivity) -> Self {
        self.diffusivity = Some(diffusivity);
        self
    }

    /// Adds convection by the face velocities `[u, v, w]` (x, y, z faces;
    /// components of inactive axes are never read).
    pub fn convection(mut self, velocity: [Tag; 3], scheme: ConvectiveScheme) -> Self {
        self.convection = Some((velocity, scheme));
        self
    }

    /// Adds the cell field `tag` as a source.
    pub fn source(mut self, tag: Tag) -> Self {
        self.sources.push(Source::Tag(tag));
        self
    }

    /// Adds a source written in the field language.
    pub fn source_expression(
        mut self,
        build: impl Fn(&mut Symbols) -> Expr<'static, CellCentre> + Send + Sync + 'static,
    ) -> Self {
        self.sources.push(Source::Expression(Arc::new(build)));
        self
    }

    /// Sets the boundary conditions of the solution variable.
    pub fn boundary_conditions(mut self, conditions: BoundaryConditions) -> Self {
        self.boundary = conditions;
        self
    }

    /// The equation's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The boundary conditions.
    pub fn boundary(&self) -> &BoundaryConditions {
        &self.boundary
    }

    /// The diffusivity, if the equation diffuses.
    pub fn diffusivity(&self) -> Option<&Diffusivity> {
        self.diffusivity.as_ref()
    }

    /// The order of the diffusion and central convection.
    pub fn order(&self) -> SpaceOrder {
        self.order
    }

    /// The convective scheme, if the equation convects.
    pub fn convective_scheme(&self) -> Option<ConvectiveScheme> {
        self.convection.as_ref().map(|(_, scheme)| *scheme)
    }

    /// The face velocities, if the equation convects.
    pub fn velocity(&self) -> Option<&[Tag; 3]> {
        self.convection.as_ref().map(|(v, _)| v)
    }

    /// The solution at the current stage (`name`, STATE_N): a placeholder.
    pub fn solution_tag(&self) -> Tag {
        Tag::new(&self.name, Context::StateN)
    }

    /// The solution after the stage (`name`, STATE_NP1).
    pub fn next_tag(&self) -> Tag {
        Tag::new(&self.name, Context::StateNp1)
    }

    /// The solution at the start of the step (`name`, "STATE_N_START").
    pub fn start_tag(&self) -> Tag {
        Tag::new(&self.name, Context::Other("STATE_N_START".into()))
    }

    /// The right-hand side (`rhs_name`, STATE_NONE).
    pub fn rhs_tag(&self) -> Tag {
        Tag::none(&format!("rhs_{}", self.name))
    }

    /// The flux through the faces normal to `axis` (`name_flux_x`, ...).
    pub fn flux_tag(&self, axis: usize) -> Tag {
        Tag::none(&format!("{}_flux_{}", self.name, ["x", "y", "z"][axis]))
    }

    /// Registers the solution placeholder, the fluxes of the active axes of
    /// `patch` and the right-hand side. The boundary conditions are not
    /// registered here: the solver attaches them to the stage's result (see
    /// [`crate::TransportSolverBuilder::build`]).
    pub fn register(&self, factory: &mut Factory, patch: &Patch) -> SolverResult<()> {
        let equation_error = |e: watershed_exprgraph::GraphError| SolverError::Setup {
            equation: self.name.clone(),
            reason: e.to_string(),
        };
        if let Some(Diffusivity::Constant(k)) = &self.diffusivity
            && !(k.is_finite() && *k >= 0.0)
        {
            return Err(SolverError::Setup {
                equation: self.name.clone(),
                reason: format!(
                    "the diffusivity {k} is not physical: it must be finite and not negative (a negative diffusivity makes the equation ill-posed)"
                ),
            });
        }
        if let Some((_, scheme)) = &self.convection
            && !scheme.supports(self.order)
        {
            return Err(SolverError::Setup {
                equation: self.name.clone(),
                reason: format!(
                    "the {scheme:?} convective scheme is second order; at space order {} use Central or SkewSymmetric",
                    self.order.number()
                ),
            });
        }
        let solution = self.solution_tag();
        factory
            .placeholder(solution.clone(), LocationKind::CellCentre)
            .map_err(equation_error)?;

        let active = patch.grid().active_dimensions();
        let mut fluxes = Vec::new();
        if self.diffusivity.is_some() || self.convection.is_some() {
            for axis in (0..3).filter(|&a| active[a]) {
                let tag = self.flux_tag(axis);
                let expression = on_face!(axis, F => self.flux_expression::<F>(tag.clone()));
                factory.register(expression).map_err(equation_error)?;
                fluxes.push((axis, tag));
            }
        }

        let sources = self.sources.clone();
        let density = self.density.clone();
        let order = self.order;
        // The skew-symmetric form's advective half, I^T(u grad phi) / 2,
        // is no flux: the right-hand side subtracts it beside the fluxes.
        let advective = match &self.convection {
            Some((velocity, ConvectiveScheme::SkewSymmetric)) => Some(velocity.clone()),
            _ => None,
        };
        let axes: Vec<usize> = (0..3).filter(|&a| active[a]).collect();
        let solution_for_rhs = solution.clone();
        let rhs = LanguageExpression::new::<CellCentre>(self.rhs_tag(), move |s| {
            let mut total: Expr<'static, CellCentre> = Expr::constant(0.0);
            for (axis, tag) in &fluxes {
                total = total - on_face!(*axis, F => order.divergence::<F>(s.field(tag)));
            }
            if let Some(velocity) = &advective {
                let phi: Expr<'static, CellCentre> = s.field(&solution_for_rhs);
                for &axis in &axes {
                    total = total
                        - 0.5
                            * on_face!(axis, F => order.to_cell::<F>(
                                s.field::<F>(&velocity[axis]) * order.gradient::<F>(phi.clone())
                            ));
                }
            }
            for source in &sources {
                total = total
                    + match source {
                        Source::Tag(tag) => s.field::<CellCentre>(tag),
                        Source::Expression(build) => build(s),
                    };
            }
            match &density {
                Some(rho) => total / s.field::<CellCentre>(rho),
                None => total,
            }
        });
        factory.register(rhs).map_err(equation_error)
    }

    /// The total flux through the faces `F`: diffusive plus convective.
    fn flux_expression<F: FaceLocation + GraphLocation>(&self, tag: Tag) -> LanguageExpression {
        let solution = self.solution_tag();
        let diffusivity = self.diffusivity.clone();
        let convection = self.convection.clone();
        let order = self.order;
        LanguageExpression::new::<F>(tag, move |s| {
            let phi: Expr<'static, CellCentre> = s.field(&solution);
            let mut flux: Expr<'static, F> = Expr::constant(0.0);
            match &diffusivity {
                Some(Diffusivity::Constant(k)) => {
                    flux = flux - *k * order.gradient::<F>(phi.clone())
                }
                Some(Diffusivity::Field(k)) => {
                    flux = flux
                        - order.to_face::<F>(s.field::<CellCentre>(k))
                            * order.gradient::<F>(phi.clone())
                }
                None => {}
            }
            if let Some((velocity, scheme)) = &convection {
                let u: Expr<'static, F> = s.field(&velocity[F::AXIS]);
                let convective = match scheme {
                    ConvectiveScheme::Central => u * order.to_face::<F>(phi),
                    ConvectiveScheme::SkewSymmetric => 0.5 * (u * order.to_face::<F>(phi)),
                    ConvectiveScheme::Upwind => u.clone() * upwind::<F>(u, phi),
                    ConvectiveScheme::Limited(limiter) => {
                        u.clone() * limited::<F>(*limiter, u, phi)
                    }
                };
                flux = flux + convective;
            }
            flux
        })
    }
}
