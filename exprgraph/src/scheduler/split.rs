//! A graph's execution in two halves around an exchange of ghost layers
//! ([`crate::overlap`]): [`ExpressionGraph::execute_interior`] computes
//! every split node's clean box (no ghost of an exchanged field read),
//! [`ExpressionGraph::execute_rim`] the rims, the fused modifiers and the
//! deferred nodes once the ghosts are in. Between the two, the caller
//! waits for its messages and writes the ghosts
//! ([`ExpressionGraph::with_field_mut`]).
//!
//! Both halves walk the plan order on the calling thread (each node's
//! loops use the pool's threads in a threaded mode), which can make an
//! MPI library's progress call between nodes
//! ([`ExpressionGraph::execute_interior_with`]): the order is
//! topological, and the first half's nodes read only what earlier nodes
//! of the same half wrote. The first half keeps its scratch fields for the
//! second (no memory budget applies, [`ExpressionGraph::overlap_plan`]
//! refuses one); an [`ExpressionGraph::execute`] in between gives them
//! back and computes everything again.

use super::{Pass, RunState, Shared, TraceEvent, checked_threads, thread_pool};
use crate::error::{GraphError, GraphResult};
use crate::graph::ExpressionGraph;
use crate::overlap::{NodeSplit, OverlapPlan};
use crate::scheduler::ExecutionMode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use watershed_operators::Parallelism;

/// Which half of a split execution runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Half {
    Interior,
    Rim,
}

impl ExpressionGraph {
    /// The first half of a split execution: every split node of `overlap`
    /// computes its clean box, reading no ghost of the exchanged fields
    /// (whose ghosts may be stale or being written by the caller's
    /// exchange meanwhile: the caller writes them only after this
    /// returns). See [`crate::overlap`].
    pub fn execute_interior(&self, mode: ExecutionMode, overlap: &OverlapPlan) -> GraphResult<()> {
        self.execute_half(mode, overlap, Half::Interior, &mut || {})
    }

    /// [`Self::execute_interior`], calling `between` on the calling
    /// thread after each node (an MPI library's progress, which must be
    /// called from the thread that posted the messages).
    pub fn execute_interior_with(
        &self,
        mode: ExecutionMode,
        overlap: &OverlapPlan,
        between: &mut dyn FnMut(),
    ) -> GraphResult<()> {
        self.execute_half(mode, overlap, Half::Interior, between)
    }

    /// The second half: the rims of the split nodes (and their fused
    /// modifiers), then every deferred node, in plan order. The exchanged
    /// fields' ghosts must be valid. An error when no first half ran since
    /// the last execution.
    pub fn execute_rim(&self, mode: ExecutionMode, overlap: &OverlapPlan) -> GraphResult<()> {
        self.execute_half(mode, overlap, Half::Rim, &mut || {})
    }

    fn execute_half(
        &self,
        mode: ExecutionMode,
        overlap: &OverlapPlan,
        half: Half,
        between: &mut dyn FnMut(),
    ) -> GraphResult<()> {
        if crate::graph::in_field_access(self) {
            return Err(GraphError::Usage(
                "a split execution was started inside with_field / with_field_mut of the same graph, which holds a field it must lock; run it after the closure returns".into(),
            ));
        }
        if overlap.nodes().len() != self.plan.nodes.len() {
            return Err(GraphError::Usage(format!(
                "the overlap plan has {} nodes but this graph has {}; build it with this graph's overlap_plan",
                overlap.nodes().len(),
                self.plan.nodes.len()
            )));
        }
        let threads = checked_threads(mode)?;
        let _serial = self
            .state
            .execution
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.check_placeholders()?;
        let pending = self.state.split_pending.swap(false, Ordering::AcqRel);
        match half {
            Half::Interior if pending => self.release_all_scratch(),
            Half::Rim if !pending => {
                return Err(GraphError::Usage(
                    "execute_rim was called without execute_interior before it (or an execute came in between); run the interior half first".into(),
                ));
            }
            _ => {}
        }
        let epoch = Instant::now();
        let shared = Shared {
            graph: self,
            // Plan order: no node waits in a ready queue.
            state: Mutex::new(RunState::new(Vec::new(), self.plan.nodes.len())),
            remaining_users: self
                .plan
                .users
                .iter()
                .map(|u| AtomicUsize::new(u.len()))
                .collect(),
            threads,
            epoch,
        };
        let pool = match mode {
            ExecutionMode::Serial => None,
            ExecutionMode::Threaded(_) | ExecutionMode::Adaptive(_) => Some(thread_pool(threads)?),
        };
        let outcome = self.walk_half(&shared, overlap, half, pool.as_deref(), between);
        let state = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
        self.record_half(epoch, &state.trace, half);
        if half == Half::Rim || outcome.is_err() {
            for &slot in &self.plan.written {
                self.state.versions[slot].fetch_add(1, Ordering::AcqRel);
            }
        }
        match outcome {
            Err(error) => {
                self.release_all_scratch();
                Err(error)
            }
            Ok(()) => {
                if half == Half::Interior {
                    self.state.split_pending.store(true, Ordering::Release);
                }
                Ok(())
            }
        }
    }

    /// Runs one half's nodes in plan order on the calling thread (each
    /// node's loops on `pool`'s threads when given), calling `between`
    /// after each.
    fn walk_half(
        &self,
        shared: &Shared<'_>,
        overlap: &OverlapPlan,
        half: Half,
        pool: Option<&rayon::ThreadPool>,
        between: &mut dyn FnMut(),
    ) -> GraphResult<()> {
        for &node in &self.plan.order {
            let pass = match (half, &overlap.nodes()[node]) {
                (Half::Interior, NodeSplit::Deferred) => continue,
                (Half::Interior, NodeSplit::Split { clean, .. }) => Pass::Boxes {
                    boxes: std::slice::from_ref(clean),
                    rim: false,
                },
                (Half::Rim, NodeSplit::Split { rim, .. }) => Pass::Boxes {
                    boxes: rim,
                    rim: true,
                },
                (Half::Rim, NodeSplit::Deferred) => Pass::Whole,
            };
            match pool {
                None => self.launch_on(node, Parallelism::Serial, shared, 0, None, pass)?,
                Some(pool) => pool
                    .install(|| self.launch_on(node, Parallelism::Rayon, shared, 0, None, pass))?,
            }
            if half == Half::Rim {
                self.finish(node, &shared.remaining_users);
            }
            between();
        }
        Ok(())
    }

    /// Adds a half's node times to the statistics and to a recording.
    fn record_half(&self, epoch: Instant, trace: &[TraceEvent], half: Half) {
        let mut stats = self
            .state
            .statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for event in trace {
            stats.total[event.node] += event.end - event.start;
            if half == Half::Rim {
                stats.calls[event.node] += 1;
            }
        }
        if half == Half::Interior {
            stats.trace.clear();
        }
        stats.trace.extend_from_slice(trace);
        if let Some(recording) = stats.recording.as_mut() {
            recording.add(epoch, trace);
        }
    }
}
