//! The CUDA implementation of the device layer (cargo feature `cuda`): the
//! only file of Watershed that calls the CUDA driver (through cudarc, with
//! dynamic loading). cudarc panics when `libcuda` is absent, so nothing
//! here is reached before [`driver_problem`] said the driver is usable.

use crate::Device;
use crate::error::{FieldError, FieldResult};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Why no GPU can be used, or `None` when the CUDA driver is usable.
pub(crate) fn driver_problem() -> Option<&'static str> {
    static PROBLEM: OnceLock<Option<&'static str>> = OnceLock::new();
    *PROBLEM.get_or_init(|| {
        if std::env::var("WATERSHED_DISABLE_CUDA").is_ok_and(|v| !v.is_empty() && v != "0") {
            return Some("GPUs are disabled by WATERSHED_DISABLE_CUDA");
        }
        // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Some("the CUDA driver library (libcuda) is not installed on this machine");
        }
        if cudarc::driver::result::init().is_err() {
            return Some("the CUDA driver is installed but failed to initialise");
        }
        None
    })
}

/// Number of CUDA devices (call only when the driver is usable).
pub(crate) fn device_count() -> usize {
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// The shared (primary) CUDA context of GPU `ordinal`, created on first use.
fn context(ordinal: usize) -> FieldResult<Arc<CudaContext>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<CudaContext>>>> = OnceLock::new();
    let device = Device::Gpu(ordinal);
    if let Some(reason) = super::gpu_unavailable_reason(ordinal) {
        return Err(FieldError::NoCudaDevice { device, reason });
    }
    let mut contexts = CONTEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(ctx) = contexts.get(&ordinal) {
        return Ok(ctx.clone());
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| cuda_error(device, "creating a context", e))?;
    contexts.insert(ordinal, ctx.clone());
    Ok(ctx)
}

/// Makes GPU `ordinal`'s context current on this thread (creating it).
pub(crate) fn bind(ordinal: usize) -> FieldResult<()> {
    context(ordinal)?
        .bind_to_thread()
        .map_err(|e| cuda_error(Device::Gpu(ordinal), "binding the context", e))
}

/// Wraps a driver error with the device and the action that failed.
fn cuda_error(
    device: Device,
    action: impl Into<String>,
    error: cudarc::driver::DriverError,
) -> FieldError {
    FieldError::Cuda {
        device,
        action: action.into(),
        message: error.to_string(),
    }
}

/// A stream of one GPU.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    stream: Arc<CudaStream>,
}

/// An event recorded on a stream.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    event: Arc<CudaEvent>,
}

impl Stream {
    /// Makes the stream's context current on this thread.
    fn bind(&self, device: Device) -> FieldResult<()> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| cuda_error(device, "binding the context", e))
    }

    pub(crate) fn new(ordinal: usize) -> FieldResult<Stream> {
        let stream = context(ordinal)?
            .new_stream()
            .map_err(|e| cuda_error(Device::Gpu(ordinal), "creating a stream", e))?;
        Ok(Stream { stream })
    }

    pub(crate) fn synchronize(&self, device: Device) -> FieldResult<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_error(device, "synchronising a stream", e))
    }

    /// An event that keeps its GPU time (for timelines; plain events are
    /// created without timing, which is cheaper).
    pub(crate) fn record_timed(&self, device: Device) -> FieldResult<Event> {
        self.record_with(
            Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT),
            device,
            "recording a timing event",
        )
    }

    pub(crate) fn record(&self, device: Device) -> FieldResult<Event> {
        // cudarc's default: an event without timing.
        self.record_with(None, device, "recording an event")
    }

    fn record_with(
        &self,
        flags: Option<cudarc::driver::sys::CUevent_flags>,
        device: Device,
        action: &str,
    ) -> FieldResult<Event> {
        let event = self
            .stream
            .record_event(flags)
            .map_err(|e| cuda_error(device, action, e))?;
        Ok(Event {
            event: Arc::new(event),
        })
    }

    pub(crate) fn wait(&self, event: &Event, device: Device) -> FieldResult<()> {
        self.stream
            .wait(&event.event)
            .map_err(|e| cuda_error(device, "waiting on an event", e))
    }

    /// Enqueues a copy of `bytes` bytes from `source` on `from` to
    /// `destination` on `to` (at least one a GPU).
    ///
    /// # Safety
    /// Both ranges must be valid for `bytes` bytes on their devices until
    /// the copy completes, and must not be written meanwhile.
    pub(crate) unsafe fn copy(
        &self,
        device: Device,
        (from, source): (Device, usize),
        (to, destination): (Device, usize),
        bytes: usize,
        action: &str,
    ) -> FieldResult<()> {
        self.bind(device)?;
        let cu_stream = self.stream.cu_stream();
        // SAFETY: the caller guarantees both ranges; the host side is read
        // or written as bytes, which every bit pattern allows.
        let result = unsafe {
            match (from, to) {
                (Device::Cpu, Device::Gpu(_)) => {
                    let host = std::slice::from_raw_parts(source as *const u8, bytes);
                    cudarc::driver::result::memcpy_htod_async(destination as u64, host, cu_stream)
                }
                (Device::Gpu(_), Device::Cpu) => {
                    let host = std::slice::from_raw_parts_mut(destination as *mut u8, bytes);
                    cudarc::driver::result::memcpy_dtoh_async(host, source as u64, cu_stream)
                }
                (Device::Gpu(a), Device::Gpu(b)) => {
                    let source_ctx = context(a)?;
                    let destination_ctx = context(b)?;
                    cudarc::driver::result::memcpy_peer_async(
                        destination_ctx.cu_ctx(),
                        destination as u64,
                        source_ctx.cu_ctx(),
                        source as u64,
                        bytes,
                        cu_stream,
                    )
                }
                (Device::Cpu, Device::Cpu) => {
                    return Err(FieldError::Cuda {
                        device,
                        action: action.to_string(),
                        message: "a host-to-host copy is not a device copy".into(),
                    });
                }
            }
        };
        result.map_err(|e| cuda_error(device, action, e))
    }

    /// Enqueues setting `bytes` bytes at device address `destination` to
    /// `byte`.
    ///
    /// # Safety
    /// The range must be device memory of this stream's GPU, valid for
    /// `bytes` bytes and not used by other work until this completes.
    pub(crate) unsafe fn memset(
        &self,
        device: Device,
        destination: usize,
        byte: u8,
        bytes: usize,
        action: &str,
    ) -> FieldResult<()> {
        self.bind(device)?;
        // SAFETY: guaranteed by the caller.
        unsafe {
            cudarc::driver::result::memset_d8_async(
                destination as u64,
                byte,
                bytes,
                self.stream.cu_stream(),
            )
        }
        .map_err(|e| cuda_error(device, action, e))
    }
}

/// The `void **` array the driver takes for a kernel's parameters: one
/// pointer per parameter block. The driver reads the bytes through them
/// before the call returns and never writes them, so the blocks need only
/// outlive the call.
fn parameter_pointers(arguments: &[&[u8]]) -> Vec<*mut std::ffi::c_void> {
    arguments
        .iter()
        .map(|a| a.as_ptr() as *mut std::ffi::c_void)
        .collect()
}

/// A kernel function of a module loaded from PTX (the module stays loaded
/// while the function lives).
#[derive(Debug, Clone)]
pub(crate) struct Function {
    function: Arc<CudaFunction>,
}

/// Loads `ptx` into GPU `ordinal`'s context and looks up `name` in it.
pub(crate) fn load_function(ordinal: usize, ptx: &str, name: &str) -> FieldResult<Function> {
    let device = Device::Gpu(ordinal);
    let ctx = context(ordinal)?;
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
        .map_err(|e| {
            cuda_error(
                device,
                format!("loading the PTX module of kernel {name}"),
                e,
            )
        })?;
    if name.contains('\0') {
        return Err(FieldError::Cuda {
            device,
            action: format!("looking up kernel {name:?}"),
            message: "a kernel name cannot contain a NUL byte".into(),
        });
    }
    let function = module
        .load_function(name)
        .map_err(|e| cuda_error(device, format!("looking up kernel {name} in its module"), e))?;
    Ok(Function {
        function: Arc::new(function),
    })
}

impl Stream {
    /// Enqueues `function` over `grid` blocks of `block` threads with
    /// `arguments` (one byte block per kernel parameter, by value).
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, size and
    /// meaning, and every device address among them must stay valid (and be
    /// used by nothing conflicting) until the kernel completes.
    pub(crate) unsafe fn launch(
        &self,
        device: Device,
        function: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        arguments: &[&[u8]],
        action: &str,
    ) -> FieldResult<()> {
        self.bind(device)?;
        let mut parameters = parameter_pointers(arguments);
        // SAFETY: guaranteed by the caller; the parameter blocks outlive
        // the call, which copies them.
        unsafe {
            cudarc::driver::result::launch_kernel(
                function.function.cu_function(),
                (grid[0], grid[1], grid[2]),
                (block[0], block[1], block[2]),
                0,
                self.stream.cu_stream(),
                &mut parameters,
            )
        }
        .map_err(|e| cuda_error(device, action, e))
    }
}

impl Event {
    /// GPU time from `earlier` to this event (both timed, of one GPU);
    /// waits for both.
    pub(crate) fn elapsed_since(
        &self,
        earlier: &Event,
        device: Device,
    ) -> FieldResult<std::time::Duration> {
        let milliseconds = earlier
            .event
            .elapsed_ms(&self.event)
            .map_err(|e| cuda_error(device, "reading the time between two events", e))?;
        Ok(std::time::Duration::from_secs_f64(
            f64::from(milliseconds.max(0.0)) * 1e-3,
        ))
    }

    pub(crate) fn synchronize(&self, device: Device) -> FieldResult<()> {
        self.event
            .synchronize()
            .map_err(|e| cuda_error(device, "waiting for an event", e))
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.event.is_complete()
    }
}

/// `bytes` bytes of zeroed device memory on GPU `ordinal`.
pub(crate) fn device_alloc_zeroed(ordinal: usize, bytes: usize) -> FieldResult<usize> {
    let device = Device::Gpu(ordinal);
    bind(ordinal)?;
    // SAFETY: the context is current; the pointer is freed in `device_free`.
    let address = unsafe { cudarc::driver::result::malloc_sync(bytes) }.map_err(|e| {
        FieldError::Allocation {
            device,
            bytes,
            reason: e.to_string(),
        }
    })?;
    // SAFETY: `address` points to `bytes` bytes of device memory.
    unsafe { cudarc::driver::result::memset_d8_sync(address, 0, bytes) }
        .map_err(|e| cuda_error(device, "zeroing new device memory", e))?;
    Ok(address as usize)
}

/// Frees memory from [`device_alloc_zeroed`] (errors are ignored: this runs
/// in destructors).
pub(crate) fn device_free(ordinal: usize, address: usize) {
    if bind(ordinal).is_ok() {
        // SAFETY: the block came from `malloc_sync` and is no longer used.
        let _ = unsafe { cudarc::driver::result::free_sync(address as u64) };
    }
}

/// Readies GPU `ordinal`'s default memory pool for stream-ordered
/// allocation, once: refuses a device or driver without memory pools, and
/// raises the pool's release threshold to the maximum so that memory freed
/// in stream order stays with the pool for the next step instead of going
/// back to the driver at every synchronisation (the default threshold is
/// zero). The attribute belongs to this process's pool, not to the card.
fn prepare_stream_ordered_pool(ordinal: usize) -> FieldResult<()> {
    use cudarc::driver::sys;
    static READY: OnceLock<Mutex<std::collections::HashSet<usize>>> = OnceLock::new();
    let device = Device::Gpu(ordinal);
    let mut ready = READY
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if ready.contains(&ordinal) {
        return Ok(());
    }
    let cu_device = context(ordinal)?.cu_device();
    let action = "preparing stream-ordered allocation";
    // SAFETY: `cu_device` is the device of a live context.
    let supported = unsafe {
        cudarc::driver::result::device::get_attribute(
            cu_device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
        )
    }
    .map_err(|e| cuda_error(device, action, e))?;
    if supported == 0 {
        return Err(FieldError::Cuda {
            device,
            action: action.into(),
            message: "this GPU or its driver has no stream-ordered memory pools; use the size-class pool (the default)".into(),
        });
    }
    // SAFETY: as above; the pool handle is the driver's own default pool.
    let pool = unsafe { cudarc::driver::result::device::get_default_mem_pool(cu_device) }
        .map_err(|e| cuda_error(device, action, e))?;
    let mut threshold = u64::MAX;
    // SAFETY: the pool is valid and the release threshold is a `cuuint64_t`,
    // which `threshold` is; the driver reads it during the call.
    unsafe {
        cudarc::driver::result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut threshold as *mut u64 as *mut std::ffi::c_void,
        )
    }
    .map_err(|e| cuda_error(device, action, e))?;
    ready.insert(ordinal);
    Ok(())
}

impl Stream {
    /// `bytes` bytes of device memory allocated in this stream's order
    /// (`cuMemAllocAsync`), contents unspecified.
    pub(crate) fn allocate_in_order(&self, device: Device, bytes: usize) -> FieldResult<usize> {
        let Device::Gpu(ordinal) = device else {
            return Err(FieldError::Cuda {
                device,
                action: "allocating in stream order".into(),
                message: "the host has no streams".into(),
            });
        };
        prepare_stream_ordered_pool(ordinal)?;
        self.bind(device)?;
        // SAFETY: the stream is alive and its context current; the memory
        // is freed with `free_in_order`.
        let address =
            unsafe { cudarc::driver::result::malloc_async(self.stream.cu_stream(), bytes) }
                .map_err(|e| FieldError::Allocation {
                    device,
                    bytes,
                    reason: format!("cuMemAllocAsync failed: {e}"),
                })?;
        Ok(address as usize)
    }

    /// Frees memory from [`Stream::allocate_in_order`] in this stream's
    /// order (`cuMemFreeAsync`).
    ///
    /// # Safety
    /// `address` came from `allocate_in_order` on this GPU and is not freed
    /// yet; every use of it is ordered before this point of the stream.
    pub(crate) unsafe fn free_in_order(&self, device: Device, address: usize) -> FieldResult<()> {
        self.bind(device)?;
        // SAFETY: guaranteed by the caller.
        unsafe { cudarc::driver::result::free_async(address as u64, self.stream.cu_stream()) }
            .map_err(|e| cuda_error(device, "freeing in stream order", e))
    }
}

/// Zeroed page-locked host memory through GPU 0's context, or `None` when
/// that fails.
pub(crate) fn pinned_alloc_zeroed(bytes: usize) -> Option<usize> {
    bind(0).ok()?;
    // SAFETY: the context is current; the memory is freed with `free_host`.
    let pointer = unsafe { cudarc::driver::result::malloc_host(bytes, 0) }.ok()?;
    // SAFETY: `pointer` is valid for `bytes` bytes.
    unsafe { std::ptr::write_bytes(pointer as *mut u8, 0, bytes) };
    Some(pointer as usize)
}

/// Frees memory from [`pinned_alloc_zeroed`].
pub(crate) fn pinned_free(address: usize) {
    if bind(0).is_ok() {
        // SAFETY: the block came from `malloc_host` and is no longer used.
        let _ = unsafe { cudarc::driver::result::free_host(address as *mut std::ffi::c_void) };
    }
}

/// A CUDA graph captured from a stream and instantiated: launching it runs
/// every captured operation, in the captured order, on that stream.
pub(crate) struct Graph {
    graph: cudarc::driver::CudaGraph,
    /// The stream it was captured from (whose context its updates bind).
    stream: Arc<CudaStream>,
}

// SAFETY: a CUDA graph and its executable are driver objects not tied to
// the thread that made them; the driver only asks that calls on one graph
// be serialised. `Graph` is not `Sync`, and its only operations take it by
// reference from one thread at a time (its owner holds it in a `Mutex` or
// alone), so no two calls on it overlap.
unsafe impl Send for Graph {}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Graph")
    }
}

impl Stream {
    /// The stream's identity while it lives (its driver handle).
    pub(crate) fn identity(&self) -> usize {
        self.stream.cu_stream() as usize
    }

    /// Starts capturing this stream's work (and that of the streams that
    /// wait on its events) into a graph, instead of running it. Only this
    /// thread's calls are checked for ones unsafe during a capture.
    pub(crate) fn begin_capture(&self, device: Device) -> FieldResult<()> {
        self.stream
            .begin_capture(
                cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
            .map_err(|e| cuda_error(device, "starting a stream capture", e))
    }

    /// Ends the capture begun by [`Stream::begin_capture`] and instantiates
    /// the captured graph. Errors when the capture was invalidated (an
    /// operation that cannot be captured) or captured nothing.
    pub(crate) fn end_capture(&self, device: Device) -> FieldResult<Graph> {
        let graph = self
            .stream
            .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
            .map_err(|e| cuda_error(device, "ending a stream capture", e))?;
        graph
            .map(|graph| Graph {
                graph,
                stream: self.stream.clone(),
            })
            .ok_or_else(|| FieldError::Cuda {
                device,
                action: "ending a stream capture".into(),
                message: "the capture recorded no work".into(),
            })
    }
}

/// The oldest driver (as `cuDriverGetVersion` numbers it) that tells
/// which node a captured operation became (`cuStreamGetCaptureInfo_v3`);
/// cudarc panics on a missing symbol, so an older one is never asked.
const CAPTURE_NODES_DRIVER: i32 = 12030;

/// The driver's version number, or 0 when it cannot say.
fn driver_version() -> i32 {
    static VERSION: OnceLock<i32> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let mut version = 0;
        // SAFETY: only called once the driver is loaded and initialised
        // (a stream exists); writes one integer.
        let result = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
        if result.result().is_ok() { version } else { 0 }
    })
}

impl Stream {
    /// In a stream capture, the graph node the last operation enqueued on
    /// this stream became: the stream's one capture dependency. `None`
    /// when the stream is not capturing, has no or several dependencies,
    /// or the driver is older than CUDA 12.3.
    pub(crate) fn last_captured_node(&self, device: Device) -> FieldResult<Option<usize>> {
        use cudarc::driver::sys;
        if driver_version() < CAPTURE_NODES_DRIVER {
            return Ok(None);
        }
        self.bind(device)?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut dependencies: *const sys::CUgraphNode = std::ptr::null();
        let mut count: usize = 0;
        // SAFETY: the stream is alive; the driver writes the status, a
        // pointer to its own array of dependencies (valid until the next
        // operation on the stream, read at once below) and their count.
        // The optional outputs left null are allowed by the API.
        unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                self.stream.cu_stream(),
                &mut status,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut dependencies,
                std::ptr::null_mut(),
                &mut count,
            )
        }
        .result()
        .map_err(|e| cuda_error(device, "asking which node a captured kernel became", e))?;
        if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
            || count != 1
            || dependencies.is_null()
        {
            return Ok(None);
        }
        // SAFETY: the driver said the array holds one node.
        Ok(Some(unsafe { *dependencies } as usize))
    }
}

impl Function {
    /// The kernel's identity while it is loaded (its driver handle).
    pub(crate) fn identity(&self) -> usize {
        self.function.cu_function() as usize
    }
}

impl Graph {
    /// Sets the arguments of kernel node `node` (a node of the captured
    /// graph, from [`Stream::last_captured_node`]) in the instantiated
    /// graph: later launches of the graph pass `arguments`; launches
    /// already enqueued keep theirs.
    ///
    /// # Safety
    /// `node` must be a kernel node of this graph captured from a launch
    /// of `function` with parameter blocks of the sizes of `arguments`,
    /// and the addresses among them must be valid for any launch of the
    /// graph made after this call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn set_kernel_arguments(
        &self,
        device: Device,
        node: usize,
        function: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        arguments: &[&[u8]],
        action: &str,
    ) -> FieldResult<()> {
        use cudarc::driver::sys;
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| cuda_error(device, "binding the context", e))?;
        let mut parameters = parameter_pointers(arguments);
        let params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: function.function.cu_function(),
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block[0],
            blockDimY: block[1],
            blockDimZ: block[2],
            sharedMemBytes: 0,
            kernelParams: parameters.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: the graph and node are alive (the graph owns the node's
        // graph); the parameter blocks outlive the call, which copies them;
        // the rest is guaranteed by the caller.
        unsafe {
            sys::cuGraphExecKernelNodeSetParams_v2(
                self.graph.cu_graph_exec(),
                node as sys::CUgraphNode,
                &params,
            )
        }
        .result()
        .map_err(|e| {
            cuda_error(
                device,
                format!("updating the arguments of {action} in a CUDA graph"),
                e,
            )
        })
    }

    /// Enqueues the whole graph on the stream it was captured from.
    pub(crate) fn launch(&self, device: Device) -> FieldResult<()> {
        self.graph
            .launch()
            .map_err(|e| cuda_error(device, "launching a CUDA graph", e))
    }
}
