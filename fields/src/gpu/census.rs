//! A census of the calls the device layer makes to GPUs: how many kernel
//! launches, copies, memsets, event records and waits, host waits,
//! stream-ordered allocations and graph launches have reached the driver
//! (or the emulation) in this process, and how many bytes the copies
//! moved.
//!
//! On small grids a time step costs what its driver calls cost, not what
//! its kernels do: each call takes the host some microseconds. Counting
//! them says where that time goes without a profiler, measures a change
//! that removes calls on a machine without a GPU (the emulated GPUs count
//! the same calls), and lets tests hold a step to a budget of calls.
//!
//! Only calls that reach a device are counted: operations logged inside a
//! step recording count when the step is run or launched (as one graph
//! launch when replayed). Each count is one relaxed atomic addition, a few
//! nanoseconds beside calls that take microseconds.

use std::sync::atomic::{AtomicU64, Ordering};

/// The calls made to GPUs (real or emulated) by this process so far, by
/// kind ([`gpu_calls`]). Subtract two readings with [`GpuCalls::since`]
/// to count the calls of a stretch of work.
///
/// ```
/// use watershed_fields::gpu_calls;
/// let before = gpu_calls();
/// // ... run a step ...
/// let step = gpu_calls().since(&before);
/// assert_eq!(step.total(), step.launches + step.copies + step.memsets + step.records
///     + step.marks + step.waits + step.host_waits + step.allocations + step.frees
///     + step.graph_launches + step.graph_updates);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuCalls {
    /// Kernel launches (`cuLaunchKernel`).
    pub launches: u64,
    /// Copies between host and GPU or between GPUs (`cuMemcpy*Async`).
    pub copies: u64,
    /// Memsets (`cuMemsetD8Async`).
    pub memsets: u64,
    /// Events recorded on streams (`cuEventCreate` + `cuEventRecord`).
    pub records: u64,
    /// Timing marks for a GPU timeline (timed events).
    pub marks: u64,
    /// Streams made to wait on events (`cuStreamWaitEvent`).
    pub waits: u64,
    /// Host waits: stream and event synchronisations.
    pub host_waits: u64,
    /// Stream-ordered allocations (`cuMemAllocAsync`).
    pub allocations: u64,
    /// Stream-ordered frees (`cuMemFreeAsync`).
    pub frees: u64,
    /// CUDA graphs launched (`cuGraphLaunch`).
    pub graph_launches: u64,
    /// Kernel nodes of instantiated graphs given new arguments
    /// (`cuGraphExecKernelNodeSetParams`).
    pub graph_updates: u64,
    /// Bytes the copies moved from one device to another (host to GPU,
    /// GPU to host, GPU to GPU): what crosses a bus. A copy within one
    /// GPU's memory is not counted, nor are the copies inside a replayed
    /// CUDA graph. A size, not a call: [`GpuCalls::total`] leaves it out.
    pub copied_bytes: u64,
}

impl GpuCalls {
    /// The calls made since `earlier` (a reading taken before this one),
    /// kind by kind.
    pub fn since(&self, earlier: &GpuCalls) -> GpuCalls {
        GpuCalls {
            launches: self.launches.saturating_sub(earlier.launches),
            copies: self.copies.saturating_sub(earlier.copies),
            memsets: self.memsets.saturating_sub(earlier.memsets),
            records: self.records.saturating_sub(earlier.records),
            marks: self.marks.saturating_sub(earlier.marks),
            waits: self.waits.saturating_sub(earlier.waits),
            host_waits: self.host_waits.saturating_sub(earlier.host_waits),
            allocations: self.allocations.saturating_sub(earlier.allocations),
            frees: self.frees.saturating_sub(earlier.frees),
            graph_launches: self.graph_launches.saturating_sub(earlier.graph_launches),
            graph_updates: self.graph_updates.saturating_sub(earlier.graph_updates),
            copied_bytes: self.copied_bytes.saturating_sub(earlier.copied_bytes),
        }
    }

    /// All calls, whatever their kind (the bytes copied are not a call).
    pub fn total(&self) -> u64 {
        self.launches
            + self.copies
            + self.memsets
            + self.records
            + self.marks
            + self.waits
            + self.host_waits
            + self.allocations
            + self.frees
            + self.graph_launches
            + self.graph_updates
    }
}

impl std::ops::Add for GpuCalls {
    type Output = GpuCalls;

    /// The calls of two stretches of work together, kind by kind.
    fn add(self, other: GpuCalls) -> GpuCalls {
        GpuCalls {
            launches: self.launches + other.launches,
            copies: self.copies + other.copies,
            memsets: self.memsets + other.memsets,
            records: self.records + other.records,
            marks: self.marks + other.marks,
            waits: self.waits + other.waits,
            host_waits: self.host_waits + other.host_waits,
            allocations: self.allocations + other.allocations,
            frees: self.frees + other.frees,
            graph_launches: self.graph_launches + other.graph_launches,
            graph_updates: self.graph_updates + other.graph_updates,
            copied_bytes: self.copied_bytes + other.copied_bytes,
        }
    }
}

impl std::fmt::Display for GpuCalls {
    /// The non-zero kinds, e.g. `30 launches, 30 records, 58 waits`
    /// (`no GPU calls` when all are zero); the bytes copied are printed
    /// by the caller where it wants them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds = [
            (self.launches, "launches"),
            (self.copies, "copies"),
            (self.memsets, "memsets"),
            (self.records, "event records"),
            (self.marks, "timing marks"),
            (self.waits, "stream waits"),
            (self.host_waits, "host waits"),
            (self.allocations, "stream-ordered allocations"),
            (self.frees, "stream-ordered frees"),
            (self.graph_launches, "graph launches"),
            (self.graph_updates, "graph node updates"),
        ];
        let mut first = true;
        for (count, name) in kinds.iter().filter(|(count, _)| *count > 0) {
            if !first {
                f.write_str(", ")?;
            }
            write!(f, "{count} {name}")?;
            first = false;
        }
        if first {
            f.write_str("no GPU calls")?;
        }
        Ok(())
    }
}

/// A kind of call, the index of its counter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    Launch,
    Copy,
    Memset,
    Record,
    Mark,
    Wait,
    HostWait,
    Allocation,
    Free,
    GraphLaunch,
    GraphUpdate,
}

const KINDS: usize = 11;

static COUNTS: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];

/// The bytes the copies counted moved from one device to another.
static COPIED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Counts one call of `kind` that reached a device.
pub(crate) fn count(kind: Call) {
    COUNTS[kind as usize].fetch_add(1, Ordering::Relaxed);
}

/// Counts one copy that reached a device, of `bytes` bytes from one
/// device to another (`between`) or within one.
pub(crate) fn count_copy(bytes: usize, between: bool) {
    count(Call::Copy);
    if between {
        COPIED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// The calls made to GPUs (real or emulated) by this process so far.
pub fn gpu_calls() -> GpuCalls {
    let read = |kind: Call| COUNTS[kind as usize].load(Ordering::Relaxed);
    GpuCalls {
        launches: read(Call::Launch),
        copies: read(Call::Copy),
        memsets: read(Call::Memset),
        records: read(Call::Record),
        marks: read(Call::Mark),
        waits: read(Call::Wait),
        host_waits: read(Call::HostWait),
        allocations: read(Call::Allocation),
        frees: read(Call::Free),
        graph_launches: read(Call::GraphLaunch),
        graph_updates: read(Call::GraphUpdate),
        copied_bytes: COPIED_BYTES.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::GpuCalls;

    #[test]
    fn readings_subtract_add_and_print_kind_by_kind() {
        let earlier = GpuCalls {
            launches: 3,
            waits: 2,
            ..GpuCalls::default()
        };
        let later = GpuCalls {
            launches: 10,
            waits: 2,
            records: 4,
            host_waits: 1,
            copied_bytes: 4096,
            ..GpuCalls::default()
        };
        let step = later.since(&earlier);
        assert_eq!(
            step,
            GpuCalls {
                launches: 7,
                records: 4,
                host_waits: 1,
                copied_bytes: 4096,
                ..GpuCalls::default()
            }
        );
        // Bytes are a size, not a call.
        assert_eq!(step.total(), 12);
        assert_eq!(step + earlier, later);
        assert_eq!(
            step.to_string(),
            "7 launches, 4 event records, 1 host waits"
        );
        assert_eq!(GpuCalls::default().to_string(), "no GPU calls");
        // A reading older than `earlier` gives zeros, not a wrap-around.
        assert_eq!(earlier.since(&later).launches, 0);
    }
}
