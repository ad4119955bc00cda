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
        "equation '{equation}' is no longer finite at step {step} (t = {time}); reduce the time step"
    )]
    Diverged {
        /// The equation's name.
        equation: String,
        /// Step number.
        step: u64,
        /// Time reached.
        time: f64,
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
