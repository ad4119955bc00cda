//! The iterations of the Poisson solvers, written once: V-cycles until
//! the residual is small, and conjugate gradients preconditioned by one
//! V-cycle. Each runs over the operations a hierarchy provides
//! ([`PoissonSpace`]): the whole domain's [`Multigrid`](crate::Multigrid)
//! or the patches of a decomposed grid
//! ([`PatchedMultigrid`](crate::PatchedMultigrid)), whose reductions
//! add per-patch partial results in patch order.

use crate::error::{SolverError, SolverResult};

/// The two inner products CG takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Product {
    /// The residual with the preconditioned residual `z`.
    ResidualZ,
    /// The search direction with the operator applied to it.
    DirectionImage,
}

/// What a hierarchy does for the iterations. The vectors (`x`, `r`, `z`,
/// `p`, `q`) are the hierarchy's own; each call acts on all of them at
/// once (every patch of a decomposed one).
pub(crate) trait PoissonSpace {
    /// One V-cycle on the finest level: the solution improved in place.
    fn v_cycle(&mut self) -> SolverResult<()>;

    /// The finest level's residual `b - lap(x)` and its L2 norm.
    fn residual_norm(&mut self) -> SolverResult<f64>;

    /// CG's start from the loaded guess: `r = b - A x`; returns `|r|`.
    fn begin_cg(&mut self) -> SolverResult<f64>;

    /// `z = M r`: one V-cycle from zero on the residual equation.
    fn precondition(&mut self) -> SolverResult<()>;

    /// The first search direction, `p = z`.
    fn first_direction(&mut self) -> SolverResult<()>;

    /// `q = A p`.
    fn search(&mut self) -> SolverResult<()>;

    /// The inner product `which`.
    fn product(&mut self, which: Product) -> SolverResult<f64>;

    /// `x += alpha p`, `r -= alpha q` (and `r`'s mean removed where the
    /// problem is singular); returns `|r|`.
    fn advance(&mut self, alpha: f64) -> SolverResult<f64>;

    /// `p = z + beta p`, its ghosts filled.
    fn direction(&mut self, beta: f64) -> SolverResult<()>;

    /// The error for an iteration that ran out of steps, naming the
    /// solver (`what`) and its levels.
    fn not_converged(
        &self,
        what: &str,
        residual: f64,
        iterations: usize,
        target: f64,
    ) -> SolverError;
}

/// The residual norms an iteration went through, and how many it took.
pub(crate) struct Iterated {
    pub residuals: Vec<f64>,
    pub iterations: usize,
}

/// V-cycles until the residual norm is at most `target` (or not finite:
/// the caller reports a divergence), at most `max_iterations` of them.
pub(crate) fn v_cycles(
    space: &mut impl PoissonSpace,
    target: f64,
    max_iterations: usize,
) -> SolverResult<Iterated> {
    let mut residuals = vec![space.residual_norm()?];
    let mut iterations = 0;
    while let Some(&last) = residuals.last()
        && (last > target || last.is_nan())
    {
        if !last.is_finite() {
            break;
        }
        if iterations == max_iterations {
            return Err(space.not_converged("multigrid", last, iterations, target));
        }
        space.v_cycle()?;
        residuals.push(space.residual_norm()?);
        iterations += 1;
    }
    Ok(Iterated {
        residuals,
        iterations,
    })
}

/// Conjugate gradients preconditioned by one V-cycle, from the loaded
/// guess, until the residual norm is at most `target` (or not finite), at
/// most `max_iterations` steps.
pub(crate) fn preconditioned_cg(
    space: &mut impl PoissonSpace,
    target: f64,
    max_iterations: usize,
) -> SolverResult<Iterated> {
    let mut residuals = vec![space.begin_cg()?];
    space.precondition()?;
    space.first_direction()?;
    let mut rz = space.product(Product::ResidualZ)?;
    let mut iterations = 0;
    while let Some(&last) = residuals.last()
        && (last > target || last.is_nan())
    {
        if !last.is_finite() {
            break;
        }
        if iterations == max_iterations {
            return Err(space.not_converged(
                "multigrid-preconditioned CG",
                last,
                iterations,
                target,
            ));
        }
        space.search()?;
        let alpha = rz / space.product(Product::DirectionImage)?;
        let residual = space.advance(alpha)?;
        residuals.push(residual);
        iterations += 1;
        // The solution is final: no V-cycle for a direction never taken.
        if residual <= target || !residual.is_finite() {
            break;
        }
        space.precondition()?;
        let rz_next = space.product(Product::ResidualZ)?;
        space.direction(rz_next / rz)?;
        rz = rz_next;
    }
    Ok(Iterated {
        residuals,
        iterations,
    })
}
