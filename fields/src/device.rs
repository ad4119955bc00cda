//! Where a field's data can live: the host (CPU) or one of the CUDA GPUs.
//!
//! A [`Device`] is a plain value used as a key everywhere a location of a field,
//! a memory pool or a stream is chosen. It says nothing about whether the device
//! exists; [`crate::gpu`] answers that at run time.

use std::fmt;

/// A memory space a field location can live in.
///
/// ```
/// use watershed_fields::Device;
/// assert_eq!(Device::Gpu(1).to_string(), "GPU 1");
/// assert!(Device::Cpu.is_cpu());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    /// Host memory, used by CPU threads.
    Cpu,
    /// Memory on the CUDA device with this ordinal.
    Gpu(usize),
}

impl Device {
    /// True for [`Device::Cpu`].
    pub fn is_cpu(self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// The CUDA ordinal of a GPU device, `None` for the CPU.
    pub fn gpu_ordinal(self) -> Option<usize> {
        match self {
            Device::Cpu => None,
            Device::Gpu(ordinal) => Some(ordinal),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "CPU"),
            Device::Gpu(ordinal) => write!(f, "GPU {ordinal}"),
        }
    }
}
