//! The GPU side of an execution's timeline: when each GPU node's kernels
//! and each planned copy ran on their stream, on the host's clock, so that
//! the Chrome trace shows every stream as a track beside the host threads
//! ([`ExpressionGraph::set_gpu_timeline`]).
//!
//! How it is timed: at the start of an execution each GPU of the plan gets
//! an origin mark ([`GpuMark`]) on one of its streams, all idle then (the
//! previous execution synchronised them), noted with the host time. A GPU
//! node's kernels are bracketed by two marks on its stream after its waits;
//! a copy by two marks around it. After the final synchronisation each
//! span's GPU times are read against its GPU's origin and placed on the
//! host timeline at the origin's host time. The error of that placement is
//! the latency between the host marking an idle stream and the GPU reaching
//! the mark (microseconds); the durations are the GPU's own. Marks cost
//! host time, so the timeline is off unless asked for, and a step replayed
//! as a CUDA graph is one launch that cannot be bracketed kernel by kernel
//! (no GPU spans then).

use crate::error::{GraphError, GraphResult};
use crate::graph::ExpressionGraph;
use crate::placement::StreamId;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use watershed_fields::{GpuMark, GpuStream};

/// What a span of a GPU stream did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuWork {
    /// A GPU node's kernels (with its fused modifiers and checks).
    Kernels,
    /// A copy of a field between devices that the plan made.
    Copy,
}

/// One span of work on a GPU stream in an execution.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpan {
    /// The stream (GPU ordinal and index in the graph's stream pool).
    pub stream: StreamId,
    /// Kernels or a copy.
    pub work: GpuWork,
    /// The node for kernels; for a copy, the field and its devices.
    pub name: String,
    /// Start on the host timeline, from the execution's start.
    pub start: Duration,
    /// End on the host timeline, from the execution's start.
    pub end: Duration,
}

/// A span whose marks the GPU has not necessarily reached yet.
struct PendingSpan {
    stream: StreamId,
    work: GpuWork,
    name: String,
    start: GpuMark,
    end: GpuMark,
}

/// The marks of one execution, collected while it enqueues.
pub(crate) struct Timeline {
    /// Per GPU: its origin mark and the host time it was made at.
    origins: HashMap<usize, (GpuMark, Duration)>,
    spans: Mutex<Vec<PendingSpan>>,
}

impl Timeline {
    /// Marks an origin on the first of `streams` of each GPU (every stream
    /// idle), timed from `epoch`, the execution's start.
    pub(crate) fn start(
        graph: &ExpressionGraph,
        streams: &[StreamId],
        epoch: Instant,
    ) -> GraphResult<Timeline> {
        let mut origins = HashMap::new();
        for &id in streams {
            if let std::collections::hash_map::Entry::Vacant(slot) = origins.entry(id.device) {
                let mark = graph.gpu_stream(id)?.mark()?;
                slot.insert((mark, epoch.elapsed()));
            }
        }
        Ok(Timeline {
            origins,
            spans: Mutex::new(Vec::new()),
        })
    }

    /// Runs `enqueue` (work it puts on `stream`) between two marks of that
    /// stream, kept as a span named `name`.
    pub(crate) fn span<T>(
        &self,
        id: StreamId,
        stream: &GpuStream,
        work: GpuWork,
        name: impl FnOnce() -> String,
        enqueue: impl FnOnce() -> GraphResult<T>,
    ) -> GraphResult<T> {
        let start = stream.mark()?;
        let value = enqueue()?;
        let end = stream.mark()?;
        self.spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(PendingSpan {
                stream: id,
                work,
                name: name(),
                start,
                end,
            });
        Ok(value)
    }

    /// After every stream has finished: the spans on the host timeline, in
    /// start order.
    pub(crate) fn finish(self) -> GraphResult<Vec<GpuSpan>> {
        let spans = self.spans.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut placed = Vec::with_capacity(spans.len());
        for span in spans {
            let (origin, at) = self.origins.get(&span.stream.device).ok_or_else(|| {
                GraphError::Native(format!(
                    "the timeline has no origin on GPU {} (a bug; please report it)",
                    span.stream.device
                ))
            })?;
            let start = *at + span.start.since(origin)?;
            let end = (*at + span.end.since(origin)?).max(start);
            placed.push(GpuSpan {
                stream: span.stream,
                work: span.work,
                name: span.name,
                start,
                end,
            });
        }
        placed.sort_by_key(|s| (s.start, s.end));
        Ok(placed)
    }
}

impl ExpressionGraph {
    /// Times the GPU side of every following execution (`true`) or stops
    /// (`false`, the default): each GPU node's kernels and each planned
    /// copy between devices, on its stream, appear in
    /// [`Self::last_gpu_trace`], in [`Self::chrome_trace`] (a track per
    /// stream under a process per GPU) and in recordings
    /// ([`Self::start_recording`]). It brackets each node and copy with two
    /// timing events, so it costs host time; a step replayed as a CUDA
    /// graph is not timed kernel by kernel (no spans then). A graph without
    /// GPU nodes has no spans.
    ///
    /// ```
    /// use watershed_exprgraph::ExpressionGraph;
    /// # fn trace(graph: &ExpressionGraph) -> watershed_exprgraph::GraphResult<()> {
    /// graph.set_gpu_timeline(true);
    /// graph.execute(watershed_exprgraph::ExecutionMode::Serial)?;
    /// for span in graph.last_gpu_trace() {
    ///     println!("{} {:?} {} {:?}", span.stream, span.work, span.name, span.end - span.start);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_gpu_timeline(&self, on: bool) {
        self.state.gpu_timeline.store(on, Ordering::Release);
    }

    /// Whether executions time their GPU side ([`Self::set_gpu_timeline`]).
    pub fn gpu_timeline(&self) -> bool {
        self.state.gpu_timeline.load(Ordering::Acquire)
    }

    /// The GPU spans of the last execution, in start order (empty unless
    /// [`Self::set_gpu_timeline`] was on and the execution succeeded).
    pub fn last_gpu_trace(&self) -> Vec<GpuSpan> {
        self.state
            .statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .gpu_trace
            .clone()
    }
}
