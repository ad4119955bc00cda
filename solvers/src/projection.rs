//! The Poisson solve of the pressure projection as a node of the momentum
//! graph: `lap(psi) = div(u*)` by multigrid-preconditioned CG, reading the
//! divergence field the graph computed before it and writing `psi`, which
//! the velocity correction and the pressure nodes read after it.
//!
//! The node is an [`ExpressionKind::IterativeSolve`]: every operation of the
//! solve (residuals, Jacobi sweeps, restriction, prolongation, ghost fills,
//! the vector updates and dot products of CG) is a language kernel or
//! reduction of the [`Multigrid`]; the loop that tests the residual
//! against the tolerance is Rust. So the node runs on a CPU or on a GPU:
//! placed on a GPU, it moves the multigrid's levels there at its first
//! solve and enqueues every kernel on the node's stream; the host waits
//! for each dot product and norm (they steer the loop) and for the
//! stream at the end. The multigrid's level fields are allocated once,
//! when the solver is built (on the CPU) or moved.
//!
//! A failed solve (no convergence, a residual no longer finite) fails the
//! graph's execution; the node keeps the solver's own error, with its
//! iterations and residuals, for the driver to return instead of the
//! graph's summary ([`PoissonState::take_failure`]).

use crate::error::SolverError;
use crate::multigrid::{Multigrid, SolveReport};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use watershed_exprgraph::{EvaluationContext, Expression, ExpressionKind, GraphError, Tag};
use watershed_fields::{CellCentre, Device, GpuStream, LocationKind};

/// What the solve node and the driver share: the multigrid, the last
/// solve's report, and the error of a solve that failed.
#[derive(Debug)]
pub(crate) struct PoissonState {
    multigrid: Multigrid,
    report: SolveReport,
    failure: Option<SolverError>,
}

impl PoissonState {
    /// The report of the last solve that succeeded.
    pub(crate) fn report(&self) -> &SolveReport {
        &self.report
    }

    /// The error of the solve that failed the last execution, if one did.
    pub(crate) fn take_failure(&mut self) -> Option<SolverError> {
        self.failure.take()
    }
}

/// The shared state, also after a panic elsewhere while it was locked (the
/// multigrid's fields are rewritten by every solve).
pub(crate) fn lock_state(state: &Mutex<PoissonState>) -> MutexGuard<'_, PoissonState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `solution = lap^-1(rhs)` on cell centres, as a graph node.
pub(crate) struct PoissonSolve {
    rhs: Tag,
    solution: Tag,
    state: Arc<Mutex<PoissonState>>,
}

impl PoissonSolve {
    /// A node solving with `multigrid`; also returns the state the driver
    /// reads the reports and failures from.
    pub(crate) fn new(
        rhs: Tag,
        solution: Tag,
        multigrid: Multigrid,
    ) -> (PoissonSolve, Arc<Mutex<PoissonState>>) {
        let state = Arc::new(Mutex::new(PoissonState {
            multigrid,
            report: SolveReport {
                iterations: 0,
                residuals: Vec::new(),
                rhs_norm: 0.0,
            },
            failure: None,
        }));
        let node = PoissonSolve {
            rhs,
            solution,
            state: state.clone(),
        };
        (node, state)
    }
}

impl Expression for PoissonSolve {
    fn name(&self) -> String {
        format!("{} = lap^-1({})", self.solution, self.rhs)
    }

    fn computes(&self) -> Vec<(Tag, LocationKind)> {
        vec![(self.solution.clone(), LocationKind::CellCentre)]
    }

    fn requires(&self) -> Vec<Tag> {
        vec![self.rhs.clone()]
    }

    fn kind(&self) -> ExpressionKind {
        ExpressionKind::IterativeSolve
    }

    fn evaluate(&self, context: &mut EvaluationContext<'_>) -> Result<(), GraphError> {
        self.solve(context, None)
    }

    /// Every operation of the solve is a language kernel or reduction, so
    /// it runs on any GPU: the multigrid's levels move there at the first
    /// solve placed there.
    fn gpu_support(&self, _ordinal: usize) -> Result<(), String> {
        Ok(())
    }

    fn evaluate_on_gpu(
        &self,
        context: &mut EvaluationContext<'_>,
        stream: &GpuStream,
    ) -> Result<(), GraphError> {
        self.solve(context, Some(stream))
    }
}

impl PoissonSolve {
    /// Solves on the CPU (`stream` `None`) or on the stream's GPU, moving
    /// the multigrid's levels there first if they are elsewhere.
    fn solve(
        &self,
        context: &mut EvaluationContext<'_>,
        stream: Option<&GpuStream>,
    ) -> Result<(), GraphError> {
        let (rhs, solution) =
            context.input_and_output::<CellCentre, CellCentre>(&self.rhs, &self.solution)?;
        let mut state = lock_state(&self.state);
        let device = stream.map_or(Device::Cpu, GpuStream::device);
        // The solution's values are the starting guess (the last stage's).
        let solved = state.multigrid.move_to(device).and_then(|()| match stream {
            None => state.multigrid.solve_preconditioned_cg(rhs, solution),
            Some(stream) => state
                .multigrid
                .solve_preconditioned_cg_on(rhs, solution, stream),
        });
        match solved {
            Ok(report) => {
                state.report = report;
                state.failure = None;
                Ok(())
            }
            Err(error) => {
                let message = error.to_string();
                state.failure = Some(error);
                Err(GraphError::Native(message))
            }
        }
    }
}
