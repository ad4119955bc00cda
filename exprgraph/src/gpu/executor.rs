//! Executing a graph whose plan puts nodes on GPUs: the host carries out
//! the stream protocol of [`crate::placement::StreamPlan`] step by step
//! (copies, event records, stream waits, host waits), launching each GPU
//! node's kernels on its stream and running each CPU node on the CPU. One
//! thread walks the nodes in plan order, or (several threads, CPU nodes in
//! the plan) the scheduler runs each node as a task once its parents have
//! finished (`scheduler.rs`, `HostWalk`). `placement/design.md`
//! states the protocol's invariants; this file adds what the plan leaves to
//! the executor:
//!
//! * **Location states.** Before a GPU node, each field it reads is made
//!   valid on its GPU (the plan's copies normally did it; a field whose
//!   location was invalidated outside the plan, e.g. by the host writing
//!   it, is copied here on the node's stream), and each persistent field it
//!   writes becomes active there (copied first when the GPU location is
//!   stale, so points the node does not write keep their values). A CPU
//!   node does the same on the CPU, synchronously. Copies enqueued by the
//!   plan record their events in the fields, so host access waits for them.
//! * **Scratch fields** of GPU nodes come from the GPU's pool and are
//!   zeroed on the node's stream. No scratch field goes back to a pool
//!   before the execution's last step has synchronised every stream, so a
//!   kernel still running never reads memory handed to someone else.
//! * **Errors.** After an error every stream used is synchronised before
//!   the scratch fields are released.
//! * **Finiteness checks.** A node that checks what it writes launches a
//!   watching kernel (`gpu_launches_watching`) with a device word armed to
//!   all bits, then copies the word to the host on its stream. The words
//!   are read after the final synchronisation ([`FiniteWatch`]), in plan
//!   order, and the first bad one becomes the CPU's `NotFinite` error; the
//!   nodes after it have run by then, so their outputs also hold values
//!   derived from the bad one.
//! * **Reductions** launch their kernel, copy the row partials back and
//!   wait: the host needs the value before it enqueues any reader.
//!
//! The host does not block between GPU nodes: only where the plan says so
//! (a CPU node consuming GPU data, on the thread running that node) and
//! at the end.

use crate::error::{GraphError, GraphResult};
use crate::expression::{EvaluationContext, LanguageExpression};
use crate::graph::ExpressionGraph;
use crate::node::NodeForm;
use crate::placement::{Step, StreamId};
use crate::store::AnyField;
use std::collections::HashMap;
use std::sync::Arc;
use watershed_fields::{Device, GpuStream, MemoryPool, PoolBlock, ValidationEvent};
use watershed_operators::OperatorError;
use watershed_operators::gpu::{GpuLaunch, GpuTarget, gpu_launches, gpu_launches_watching};
use watershed_operators::ir::Node;
use watershed_operators::{BoundField, MaskedAssignment, Region};

/// Where an execution takes the memory its GPU nodes need only during it:
/// their scratch fields and the device words of their finiteness checks
/// ([`ExpressionGraph::set_gpu_scratch`]). Both give the same values; the
/// GPU benchmark's `allocation` section measures which is faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuScratch {
    /// The GPU's size-class pool ([`MemoryPool::global`]): a freed block
    /// waits in the engine's free lists until the next request of its size,
    /// so a repeating step reuses its blocks with a host-side lookup and
    /// always at the same addresses (which step replay needs).
    #[default]
    SizeClassPool,
    /// Stream-ordered allocation ([`MemoryPool::stream_ordered`]): each
    /// block is allocated on its node's stream (`cuMemAllocAsync`)
    /// and freed on it once the execution has finished (`cuMemFreeAsync`);
    /// the driver's pool of the device caches the memory. Cannot be combined
    /// with [`crate::StepReplay::CudaGraph`].
    StreamOrdered,
}

impl ExpressionGraph {
    /// Sets where GPU nodes take their scratch memory (default:
    /// [`GpuScratch::SizeClassPool`]). Takes effect at the next execution;
    /// a graph without GPU nodes ignores it.
    ///
    /// Errors with [`GraphError::Usage`] for [`GpuScratch::StreamOrdered`]
    /// while step replay is on: a replayed step keeps its addresses, which
    /// stream-ordered memory does not promise.
    ///
    /// ```
    /// use watershed_exprgraph::{ExpressionGraph, GpuScratch};
    /// # fn choose(graph: &ExpressionGraph) -> watershed_exprgraph::GraphResult<()> {
    /// graph.set_gpu_scratch(GpuScratch::StreamOrdered)?;
    /// assert_eq!(graph.gpu_scratch(), GpuScratch::StreamOrdered);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_gpu_scratch(&self, scratch: GpuScratch) -> GraphResult<()> {
        let replay = self.replay_state();
        if scratch == GpuScratch::StreamOrdered && replay.mode == crate::StepReplay::CudaGraph {
            return Err(GraphError::Usage(
                "GPU scratch memory in stream order (GpuScratch::StreamOrdered) cannot be combined with step replay (StepReplay::CudaGraph): a replayed step must find its scratch fields at the addresses it was captured with; turn replay off first, or keep the size-class pool".into(),
            ));
        }
        self.state.stream_ordered_scratch.store(
            scratch == GpuScratch::StreamOrdered,
            std::sync::atomic::Ordering::Release,
        );
        drop(replay);
        Ok(())
    }

    /// Where GPU nodes take their scratch memory.
    pub fn gpu_scratch(&self) -> GpuScratch {
        if self
            .state
            .stream_ordered_scratch
            .load(std::sync::atomic::Ordering::Acquire)
        {
            GpuScratch::StreamOrdered
        } else {
            GpuScratch::SizeClassPool
        }
    }
}

/// What one execution of a plan with GPU nodes carries from step to step:
/// the events recorded so far, and the GPU timeline when it is on.
pub(crate) struct DeviceRun<'t> {
    pub(crate) events: std::sync::Mutex<Vec<Option<ValidationEvent>>>,
    pub(crate) timeline: Option<&'t crate::gpu::timeline::Timeline>,
}

/// The streams of a graph's plan, created on first use and reused across
/// executions.
pub(crate) type StreamPool = std::sync::Mutex<HashMap<StreamId, GpuStream>>;

impl ExpressionGraph {
    /// The stream `id` of this graph's pool (created on first use).
    pub(crate) fn gpu_stream(&self, id: StreamId) -> GraphResult<GpuStream> {
        let mut streams = self
            .state
            .gpu_streams
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(stream) = streams.get(&id) {
            return Ok(stream.clone());
        }
        let stream = GpuStream::new(id.device)?;
        streams.insert(id, stream.clone());
        Ok(stream)
    }

    /// Carries out `steps` of the stream protocol.
    pub(crate) fn run_steps(&self, steps: &[Step], run: &DeviceRun<'_>) -> GraphResult<()> {
        let events = &run.events;
        // The event is cloned out, so no lock is held while the host or a
        // stream waits on it.
        let recorded = |event: usize| {
            events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(event)
                .and_then(Option::as_ref)
                .cloned()
                .ok_or_else(|| {
                    GraphError::Native(format!(
                        "the stream plan waits on event {event} before recording it (a bug in the plan; please report it)"
                    ))
                })
        };
        for step in steps {
            match *step {
                Step::Copy { transfer, stream } => {
                    let copy = &self.device_plan.transfers()[transfer];
                    let id = stream;
                    let stream = self.gpu_stream(id)?;
                    let mut guard = self.state.store.slots[copy.slot]
                        .write()
                        .unwrap_or_else(|p| p.into_inner());
                    // A slot still empty has nothing to copy; its reader
                    // then finds it unallocated and says so. A field still
                    // valid there is not copied (nor timed).
                    if let Some(field) = guard.as_mut() {
                        match run.timeline {
                            Some(timeline) if !field.is_valid_on(copy.to) => timeline.span(
                                id,
                                &stream,
                                crate::GpuWork::Copy,
                                || format!("copy {} {} -> {}", copy.field, copy.from, copy.to),
                                || Ok(field.validate_on_async(copy.to, &stream)?),
                            )?,
                            _ => field.validate_on_async(copy.to, &stream)?,
                        };
                    }
                }
                Step::Record { event, stream } => {
                    let recorded_event = self.gpu_stream(stream)?.record()?;
                    if let Some(slot) = events
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_mut(event)
                    {
                        *slot = Some(recorded_event);
                    }
                }
                Step::Wait { stream, event } => {
                    let event = recorded(event)?;
                    self.gpu_stream(stream)?.wait(&event)?;
                }
                Step::HostWait { event } => recorded(event)?.synchronize()?,
                Step::Synchronize { stream } => self.gpu_stream(stream)?.synchronize()?,
            }
        }
        Ok(())
    }

    /// Waits for every stream of the plan (after an error, so that no
    /// kernel still runs when scratch memory is released). Errors are
    /// ignored: the first error is already being reported.
    pub(crate) fn drain_streams(&self) {
        for id in self.device_plan.streams().streams_used() {
            if let Ok(stream) = self.gpu_stream(id) {
                let _ = stream.synchronize();
            }
        }
    }

    /// Prepares `node`'s fields for running on `device` (`stream`: the
    /// GPU node's stream; `None` for a CPU node): the fields it reads valid
    /// there, the persistent fields it writes active there.
    pub(crate) fn place_fields(
        &self,
        node: usize,
        device: Device,
        stream: Option<&GpuStream>,
    ) -> GraphResult<()> {
        let graph_node = &self.plan.nodes[node];
        for &slot in &graph_node.inputs {
            let valid = self.state.store.slots[slot]
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .is_none_or(|f| f.is_valid_on(device));
            if valid {
                continue;
            }
            let mut guard = self.state.store.slots[slot]
                .write()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(field) = guard.as_mut() {
                match stream {
                    Some(stream) => {
                        field.validate_on_async(device, stream)?;
                    }
                    None => field.validate_on(device)?,
                }
            }
        }
        for &slot in &graph_node.outputs {
            let scratch_of_this_node =
                !self.plan.fields[slot].persistent && self.plan.producer[slot] == Some(node);
            if scratch_of_this_node {
                continue;
            }
            let mut guard = self.state.store.slots[slot]
                .write()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(field) = guard.as_mut() {
                field.make_active_on(device, stream)?;
            }
        }
        Ok(())
    }
}

/// One assignment of a GPU node: the target's leaf id, the value, the
/// region, the modifiers after it, the target, and whether it checks that
/// what it writes is finite.
type Assignment<'f> = (
    u64,
    Arc<Node>,
    Region,
    Vec<MaskedAssignment>,
    &'f mut AnyField,
    bool,
);

/// A GPU kernel that checks what it writes, as the execution left it: the
/// device word the kernel lowers to the first bad point's key, and the
/// host copy enqueued after it. Read once every stream has finished
/// ([`ExpressionGraph::first_not_finite`]).
pub(crate) struct FiniteWatch {
    /// The node's index in the graph, which orders the watches by plan.
    plan_node: usize,
    node: String,
    target: String,
    launch: GpuLaunch,
    stream: GpuStream,
    /// The device word (kept until the watch is read).
    _word: PoolBlock,
    /// Where the copy of the word lands (boxed: its address must not move).
    key: Box<u64>,
}

/// The watches of the execution in progress, in the order their kernels
/// were enqueued (plan order when one thread walks the plan; a concurrent
/// walk may enqueue in another topological order, so they are read in plan
/// order), and the host words of earlier executions'
/// watches, reused so that a repeating step copies its checks to the same
/// host addresses (which lets it be replayed as a CUDA graph).
#[derive(Default)]
pub(crate) struct FiniteWatches {
    active: std::sync::Mutex<Vec<FiniteWatch>>,
    /// Boxed: a word's address must not move while a copy targets it.
    #[allow(clippy::vec_box)]
    spare_keys: std::sync::Mutex<Vec<Box<u64>>>,
}

impl FiniteWatches {
    /// A host word for a new watch, set to "no bad point".
    fn key(&self) -> Box<u64> {
        let mut key = self
            .spare_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        *key = u64::MAX;
        key
    }

    /// Forgets the watches of the execution (after every stream has
    /// finished), keeping their host words for the next one.
    pub(crate) fn clear(&self) {
        let watches = std::mem::take(&mut *self.active.lock().unwrap_or_else(|p| p.into_inner()));
        self.keep_keys(watches.into_iter().map(|w| w.key));
    }

    /// Keeps host words for later watches, in reverse so that the next
    /// execution takes them in the same order.
    fn keep_keys(&self, keys: impl DoubleEndedIterator<Item = Box<u64>>) {
        self.spare_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(keys.rev());
    }
}

impl ExpressionGraph {
    /// After every stream has finished: the first watched kernel (in plan
    /// order) that wrote a value that is not finite, as the CPU reports
    /// it (`GraphError::Expression` around `OperatorError::NotFinite`,
    /// naming the node, the target, the first bad point in storage order
    /// and its value). Clears the watches.
    pub(crate) fn first_not_finite(&self) -> GraphResult<()> {
        let mut watches = std::mem::take(
            &mut *self
                .state
                .finite_watches
                .active
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if !watches.is_empty() {
            // Plan order (a no-op after a walk in plan order; stable, so a
            // node's own watches keep their order).
            let mut position = vec![usize::MAX; self.plan.nodes.len()];
            for (place, &node) in self.plan.order.iter().enumerate() {
                position[node] = place;
            }
            watches.sort_by_key(|w| position.get(w.plan_node).copied().unwrap_or(usize::MAX));
        }
        let mut bad = None;
        let mut keys = Vec::with_capacity(watches.len());
        for mut watch in watches {
            if bad.is_none()
                && let Some(point) = watch.launch.not_finite_at(*watch.key)
            {
                keys.push(std::mem::take(&mut watch.key));
                bad = Some((point, watch));
            } else {
                keys.push(watch.key);
            }
        }
        self.state.finite_watches.keep_keys(keys.into_iter());
        if let Some((point, watch)) = bad {
            let (zero, sy, sz) = watch.launch.target;
            let offset = point[0] as i64 + point[1] as i64 * sy + point[2] as i64 * sz;
            let address = zero.wrapping_add_signed(offset.wrapping_mul(8));
            let mut value = f64::NAN;
            let action = format!("reading the value of {} that is not finite", watch.target);
            // SAFETY: `address` is a point of the target the kernel wrote
            // (inside the buffer `gpu_launches_watching` checked), still
            // allocated (scratch fields go back to the pool after this);
            // `value` is 8 bytes of host memory alive until the wait.
            unsafe {
                watch.stream.copy(
                    (watch.stream.device(), address as usize),
                    (Device::Cpu, &mut value as *mut f64 as usize),
                    8,
                    &action,
                )?;
            }
            watch.stream.synchronize()?;
            return Err(GraphError::Expression {
                expression: watch.node,
                source: Box::new(GraphError::Operator(OperatorError::NotFinite {
                    target: watch.target,
                    point,
                    value,
                })),
            });
        }
        Ok(())
    }
}

/// Runs `expression`, the graph's node `node` (a language node: an expression with its fused
/// modifiers, a horizontal group, a language modifier, or a reduction; or
/// a native node or solve with its own GPU evaluation) on the GPU of
/// `stream`: enqueues its kernels and returns before they finish (a
/// reduction waits for its value). The device words of finiteness checks
/// are allocated as `scratch` says.
pub(crate) fn evaluate_on_gpu(
    node: usize,
    form: &NodeForm,
    context: &mut EvaluationContext<'_>,
    stream: &GpuStream,
    watches: &FiniteWatches,
    scratch: GpuScratch,
) -> GraphResult<()> {
    let modifier = match form {
        NodeForm::Reduction(reduction) => return reduction.evaluate_on_gpu(context, stream),
        // Placement asked `gpu_support` before putting it here.
        NodeForm::Native(native) => return native.evaluate_on_gpu(context, stream),
        NodeForm::Modifier(modifier) => Some(modifier),
        NodeForm::Language(_) | NodeForm::Group(_) => None,
    };
    let device = stream.device();
    let region = match context.region {
        Some(region) => Region::Box(region),
        None => Region::Interior,
    };
    let node_name = context.expression.to_string();
    let context_name = node_name.clone();
    let (bindings, outputs) = context.split_for_group()?;
    let bound: Vec<&dyn BoundField> = bindings.iter().map(|b| b as &dyn BoundField).collect();
    let mut work: Vec<Assignment<'_>> = Vec::new();
    let mut outputs = outputs;
    let mut take_output = |tag: &crate::Tag| -> GraphResult<&mut AnyField> {
        let position = outputs
            .iter()
            .position(|(t, f)| *t == tag && f.is_some())
            .ok_or_else(|| GraphError::FieldUnavailable {
                tag: tag.clone(),
                expression: node_name.clone(),
                reason: "it is not an allocated output of the node".into(),
            })?;
        let (_, field) = outputs.swap_remove(position);
        field.ok_or_else(|| GraphError::Native("an output vanished".into()))
    };
    let members: Vec<&LanguageExpression> = form.language_members();
    if let Some(modifier) = modifier {
        let field = take_output(modifier.target())?;
        let assignments = modifier.assignments(field.as_bound().layout())?;
        if let Some(((first_box, first), rest)) = assignments.split_first() {
            work.push((
                modifier.target().id(),
                first.clone(),
                Region::Box(*first_box),
                rest.to_vec(),
                field,
                false,
            ));
        }
    }
    for language in members {
        let field = take_output(language.target())?;
        let then = language.fused_assignments(field.as_bound().layout())?;
        work.push((
            language.target().id(),
            language.root().clone(),
            region,
            then,
            field,
            language.checks_finite(),
        ));
    }
    for (leaf, root, region, then, field, checks) in work {
        let kind = field.kind();
        let buffer = field.gpu_buffer_mut(device)?;
        if let Some(event) = &buffer.ready {
            stream.wait(event)?;
        }
        let bound_target = field.as_bound();
        let target = GpuTarget {
            name: bound_target.name(),
            layout: bound_target.layout(),
            kind,
            device,
            pointer: buffer.pointer,
            len: buffer.len,
        };
        let watch = if checks {
            let label = format!("finiteness of {}", target.name);
            // Kept by the watch until it is read after every stream has
            // finished, so a stream-ordered word is freed after that.
            let word = match scratch {
                GpuScratch::SizeClassPool => MemoryPool::global(device)?.allocate(8, label)?,
                GpuScratch::StreamOrdered => {
                    let Device::Gpu(ordinal) = device else {
                        return Err(GraphError::Native(format!(
                            "the finiteness check of {} runs on the host, not a GPU (a bug; please report it)",
                            target.name
                        )));
                    };
                    MemoryPool::stream_ordered(ordinal)?.allocate_on(stream, 8, label)?
                }
            };
            // SAFETY: `word` is 8 bytes of this GPU's memory that nothing
            // else uses while the watch holds it.
            unsafe {
                stream.memset(
                    word.address(),
                    0xff,
                    8,
                    &format!("arming the finiteness check of {}", target.name),
                )?;
            }
            Some(word)
        } else {
            None
        };
        let launches = match &watch {
            Some(word) => gpu_launches_watching(
                target,
                leaf,
                &root,
                &bound,
                region,
                &then,
                word.address() as u64,
            )?,
            None => gpu_launches(target, leaf, &root, &bound, region, &then)?,
        };
        for launch in &launches {
            // SAFETY: the target and every field read live in the graph's
            // store until the execution has synchronised every stream
            // (scratch fields are released only after that; persistent
            // fields are not freed while the execution lock is held), their
            // locations on this GPU are the memory the launch was built
            // over, and the plan orders every other access to them after
            // this kernel through the stream or an event.
            unsafe { launch.enqueue(stream)? };
        }
        if let (Some(word), Some(main)) = (watch, launches.first()) {
            let mut key = watches.key();
            let action = format!(
                "copying the finiteness check of {} to the host",
                target.name
            );
            // SAFETY: the word is this GPU's memory, kept alive by the
            // watch until it is read after every stream has finished;
            // `key` is boxed host memory, also kept by the watch.
            unsafe {
                stream.copy(
                    (device, word.address()),
                    (Device::Cpu, &mut *key as *mut u64 as usize),
                    8,
                    &action,
                )?;
            }
            watches
                .active
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(FiniteWatch {
                    plan_node: node,
                    node: context_name.clone(),
                    target: target.name.to_string(),
                    launch: main.clone(),
                    stream: stream.clone(),
                    _word: word,
                    key,
                });
        }
    }
    Ok(())
}
