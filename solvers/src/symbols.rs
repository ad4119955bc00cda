//! How a user's expression names a solver's fields without spelling a
//! [`Context`]: `s.solution("Y")` is the solution a right-hand side reads
//! (STATE_N), `s.given("u")` a field the program provides (STATE_NONE, a
//! placeholder such as a velocity). Writing `s.field(&Tag::none("Y"))` for
//! the solution was the trap: no node produces `Y (STATE_NONE)`, and the
//! graph refused it as a missing producer.
//!
//! ```
//! use watershed_fields::{CellCentre, Grid};
//! use watershed_solvers::{
//!     BoundaryCondition, BoundaryConditions, SolverSymbols, TimeStep, TransportEquation,
//!     TransportSolverBuilder,
//! };
//! let patch = Grid::new([16, 1, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
//! // Logistic growth: dY/dt = Y (1 - Y), no transport.
//! let equation = TransportEquation::new("Y")
//!     .source_expression(|s| {
//!         let y = s.solution::<CellCentre>("Y");
//!         y.clone() * (1.0 - y)
//!     })
//!     .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0)));
//! let mut solver = TransportSolverBuilder::new(&patch).equation(equation).build()?;
//! solver.set_initial_condition("Y", |_| 0.5)?;
//! solver.advance(1.0, TimeStep::Fixed(0.01))?;
//! let y = solver.with_solution("Y", |y| y.values().map(|v| v[v.len() / 2]))??;
//! // The exact value at t = 1: 1 / (1 + e^-1).
//! assert!((y - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-6, "{y}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use watershed_exprgraph::{Context, Symbols, Tag};
use watershed_fields::Location;
use watershed_operators::Expr;

/// The names of a solver's fields in an expression's context.
pub trait SolverSymbols {
    /// The solution variable `name` as a right-hand side reads it: the
    /// state at the stage's start (`Tag::new(name, Context::StateN)`).
    fn solution<L: Location>(&mut self, name: &str) -> Expr<'static, L>;

    /// A field the program provides under `name` (a placeholder: a
    /// velocity, a coefficient; `Tag::none(name)`).
    fn given<L: Location>(&mut self, name: &str) -> Expr<'static, L>;
}

impl SolverSymbols for Symbols {
    fn solution<L: Location>(&mut self, name: &str) -> Expr<'static, L> {
        self.field(&Tag::new(name, Context::StateN))
    }

    fn given<L: Location>(&mut self, name: &str) -> Expr<'static, L> {
        self.field(&Tag::none(name))
    }
}
