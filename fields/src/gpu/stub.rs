//! The device layer of a build without CUDA (cargo feature `cuda` off):
//! no GPU exists, every request for one is a [`FieldError::NoCudaDevice`]
//! saying why, and streams and events cannot be made (their types hold an
//! uninhabited value, so their methods need no body).

use crate::Device;
use crate::error::{FieldError, FieldResult};

/// Why no GPU can be used: always, in this build.
pub(crate) fn driver_problem() -> Option<&'static str> {
    Some(
        "this build of Watershed has no CUDA support (it was built without the `cuda` cargo feature, which is on by default)",
    )
}

/// No devices.
pub(crate) fn device_count() -> usize {
    0
}

fn no_device(ordinal: usize) -> FieldError {
    FieldError::NoCudaDevice {
        device: Device::Gpu(ordinal),
        reason: driver_problem().unwrap_or_default().to_string(),
    }
}

/// Refuses: there is no context to bind.
pub(crate) fn bind(ordinal: usize) -> FieldResult<()> {
    Err(no_device(ordinal))
}

#[derive(Debug, Clone, Copy)]
enum Never {}

/// A stream (none can exist in this build).
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    never: Never,
}

/// An event (none can exist in this build).
#[derive(Debug, Clone)]
pub(crate) struct Event {
    never: Never,
}

impl Stream {
    pub(crate) fn new(ordinal: usize) -> FieldResult<Stream> {
        Err(no_device(ordinal))
    }

    pub(crate) fn synchronize(&self, _device: Device) -> FieldResult<()> {
        match self.never {}
    }

    pub(crate) fn record(&self, _device: Device) -> FieldResult<Event> {
        match self.never {}
    }

    pub(crate) fn record_timed(&self, _device: Device) -> FieldResult<Event> {
        match self.never {}
    }

    pub(crate) fn wait(&self, _event: &Event, _device: Device) -> FieldResult<()> {
        match self.never {}
    }

    /// # Safety
    /// Never callable: no stream exists in this build.
    pub(crate) unsafe fn copy(
        &self,
        _device: Device,
        _from: (Device, usize),
        _to: (Device, usize),
        _bytes: usize,
        _action: &str,
    ) -> FieldResult<()> {
        match self.never {}
    }

    /// # Safety
    /// Never callable: no stream exists in this build.
    pub(crate) unsafe fn memset(
        &self,
        _device: Device,
        _destination: usize,
        _byte: u8,
        _bytes: usize,
        _action: &str,
    ) -> FieldResult<()> {
        match self.never {}
    }

    pub(crate) fn allocate_in_order(&self, _device: Device, _bytes: usize) -> FieldResult<usize> {
        match self.never {}
    }

    /// # Safety
    /// Never callable: no stream exists in this build.
    pub(crate) unsafe fn free_in_order(&self, _device: Device, _address: usize) -> FieldResult<()> {
        match self.never {}
    }
}

/// A kernel function (none can exist in this build).
#[derive(Debug, Clone)]
pub(crate) struct Function {
    never: Never,
}

/// Refuses: no module can be loaded in this build.
pub(crate) fn load_function(ordinal: usize, _ptx: &str, _name: &str) -> FieldResult<Function> {
    Err(no_device(ordinal))
}

impl Stream {
    /// # Safety
    /// Never callable: no stream exists in this build.
    pub(crate) unsafe fn launch(
        &self,
        _device: Device,
        function: &Function,
        _grid: [u32; 3],
        _block: [u32; 3],
        _arguments: &[&[u8]],
        _action: &str,
    ) -> FieldResult<()> {
        match function.never {}
    }
}

impl Event {
    pub(crate) fn synchronize(&self, _device: Device) -> FieldResult<()> {
        match self.never {}
    }

    pub(crate) fn elapsed_since(
        &self,
        _earlier: &Event,
        _device: Device,
    ) -> FieldResult<std::time::Duration> {
        match self.never {}
    }

    pub(crate) fn is_complete(&self) -> bool {
        match self.never {}
    }
}

/// Refuses: no device memory in this build.
pub(crate) fn device_alloc_zeroed(ordinal: usize, _bytes: usize) -> FieldResult<usize> {
    Err(no_device(ordinal))
}

/// Nothing was ever allocated.
pub(crate) fn device_free(_ordinal: usize, _address: usize) {}

/// No pinned memory without CUDA.
pub(crate) fn pinned_alloc_zeroed(_bytes: usize) -> Option<usize> {
    None
}

/// Nothing was ever allocated.
pub(crate) fn pinned_free(_address: usize) {}

/// A captured CUDA graph (none can exist in this build).
#[derive(Debug)]
pub(crate) struct Graph {
    never: Never,
}

impl Stream {
    /// The stream's identity (never callable: no stream exists).
    pub(crate) fn identity(&self) -> usize {
        match self.never {}
    }

    pub(crate) fn begin_capture(&self, _device: Device) -> FieldResult<()> {
        match self.never {}
    }

    pub(crate) fn end_capture(&self, _device: Device) -> FieldResult<Graph> {
        match self.never {}
    }

    pub(crate) fn last_captured_node(&self, _device: Device) -> FieldResult<Option<usize>> {
        match self.never {}
    }
}

impl Function {
    /// The kernel's identity (never callable: no kernel exists).
    pub(crate) fn identity(&self) -> usize {
        match self.never {}
    }
}

impl Graph {
    pub(crate) fn launch(&self, _device: Device) -> FieldResult<()> {
        match self.never {}
    }

    /// # Safety
    /// Never callable: no graph exists in this build.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn set_kernel_arguments(
        &self,
        _device: Device,
        _node: usize,
        _function: &Function,
        _grid: [u32; 3],
        _block: [u32; 3],
        _arguments: &[&[u8]],
        _action: &str,
    ) -> FieldResult<()> {
        match self.never {}
    }
}
