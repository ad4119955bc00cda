//! Recording the stream work of one step, and replaying it as a CUDA graph.
//!
//! # Design
//! A step of a graph placed on a GPU enqueues hundreds of small kernels.
//! On small grids the launches, not the kernels, take the time, and a CUDA
//! graph launches them all in one call. The danger is a graph replaying
//! the pointers or the parameter values of an earlier step. This module
//! makes that impossible by construction:
//!
//! 1. **Record.** While a [`StepRecording`] is open on a thread, every
//!    stream call of that thread (kernel launch, copy, memset, event record,
//!    event wait) is logged instead of enqueued. The host logic above runs
//!    as it always does: pools hand out memory, location states change,
//!    arguments are packed. Only the device work is held back. An event
//!    recorded meanwhile is *pending*: a wait on it inside the recording is
//!    logged, and anything else that needs it (a host wait, a wait outside
//!    the recording) is refused until the step is enqueued. A stream
//!    synchronisation inside a recording is refused, since the work it
//!    would wait for is not enqueued yet.
//! 2. **Shape and key.** The finished [`RecordedStep`] has a [`StepShape`]:
//!    each operation with its stream (streams numbered by first use), the
//!    kernel's identity, grid, block and parameter sizes, every copy's and
//!    memset's addresses and sizes, and the event dependencies. Its
//!    [`StepKey`] is the shape plus every kernel argument byte (so every
//!    pointer and parameter value a kernel receives). A wait on an event
//!    from before the step enters both as a wait, without the event: it is
//!    satisfied before the step starts.
//! 3. **Run or replay.** A recorded step is either run directly (each
//!    operation enqueued where it was asked for, exactly as without a
//!    recording; [`RecordedStep::run_directly`]) or launched through a
//!    [`GpuGraph`] whose key equals the step's ([`GpuGraph::launch`], which
//!    compares the keys and runs a different step directly, with an
//!    error). Either way every pending event resolves to a real one: the
//!    event recorded where it was asked for, or, for a graph, one event
//!    after the whole graph.
//! 4. **Update.** A graph can take the kernel arguments of a step of the
//!    same shape ([`GpuGraph::update_arguments`]; on a real GPU
//!    `cuGraphExecKernelNodeSetParams` on the kernels whose bytes differ,
//!    which leaves launches already enqueued as they were). The graph's key
//!    follows each kernel as it is updated, so even an update that fails
//!    midway leaves a graph that launches only the step its key describes.
//!    A step whose parameter (a time) or whose pointers change every time
//!    is thus replayed without a new capture.
//!
//! Capture on a real GPU replays the operations between
//! `cuStreamBeginCapture` and `cuStreamEndCapture` on the origin stream;
//! the other streams fork from the origin (they wait on an event recorded
//! there first) and join it at the end. After each kernel the capturing
//! stream's one dependency is that kernel's node, which is how a graph
//! knows the node to update. An emulated GPU's graph is the checked
//! operation list, which runs on private queues when the origin stream
//! reaches it.

use super::{EventImpl, FunctionImpl, GpuFunction, GpuStream, StreamImpl, ValidationEvent};
use super::{backend, emulated};
use crate::Device;
use crate::error::{FieldError, FieldResult};
use crate::hashing::digest_of;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

thread_local! {
    /// The recording open on this thread.
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Numbers recordings, so that a pending event knows its own.
static NEXT_RECORDING: AtomicU64 = AtomicU64::new(1);

/// An event recorded inside a recording: real once the step is enqueued.
#[derive(Debug)]
pub(crate) struct PendingEvent {
    recording: u64,
    index: usize,
    real: OnceLock<EventImpl>,
    /// Where the real event lies on its stream (the origin's, for a
    /// replayed step), once resolved (`stream_book.rs`).
    real_point: OnceLock<super::stream_book::StreamPoint>,
}

impl PendingEvent {
    /// Makes `real` the event this one stands for (once; later calls
    /// change nothing).
    fn resolve(&self, real: &ValidationEvent) {
        if self.real.set(real.event.clone()).is_ok()
            && let Some(point) = &real.point
        {
            let _ = self.real_point.set(point.clone());
        }
    }

    /// Where the real event lies on its stream, once resolved.
    pub(crate) fn real_point(&self) -> Option<&super::stream_book::StreamPoint> {
        self.real_point.get()
    }

    /// The real event, or an error when the step that records it has not
    /// been enqueued.
    pub(crate) fn resolved(&self, device: Device) -> FieldResult<EventImpl> {
        self.real.get().cloned().ok_or_else(|| FieldError::Cuda {
            device,
            action: "using an event".into(),
            message: "the event belongs to a recorded step that has not been enqueued yet; finish the recording and run or replay the step first".into(),
        })
    }
}

/// One stream operation of a step. Streams are numbered by first use in
/// the step, events by the order they are recorded in it. `K` is what a
/// kernel launch carries: the kernel's identity and parameter count in a
/// [`StepShape`] (its argument bytes are kept beside it), the checked
/// kernel with its arguments in an emulated graph.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum StepOperation<K> {
    Launch {
        stream: usize,
        grid: [u32; 3],
        block: [u32; 3],
        kernel: K,
    },
    Copy {
        stream: usize,
        source: (Device, usize),
        destination: (Device, usize),
        bytes: usize,
    },
    Memset {
        stream: usize,
        destination: usize,
        byte: u8,
        bytes: usize,
    },
    /// Records event `event` of the step.
    Record { stream: usize, event: usize },
    /// Waits on event `event` of the step.
    Wait { stream: usize, event: usize },
    /// Waits on an event recorded before the step (satisfied before the
    /// step starts; the events are kept beside the operations, in order).
    WaitBefore { stream: usize },
}

/// A kernel launch in a [`StepShape`]: which kernel, and how many
/// parameter blocks it takes (their sizes are in the shape too, their
/// bytes in the [`StepKey`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct KernelShape {
    function: usize,
    parameters: usize,
}

/// What a logged launch keeps beside its shape: the kernel itself and
/// what the launch is for.
#[derive(Debug, Clone)]
struct LoggedLaunch {
    function: GpuFunction,
    action: Arc<str>,
}

/// What a recording holds: the step's operations as its shape describes
/// them, and beside them what only the recording needs.
#[derive(Debug)]
struct Recording {
    id: u64,
    origin: GpuStream,
    streams: Vec<GpuStream>,
    operations: Vec<StepOperation<KernelShape>>,
    /// The size of every parameter block, launch after launch.
    parameter_sizes: Vec<u32>,
    /// Every launch's parameter blocks, one after the other.
    arguments: Vec<u8>,
    /// Per launch: where its blocks end in `arguments`.
    argument_ends: Vec<usize>,
    /// Per launch: the kernel and the action.
    launches: Vec<LoggedLaunch>,
    /// Per wait on an event from before the step: the event.
    waits_before: Vec<ValidationEvent>,
    events: Vec<Arc<PendingEvent>>,
}

impl Recording {
    /// The index of `stream` (added on first use); a stream of another GPU
    /// is refused.
    fn stream_index(&mut self, stream: &GpuStream) -> FieldResult<usize> {
        if stream.device != self.origin.device {
            return Err(FieldError::Cuda {
                device: stream.device,
                action: "recording a step".into(),
                message: format!(
                    "the step is recorded on {}; a recorded step runs on one GPU",
                    self.origin.device
                ),
            });
        }
        let identity = stream.identity();
        if let Some(index) = self.streams.iter().position(|s| s.identity() == identity) {
            return Ok(index);
        }
        self.streams.push(stream.clone());
        Ok(self.streams.len() - 1)
    }

    /// Logs the operation `make` builds for `stream`'s index.
    fn log(
        &mut self,
        stream: &GpuStream,
        make: impl FnOnce(usize) -> StepOperation<KernelShape>,
    ) -> FieldResult<()> {
        let index = self.stream_index(stream)?;
        self.operations.push(make(index));
        Ok(())
    }

    /// The action of a launch, shared with the launch before when equal
    /// (callers pass the same words for every launch).
    fn action(&self, action: &str) -> Arc<str> {
        match self.launches.last() {
            Some(last) if &*last.action == action => last.action.clone(),
            _ => Arc::from(action),
        }
    }
}

/// Runs `f` on this thread's open recording; `None` when there is none.
fn with_recording<R>(f: impl FnOnce(&mut Recording) -> R) -> Option<R> {
    RECORDING.with(|cell| cell.borrow_mut().as_mut().map(f))
}

/// Refuses a host wait on a stream while a recording is open here.
pub(crate) fn refuse_host_wait(device: Device, action: &str) -> FieldResult<()> {
    match with_recording(|_| ()) {
        None => Ok(()),
        Some(()) => Err(FieldError::Cuda {
            device,
            action: action.to_string(),
            message: "the host cannot wait inside a step recorded for replay (its work is not enqueued yet); a step that needs a value on the host cannot be replayed as a graph".into(),
        }),
    }
}

/// True when a step recording is open on this thread.
pub(crate) fn recording_open() -> bool {
    with_recording(|_| ()).is_some()
}

/// Logs an event record; `None` when no recording is open.
pub(crate) fn log_record(stream: &GpuStream) -> FieldResult<Option<ValidationEvent>> {
    with_recording(|recording| {
        let pending = Arc::new(PendingEvent {
            recording: recording.id,
            index: recording.events.len(),
            real: OnceLock::new(),
            real_point: OnceLock::new(),
        });
        let event = pending.index;
        recording.log(stream, |stream| StepOperation::Record { stream, event })?;
        recording.events.push(pending.clone());
        Ok(ValidationEvent {
            device: stream.device,
            event: EventImpl::Pending(pending),
            point: None,
        })
    })
    .transpose()
}

/// Logs a wait; `false` when no recording is open.
pub(crate) fn log_wait(stream: &GpuStream, event: &ValidationEvent) -> FieldResult<bool> {
    with_recording(|recording| {
        let index = recording.stream_index(stream)?;
        let operation = match &event.event {
            EventImpl::Pending(pending) if pending.real.get().is_none() => {
                if pending.recording != recording.id {
                    return Err(FieldError::Cuda {
                        device: stream.device,
                        action: "recording a wait".into(),
                        message:
                            "the event belongs to another recorded step that has not been enqueued"
                                .into(),
                    });
                }
                StepOperation::Wait {
                    stream: index,
                    event: pending.index,
                }
            }
            _ => {
                recording.waits_before.push(event.clone());
                StepOperation::WaitBefore { stream: index }
            }
        };
        recording.operations.push(operation);
        Ok(true)
    })
    .unwrap_or(Ok(false))
}

/// Logs a copy; `false` when no recording is open.
pub(crate) fn log_copy(
    stream: &GpuStream,
    source: (Device, usize),
    destination: (Device, usize),
    bytes: usize,
) -> FieldResult<bool> {
    with_recording(|recording| {
        recording.log(stream, |stream| StepOperation::Copy {
            stream,
            source,
            destination,
            bytes,
        })
    })
    .map_or(Ok(false), |logged| logged.map(|()| true))
}

/// Logs a memset; `false` when no recording is open.
pub(crate) fn log_memset(
    stream: &GpuStream,
    destination: usize,
    byte: u8,
    bytes: usize,
) -> FieldResult<bool> {
    with_recording(|recording| {
        recording.log(stream, |stream| StepOperation::Memset {
            stream,
            destination,
            byte,
            bytes,
        })
    })
    .map_or(Ok(false), |logged| logged.map(|()| true))
}

/// Logs a kernel launch (its parameter blocks copied, as
/// `cuLaunchKernel` copies them); `false` when no recording is open.
pub(crate) fn log_launch(
    stream: &GpuStream,
    function: &GpuFunction,
    grid: [u32; 3],
    block: [u32; 3],
    arguments: &[&[u8]],
    action: &str,
) -> FieldResult<bool> {
    with_recording(|recording| {
        let too_large = || FieldError::Cuda {
            device: stream.device,
            action: action.to_string(),
            message: "a kernel parameter block of 4 GiB or more cannot be launched".into(),
        };
        if arguments.iter().any(|a| u32::try_from(a.len()).is_err()) {
            return Err(too_large());
        }
        recording.log(stream, |stream| StepOperation::Launch {
            stream,
            grid,
            block,
            kernel: KernelShape {
                function: function.identity(),
                parameters: arguments.len(),
            },
        })?;
        // Each fits: checked above.
        recording
            .parameter_sizes
            .extend(arguments.iter().map(|a| a.len() as u32));
        for block in arguments {
            recording.arguments.extend_from_slice(block);
        }
        recording.argument_ends.push(recording.arguments.len());
        let action = recording.action(action);
        recording.launches.push(LoggedLaunch {
            function: function.clone(),
            action,
        });
        Ok(())
    })
    .map_or(Ok(false), |logged| logged.map(|()| true))
}

impl GpuStream {
    /// Opens a recording on this thread with this stream as its origin:
    /// until [`StepRecording::finish`], the stream work this thread asks
    /// for (on any stream of this GPU) is logged, not enqueued (see the
    /// module documentation of `gpu::replay`). Refused when a recording is
    /// already open here.
    ///
    /// ```
    /// # use watershed_fields::GpuStream;
    /// # fn step(stream: &GpuStream) -> watershed_fields::FieldResult<()> {
    /// let recording = stream.begin_recording()?;
    /// // ... enqueue the step's work on this GPU's streams ...
    /// let step = recording.finish()?;
    /// let graph = step.capture()?; // or step.run_directly()
    /// graph.launch(step)?;
    /// stream.synchronize()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn begin_recording(&self) -> FieldResult<StepRecording> {
        RECORDING.with(|cell| {
            let mut cell = cell.borrow_mut();
            if cell.is_some() {
                return Err(FieldError::Cuda {
                    device: self.device,
                    action: "opening a step recording".into(),
                    message: "a recording is already open on this thread; finish it first".into(),
                });
            }
            *cell = Some(Recording {
                id: NEXT_RECORDING.fetch_add(1, Ordering::Relaxed),
                origin: self.clone(),
                streams: vec![self.clone()],
                operations: Vec::new(),
                parameter_sizes: Vec::new(),
                arguments: Vec::new(),
                argument_ends: Vec::new(),
                launches: Vec::new(),
                waits_before: Vec::new(),
                events: Vec::new(),
            });
            Ok(StepRecording {
                open: true,
                _thread_bound: std::marker::PhantomData,
            })
        })
    }
}

/// An open recording (see [`GpuStream::begin_recording`]). Dropping it
/// without [`finish`](StepRecording::finish) runs what it logged directly,
/// so that no work and no event is lost.
#[derive(Debug)]
pub struct StepRecording {
    open: bool,
    /// The recording belongs to the thread that opened it.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl StepRecording {
    /// Closes the recording and hands over what it logged. Errors only if
    /// the thread's recording is gone (it cannot be, since only this guard
    /// takes it; reported rather than assumed).
    pub fn finish(mut self) -> FieldResult<RecordedStep> {
        self.open = false;
        RECORDING
            .with(|cell| cell.borrow_mut().take())
            .map(RecordedStep::new)
            .ok_or_else(|| FieldError::Cuda {
                device: Device::Cpu,
                action: "finishing a step recording".into(),
                message: "this thread has no open recording (a bug; please report it)".into(),
            })
    }
}

impl Drop for StepRecording {
    fn drop(&mut self) {
        if self.open
            && let Some(recording) = RECORDING.with(|cell| cell.borrow_mut().take())
        {
            let _ = RecordedStep::new(recording).run_directly();
        }
    }
}

/// Kernel parameters kept inline per launch; generated kernels take an
/// argument struct, a few field pointers and strides.
const INLINE_PARAMETERS: usize = 12;

/// The parameter blocks of one kernel launch.
type ParameterBlocks<'a> = smallvec::SmallVec<[&'a [u8]; INLINE_PARAMETERS]>;

/// Everything a recorded step does on its GPU except the bytes of its
/// kernel arguments: the same kernels with the same grids, blocks and
/// parameter sizes, the same copies and memsets (addresses and sizes), on
/// the same streams in the same order, with the same event dependencies.
/// A captured graph can take the arguments of any step of its shape
/// ([`GpuGraph::update_arguments`]).
#[derive(Debug, Clone)]
pub struct StepShape {
    device: Device,
    origin: usize,
    operations: Vec<StepOperation<KernelShape>>,
    parameter_sizes: Vec<u32>,
    digest: u64,
}

impl PartialEq for StepShape {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
            && self.device == other.device
            && self.origin == other.origin
            && self.parameter_sizes == other.parameter_sizes
            && self.operations == other.operations
    }
}

impl Eq for StepShape {}

impl std::hash::Hash for StepShape {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl StepShape {
    fn new(
        device: Device,
        origin: usize,
        operations: Vec<StepOperation<KernelShape>>,
        parameter_sizes: Vec<u32>,
    ) -> Self {
        let digest = digest_of(&(device, origin, &operations, &parameter_sizes));
        StepShape {
            device,
            origin,
            operations,
            parameter_sizes,
            digest,
        }
    }

    /// A sentence naming the first operation where `self` and `other`
    /// differ (or the device or origin stream).
    pub fn first_difference(&self, other: &StepShape) -> String {
        if self.device != other.device || self.origin != other.origin {
            return format!(
                "the steps run on different devices or origin streams ({} and {})",
                self.device, other.device
            );
        }
        match self
            .operations
            .iter()
            .zip(&other.operations)
            .position(|(a, b)| a != b)
        {
            Some(at) => format!(
                "operation {at} differs: {:?} against {:?}",
                self.operations[at], other.operations[at]
            ),
            None if self.operations.len() != other.operations.len() => format!(
                "one step has {} operations, the other {}",
                self.operations.len(),
                other.operations.len()
            ),
            None if self.parameter_sizes != other.parameter_sizes => {
                "the kernels' parameter blocks have different sizes".into()
            }
            None => "the steps have the same shape".into(),
        }
    }

    /// Per kernel launch, in order: the sizes of its parameter blocks.
    fn launch_parameter_sizes(&self) -> impl Iterator<Item = &[u32]> {
        let mut rest = self.parameter_sizes.as_slice();
        self.operations.iter().filter_map(move |operation| {
            let StepOperation::Launch { kernel, .. } = operation else {
                return None;
            };
            let (sizes, after) = rest.split_at(kernel.parameters.min(rest.len()));
            rest = after;
            Some(sizes)
        })
    }
}

/// Everything a recorded step does on its GPU, as data that compares
/// equal only for steps that enqueue the same work: its [`StepShape`] and
/// the bytes of every kernel argument (so the same pointers and parameter
/// values).
#[derive(Debug, Clone)]
pub struct StepKey {
    shape: StepShape,
    /// Every launch's parameter blocks, one after the other.
    arguments: Vec<u8>,
    /// Per launch: where its blocks end in `arguments`.
    argument_ends: Vec<usize>,
    digest: u64,
}

impl PartialEq for StepKey {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
            && self.argument_ends == other.argument_ends
            && self.arguments == other.arguments
            && self.shape == other.shape
    }
}

impl Eq for StepKey {}

impl std::hash::Hash for StepKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl StepKey {
    fn new(shape: StepShape, arguments: Vec<u8>, argument_ends: Vec<usize>) -> Self {
        let digest = digest_of(&(shape.digest, &arguments));
        StepKey {
            shape,
            arguments,
            argument_ends,
            digest,
        }
    }

    /// The step's shape (its key without the argument bytes).
    pub fn shape(&self) -> &StepShape {
        &self.shape
    }

    /// The number of kernel launches.
    fn launches(&self) -> usize {
        self.argument_ends.len()
    }

    /// The parameter blocks of kernel launch `launch`, all together.
    fn launch_bytes(&self, launch: usize) -> &[u8] {
        let start = launch
            .checked_sub(1)
            .map_or(0, |before| self.argument_ends[before]);
        &self.arguments[start..self.argument_ends[launch]]
    }

    /// Per kernel launch, in order: its parameter blocks (inline up to
    /// [`INLINE_PARAMETERS`], so that enqueuing a step allocates nothing
    /// per launch).
    fn launch_blocks(&self) -> impl Iterator<Item = ParameterBlocks<'_>> {
        self.shape
            .launch_parameter_sizes()
            .enumerate()
            .map(|(launch, sizes)| {
                let mut rest = self.launch_bytes(launch);
                sizes
                    .iter()
                    .map(|&size| {
                        let (block, after) = rest.split_at((size as usize).min(rest.len()));
                        rest = after;
                        block
                    })
                    .collect()
            })
    }

    /// Sets the bytes of launch `launch` to `other`'s (same shape); call
    /// [`StepKey::refresh_digest`] after the last.
    fn set_launch_bytes(&mut self, launch: usize, other: &StepKey) {
        let start = launch
            .checked_sub(1)
            .map_or(0, |before| self.argument_ends[before]);
        let end = self.argument_ends[launch];
        self.arguments[start..end].copy_from_slice(other.launch_bytes(launch));
    }

    /// Recomputes the digest after [`StepKey::set_launch_bytes`].
    fn refresh_digest(&mut self) {
        self.digest = digest_of(&(self.shape.digest, &self.arguments));
    }

    /// A sentence naming the first operation where `self` and `other`
    /// differ: in shape, or in the bytes of a kernel's parameters.
    pub fn first_difference(&self, other: &StepKey) -> String {
        if self.shape != other.shape {
            return self.shape.first_difference(&other.shape);
        }
        let launches = self.launch_blocks().zip(other.launch_blocks()).enumerate();
        for (launch, (mine, theirs)) in launches {
            if let Some(parameter) = mine.iter().zip(&theirs).position(|(a, b)| a != b) {
                return format!(
                    "kernel launch {launch} differs in parameter {parameter}: bytes {:?} against {:?}",
                    mine[parameter], theirs[parameter]
                );
            }
        }
        "the steps are the same".into()
    }
}

/// The stream work of one step, logged by a [`StepRecording`] and not yet
/// enqueued: run it directly, or capture it as a [`GpuGraph`] and launch
/// that.
#[derive(Debug)]
pub struct RecordedStep {
    recording: Recording,
    key: StepKey,
}

impl RecordedStep {
    fn new(mut recording: Recording) -> Self {
        let shape = StepShape::new(
            recording.origin.device,
            recording.origin.identity(),
            std::mem::take(&mut recording.operations),
            std::mem::take(&mut recording.parameter_sizes),
        );
        let key = StepKey::new(
            shape,
            std::mem::take(&mut recording.arguments),
            std::mem::take(&mut recording.argument_ends),
        );
        RecordedStep { recording, key }
    }

    /// The step's key.
    pub fn key(&self) -> &StepKey {
        &self.key
    }

    /// The step's shape (its key without the argument bytes).
    pub fn shape(&self) -> &StepShape {
        &self.key.shape
    }

    /// The GPU the step runs on.
    pub fn device(&self) -> Device {
        self.recording.origin.device
    }

    /// The kernel launches it holds.
    pub fn launches(&self) -> usize {
        self.key.launches()
    }

    /// The operations it holds (launches, copies, memsets, event records
    /// and waits).
    pub fn operations(&self) -> usize {
        self.key.shape.operations.len()
    }

    /// Enqueues every operation on the stream it was asked for, in the
    /// order it was asked for, as if no recording had been open; pending
    /// events become the events recorded at their places. After an error
    /// the streams are drained and the events still pending resolve to
    /// one recorded after everything, so that nothing waits forever.
    pub fn run_directly(self) -> FieldResult<()> {
        let outcome = self.enqueue(Mode::Direct).map(|_| ());
        if outcome.is_err() {
            self.resolve_rest_after_draining();
        }
        outcome
    }

    /// Captures the step as a graph (on a real GPU: a stream capture on the
    /// origin stream, instantiated; on an emulated GPU: the checked
    /// operation list). Nothing runs; launch the graph with
    /// [`GpuGraph::launch`].
    pub fn capture(&self) -> FieldResult<GpuGraph> {
        let device = self.device();
        let graph = match &self.recording.origin.stream {
            StreamImpl::Emulated(_) => GraphImpl::Emulated(self.emulated_graph()?),
            StreamImpl::Hardware(origin) => {
                origin.begin_capture(device)?;
                let enqueued = {
                    let _capture = super::stream_book::CaptureScope::open();
                    self.enqueue(Mode::Capture)
                };
                // The capture is ended in every case, so that the stream
                // leaves the capture state.
                let captured = origin.end_capture(device);
                let nodes = enqueued?;
                GraphImpl::Hardware {
                    graph: captured?,
                    nodes,
                }
            }
        };
        Ok(GpuGraph {
            key: self.key.clone(),
            streams: self.recording.streams.len(),
            graph,
        })
    }

    /// The operation list of an emulated graph, each launch checked as
    /// `cuLaunchKernel` would check it.
    fn emulated_graph(&self) -> FieldResult<Arc<Vec<emulated::GraphOperation>>> {
        let device = self.device();
        let mut launches = self.recording.launches.iter().zip(self.key.launch_blocks());
        let operations = self
            .key
            .shape
            .operations
            .iter()
            .map(|operation| {
                operation.try_map(|_, grid, block| {
                    let (launch, blocks) = launches.next().ok_or_else(|| inconsistent(device))?;
                    emulated_kernel(device, launch, &blocks, grid, block)
                })
            })
            .collect::<FieldResult<Vec<_>>>()?;
        Ok(Arc::new(operations))
    }

    /// Enqueues the operations: directly (pending events resolve to the
    /// events recorded), or inside a capture (fresh events, forked from and
    /// joined to the origin; waits on earlier events left out). In a
    /// capture, returns each launch's graph node where the driver tells it.
    fn enqueue(&self, mode: Mode) -> FieldResult<Vec<Option<usize>>> {
        let streams = &self.recording.streams;
        let origin = &self.recording.origin;
        let device = origin.device;
        let mut nodes = Vec::new();
        if mode == Mode::Capture {
            let fork = origin.record_now()?;
            for stream in streams.iter().filter(|s| s.identity() != origin.identity()) {
                stream.wait_now(&fork)?;
            }
        }
        let mut captured: Vec<Option<ValidationEvent>> = vec![None; self.recording.events.len()];
        let mut launches = self.recording.launches.iter().zip(self.key.launch_blocks());
        let mut waits_before = self.recording.waits_before.iter();
        for operation in &self.key.shape.operations {
            match operation {
                StepOperation::Launch {
                    stream,
                    grid,
                    block,
                    ..
                } => {
                    let (launch, blocks) = launches.next().ok_or_else(|| inconsistent(device))?;
                    // SAFETY: the caller of `GpuStream::launch` vouched for
                    // the blocks and for the addresses until the kernel
                    // completes; it is enqueued now, as it would have been.
                    unsafe {
                        streams[*stream].launch_now(
                            &launch.function,
                            *grid,
                            *block,
                            &blocks,
                            &launch.action,
                        )?
                    };
                    if mode == Mode::Capture {
                        nodes.push(streams[*stream].last_captured_node()?);
                    }
                }
                StepOperation::Copy {
                    stream,
                    source,
                    destination,
                    bytes,
                } => {
                    // SAFETY: as for the launch: the caller of
                    // `GpuStream::copy` vouched for both ranges.
                    unsafe {
                        streams[*stream].copy_now(
                            *source,
                            *destination,
                            *bytes,
                            "a recorded copy",
                        )?
                    };
                }
                StepOperation::Memset {
                    stream,
                    destination,
                    byte,
                    bytes,
                } => {
                    // SAFETY: as for the launch: the caller of
                    // `GpuStream::memset` vouched for the range.
                    unsafe {
                        streams[*stream].memset_now(
                            *destination,
                            *byte,
                            *bytes,
                            "a recorded memset",
                        )?
                    };
                }
                StepOperation::Record { stream, event } => {
                    let real = streams[*stream].record_now()?;
                    match mode {
                        Mode::Direct => {
                            self.recording.events[*event].resolve(&real);
                        }
                        Mode::Capture => captured[*event] = Some(real),
                    }
                }
                StepOperation::Wait { stream, event } => match mode {
                    Mode::Direct => {
                        let pending = &self.recording.events[*event];
                        let real = ValidationEvent {
                            device,
                            event: pending.resolved(device)?,
                            point: None,
                        };
                        streams[*stream].wait_now(&real)?;
                    }
                    Mode::Capture => {
                        let real = captured[*event]
                            .as_ref()
                            .ok_or_else(|| out_of_order(origin))?;
                        streams[*stream].wait_now(real)?;
                    }
                },
                StepOperation::WaitBefore { stream } => {
                    let event = waits_before.next().ok_or_else(|| inconsistent(device))?;
                    if mode == Mode::Direct {
                        streams[*stream].wait_now(event)?;
                    }
                }
            }
        }
        if mode == Mode::Capture {
            for stream in streams.iter().filter(|s| s.identity() != origin.identity()) {
                let join = stream.record_now()?;
                origin.wait_now(&join)?;
            }
        }
        Ok(nodes)
    }

    /// After an error: waits for every stream of the step, then resolves
    /// the events still pending to one recorded on the origin after that.
    fn resolve_rest_after_draining(&self) {
        for stream in &self.recording.streams {
            let _ = stream.synchronize_now();
        }
        if let Ok(end) = self.recording.origin.record_now() {
            for pending in &self.recording.events {
                pending.resolve(&end);
            }
        }
    }

    /// Makes every pending event the one recorded after the step's graph.
    fn resolve_all(&self, end: &ValidationEvent) {
        for pending in &self.recording.events {
            pending.resolve(end);
        }
    }
}

impl<K> StepOperation<K> {
    /// The same operation with the launch's kernel (and possibly its grid
    /// and block) made by `kernel`.
    fn try_map<K2, E>(
        &self,
        kernel: impl FnOnce(&K, [u32; 3], [u32; 3]) -> Result<(K2, [u32; 3], [u32; 3]), E>,
    ) -> Result<StepOperation<K2>, E> {
        Ok(match self {
            StepOperation::Launch {
                stream,
                grid,
                block,
                kernel: k,
            } => {
                let (kernel, grid, block) = kernel(k, *grid, *block)?;
                StepOperation::Launch {
                    stream: *stream,
                    grid,
                    block,
                    kernel,
                }
            }
            StepOperation::Copy {
                stream,
                source,
                destination,
                bytes,
            } => StepOperation::Copy {
                stream: *stream,
                source: *source,
                destination: *destination,
                bytes: *bytes,
            },
            StepOperation::Memset {
                stream,
                destination,
                byte,
                bytes,
            } => StepOperation::Memset {
                stream: *stream,
                destination: *destination,
                byte: *byte,
                bytes: *bytes,
            },
            StepOperation::Record { stream, event } => StepOperation::Record {
                stream: *stream,
                event: *event,
            },
            StepOperation::Wait { stream, event } => StepOperation::Wait {
                stream: *stream,
                event: *event,
            },
            StepOperation::WaitBefore { stream } => StepOperation::WaitBefore { stream: *stream },
        })
    }
}

/// A logged launch as an emulated graph runs it, checked as
/// `cuLaunchKernel` would check it.
fn emulated_kernel(
    device: Device,
    launch: &LoggedLaunch,
    blocks: &[&[u8]],
    grid: [u32; 3],
    block: [u32; 3],
) -> FieldResult<(emulated::GraphKernel, [u32; 3], [u32; 3])> {
    let FunctionImpl::Emulated(host) = &launch.function.function else {
        return Err(mixed(device));
    };
    let (grid, block) = host.check(device, grid, block, blocks, &launch.action)?;
    Ok((
        emulated::GraphKernel {
            function: host.clone(),
            arguments: blocks.iter().map(|b| b.to_vec()).collect(),
        },
        grid,
        block,
    ))
}

/// How [`RecordedStep::enqueue`] enqueues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Direct,
    Capture,
}

fn mixed(device: Device) -> FieldError {
    FieldError::Cuda {
        device,
        action: "capturing a step".into(),
        message: "the step mixes a real and an emulated GPU".into(),
    }
}

fn out_of_order(origin: &GpuStream) -> FieldError {
    FieldError::Cuda {
        device: origin.device,
        action: "capturing a step".into(),
        message:
            "the step waits on an event before recording it (a bug in the caller; please report it)"
                .into(),
    }
}

fn inconsistent(device: Device) -> FieldError {
    FieldError::Cuda {
        device,
        action: "enqueuing a recorded step".into(),
        message: "the recorded step's operations and launches disagree (a bug; please report it)"
            .into(),
    }
}

/// A captured graph of a real or of an emulated GPU.
#[derive(Debug)]
enum GraphImpl {
    /// The instantiated graph, and the node of each kernel launch in it
    /// (`None` where the driver did not tell).
    Hardware {
        graph: backend::Graph,
        nodes: Vec<Option<usize>>,
    },
    /// The checked operations, replaced whole by an update (launches
    /// already enqueued keep the list they were given).
    Emulated(Arc<Vec<emulated::GraphOperation>>),
}

/// A step captured as a graph ([`RecordedStep::capture`]): launching it
/// enqueues all of the step's work on the origin stream in one call. It
/// only ever launches steps whose [`StepKey`] equals its own: the key of
/// the step it was captured from, with the arguments of the last
/// [`update_arguments`](GpuGraph::update_arguments).
#[derive(Debug)]
pub struct GpuGraph {
    key: StepKey,
    streams: usize,
    graph: GraphImpl,
}

impl GpuGraph {
    /// The key of the step the graph launches: the one it was captured
    /// from, with the arguments of its updates.
    pub fn key(&self) -> &StepKey {
        &self.key
    }

    /// Enqueues `step` as this graph on the step's origin stream (the one
    /// the graph was captured from): first the waits on events from before
    /// the step, then the graph, then one event that every pending event
    /// of the step becomes. Returns at once.
    ///
    /// A step whose key differs is not replayed: it runs directly (nothing
    /// is lost) and the call returns [`FieldError::Cuda`] saying where the
    /// steps differ.
    pub fn launch(&self, step: RecordedStep) -> FieldResult<()> {
        let device = step.device();
        if step.key != self.key {
            let difference = self.key.first_difference(&step.key);
            step.run_directly()?;
            return Err(FieldError::Cuda {
                device,
                action: "replaying a captured step".into(),
                message: format!(
                    "the step differs from the one the graph launches ({difference}); it ran directly instead"
                ),
            });
        }
        let origin = &step.recording.origin;
        let launched = (|| {
            for event in &step.recording.waits_before {
                origin.wait_now(event)?;
            }
            super::census::count(super::census::Call::GraphLaunch);
            match (&self.graph, &origin.stream) {
                (GraphImpl::Hardware { graph, .. }, StreamImpl::Hardware(_)) => {
                    graph.launch(device)?;
                    origin.book.enqueued_one();
                    Ok(())
                }
                (GraphImpl::Emulated(operations), StreamImpl::Emulated(stream)) => {
                    // SAFETY: every launch was checked when the graph was
                    // made or updated; the operations are those of `step`
                    // (equal keys: the same kernels, arguments, addresses
                    // and sizes), whose callers vouched for the addresses
                    // until the work completes, which is before the event
                    // recorded after the graph.
                    unsafe { stream.launch_graph(operations.clone(), self.streams) };
                    origin.book.enqueued_one();
                    Ok(())
                }
                _ => Err(mixed(device)),
            }
        })();
        if let Err(error) = launched {
            step.resolve_rest_after_draining();
            return Err(error);
        }
        match origin.record_now() {
            Ok(end) => {
                step.resolve_all(&end);
                Ok(())
            }
            Err(error) => {
                step.resolve_rest_after_draining();
                Err(error)
            }
        }
    }

    /// Gives the graph the kernel arguments of `step`, a step of the same
    /// [`StepShape`], so that [`GpuGraph::launch`] then replays it: only
    /// the kernels whose argument bytes differ are updated (on a real GPU
    /// with `cuGraphExecKernelNodeSetParams`; launches of the graph
    /// already enqueued keep their arguments). Returns how many kernels
    /// were updated. Nothing runs.
    ///
    /// A step of another shape is refused with [`FieldError::Cuda`] naming
    /// the first difference, and the graph is left as it was. The graph's
    /// key follows each kernel as it is updated, so after an error midway
    /// (the driver refusing an update) the graph launches only the step
    /// its key now describes, which is no step at all in practice: such a
    /// graph is best dropped.
    pub fn update_arguments(&mut self, step: &RecordedStep) -> FieldResult<usize> {
        let device = step.device();
        if step.key.shape != self.key.shape {
            return Err(FieldError::Cuda {
                device,
                action: "updating a captured step's arguments".into(),
                message: format!(
                    "the step's shape differs from the graph's ({}); capture it instead",
                    self.key.shape.first_difference(&step.key.shape)
                ),
            });
        }
        let mut updated = 0;
        let mut outcome = Ok(());
        let mut replaced: Option<Vec<emulated::GraphOperation>> = None;
        let positions =
            step.key
                .shape
                .operations
                .iter()
                .enumerate()
                .filter_map(|(position, operation)| match operation {
                    StepOperation::Launch { grid, block, .. } => Some((position, *grid, *block)),
                    _ => None,
                });
        let launches = positions
            .zip(&step.recording.launches)
            .zip(step.key.launch_blocks());
        for (index, (((position, grid, block), launch), blocks)) in launches.enumerate() {
            if self.key.launch_bytes(index) == step.key.launch_bytes(index) {
                continue;
            }
            super::census::count(super::census::Call::GraphUpdate);
            let done = match &self.graph {
                GraphImpl::Hardware { graph, nodes } => {
                    match (
                        nodes.get(index).copied().flatten(),
                        &launch.function.function,
                    ) {
                        (Some(node), FunctionImpl::Hardware(function)) => {
                            // SAFETY: the node is a kernel node of this
                            // graph, captured from a launch of this very
                            // kernel (equal shapes), and the blocks match
                            // its parameters in number and size. Nothing
                            // runs with them until `launch` is given a step
                            // with this key, whose caller vouched for them.
                            unsafe {
                                graph.set_kernel_arguments(
                                    device,
                                    node,
                                    function,
                                    grid,
                                    block,
                                    &blocks,
                                    &launch.action,
                                )
                            }
                        }
                        (None, _) => Err(FieldError::Cuda {
                            device,
                            action: launch.action.to_string(),
                            message: format!(
                                "the driver did not tell which graph node kernel launch {index} became (in-place updates need a CUDA 12.3 driver or newer); capture the step instead"
                            ),
                        }),
                        (Some(_), FunctionImpl::Emulated(_)) => Err(mixed(device)),
                    }
                }
                GraphImpl::Emulated(operations) => emulated_kernel(
                    device, launch, &blocks, grid, block,
                )
                .map(|(kernel, grid, block)| {
                    let list = replaced.get_or_insert_with(|| operations.as_ref().clone());
                    if let Some(StepOperation::Launch { stream, .. }) = list.get(position) {
                        list[position] = StepOperation::Launch {
                            stream: *stream,
                            grid,
                            block,
                            kernel,
                        };
                    }
                }),
            };
            if let Err(error) = done {
                outcome = Err(error);
                break;
            }
            self.key.set_launch_bytes(index, &step.key);
            updated += 1;
        }
        if updated > 0 {
            self.key.refresh_digest();
        }
        if let (Some(list), GraphImpl::Emulated(operations)) = (replaced, &mut self.graph) {
            *operations = Arc::new(list);
        }
        outcome.map(|()| updated)
    }
}
