//! An emulated GPU: the device layer played on the host, so that the GPU
//! paths of Watershed (placement, the stream protocol, location states,
//! pools, launches, reductions, the solvers on a GPU) run and are tested
//! on machines without one. It is a test device, never chosen on its own:
//! setting `WATERSHED_EMULATE_GPUS=N` (N >= 1) makes the device layer
//! report N GPUs, all emulated, and leaves the CUDA driver untouched.
//!
//! What it does:
//! * **Memory** of an emulated GPU is host memory (256-byte aligned,
//!   zeroed); device addresses are host addresses.
//! * **Streams are deferred**: work enqueued on a stream (copies, memsets,
//!   kernels, waits on events) is queued, and runs, in order, only when
//!   something needs it: the host synchronising the stream or an event
//!   recorded on it, or another stream reaching a wait on such an event.
//!   Work on different streams therefore runs in the order the host's
//!   waits force, not in the order it was enqueued: a reader on one stream
//!   that lacks the event of its writer on another can run first and read
//!   stale data, so a missing event shows as a wrong result instead of
//!   hiding behind the host's order. (`WATERSHED_EMULATE_STREAMS=eager`
//!   runs work when it is enqueued instead.) Like CUDA, memory a queued
//!   operation uses must stay allocated until the stream has run it.
//! * **Kernels**: the CUDA C of each kernel (header-free, as the emitters
//!   write it) is compiled for the host by the system C++ compiler (`$CXX`,
//!   else `g++`, with `-O1 -ffp-contract=off`, so no contraction, like
//!   NVRTC with `--fmad=false`) under a small shim that defines the thread
//!   indices, the integer casts and `atomicMin`, unpacks the parameters as
//!   `cuLaunchKernel` receives them and runs every thread of every block.
//!   Libraries are cached on disk by a hash of their source.

use super::replay::StepOperation;
use crate::Device;
use crate::error::{FieldError, FieldResult};
use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::c_void;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// The variable that turns emulation on.
pub(crate) const VARIABLE: &str = "WATERSHED_EMULATE_GPUS";

/// True when streams run work when it is enqueued
/// (`WATERSHED_EMULATE_STREAMS=eager`) instead of deferring it.
fn eager() -> bool {
    static EAGER: OnceLock<bool> = OnceLock::new();
    *EAGER.get_or_init(|| std::env::var("WATERSHED_EMULATE_STREAMS").is_ok_and(|v| v == "eager"))
}

/// What `WATERSHED_EMULATE_GPUS` asks for: `Ok(0)` when unset or empty,
/// `Ok(n)` for a count, `Err` (why) for a value that is not one.
fn requested() -> &'static Result<usize, String> {
    static REQUESTED: OnceLock<Result<usize, String>> = OnceLock::new();
    REQUESTED.get_or_init(|| match std::env::var(VARIABLE) {
        Err(_) => Ok(0),
        Ok(value) if value.trim().is_empty() => Ok(0),
        Ok(value) => value.trim().parse::<usize>().map_err(|_| {
            format!("{VARIABLE}={value:?} is not a number of GPUs to emulate; set it to 1 or more, or unset it")
        }),
    })
}

/// True when the device layer is emulated (also when the variable is
/// malformed: then no GPU is usable, and [`problem`] says why).
pub(crate) fn active() -> bool {
    !matches!(requested(), Ok(0))
}

/// Why emulated GPUs cannot be used (a malformed variable), if so.
pub(crate) fn problem() -> Option<&'static str> {
    requested().as_ref().err().map(String::as_str)
}

/// The number of emulated GPUs.
pub(crate) fn count() -> usize {
    *requested().as_ref().unwrap_or(&0)
}

fn check(ordinal: usize) -> FieldResult<()> {
    if let Some(reason) = problem() {
        return Err(FieldError::NoCudaDevice {
            device: Device::Gpu(ordinal),
            reason: reason.to_string(),
        });
    }
    if ordinal >= count() {
        return Err(FieldError::NoCudaDevice {
            device: Device::Gpu(ordinal),
            reason: format!("{VARIABLE} emulates {} GPU(s)", count()),
        });
    }
    Ok(())
}

/// Nothing to bind: checks the ordinal.
pub(crate) fn bind(ordinal: usize) -> FieldResult<()> {
    check(ordinal)
}

/// The layouts of live allocations, by address.
fn allocations() -> &'static Mutex<HashMap<usize, Layout>> {
    static ALLOCATIONS: OnceLock<Mutex<HashMap<usize, Layout>>> = OnceLock::new();
    ALLOCATIONS.get_or_init(Default::default)
}

/// `bytes` zeroed bytes of host memory aligned to `align`, recorded for
/// [`device_free`]; why not, if it cannot be had.
fn host_alloc_zeroed(bytes: usize, align: usize) -> Result<usize, String> {
    let layout = Layout::from_size_align(bytes.max(1), align).map_err(|e| e.to_string())?;
    // SAFETY: the layout has a non-zero size.
    let address = unsafe { std::alloc::alloc_zeroed(layout) } as usize;
    if address == 0 {
        return Err("the host is out of memory".into());
    }
    allocations()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(address, layout);
    Ok(address)
}

/// `bytes` zeroed bytes of "device" (host) memory, 256-byte aligned.
pub(crate) fn device_alloc_zeroed(ordinal: usize, bytes: usize) -> FieldResult<usize> {
    check(ordinal)?;
    host_alloc_zeroed(bytes, 256).map_err(|message| FieldError::Cuda {
        device: Device::Gpu(ordinal),
        action: format!("allocating {bytes} bytes of emulated GPU memory"),
        message,
    })
}

/// "Pinned" host memory: any page-aligned host memory serves, since an
/// emulated GPU copies with `memcpy`.
pub(crate) fn pinned_alloc_zeroed(bytes: usize) -> Option<usize> {
    if problem().is_some() {
        return None;
    }
    host_alloc_zeroed(bytes, 4096).ok()
}

/// Frees memory from [`device_alloc_zeroed`] or [`pinned_alloc_zeroed`]
/// (other addresses are ignored).
pub(crate) fn device_free(address: usize) {
    let layout = allocations()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&address);
    if let Some(layout) = layout {
        // SAFETY: `address` was returned by `alloc_zeroed` with `layout`
        // and is removed from the table, so it is freed once.
        unsafe { std::alloc::dealloc(address as *mut u8, layout) };
    }
}

/// One queued operation of a stream.
enum Operation {
    /// Copies, memsets and kernels, with everything they need owned.
    Run(Box<dyn FnOnce() + Send>),
    /// Runs `stream` up to `position` first (a wait on its event).
    WaitFor(Arc<Queue>, u64),
}

/// A stream's queue: the operations not yet run, and how many have run.
#[derive(Default)]
struct Queue {
    pending: Mutex<std::collections::VecDeque<Operation>>,
    /// Operations enqueued so far (an event's position).
    enqueued: std::sync::atomic::AtomicU64,
    /// Operations run so far.
    done: std::sync::atomic::AtomicU64,
    /// Held while operations of this stream run, so they run in order.
    running: Mutex<()>,
}

impl Queue {
    fn push(&self, operation: Operation) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.push_back(operation);
        self.enqueued
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Runs the operations up to `position` (those enqueued before an
    /// event recorded there). A wait on another stream's event runs that
    /// stream first; valid programs never wait in a cycle, and work that
    /// has run already is not waited for again.
    fn run_until(&self, position: u64) {
        use std::sync::atomic::Ordering;
        if self.done.load(Ordering::Acquire) >= position {
            return;
        }
        let _running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        while self.done.load(Ordering::Acquire) < position {
            let next = self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            match next {
                Some(Operation::Run(work)) => work(),
                Some(Operation::WaitFor(other, at)) => other.run_until(at),
                None => break,
            }
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn run_all(&self) {
        self.run_until(self.enqueued.load(std::sync::atomic::Ordering::Acquire));
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::sync::atomic::Ordering;
        f.debug_struct("Queue")
            .field("enqueued", &self.enqueued.load(Ordering::Relaxed))
            .field("done", &self.done.load(Ordering::Relaxed))
            .finish()
    }
}

/// A stream of an emulated GPU.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    queue: Arc<Queue>,
}

/// An event of an emulated GPU: a position in a stream's queue; a timed
/// one also holds the host time at which the stream reached it.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    queue: Arc<Queue>,
    position: u64,
    reached: Option<Arc<OnceLock<std::time::Instant>>>,
}

/// Kernels launched on emulated GPUs so far, in this process.
static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of kernels launched on emulated GPUs so far.
pub(crate) fn launches() -> u64 {
    LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

/// An address that may cross to the thread that runs a queued operation.
#[derive(Clone, Copy)]
struct Address(usize);

impl Stream {
    pub(crate) fn new(ordinal: usize) -> FieldResult<Stream> {
        check(ordinal)?;
        Ok(Stream {
            queue: Arc::default(),
        })
    }

    /// Queues `work`, or runs it now in eager mode.
    fn enqueue(&self, work: impl FnOnce() + Send + 'static) {
        if eager() {
            work();
        } else {
            self.queue.push(Operation::Run(Box::new(work)));
        }
    }

    /// Runs everything queued so far.
    pub(crate) fn synchronize(&self) {
        self.queue.run_all();
    }

    /// An event after the work queued so far.
    pub(crate) fn record(&self) -> Event {
        Event {
            queue: self.queue.clone(),
            position: self
                .queue
                .enqueued
                .load(std::sync::atomic::Ordering::Acquire),
            reached: None,
        }
    }

    /// An event after the work queued so far that notes the time the
    /// stream reaches it (the emulated GPU's clock is the host's).
    pub(crate) fn record_timed(&self) -> Event {
        let reached = Arc::new(OnceLock::new());
        let stamp = reached.clone();
        self.enqueue(move || {
            let _ = stamp.set(std::time::Instant::now());
        });
        Event {
            reached: Some(reached),
            ..self.record()
        }
    }

    /// Later work of this stream runs after `event`'s.
    pub(crate) fn wait(&self, event: &Event) {
        if eager() {
            event.queue.run_until(event.position);
        } else {
            self.queue
                .push(Operation::WaitFor(event.queue.clone(), event.position));
        }
    }

    /// # Safety
    /// Both ranges must be valid for `bytes` bytes (host memory, as every
    /// emulated device address is) until the stream has run the copy.
    pub(crate) unsafe fn copy(&self, from: usize, to: usize, bytes: usize) {
        let (from, to) = (Address(from), Address(to));
        self.enqueue(move || {
            let (from, to) = (from, to);
            if bytes > 0 {
                // SAFETY: forwarded from the caller; `copy` allows overlap.
                unsafe { std::ptr::copy(from.0 as *const u8, to.0 as *mut u8, bytes) };
            }
        });
    }

    /// # Safety
    /// The range must be valid for `bytes` bytes until the stream has run
    /// the memset.
    pub(crate) unsafe fn memset(&self, destination: usize, byte: u8, bytes: usize) {
        let destination = Address(destination);
        self.enqueue(move || {
            let destination = destination;
            // SAFETY: forwarded from the caller.
            unsafe { std::ptr::write_bytes(destination.0 as *mut u8, byte, bytes) };
        });
    }

    /// `bytes` bytes of "device" memory allocated in this stream's order:
    /// the host memory exists at once (earlier than CUDA promises, which
    /// is harmless), zero-filled although callers may not rely on it.
    pub(crate) fn allocate_in_order(&self, device: Device, bytes: usize) -> FieldResult<usize> {
        match device {
            Device::Gpu(ordinal) => device_alloc_zeroed(ordinal, bytes),
            Device::Cpu => Err(FieldError::Cuda {
                device,
                action: "allocating in stream order".into(),
                message: "the host has no streams".into(),
            }),
        }
    }

    /// Frees memory from [`Stream::allocate_in_order`] when the stream
    /// reaches this point, after the work queued before it, as
    /// `cuMemFreeAsync` does.
    ///
    /// # Safety
    /// `address` came from `allocate_in_order` and is not freed yet; every
    /// use of it is ordered before this point of the stream.
    pub(crate) unsafe fn free_in_order(&self, address: usize) {
        let address = Address(address);
        self.enqueue(move || {
            let address = address;
            device_free(address.0);
        });
    }

    /// Queues `function` over `grid` x `block` threads (the parameter
    /// blocks are copied, as `cuLaunchKernel` copies them).
    ///
    /// # Safety
    /// As `cuLaunchKernel`: the blocks must be the kernel's parameters in
    /// number, size and meaning, and every address among them valid for
    /// what the kernel reads and writes until the stream has run it.
    pub(crate) unsafe fn launch(
        &self,
        device: Device,
        function: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        arguments: &[&[u8]],
        action: &str,
    ) -> FieldResult<()> {
        let (grid, block) = function.check(device, grid, block, arguments, action)?;
        LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let blocks: Vec<Vec<u8>> = arguments.iter().map(|b| b.to_vec()).collect();
        // SAFETY: checked above; forwarded from the caller.
        unsafe { self.enqueue_checked(function, grid, block, blocks) };
        Ok(())
    }

    /// Queues a launch [`Function::check`] accepted.
    ///
    /// # Safety
    /// As [`Stream::launch`].
    unsafe fn enqueue_checked(
        &self,
        function: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        blocks: Vec<Vec<u8>>,
    ) {
        let function = function.clone();
        self.enqueue(move || {
            let mut pointers: Vec<*mut c_void> =
                blocks.iter().map(|b| b.as_ptr() as *mut c_void).collect();
            // SAFETY: the library was built from the kernel's source under
            // the shim, whose entry point has this signature and reads
            // exactly the parameters `check` counted; the caller vouches
            // for the addresses until the stream has run the kernel.
            unsafe { (function.entry)(pointers.as_mut_ptr(), grid.as_ptr(), block.as_ptr()) };
        });
    }

    /// The stream's identity while it lives.
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.queue) as usize
    }

    /// Queues a whole graph: when the stream reaches it, `operations` run
    /// on `streams` private queues (their events private too), and the
    /// stream goes on once all of them have run, as a CUDA graph launched
    /// on a stream does. Counted as one graph launch, not as kernel
    /// launches.
    ///
    /// # Safety
    /// Every launch must have passed [`Function::check`], and every address
    /// among the operations must be valid for what they do until the
    /// stream has run the graph.
    pub(crate) unsafe fn launch_graph(&self, operations: Arc<Vec<GraphOperation>>, streams: usize) {
        GRAPH_LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.enqueue(move || {
            let private: Vec<Stream> = (0..streams)
                .map(|_| Stream {
                    queue: Arc::default(),
                })
                .collect();
            let mut events: HashMap<usize, Event> = HashMap::new();
            for operation in operations.iter() {
                // SAFETY: forwarded from the caller of `launch_graph`.
                unsafe {
                    match operation {
                        StepOperation::Launch {
                            stream,
                            grid,
                            block,
                            kernel,
                        } => private[*stream].enqueue_checked(
                            &kernel.function,
                            *grid,
                            *block,
                            kernel.arguments.clone(),
                        ),
                        StepOperation::Copy {
                            stream,
                            source,
                            destination,
                            bytes,
                        } => private[*stream].copy(source.1, destination.1, *bytes),
                        StepOperation::Memset {
                            stream,
                            destination,
                            byte,
                            bytes,
                        } => private[*stream].memset(*destination, *byte, *bytes),
                        StepOperation::Record { stream, event } => {
                            events.insert(*event, private[*stream].record());
                        }
                        StepOperation::WaitBefore { .. } => {}
                        StepOperation::Wait { stream, event } => {
                            // The operation list was checked when the graph
                            // was made: every wait follows its record.
                            if let Some(event) = events.get(event) {
                                private[*stream].wait(event);
                            }
                        }
                    }
                }
            }
            for stream in &private {
                stream.synchronize();
            }
        });
    }
}

/// A kernel launch of an emulated graph: a kernel that passed
/// [`Function::check`], with its parameter blocks.
#[derive(Debug, Clone)]
pub(crate) struct GraphKernel {
    pub(crate) function: Function,
    pub(crate) arguments: Vec<Vec<u8>>,
}

/// One operation of an emulated graph (grid and block as
/// [`Function::check`] returned them); streams and events are numbered
/// within the graph, and a wait on an event from before the graph is
/// satisfied before it starts.
pub(crate) type GraphOperation = StepOperation<GraphKernel>;

/// Graphs launched on emulated GPUs so far, in this process.
static GRAPH_LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of graphs launched on emulated GPUs so far.
pub(crate) fn graph_launches() -> u64 {
    GRAPH_LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

impl Event {
    /// Runs the work before the event.
    pub(crate) fn synchronize(&self) {
        self.queue.run_until(self.position);
    }

    /// True once the work before the event has run (never runs it).
    pub(crate) fn is_complete(&self) -> bool {
        self.queue.done.load(std::sync::atomic::Ordering::Acquire) >= self.position
    }

    /// Host time from `earlier` to this event, once the streams have run
    /// to both (runs them); `None` unless both are timed.
    pub(crate) fn elapsed_since(&self, earlier: &Event) -> Option<std::time::Duration> {
        earlier.synchronize();
        self.synchronize();
        let (from, to) = (
            earlier.reached.as_ref()?.get()?,
            self.reached.as_ref()?.get()?,
        );
        Some(to.saturating_duration_since(*from))
    }
}

/// The entry point the shim exports: parameter blocks, grid, block.
type HostLaunch = unsafe extern "C" fn(*mut *mut c_void, *const u32, *const u32);

/// A kernel compiled for the host.
#[derive(Clone)]
pub(crate) struct Function {
    name: String,
    /// Parameters after the argument struct.
    parameters: usize,
    /// The kernel synchronises its block (`__syncthreads`): the emulator
    /// runs it as one thread (threads run one after the other here, so a
    /// barrier could not hold otherwise); such kernels are written for any
    /// number of threads in their one block.
    barrier: bool,
    entry: HostLaunch,
    _library: Arc<libloading::Library>,
}

impl Function {
    /// Checks a launch as `cuLaunchKernel` would (the number and sizes of
    /// the parameter blocks; one block for a kernel with a barrier) and
    /// returns the grid and block the host runs it with.
    pub(crate) fn check(
        &self,
        device: Device,
        grid: [u32; 3],
        block: [u32; 3],
        arguments: &[&[u8]],
        action: &str,
    ) -> FieldResult<([u32; 3], [u32; 3])> {
        let refuse = |message: String| FieldError::Cuda {
            device,
            action: action.to_string(),
            message,
        };
        if arguments.len() != self.parameters + 1 {
            return Err(refuse(format!(
                "kernel {} takes {} parameters, {} were given",
                self.name,
                self.parameters + 1,
                arguments.len()
            )));
        }
        if let Some(size) = arguments.iter().skip(1).map(|b| b.len()).find(|&n| n != 8) {
            return Err(refuse(format!(
                "kernel {} takes 8-byte parameters after its struct, one of {size} bytes was given",
                self.name
            )));
        }
        if self.barrier && grid != [1, 1, 1] {
            return Err(refuse(format!(
                "kernel {} synchronises its block, so it runs as one block, not {grid:?}",
                self.name
            )));
        }
        Ok(if self.barrier {
            ([1, 1, 1], [1, 1, 1])
        } else {
            (grid, block)
        })
    }

    /// The kernel's identity while it is loaded (its entry point).
    pub(crate) fn identity(&self) -> usize {
        self.entry as usize
    }
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name)
            .field("parameters", &self.parameters)
            .finish()
    }
}

/// The parameter types after the argument struct of kernel `name` in
/// `source` (`extern "C" __global__ void name(const struct ..._args a,
/// double *t, long long tsy, ...)`).
fn parameter_types(source: &str, name: &str) -> Result<Vec<String>, String> {
    let head = format!("void {name}(");
    let start = source
        .find(&head)
        .ok_or_else(|| format!("no `{head}` in the kernel's source"))?
        + head.len();
    let end = source[start..]
        .find(')')
        .ok_or_else(|| format!("the parameter list of {name} is not closed"))?;
    let list: Vec<&str> = source[start..start + end]
        .split(',')
        .map(str::trim)
        .collect();
    if list.first().is_none_or(|first| !first.contains("_args")) {
        return Err(format!("{name} does not take its argument struct first"));
    }
    list[1..]
        .iter()
        .map(|parameter| {
            let cut = parameter
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .ok_or_else(|| format!("cannot read parameter `{parameter}` of {name}"))?;
            Ok(parameter[..=cut].trim().to_string())
        })
        .collect()
}

/// The host translation unit for kernel `name`: the shim, the kernel's
/// CUDA C, and an entry point that unpacks the parameters and runs every
/// thread.
fn host_unit(source: &str, name: &str, types: &[String]) -> String {
    let unpack: String = types
        .iter()
        .enumerate()
        .map(|(i, ty)| format!("    {ty} n{i}; memcpy(&n{i}, params[{}], 8);\n", i + 1))
        .collect();
    let arguments: Vec<String> = (0..types.len()).map(|i| format!("n{i}")).collect();
    format!(
        "#include <math.h>\n#include <string.h>\n\
         struct ws_uint3 {{ unsigned x, y, z; }};\n\
         static thread_local ws_uint3 threadIdx, blockIdx, blockDim;\n\
         #define __global__\n#define __device__\n#define __forceinline__ inline\n\
         #define __syncthreads()\n\
         static inline long long __double_as_longlong(double v) {{ long long u; memcpy(&u, &v, 8); return u; }}\n\
         static inline double __longlong_as_double(long long u) {{ double v; memcpy(&v, &u, 8); return v; }}\n\
         static inline unsigned long long atomicMin(unsigned long long *a, unsigned long long v) {{\n\
         \x20   unsigned long long old = *a; if (v < old) *a = v; return old; }}\n\
         {source}\n\
         extern \"C\" void ws_host_launch(void **params, const unsigned *grid, const unsigned *block) {{\n\
         \x20   struct {name}_args a; memcpy(&a, params[0], sizeof a);\n\
         {unpack}\
         \x20   blockDim.x = block[0]; blockDim.y = block[1]; blockDim.z = block[2];\n\
         \x20   for (unsigned bz = 0; bz < grid[2]; ++bz) for (unsigned by = 0; by < grid[1]; ++by)\n\
         \x20   for (unsigned bx = 0; bx < grid[0]; ++bx) for (unsigned tz = 0; tz < block[2]; ++tz)\n\
         \x20   for (unsigned ty = 0; ty < block[1]; ++ty) for (unsigned tx = 0; tx < block[0]; ++tx) {{\n\
         \x20       blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;\n\
         \x20       threadIdx.x = tx; threadIdx.y = ty; threadIdx.z = tz;\n\
         \x20       {name}(a{comma}{arguments});\n\
         \x20   }}\n}}\n",
        comma = if arguments.is_empty() { "" } else { ", " },
        arguments = arguments.join(", "),
    )
}

/// The host translation unit for kernel `name` of `source`, and the
/// number of parameters after its argument struct.
pub(crate) fn host_unit_of(source: &str, name: &str) -> Result<(String, usize), String> {
    let types = parameter_types(source, name)?;
    Ok((host_unit(source, name, &types), types.len()))
}

/// Where compiled kernels are kept.
fn cache_directory() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("watershed").join("emulated-gpu")
}

/// Loads kernel `name` from its CUDA C `source`, compiling it for the host
/// unless the cache has it.
pub(crate) fn load_function(ordinal: usize, source: &str, name: &str) -> FieldResult<Function> {
    check(ordinal)?;
    let device = Device::Gpu(ordinal);
    let failed = |message: String| FieldError::Cuda {
        device,
        action: format!("compiling kernel {name} for the emulated GPU"),
        message,
    };
    let (unit, parameters) = host_unit_of(source, name).map_err(failed)?;
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let key = format!(
        "{:016x}",
        crate::shared_object::fnv1a(format!("{compiler}\n{unit}").as_bytes())
    );
    let directory = cache_directory();
    let command = |source: &std::path::Path, object: &std::path::Path| {
        let mut command = Command::new(&compiler);
        command
            .args(["-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o"])
            .arg(object)
            .args(["-x", "c++"])
            .arg(source);
        command
    };
    let request = crate::shared_object::ObjectRequest {
        directory: &directory,
        key: &key,
        source: &unit,
        extension: "cpp",
        command: &command,
        symbol: "ws_host_launch",
    };
    let (library, _) =
        crate::shared_object::load_or_build(&request).map_err(|e| failed(e.to_string()))?;
    // SAFETY: `ws_host_launch` is defined by the shim with this signature.
    let entry = unsafe { library.get::<HostLaunch>(b"ws_host_launch") }
        .map(|symbol| *symbol)
        .map_err(|e| failed(format!("no entry point: {e}")))?;
    Ok(Function {
        name: name.to_string(),
        parameters,
        barrier: source.contains("__syncthreads"),
        entry,
        _library: library,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Queues on `queue` an operation that appends `value` to `log`.
    fn note(queue: &Queue, log: &Arc<Mutex<Vec<u64>>>, value: u64) {
        let log = log.clone();
        queue.push(Operation::Run(Box::new(move || {
            log.lock().unwrap().push(value)
        })));
    }

    #[test]
    fn deferred_streams_run_in_the_order_waits_force() {
        let (a, b) = (Arc::new(Queue::default()), Arc::new(Queue::default()));
        let log = Arc::new(Mutex::new(Vec::new()));
        note(&a, &log, 1);
        let event_a = a.enqueued.load(Ordering::Acquire);
        note(&a, &log, 2);
        // b waits for a's first operation only, then runs its own.
        b.push(Operation::WaitFor(a.clone(), event_a));
        note(&b, &log, 10);
        assert!(
            log.lock().unwrap().is_empty(),
            "nothing runs before it is needed"
        );
        b.run_all();
        assert_eq!(*log.lock().unwrap(), [1, 10]);
        assert_eq!(a.done.load(Ordering::Acquire), 1);
        a.run_all();
        assert_eq!(*log.lock().unwrap(), [1, 10, 2]);
        // Without a wait, the stream synchronised first runs first,
        // whatever the order of enqueueing: a reader lacking its writer's
        // event reads what was there before.
        let cell = Arc::new(AtomicU64::new(0));
        let (writer, reader) = (Queue::default(), Queue::default());
        let written = cell.clone();
        writer.push(Operation::Run(Box::new(move || {
            written.store(7, Ordering::Release)
        })));
        let (read, seen) = (cell.clone(), Arc::new(AtomicU64::new(u64::MAX)));
        let into = seen.clone();
        reader.push(Operation::Run(Box::new(move || {
            into.store(read.load(Ordering::Acquire), Ordering::Release)
        })));
        reader.run_all();
        writer.run_all();
        assert_eq!(seen.load(Ordering::Acquire), 0);
    }

    #[test]
    fn parameter_types_are_read_from_the_signature() {
        let source = "extern \"C\" __global__ void k0(const struct k0_args a, double *t, long long tsy,\n    long long x1, unsigned long long *bad)\n{ }";
        assert_eq!(
            parameter_types(source, "k0").unwrap(),
            ["double *", "long long", "long long", "unsigned long long *"]
        );
        assert!(
            parameter_types(source, "k1")
                .unwrap_err()
                .contains("no `void k1(`")
        );
        let without_struct = "__global__ void k2(double *t) {}";
        assert!(
            parameter_types(without_struct, "k2")
                .unwrap_err()
                .contains("argument struct")
        );
    }
}
