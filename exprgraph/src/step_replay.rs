//! Replaying a graph's step on a GPU as a CUDA graph
//! ([`StepReplay::CudaGraph`]).
//!
//! With replay on, an execution of a graph placed wholly on one GPU runs
//! its host logic as usual inside a recording
//! ([`watershed_fields::GpuStream::begin_recording`]): the stream work is
//! logged, not enqueued. The recorded step's key (every kernel, argument
//! byte, address, size, stream and event dependency) then decides:
//!
//! * a key seen for the first time: the step runs directly, as without
//!   replay, and the key is remembered;
//! * a key seen before: the step is captured as a graph and launched;
//! * a key with a captured graph: the graph is launched. The graph itself
//!   refuses a step with another key, so a replay never uses the pointers
//!   or parameter values of another step.
//!
//! A step that changes every time (a parameter such as the time passed as
//! a kernel argument, pointers that never repeat) therefore runs directly
//! each time and costs only the recording; [`ReplayStatistics`] tells.
//! A capture that fails (an operation the driver cannot capture) runs the
//! step directly and keeps the driver's message.

use crate::error::{GraphError, GraphResult};
use crate::expression::ExpressionKind;
use crate::graph::{ExpressionGraph, Target};
use std::collections::HashMap;
use watershed_fields::Device;
use watershed_fields::gpu::{GpuGraph, RecordedStep, StepKey};

/// Graphs kept per expression graph (a stepping graph alternates between
/// a few steps; more distinct steps than this clear the cache).
pub const MAX_CAPTURED_STEPS: usize = 32;

/// Keys remembered while waiting for a second sight.
const MAX_SEEN_STEPS: usize = 64;

/// How an execution of a graph on a GPU enqueues its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepReplay {
    /// Every kernel, copy and event is enqueued by its own call.
    #[default]
    Off,
    /// A step enqueued twice with identical work is captured as a CUDA
    /// graph, and later identical steps launch that graph in one call (see
    /// the module documentation). Needs every node on one GPU and no node
    /// whose value the host waits for (reductions, native nodes, solves).
    CudaGraph,
}

/// What replay did so far, over the executions of one graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayStatistics {
    /// Executions recorded (all executions with replay on).
    pub recorded: u64,
    /// Steps run directly (first sight of their key, or a failed capture).
    pub direct: u64,
    /// Steps captured as a graph (and launched).
    pub captures: u64,
    /// Steps launched from a graph captured earlier.
    pub replays: u64,
    /// Captures that failed; the steps ran directly.
    pub failed_captures: u64,
    /// The driver's message for the last failed capture.
    pub last_capture_error: Option<String>,
    /// Kernel launches in the last recorded step.
    pub launches_per_step: usize,
}

/// The replay setting and cache of one graph.
#[derive(Debug, Default)]
pub(crate) struct ReplayState {
    pub(crate) mode: StepReplay,
    seen: HashMap<StepKey, ()>,
    graphs: HashMap<StepKey, GpuGraph>,
    statistics: ReplayStatistics,
}

impl ReplayState {
    /// Drops the captured graphs and the remembered keys.
    pub(crate) fn forget_steps(&mut self) {
        self.seen.clear();
        self.graphs.clear();
    }
}

impl ExpressionGraph {
    fn replay_state(&self) -> std::sync::MutexGuard<'_, ReplayState> {
        self.replay.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets how executions on a GPU enqueue their work. Turning
    /// [`StepReplay::CudaGraph`] on is refused, naming the node, when the
    /// current placement cannot be replayed (see
    /// [`StepReplay::CudaGraph`]); changing it drops the captured graphs.
    pub fn set_step_replay(&self, mode: StepReplay) -> GraphResult<()> {
        if mode == StepReplay::CudaGraph {
            self.replay_obstacle()?;
        }
        let mut state = self.replay_state();
        if state.mode != mode {
            state.forget_steps();
        }
        state.mode = mode;
        Ok(())
    }

    /// The replay setting.
    pub fn step_replay(&self) -> StepReplay {
        self.replay_state().mode
    }

    /// What replay did so far.
    pub fn replay_statistics(&self) -> ReplayStatistics {
        self.replay_state().statistics.clone()
    }

    /// The GPU a replayed step runs on, or the error naming the node that
    /// prevents replay.
    pub(crate) fn replay_obstacle(&self) -> GraphResult<usize> {
        let refuse = |node: &str, device: Device, reason: &str| GraphError::NotPlaceable {
            node: node.to_string(),
            device,
            reason: format!(
                "{reason}; a step replayed as a CUDA graph needs every node on one GPU and no host wait inside it; turn replay off for this graph"
            ),
        };
        let mut gpu = None;
        for &n in &self.order {
            let node = &self.nodes[n];
            let ordinal = match self.device_plan.targets[n] {
                Target::Cpu => {
                    return Err(refuse(&node.name, Device::Cpu, "it runs on the CPU"));
                }
                Target::Gpu(ordinal) => ordinal,
            };
            match gpu {
                None => gpu = Some(ordinal),
                Some(first) if first != ordinal => {
                    return Err(refuse(
                        &node.name,
                        Device::Gpu(ordinal),
                        &format!("it runs on GPU {ordinal}, other nodes on GPU {first}"),
                    ));
                }
                Some(_) => {}
            }
            let reason = match node.expression.kind() {
                ExpressionKind::Language => None,
                ExpressionKind::Reduction => {
                    Some("it is a reduction, whose value the host waits for")
                }
                ExpressionKind::Native => Some("it is a native node, which may wait on the host"),
                ExpressionKind::IterativeSolve => {
                    Some("it is an iterative solve, whose convergence the host tests")
                }
            };
            if let Some(reason) = reason {
                return Err(refuse(&node.name, Device::Gpu(ordinal), reason));
            }
        }
        gpu.ok_or_else(|| {
            GraphError::Usage(
                "the graph has no node on a GPU; place it with PlacementPolicy::Gpu to replay its steps"
                    .into(),
            )
        })
    }

    /// Enqueues a recorded step: directly, captured, or replayed.
    pub(crate) fn enqueue_recorded(&self, step: RecordedStep) -> GraphResult<()> {
        let mut state = self.replay_state();
        state.statistics.recorded += 1;
        state.statistics.launches_per_step = step.launches();
        if let Some(graph) = state.graphs.get(step.key()) {
            graph.launch(step)?;
            state.statistics.replays += 1;
            return Ok(());
        }
        if state.seen.remove(step.key()).is_none() {
            if state.seen.len() >= MAX_SEEN_STEPS {
                state.seen.clear();
            }
            state.seen.insert(step.key().clone(), ());
            state.statistics.direct += 1;
            step.run_directly()?;
            return Ok(());
        }
        match step.capture() {
            Ok(graph) => {
                graph.launch(step)?;
                state.statistics.captures += 1;
                if state.graphs.len() >= MAX_CAPTURED_STEPS {
                    state.graphs.clear();
                }
                state.graphs.insert(graph.key().clone(), graph);
            }
            Err(error) => {
                state.statistics.failed_captures += 1;
                state.statistics.last_capture_error = Some(error.to_string());
                state.statistics.direct += 1;
                step.run_directly()?;
            }
        }
        Ok(())
    }
}
