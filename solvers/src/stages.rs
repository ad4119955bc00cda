//! What the transport and flow solvers share to run Shu-Osher stages
//! through a graph: the update node and the copies between time levels.

use crate::error::SolverResult;
use crate::solver::StageValues;
use std::sync::{Arc, Mutex};
use watershed_exprgraph::{ExpressionGraph, GraphLocation, NativeExpression, Tag};

/// The node computing `next = a start + b (now + dt rhs)` with the stage's
/// `a`, `b` and `dt` (CPU-side values, as in Wasatch).
pub(crate) fn update_node<F: GraphLocation>(
    now: &Tag,
    next: &Tag,
    start: &Tag,
    rhs: &Tag,
    stage: Arc<Mutex<StageValues>>,
) -> NativeExpression {
    let (s, n, o, r) = (now.clone(), next.clone(), start.clone(), rhs.clone());
    NativeExpression::new(
        &format!("update {}", now.name),
        vec![(next.clone(), F::KIND)],
        vec![now.clone(), rhs.clone(), start.clone()],
        move |context| {
            let StageValues { dt, a, b, .. } = *stage.lock().unwrap_or_else(|p| p.into_inner());
            let u = context.input::<F>(&s)?.values()?.to_vec();
            let rhs = context.input::<F>(&r)?.values()?.to_vec();
            let old = context.input::<F>(&o)?.values()?.to_vec();
            let out = context.output::<F>(&n)?.values_mut()?;
            for (i, o) in out.iter_mut().enumerate() {
                *o = a * old[i] + b * (u[i] + dt * rhs[i]);
            }
            Ok(())
        },
    )
}

/// Copies the persistent field `from` into `to` (same location and layout).
pub(crate) fn copy_field<F: GraphLocation>(
    graph: &ExpressionGraph,
    from: &Tag,
    to: &Tag,
) -> SolverResult<()> {
    graph.with_field::<F, _>(from, |source| -> SolverResult<()> {
        let values = source.values()?;
        graph.with_field_mut::<F, _>(to, |target| -> SolverResult<()> {
            target.values_mut()?.copy_from_slice(values);
            Ok(())
        })?
    })?
}
