//! The one error type of the `fields` crate.
//!
//! Every variant names the thing at fault (the field, the device, the file and
//! dataset) and, where it is not obvious, what to do about it. Variants are
//! grouped by phase: grid and layout set-up, the location state machine,
//! memory, CUDA, and HDF5 I/O.

use crate::Device;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type FieldResult<T> = Result<T, FieldError>;

/// Everything that can go wrong in the `fields` crate.
#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    // ---- grid and layout -------------------------------------------------
    /// A grid or patch description is inconsistent.
    #[error("invalid grid: {reason}")]
    InvalidGrid {
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// A decomposition of a grid into patches cannot be used
    /// ([`crate::decomposition::PatchLayout`]).
    #[error("invalid patch layout: {reason}")]
    InvalidLayout {
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// Caller memory does not match the layout the field needs.
    #[error("field '{field}': external storage does not fit its layout: {reason}")]
    ExternalStorage {
        /// Field name.
        field: String,
        /// What does not fit.
        reason: String,
    },

    // ---- location state machine -----------------------------------------
    /// The field has no location on the requested device.
    #[error(
        "field '{field}' has no location on {device} (locations: {states}); add one with add_location or validate_on"
    )]
    LocationMissing {
        /// Field name.
        field: String,
        /// Requested device.
        device: Device,
        /// Current location states.
        states: String,
    },

    /// A location was added twice.
    #[error("field '{field}' already has a location on {device} (locations: {states})")]
    LocationExists {
        /// Field name.
        field: String,
        /// Device of the duplicate location.
        device: Device,
        /// Current location states.
        states: String,
    },

    /// Write access was requested on a location that is not active.
    #[error(
        "field '{field}': cannot write on {device}, it is not the active location (locations: {states}); call set_active({device}) first"
    )]
    NotActive {
        /// Field name.
        field: String,
        /// Device where the write was attempted.
        device: Device,
        /// Current location states.
        states: String,
    },

    /// Read access or activation was requested on a location that is not valid.
    #[error(
        "field '{field}': the location on {device} does not hold current data (locations: {states}); call validate_on({device}) first"
    )]
    NotValid {
        /// Field name.
        field: String,
        /// Device of the invalid location.
        device: Device,
        /// Current location states.
        states: String,
    },

    /// The active location cannot be removed.
    #[error(
        "field '{field}': cannot remove the active location on {device} (locations: {states}); activate another valid location first"
    )]
    RemoveActive {
        /// Field name.
        field: String,
        /// Device of the active location.
        device: Device,
        /// Current location states.
        states: String,
    },

    // ---- memory -----------------------------------------------------------
    /// A memory pool could not allocate a block.
    #[error("could not allocate {bytes} bytes on {device}: {reason}")]
    Allocation {
        /// Device of the pool.
        device: Device,
        /// Requested size in bytes.
        bytes: usize,
        /// Why the allocation failed.
        reason: String,
    },

    /// A host allocation would take more memory than the machine has
    /// available ([`crate::host_memory`]): refused before it is tried.
    #[error(
        "field `{field}` needs {} MiB, more than the {} MiB this machine has available; make the problem smaller (fewer cells or fields) or free memory",
        bytes >> 20,
        available >> 20
    )]
    MemoryExhausted {
        /// What asked for the memory (a field's name).
        field: String,
        /// Bytes asked for.
        bytes: usize,
        /// Bytes the machine had available.
        available: u64,
    },

    /// Blocks are still outstanding when the caller required none.
    #[error(
        "memory pool on {device} still has {blocks} outstanding block(s), {bytes} bytes: {report}"
    )]
    Leak {
        /// Device of the pool.
        device: Device,
        /// Number of outstanding blocks.
        blocks: usize,
        /// Outstanding bytes.
        bytes: usize,
        /// One line per outstanding block, with its label.
        report: String,
    },

    // ---- CUDA -------------------------------------------------------------
    /// A GPU was requested where none can be used.
    #[error("no CUDA device for {device}: {reason}")]
    NoCudaDevice {
        /// The requested GPU.
        device: Device,
        /// Why it is unavailable (no driver, ordinal out of range, disabled).
        reason: String,
    },

    /// A CUDA driver call failed.
    #[error("CUDA error on {device} while {action}: {message}")]
    Cuda {
        /// Device the call was made for.
        device: Device,
        /// What Watershed was doing.
        action: String,
        /// The driver's message.
        message: String,
    },

    // ---- HDF5 -------------------------------------------------------------
    /// The HDF5 library reported an error.
    #[error("HDF5 error in '{}' at '{object}': {source}", file.display())]
    Hdf5 {
        /// File being read or written.
        file: PathBuf,
        /// Group, dataset or attribute involved.
        object: String,
        /// The library's error.
        source: hdf5::Error,
    },

    /// An HDF5 dataset does not describe a field Watershed can read.
    #[error("'{}' dataset '{dataset}' is not a readable field: {reason}", file.display())]
    Hdf5Format {
        /// File being read.
        file: PathBuf,
        /// Dataset path inside the file.
        dataset: String,
        /// What is missing or inconsistent.
        reason: String,
    },
}
