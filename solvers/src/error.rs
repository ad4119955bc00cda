//! The one error type of the `solvers` crate.

use watershed_exprgraph::GraphError;
use watershed_fields::FieldError;
use watershed_operators::OperatorError;

/// Result alias used throughout the crate.
pub type SolverResult<T> = Result<T, SolverError>;

/// Everything that can go wrong setting up or running a solver.
#[derive(Debug, thiserror::Error)]
pub enum SolverError {
    /// An equation or boundary condition is inconsistent.
    #[error("equation '{equation}': {reason}")]
    Setup {
        /// The equation's name.
        equation: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The time step cannot be chosen.
    #[error("time step: {0}")]
    TimeStep(String),
    /// The solution stopped being finite.
    #[error(
        "equation '{equation}' is no longer finite at cell {cell:?} after step {step} (t = {time}): {cause}"
    )]
    Diverged {
        /// The equation's name.
        equation: String,
        /// The first interior cell (i, j, k) that is not finite.
        cell: [isize; 3],
        /// Step number.
        step: u64,
        /// Time reached.
        time: f64,
        /// The likely cause: a non-finite input, an unstable time step, or
        /// an expression evaluated outside its domain.
        cause: String,
    },
    /// An input (initial condition, velocity, coefficient) is not finite.
    #[error("{detail} (first at cell {cell:?})")]
    NonFiniteInput {
        /// The field's tag.
        field: String,
        /// The first interior point (i, j, k) that is not finite.
        cell: [isize; 3],
        /// What and when.
        detail: String,
    },
    /// An iterative solver did not converge.
    #[error(
        "{solver} did not converge: residual {residual:e} after {iterations} iterations (target {target:e})"
    )]
    NotConverged {
        /// Which solver.
        solver: String,
        /// Final residual norm.
        residual: f64,
        /// Iterations done.
        iterations: usize,
        /// Requested residual norm.
        target: f64,
    },
    /// From the graph.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// From the expression language.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// From the fields layer.
    #[error(transparent)]
    Field(#[from] FieldError),
}
