//! Run-time detection of CUDA GPUs and the narrow device layer fields need:
//! contexts, streams and events.
//!
//! cudarc is built with dynamic loading, and its calls panic when `libcuda` is
//! absent. Every entry point here therefore checks for the driver first
//! ([`cuda_driver_present`]) and turns its absence into
//! [`FieldError::NoCudaDevice`], so every CPU path works on machines without a
//! GPU. Setting the environment variable `WATERSHED_DISABLE_CUDA=1` hides all
//! GPUs, which is useful to check the CPU fallback on a GPU machine.
//!
//! Synchronisation semantics are stated on each call; the rule is that
//! anything taking a [`GpuStream`] only enqueues work and returns before the
//! GPU finishes.

use crate::Device;
use crate::error::{FieldError, FieldResult};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Why no GPU can be used, or `None` when the CUDA driver is usable.
fn driver_problem() -> Option<&'static str> {
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

/// True when the CUDA driver is loaded and initialised. Never panics.
pub fn cuda_driver_present() -> bool {
    driver_problem().is_none()
}

/// Number of CUDA devices (0 without a driver). Never panics.
pub fn gpu_count() -> usize {
    if !cuda_driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// Why `device` cannot be used, or `None` when it can.
pub fn gpu_unavailable_reason(ordinal: usize) -> Option<String> {
    if let Some(problem) = driver_problem() {
        return Some(problem.to_string());
    }
    let count = gpu_count();
    (ordinal >= count).then(|| format!("this machine has {count} CUDA device(s)"))
}

/// The shared (primary) CUDA context of GPU `ordinal`, created on first use.
pub fn context(ordinal: usize) -> FieldResult<Arc<CudaContext>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<CudaContext>>>> = OnceLock::new();
    let device = Device::Gpu(ordinal);
    if let Some(reason) = gpu_unavailable_reason(ordinal) {
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

/// Wraps a driver error with the device and the action that failed.
pub(crate) fn cuda_error(
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

/// A CUDA stream on one GPU: work enqueued on it runs in order, concurrently
/// with other streams.
#[derive(Debug, Clone)]
pub struct GpuStream {
    device: Device,
    stream: Arc<CudaStream>,
}

impl GpuStream {
    /// A new stream on GPU `ordinal`.
    pub fn new(ordinal: usize) -> FieldResult<Self> {
        let device = Device::Gpu(ordinal);
        let stream = context(ordinal)?
            .new_stream()
            .map_err(|e| cuda_error(device, "creating a stream", e))?;
        Ok(GpuStream { device, stream })
    }

    /// The GPU this stream belongs to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The underlying cudarc stream, for launching kernels.
    pub fn cuda_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Blocks the calling thread until all work enqueued so far has finished.
    pub fn synchronize(&self) -> FieldResult<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_error(self.device, "synchronising a stream", e))
    }

    /// Records an event after the work enqueued so far. Returns at once.
    pub fn record(&self) -> FieldResult<ValidationEvent> {
        let event = self
            .stream
            .record_event(None)
            .map_err(|e| cuda_error(self.device, "recording an event", e))?;
        Ok(ValidationEvent {
            device: self.device,
            event: Arc::new(event),
        })
    }

    /// Makes later work on this stream wait for `event`. Returns at once.
    pub fn wait(&self, event: &ValidationEvent) -> FieldResult<()> {
        self.stream
            .wait(&event.event)
            .map_err(|e| cuda_error(self.device, "waiting on an event", e))
    }
}

/// Marks the completion of an asynchronous copy (or any stream work): a
/// consumer on another stream calls [`GpuStream::wait`] with it, a host thread
/// calls [`ValidationEvent::synchronize`].
#[derive(Debug, Clone)]
pub struct ValidationEvent {
    device: Device,
    event: Arc<CudaEvent>,
}

impl ValidationEvent {
    /// The GPU whose stream recorded the event.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Blocks until the recorded work has finished.
    pub fn synchronize(&self) -> FieldResult<()> {
        self.event
            .synchronize()
            .map_err(|e| cuda_error(self.device, "waiting for an event", e))
    }

    /// True once the recorded work has finished. Never blocks.
    pub fn is_complete(&self) -> bool {
        self.event.is_complete()
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
