//! Replaying a graph's step on a GPU as a CUDA graph
//! ([`StepReplay::CudaGraph`]).
//!
//! With replay on, an execution of a graph placed wholly on one GPU runs
//! its host logic as usual inside a recording
//! ([`watershed_fields::GpuStream::begin_recording`]): the stream work is
//! logged, not enqueued. The recorded step's key (every kernel, argument
//! byte, address, size, stream and event dependency) and its shape (the
//! key without the argument bytes) then decide, in this order:
//!
//! 1. a graph launches exactly this key: it is launched (a *replay*);
//! 2. the key was seen before: the step is captured as its own graph and
//!    launched (a *capture*);
//! 3. a graph of the same shape exists: its kernels take the step's
//!    arguments ([`watershed_fields::gpu::GpuGraph::update_arguments`]) and it
//!    is launched (an *updated replay*). This is how a step whose
//!    parameter (the time) or whose pointers change every time is still
//!    replayed;
//! 4. the shape was seen before: the step is captured as the graph to
//!    update for that shape, and launched (a *capture*);
//! 5. otherwise the step runs directly, as without replay, and its key
//!    and shape are remembered.
//!
//! A graph itself refuses a step with another key, so a replay never uses
//! the pointers or parameter values of another step. A capture or an
//! update that fails (an operation the driver cannot capture, a driver
//! that cannot update in place) runs the step directly and keeps the
//! driver's message in [`ReplayStatistics`]; a shape whose update failed
//! is not updated again.

use crate::error::{GraphError, GraphResult};
use crate::expression::ExpressionKind;
use crate::graph::ExpressionGraph;
use crate::node::Target;
use std::collections::{HashMap, HashSet};
use watershed_fields::Device;
use watershed_fields::gpu::{GpuGraph, RecordedStep, StepKey, StepShape};

/// Graphs kept per expression graph (a stepping graph alternates between
/// a few steps; more distinct steps than this clear the cache).
pub const MAX_CAPTURED_STEPS: usize = 32;

/// Shapes whose graph takes the arguments of each new step of the shape.
pub const MAX_UPDATED_SHAPES: usize = 8;

/// Keys (and shapes) remembered while waiting for a second sight.
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
    /// Steps run directly (first sight of their key and shape, or a failed
    /// capture or update).
    pub direct: u64,
    /// Steps captured as a graph (and launched).
    pub captures: u64,
    /// Steps launched from a graph that held their arguments already.
    pub replays: u64,
    /// Steps launched from a graph of their shape after updating its
    /// kernel arguments to theirs.
    pub updated_replays: u64,
    /// Kernels whose arguments those updates changed, in all.
    pub kernels_updated: u64,
    /// Captures that failed; the steps ran directly.
    pub failed_captures: u64,
    /// The driver's message for the last failed capture.
    pub last_capture_error: Option<String>,
    /// Argument updates that failed; the steps ran directly.
    pub failed_updates: u64,
    /// The driver's message for the last failed update.
    pub last_update_error: Option<String>,
    /// Kernel launches in the last recorded step.
    pub launches_per_step: usize,
}

/// The replay setting and caches of one graph.
#[derive(Debug, Default)]
pub(crate) struct ReplayState {
    pub(crate) mode: StepReplay,
    /// Keys seen once, waiting for a second sight.
    seen: HashSet<StepKey>,
    /// Shapes seen once, waiting for a second sight.
    seen_shapes: HashSet<StepShape>,
    /// Graphs of one key each.
    graphs: HashMap<StepKey, GpuGraph>,
    /// Per shape, the graph updated to each new step of that shape.
    updated: HashMap<StepShape, GpuGraph>,
    /// Shapes whose update failed: never updated again.
    not_updatable: HashSet<StepShape>,
    statistics: ReplayStatistics,
}

impl ReplayState {
    /// Drops the captured graphs and the remembered keys and shapes.
    pub(crate) fn forget_steps(&mut self) {
        self.seen.clear();
        self.seen_shapes.clear();
        self.graphs.clear();
        self.updated.clear();
        self.not_updatable.clear();
    }

    /// Captures `step` as a graph and launches it; the graph, or `None`
    /// after a failed capture (the step then ran directly).
    fn capture_and_launch(&mut self, step: RecordedStep) -> GraphResult<Option<GpuGraph>> {
        match step.capture() {
            Ok(graph) => {
                graph.launch(step)?;
                self.statistics.captures += 1;
                Ok(Some(graph))
            }
            Err(error) => {
                self.statistics.failed_captures += 1;
                self.statistics.last_capture_error = Some(error.to_string());
                self.statistics.direct += 1;
                step.run_directly()?;
                Ok(None)
            }
        }
    }

    /// Enqueues a recorded step: replayed, captured, updated and replayed,
    /// or run directly (see the module documentation).
    fn enqueue(&mut self, step: RecordedStep) -> GraphResult<()> {
        self.statistics.recorded += 1;
        self.statistics.launches_per_step = step.launches();
        let exact = self.graphs.get(step.key()).or_else(|| {
            self.updated
                .get(step.shape())
                .filter(|graph| graph.key() == step.key())
        });
        if let Some(graph) = exact {
            graph.launch(step)?;
            self.statistics.replays += 1;
            return Ok(());
        }
        if self.seen.remove(step.key()) {
            if let Some(graph) = self.capture_and_launch(step)? {
                if self.graphs.len() >= MAX_CAPTURED_STEPS {
                    self.graphs.clear();
                }
                self.graphs.insert(graph.key().clone(), graph);
            }
            return Ok(());
        }
        if self.seen.len() >= MAX_SEEN_STEPS {
            self.seen.clear();
        }
        self.seen.insert(step.key().clone());
        if let Some(graph) = self.updated.get_mut(step.shape()) {
            match graph.update_arguments(&step) {
                Ok(kernels) => {
                    graph.launch(step)?;
                    self.statistics.updated_replays += 1;
                    self.statistics.kernels_updated += kernels as u64;
                }
                Err(error) => {
                    self.statistics.failed_updates += 1;
                    self.statistics.last_update_error = Some(error.to_string());
                    self.updated.remove(step.shape());
                    self.not_updatable.insert(step.shape().clone());
                    self.statistics.direct += 1;
                    step.run_directly()?;
                }
            }
            return Ok(());
        }
        if self.seen_shapes.remove(step.shape()) && !self.not_updatable.contains(step.shape()) {
            let shape = step.shape().clone();
            if let Some(graph) = self.capture_and_launch(step)? {
                if self.updated.len() >= MAX_UPDATED_SHAPES {
                    self.updated.clear();
                }
                self.updated.insert(shape, graph);
            }
            return Ok(());
        }
        if self.seen_shapes.len() >= MAX_SEEN_STEPS {
            self.seen_shapes.clear();
        }
        self.seen_shapes.insert(step.shape().clone());
        self.statistics.direct += 1;
        step.run_directly()?;
        Ok(())
    }
}

impl ExpressionGraph {
    pub(crate) fn replay_state(&self) -> std::sync::MutexGuard<'_, ReplayState> {
        self.state.replay.lock().unwrap_or_else(|p| p.into_inner())
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
        if mode == StepReplay::CudaGraph && self.gpu_scratch() == crate::GpuScratch::StreamOrdered {
            return Err(GraphError::Usage(
                "step replay (StepReplay::CudaGraph) cannot be combined with GPU scratch memory in stream order (GpuScratch::StreamOrdered): a replayed step must find its scratch fields at the addresses it was captured with; set GpuScratch::SizeClassPool first".into(),
            ));
        }
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
        for &n in &self.plan.order {
            let node = &self.plan.nodes[n];
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
            let reason = match node.form.expression().kind() {
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

    /// Enqueues a recorded step: replayed, captured, updated and replayed,
    /// or run directly (see the module documentation).
    pub(crate) fn enqueue_recorded(&self, step: RecordedStep) -> GraphResult<()> {
        self.replay_state().enqueue(step)
    }
}
