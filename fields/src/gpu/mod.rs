//! The narrow device layer: run-time detection of CUDA GPUs, streams,
//! events, device and pinned memory, and copies. Every allocation, copy,
//! memset, stream and event call of Watershed goes through here; no cudarc
//! type appears in a public signature.
//!
//! Two implementations sit behind one interface: `cuda.rs` (cargo feature
//! `cuda`, on by default; cudarc with dynamic loading) and `stub.rs`
//! (without the feature: no GPU, and every request for one is a clear
//! [`FieldError::NoCudaDevice`]). cudarc panics when `libcuda` is absent,
//! so every entry point checks for the driver first
//! ([`cuda_driver_present`]) and turns its absence into
//! [`FieldError::NoCudaDevice`]: every CPU path works on machines without a
//! GPU. Setting `WATERSHED_DISABLE_CUDA=1` hides all GPUs, which checks the
//! CPU fallback on a GPU machine.
//!
//! A third implementation, `emulated.rs`, plays GPUs on the host for
//! tests: with `WATERSHED_EMULATE_GPUS=N` the layer reports N GPUs whose
//! memory is host memory, whose streams defer their work until the host
//! or an event needs it, and whose kernels are their CUDA C compiled for
//! the host. The CUDA driver is then not touched. It lets every GPU path
//! run on machines without a GPU, and a missing event shows as a wrong
//! result.
//!
//! Synchronisation semantics are stated on each call; the rule is that
//! anything taking a [`GpuStream`] only enqueues work and returns before the
//! GPU finishes.

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
use cuda as backend;
#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
use stub as backend;
mod census;
mod emulated;
mod replay;
mod stream_book;

pub use census::{GpuCalls, gpu_calls};
pub use replay::{GpuGraph, RecordedStep, StepKey, StepRecording, StepShape};
pub use stream_book::set_call_elision;

use crate::Device;
use crate::error::{FieldError, FieldResult};
use std::sync::{Arc, OnceLock};

/// Why no GPU can be used (`None`: the driver, or the emulation, is usable).
fn driver_problem() -> Option<&'static str> {
    static DISABLED: OnceLock<bool> = OnceLock::new();
    let disabled = *DISABLED.get_or_init(|| {
        std::env::var("WATERSHED_DISABLE_CUDA").is_ok_and(|v| !v.is_empty() && v != "0")
    });
    if disabled {
        return Some("GPUs are disabled by WATERSHED_DISABLE_CUDA");
    }
    if emulated::active() {
        emulated::problem()
    } else {
        backend::driver_problem()
    }
}

/// True when a step recording ([`StepRecording`]) is open on this thread.
pub(crate) fn recording_open() -> bool {
    replay::recording_open()
}

/// True when the GPUs are emulated on the host (`WATERSHED_EMULATE_GPUS`;
/// see the module documentation).
pub fn gpus_are_emulated() -> bool {
    emulated::active()
}

/// The kernels launched on emulated GPUs so far in this process (0 on
/// real GPUs, whose launches are not counted): what a step costs in
/// launches, measured without a GPU.
pub fn emulated_launches() -> u64 {
    emulated::launches()
}

/// The graphs launched on emulated GPUs so far in this process (0 on real
/// GPUs): a step replayed as a graph counts one here and none in
/// [`emulated_launches`].
pub fn emulated_graph_launches() -> u64 {
    emulated::graph_launches()
}

/// The C++ translation unit an emulated GPU compiles for kernel `name`
/// from its CUDA C `source` (the kernel under a shim that plays the
/// thread indices, the bit casts and `atomicMin`), and the number of
/// parameters after its argument struct. The unit exports
/// `extern "C" void ws_host_launch(void **params, const unsigned *grid,
/// const unsigned *block)`, which runs every thread of the grid as
/// `cuLaunchKernel` would with those parameter blocks. An error says why
/// the kernel's signature cannot be read.
pub fn emulated_host_unit(source: &str, name: &str) -> Result<(String, usize), String> {
    emulated::host_unit_of(source, name)
}

/// `bytes` zeroed bytes of memory of GPU `ordinal`.
pub(crate) fn device_alloc_zeroed(ordinal: usize, bytes: usize) -> FieldResult<usize> {
    if emulated::active() {
        emulated::device_alloc_zeroed(ordinal, bytes)
    } else {
        backend::device_alloc_zeroed(ordinal, bytes)
    }
}

/// Frees memory from [`device_alloc_zeroed`].
pub(crate) fn device_free(ordinal: usize, address: usize) {
    if emulated::active() {
        emulated::device_free(address)
    } else {
        backend::device_free(ordinal, address)
    }
}

/// Page-locked host memory, or `None` (no driver; emulated GPUs take any
/// host memory as pinned).
pub(crate) fn pinned_alloc_zeroed(bytes: usize) -> Option<usize> {
    if emulated::active() {
        emulated::pinned_alloc_zeroed(bytes)
    } else {
        backend::pinned_alloc_zeroed(bytes)
    }
}

/// Frees memory from [`pinned_alloc_zeroed`].
pub(crate) fn pinned_free(address: usize) {
    if emulated::active() {
        emulated::device_free(address)
    } else {
        backend::pinned_free(address)
    }
}

/// A stream of a real or of an emulated GPU.
#[derive(Debug, Clone)]
enum StreamImpl {
    Hardware(backend::Stream),
    Emulated(emulated::Stream),
}

/// An event of a real or of an emulated GPU.
#[derive(Debug, Clone)]
enum EventImpl {
    Hardware(backend::Event),
    Emulated(emulated::Event),
    /// Recorded inside a [`StepRecording`]: it becomes a real event when
    /// the recorded step is enqueued.
    Pending(Arc<replay::PendingEvent>),
    /// Recorded on a stream with no work since the host last waited for
    /// it: finished from the start, no driver event (`stream_book.rs`).
    Finished,
}

/// A kernel loaded on a real or on an emulated GPU.
#[derive(Debug, Clone)]
enum FunctionImpl {
    Hardware(backend::Function),
    Emulated(emulated::Function),
}

/// True when this build has CUDA support (the `cuda` cargo feature).
pub const BUILT_WITH_CUDA: bool = cfg!(feature = "cuda");

/// True when the CUDA driver is loaded and initialised (or the GPUs are
/// emulated). Never panics.
pub fn cuda_driver_present() -> bool {
    driver_problem().is_none()
}

/// Number of CUDA devices (0 without a driver; the emulated ones when
/// emulating). Never panics.
pub fn gpu_count() -> usize {
    if !cuda_driver_present() {
        return 0;
    }
    if emulated::active() {
        return emulated::count();
    }
    backend::device_count()
}

/// Why `device` cannot be used, or `None` when it can.
pub fn gpu_unavailable_reason(ordinal: usize) -> Option<String> {
    if let Some(problem) = driver_problem() {
        return Some(problem.to_string());
    }
    let count = gpu_count();
    (ordinal >= count).then(|| format!("this machine has {count} CUDA device(s)"))
}

/// Checks that GPU `ordinal` can be used and makes its context current on
/// this thread (creating it on first use).
pub fn require_gpu(ordinal: usize) -> FieldResult<()> {
    if let Some(reason) = gpu_unavailable_reason(ordinal) {
        return Err(FieldError::NoCudaDevice {
            device: Device::Gpu(ordinal),
            reason,
        });
    }
    if emulated::active() {
        emulated::bind(ordinal)
    } else {
        backend::bind(ordinal)
    }
}

/// A CUDA stream on one GPU: work enqueued on it runs in order, concurrently
/// with other streams.
#[derive(Debug, Clone)]
pub struct GpuStream {
    device: Device,
    stream: StreamImpl,
    /// What the host knows of the stream's progress (shared by clones).
    book: Arc<stream_book::StreamBook>,
}

impl GpuStream {
    /// A new stream on GPU `ordinal`.
    pub fn new(ordinal: usize) -> FieldResult<Self> {
        if let Some(reason) = gpu_unavailable_reason(ordinal) {
            return Err(FieldError::NoCudaDevice {
                device: Device::Gpu(ordinal),
                reason,
            });
        }
        let stream = if emulated::active() {
            StreamImpl::Emulated(emulated::Stream::new(ordinal)?)
        } else {
            StreamImpl::Hardware(backend::Stream::new(ordinal)?)
        };
        Ok(GpuStream {
            device: Device::Gpu(ordinal),
            stream,
            book: stream_book::StreamBook::new(),
        })
    }

    /// The GPU this stream belongs to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The stream's identity while it lives: two clones of one stream
    /// have the same, two streams alive at once differ.
    pub fn identity(&self) -> usize {
        match &self.stream {
            StreamImpl::Hardware(stream) => stream.identity(),
            StreamImpl::Emulated(stream) => stream.identity(),
        }
    }

    /// Blocks the calling thread until all work enqueued so far has finished.
    /// Refused while a [`StepRecording`] is open on this thread. Returns at
    /// once, without a driver call, when the host knows it all finished.
    pub fn synchronize(&self) -> FieldResult<()> {
        replay::refuse_host_wait(self.device, "synchronising a stream")?;
        self.synchronize_now()
    }

    fn synchronize_now(&self) -> FieldResult<()> {
        if self.book.idle() {
            // Everything enqueued on it is known finished.
            return Ok(());
        }
        census::count(census::Call::HostWait);
        let point = self.book.before_synchronising();
        match &self.stream {
            StreamImpl::Hardware(stream) => stream.synchronize(self.device)?,
            StreamImpl::Emulated(stream) => stream.synchronize(),
        }
        self.book.finished_up_to(point);
        Ok(())
    }

    /// Records an event after the work enqueued so far. Returns at once.
    /// Inside a [`StepRecording`] the event is pending until the recorded
    /// step is enqueued. When nothing was enqueued on the stream since the
    /// host last waited for it, the event is finished from the start and
    /// costs no driver call.
    pub fn record(&self) -> FieldResult<ValidationEvent> {
        if let Some(event) = replay::log_record(self)? {
            return Ok(event);
        }
        self.record_now()
    }

    fn record_now(&self) -> FieldResult<ValidationEvent> {
        if self.book.idle() {
            return Ok(ValidationEvent {
                device: self.device,
                event: EventImpl::Finished,
                point: None,
            });
        }
        census::count(census::Call::Record);
        let point = self.book.point();
        let event = match &self.stream {
            StreamImpl::Hardware(stream) => EventImpl::Hardware(stream.record(self.device)?),
            StreamImpl::Emulated(stream) => EventImpl::Emulated(stream.record()),
        };
        Ok(ValidationEvent {
            device: self.device,
            event,
            point: Some(point),
        })
    }

    /// Marks the point after the work enqueued so far, keeping the GPU's
    /// time of it (a timing event): [`GpuMark::since`] gives the GPU time
    /// between two marks, which is how an execution's timeline times its
    /// kernels and copies. Returns at once. Refused inside a
    /// [`StepRecording`]: a replayed step is one graph launch, not timed
    /// kernel by kernel.
    pub fn mark(&self) -> FieldResult<GpuMark> {
        if recording_open() {
            return Err(FieldError::Cuda {
                device: self.device,
                action: "marking a stream for a timeline".into(),
                message: "a step recorded for replay runs as one graph and cannot time its kernels one by one; turn step replay off to see GPU kernels and copies on the timeline".into(),
            });
        }
        census::count(census::Call::Mark);
        let event = match &self.stream {
            StreamImpl::Hardware(stream) => EventImpl::Hardware(stream.record_timed(self.device)?),
            StreamImpl::Emulated(stream) => EventImpl::Emulated(stream.record_timed()),
        };
        Ok(GpuMark {
            device: self.device,
            event,
        })
    }

    /// Makes later work on this stream wait for `event`. Returns at once.
    /// A wait that orders nothing is left out (`stream_book.rs`): on an event
    /// the host knows finished, recorded on this stream, or at or before
    /// a point of its stream this one already waits for.
    pub fn wait(&self, event: &ValidationEvent) -> FieldResult<()> {
        if event.needs_no_wait_by(self) {
            return Ok(());
        }
        if replay::log_wait(self, event)? {
            return Ok(());
        }
        self.wait_now(event)
    }

    fn wait_now(&self, event: &ValidationEvent) -> FieldResult<()> {
        let event_point = event.stream_point().cloned();
        let resolved;
        let event = match &event.event {
            EventImpl::Pending(pending) => {
                resolved = pending.resolved(self.device)?;
                &resolved
            }
            event => event,
        };
        if matches!(event, EventImpl::Finished) {
            return Ok(());
        }
        census::count(census::Call::Wait);
        match (&self.stream, event) {
            (StreamImpl::Hardware(stream), EventImpl::Hardware(event)) => {
                stream.wait(event, self.device)?
            }
            (StreamImpl::Emulated(stream), EventImpl::Emulated(event)) => stream.wait(event),
            _ => {
                return Err(FieldError::Cuda {
                    device: self.device,
                    action: "waiting on an event".into(),
                    message: "the event and the stream belong to a real and an emulated GPU".into(),
                });
            }
        }
        self.book.enqueued_one();
        if let Some(point) = &event_point {
            self.book.waits_now_for(point);
        }
        Ok(())
    }

    /// Enqueues a copy of `bytes` bytes from `source` to `destination`
    /// (each a device and an address; at least one a GPU). Returns at once.
    ///
    /// # Safety
    /// Both ranges must be valid for `bytes` bytes on their devices until
    /// the copy completes (wait on an event recorded after it), and nothing
    /// may write them meanwhile.
    pub unsafe fn copy(
        &self,
        source: (Device, usize),
        destination: (Device, usize),
        bytes: usize,
        action: &str,
    ) -> FieldResult<()> {
        if replay::log_copy(self, source, destination, bytes)? {
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.copy_now(source, destination, bytes, action) }
    }

    /// [`GpuStream::copy`], enqueued even inside a recording.
    ///
    /// # Safety
    /// As [`GpuStream::copy`].
    unsafe fn copy_now(
        &self,
        source: (Device, usize),
        destination: (Device, usize),
        bytes: usize,
        action: &str,
    ) -> FieldResult<()> {
        census::count_copy(bytes, source.0 != destination.0);
        // SAFETY: forwarded from the caller.
        unsafe {
            match &self.stream {
                StreamImpl::Hardware(stream) => {
                    stream.copy(self.device, source, destination, bytes, action)?
                }
                StreamImpl::Emulated(stream) => stream.copy(source.1, destination.1, bytes),
            }
        }
        self.book.enqueued_one();
        Ok(())
    }

    /// Enqueues setting `bytes` bytes of device memory at `destination` to
    /// `byte`. Returns at once.
    ///
    /// # Safety
    /// The range must be memory of this stream's GPU, valid for `bytes`
    /// bytes and not used by other work until the memset completes.
    pub unsafe fn memset(
        &self,
        destination: usize,
        byte: u8,
        bytes: usize,
        action: &str,
    ) -> FieldResult<()> {
        if replay::log_memset(self, destination, byte, bytes)? {
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.memset_now(destination, byte, bytes, action) }
    }

    /// [`GpuStream::memset`], enqueued even inside a recording.
    ///
    /// # Safety
    /// As [`GpuStream::memset`].
    unsafe fn memset_now(
        &self,
        destination: usize,
        byte: u8,
        bytes: usize,
        action: &str,
    ) -> FieldResult<()> {
        census::count(census::Call::Memset);
        // SAFETY: forwarded from the caller.
        unsafe {
            match &self.stream {
                StreamImpl::Hardware(stream) => {
                    stream.memset(self.device, destination, byte, bytes, action)?
                }
                StreamImpl::Emulated(stream) => stream.memset(destination, byte, bytes),
            }
        }
        self.book.enqueued_one();
        Ok(())
    }
}

impl GpuStream {
    /// `bytes` bytes of this GPU's memory allocated in the stream's order
    /// (`cuMemAllocAsync`, from the device's default memory pool, whose
    /// release threshold is raised on first use so that freed memory stays
    /// for reuse). Work enqueued on this stream afterwards may use it at
    /// once; work on another stream must first wait on an event recorded
    /// here after this call. The contents are unspecified. Refused inside
    /// a [`StepRecording`], whose work is not enqueued yet.
    pub(crate) fn allocate_in_order(&self, bytes: usize) -> FieldResult<usize> {
        if recording_open() {
            return Err(FieldError::Allocation {
                device: self.device,
                bytes,
                reason: "a step recorded for replay cannot allocate in stream order; use the size-class pool for steps replayed as graphs".into(),
            });
        }
        let bytes = bytes.max(1);
        census::count(census::Call::Allocation);
        let address = match &self.stream {
            StreamImpl::Hardware(stream) => stream.allocate_in_order(self.device, bytes)?,
            StreamImpl::Emulated(stream) => stream.allocate_in_order(self.device, bytes)?,
        };
        self.book.enqueued_one();
        Ok(address)
    }

    /// Frees memory from [`GpuStream::allocate_in_order`] when the stream
    /// reaches this point (`cuMemFreeAsync`). Returns at once.
    ///
    /// # Safety
    /// `address` came from `allocate_in_order` on a stream of this GPU and
    /// is not freed yet, and every use of it is ordered before this point
    /// of this stream (enqueued on it earlier, or waited for by it).
    pub(crate) unsafe fn free_in_order(&self, address: usize) -> FieldResult<()> {
        census::count(census::Call::Free);
        // SAFETY: forwarded from the caller.
        unsafe {
            match &self.stream {
                StreamImpl::Hardware(stream) => stream.free_in_order(self.device, address)?,
                StreamImpl::Emulated(stream) => stream.free_in_order(address),
            }
        }
        self.book.enqueued_one();
        Ok(())
    }
}

impl GpuStream {
    /// Enqueues `function` over `grid` blocks of `block` threads each, with
    /// `arguments`: one byte block per kernel parameter, passed by value
    /// (a struct's bytes, a device address as 8 bytes, a 64-bit integer).
    /// Returns at once.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, size and
    /// meaning (the generator that wrote the kernel packs them), and every
    /// device address among them must be memory of this stream's GPU,
    /// valid for what the kernel reads and writes, and not written by
    /// other work until the kernel completes.
    pub unsafe fn launch(
        &self,
        function: &GpuFunction,
        grid: [u32; 3],
        block: [u32; 3],
        arguments: &[&[u8]],
        action: &str,
    ) -> FieldResult<()> {
        if function.device != self.device {
            return Err(FieldError::Cuda {
                device: self.device,
                action: action.to_string(),
                message: format!(
                    "kernel {} was loaded on {}, not on this stream's device",
                    function.name, function.device
                ),
            });
        }
        if replay::log_launch(self, function, grid, block, arguments, action)? {
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_now(function, grid, block, arguments, action) }
    }

    /// In a stream capture, the graph node the last operation enqueued on
    /// this stream became (the stream's one capture dependency); `None`
    /// where the driver cannot tell (or the GPU is emulated, whose graphs
    /// are updated by position).
    fn last_captured_node(&self) -> FieldResult<Option<usize>> {
        match &self.stream {
            StreamImpl::Hardware(stream) => stream.last_captured_node(self.device),
            StreamImpl::Emulated(_) => Ok(None),
        }
    }

    /// [`GpuStream::launch`], enqueued even inside a recording.
    ///
    /// # Safety
    /// As [`GpuStream::launch`].
    unsafe fn launch_now(
        &self,
        function: &GpuFunction,
        grid: [u32; 3],
        block: [u32; 3],
        arguments: &[&[u8]],
        action: &str,
    ) -> FieldResult<()> {
        census::count(census::Call::Launch);
        // SAFETY: forwarded from the caller.
        unsafe {
            match (&self.stream, &function.function) {
                (StreamImpl::Hardware(stream), FunctionImpl::Hardware(function)) => {
                    stream.launch(self.device, function, grid, block, arguments, action)?
                }
                (StreamImpl::Emulated(stream), FunctionImpl::Emulated(function)) => {
                    stream.launch(self.device, function, grid, block, arguments, action)?
                }
                _ => {
                    return Err(FieldError::Cuda {
                        device: self.device,
                        action: action.to_string(),
                        message: "the kernel and the stream belong to a real and an emulated GPU"
                            .into(),
                    });
                }
            }
        }
        self.book.enqueued_one();
        Ok(())
    }
}

/// A kernel loaded on one GPU from PTX, ready to launch.
#[derive(Debug, Clone)]
pub struct GpuFunction {
    device: Device,
    /// Shared, so that a clone per launch allocates nothing.
    name: Arc<str>,
    function: FunctionImpl,
}

impl GpuFunction {
    /// Loads the PTX module `ptx` on GPU `ordinal` and looks up the kernel
    /// `name` in it (the driver compiles the PTX for the GPU it finds). An
    /// emulated GPU compiles `source`, the CUDA C the PTX was made from,
    /// for the host instead.
    pub fn load(ordinal: usize, ptx: &str, source: &str, name: &str) -> FieldResult<Self> {
        if let Some(reason) = gpu_unavailable_reason(ordinal) {
            return Err(FieldError::NoCudaDevice {
                device: Device::Gpu(ordinal),
                reason,
            });
        }
        Ok(GpuFunction {
            device: Device::Gpu(ordinal),
            name: Arc::from(name),
            function: if emulated::active() {
                FunctionImpl::Emulated(emulated::load_function(ordinal, source, name)?)
            } else {
                FunctionImpl::Hardware(backend::load_function(ordinal, ptx, name)?)
            },
        })
    }

    /// The GPU it is loaded on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel's identity while it is loaded: two loads of one kernel
    /// on one GPU may differ, two different kernels alive at once differ.
    pub fn identity(&self) -> usize {
        match &self.function {
            FunctionImpl::Hardware(function) => function.identity(),
            FunctionImpl::Emulated(function) => function.identity(),
        }
    }
}

/// A point in a stream's work whose GPU time is kept ([`GpuStream::mark`]).
///
/// ```
/// use watershed_fields::GpuStream;
/// # fn time(stream: &GpuStream) -> watershed_fields::FieldResult<()> {
/// let before = stream.mark()?;
/// // ... enqueue a kernel or a copy on `stream` ...
/// let after = stream.mark()?;
/// let gpu_time = after.since(&before)?; // waits for both marks
/// # let _ = gpu_time;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct GpuMark {
    device: Device,
    event: EventImpl,
}

impl GpuMark {
    /// The GPU whose stream was marked.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The GPU time from `earlier` to this mark (zero when this one came
    /// first). Blocks until the GPU has reached both. Errors with
    /// [`FieldError::Cuda`] for marks of two GPUs, or when the host may not
    /// wait (inside a step recording).
    pub fn since(&self, earlier: &GpuMark) -> FieldResult<std::time::Duration> {
        replay::refuse_host_wait(self.device, "reading the time between two marks")?;
        let mismatch = |why: &str| FieldError::Cuda {
            device: self.device,
            action: "reading the time between two marks".into(),
            message: format!("{why}; time marks of one GPU against each other"),
        };
        if earlier.device != self.device {
            return Err(mismatch(&format!(
                "the earlier mark is on {}",
                earlier.device
            )));
        }
        match (&earlier.event, &self.event) {
            (EventImpl::Hardware(from), EventImpl::Hardware(to)) => {
                to.elapsed_since(from, self.device)
            }
            (EventImpl::Emulated(from), EventImpl::Emulated(to)) => to
                .elapsed_since(from)
                .ok_or_else(|| mismatch("a mark without a time (a bug; please report it)")),
            _ => Err(mismatch(
                "one mark is of a real GPU, the other of an emulated one",
            )),
        }
    }
}

/// Marks the completion of an asynchronous copy (or any stream work): a
/// consumer on another stream calls [`GpuStream::wait`] with it, a host thread
/// calls [`ValidationEvent::synchronize`].
#[derive(Debug, Clone)]
pub struct ValidationEvent {
    device: Device,
    event: EventImpl,
    /// Where on its stream it was recorded (`None`: finished from the
    /// start, logged in a step recording (see [`Self::stream_point`]), or
    /// a resolved copy made inside the device layer).
    point: Option<stream_book::StreamPoint>,
}

impl ValidationEvent {
    /// The GPU whose stream recorded the event.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Blocks until the recorded work has finished. Refused for an event
    /// of a recorded step not yet enqueued (it could never finish).
    /// An event the host already waited for (or saw complete) returns at
    /// once, without a driver call.
    pub fn synchronize(&self) -> FieldResult<()> {
        if self.known_finished() {
            return Ok(());
        }
        match &self.event {
            EventImpl::Hardware(event) => {
                census::count(census::Call::HostWait);
                event.synchronize(self.device)?;
            }
            EventImpl::Emulated(event) => {
                census::count(census::Call::HostWait);
                event.synchronize();
            }
            EventImpl::Pending(pending) => ValidationEvent {
                device: self.device,
                event: pending.resolved(self.device)?,
                point: None,
            }
            .synchronize()?,
            EventImpl::Finished => {}
        }
        self.saw_finished();
        Ok(())
    }

    /// True once the recorded work has finished (false for an event of a
    /// recorded step not yet enqueued). Never blocks.
    pub fn is_complete(&self) -> bool {
        if self.known_finished() {
            return true;
        }
        let complete = match &self.event {
            EventImpl::Hardware(event) => event.is_complete(),
            EventImpl::Emulated(event) => event.is_complete(),
            EventImpl::Pending(pending) => pending.resolved(self.device).is_ok_and(|event| {
                ValidationEvent {
                    device: self.device,
                    event,
                    point: None,
                }
                .is_complete()
            }),
            EventImpl::Finished => true,
        };
        if complete {
            self.saw_finished();
        }
        complete
    }

    /// True when the host knows the event's work has finished.
    fn known_finished(&self) -> bool {
        matches!(self.event, EventImpl::Finished)
            || self.stream_point().is_some_and(|p| p.known_finished())
    }

    /// Notes that the host saw the event's work finish.
    fn saw_finished(&self) {
        if let Some(point) = self.stream_point() {
            point.saw_finished();
        }
    }

    /// True when a wait on this event by `stream` orders nothing.
    fn needs_no_wait_by(&self, stream: &GpuStream) -> bool {
        matches!(self.event, EventImpl::Finished)
            || self
                .stream_point()
                .is_some_and(|p| stream.book.needs_no_wait_for(p))
    }

    /// Where the event lies on its stream: its own point, or for an event
    /// logged in a step recording, that of the real event it stands for
    /// once the step is enqueued (`None` before).
    fn stream_point(&self) -> Option<&stream_book::StreamPoint> {
        match &self.event {
            EventImpl::Pending(pending) => pending.real_point(),
            _ => self.point.as_ref(),
        }
    }
}

/// The GPU to run GPU tests on, or `None` after printing why they are skipped.
///
/// Test bodies call this first and return early on `None`, so the suite
/// passes and says "skipped" on machines without a GPU.
pub fn gpu_for_tests(test_name: &str) -> Option<usize> {
    match gpu_unavailable_reason(0) {
        None => Some(0),
        Some(reason) => {
            eprintln!("skipped {test_name}: no CUDA device ({reason})");
            None
        }
    }
}
