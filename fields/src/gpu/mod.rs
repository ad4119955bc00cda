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

use crate::Device;
use crate::error::{FieldError, FieldResult};

pub(crate) use backend::{device_alloc_zeroed, device_free, pinned_alloc_zeroed, pinned_free};

/// True when this build has CUDA support (the `cuda` cargo feature).
pub const BUILT_WITH_CUDA: bool = cfg!(feature = "cuda");

/// True when the CUDA driver is loaded and initialised. Never panics.
pub fn cuda_driver_present() -> bool {
    backend::driver_problem().is_none()
}

/// Number of CUDA devices (0 without a driver). Never panics.
pub fn gpu_count() -> usize {
    if !cuda_driver_present() {
        return 0;
    }
    backend::device_count()
}

/// Why `device` cannot be used, or `None` when it can.
pub fn gpu_unavailable_reason(ordinal: usize) -> Option<String> {
    if let Some(problem) = backend::driver_problem() {
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
    backend::bind(ordinal)
}

/// A CUDA stream on one GPU: work enqueued on it runs in order, concurrently
/// with other streams.
#[derive(Debug, Clone)]
pub struct GpuStream {
    device: Device,
    stream: backend::Stream,
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
        Ok(GpuStream {
            device: Device::Gpu(ordinal),
            stream: backend::Stream::new(ordinal)?,
        })
    }

    /// The GPU this stream belongs to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Blocks the calling thread until all work enqueued so far has finished.
    pub fn synchronize(&self) -> FieldResult<()> {
        self.stream.synchronize(self.device)
    }

    /// Records an event after the work enqueued so far. Returns at once.
    pub fn record(&self) -> FieldResult<ValidationEvent> {
        Ok(ValidationEvent {
            device: self.device,
            event: self.stream.record(self.device)?,
        })
    }

    /// Makes later work on this stream wait for `event`. Returns at once.
    pub fn wait(&self, event: &ValidationEvent) -> FieldResult<()> {
        self.stream.wait(&event.event, self.device)
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
        // SAFETY: forwarded from the caller.
        unsafe {
            self.stream
                .copy(self.device, source, destination, bytes, action)
        }
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
        // SAFETY: forwarded from the caller.
        unsafe {
            self.stream
                .memset(self.device, destination, byte, bytes, action)
        }
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
        // SAFETY: forwarded from the caller.
        unsafe {
            self.stream.launch(
                self.device,
                &function.function,
                grid,
                block,
                arguments,
                action,
            )
        }
    }
}

/// A kernel loaded on one GPU from PTX, ready to launch.
#[derive(Debug, Clone)]
pub struct GpuFunction {
    device: Device,
    name: String,
    function: backend::Function,
}

impl GpuFunction {
    /// Loads the PTX module `ptx` on GPU `ordinal` and looks up the kernel
    /// `name` in it (the driver compiles the PTX for the GPU it finds).
    pub fn load(ordinal: usize, ptx: &str, name: &str) -> FieldResult<Self> {
        if let Some(reason) = gpu_unavailable_reason(ordinal) {
            return Err(FieldError::NoCudaDevice {
                device: Device::Gpu(ordinal),
                reason,
            });
        }
        Ok(GpuFunction {
            device: Device::Gpu(ordinal),
            name: name.to_string(),
            function: backend::load_function(ordinal, ptx, name)?,
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
}

/// Marks the completion of an asynchronous copy (or any stream work): a
/// consumer on another stream calls [`GpuStream::wait`] with it, a host thread
/// calls [`ValidationEvent::synchronize`].
#[derive(Debug, Clone)]
pub struct ValidationEvent {
    device: Device,
    event: backend::Event,
}

impl ValidationEvent {
    /// The GPU whose stream recorded the event.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Blocks until the recorded work has finished.
    pub fn synchronize(&self) -> FieldResult<()> {
        self.event.synchronize(self.device)
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
