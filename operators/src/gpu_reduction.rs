//! Reductions on a GPU: the launch of a generated CUDA kernel that reduces
//! an expression over a region (what [`crate::reduce`] computes on the
//! CPU), and the host's last step.
//!
//! [`gpu_reduction`] checks the reduction exactly as the CPU path does
//! (the same slot binding, region and ghost-layer checks, with the same
//! errors), then describes the launch as data ([`GpuReduction`]). The
//! kernel ([`crate::codegen::emit::cuda_reduction_function`]) runs one
//! thread per row of the region and reduces the row in the CPU's order
//! (blocks of `TILE` points, eight interleaved accumulators merged
//! pairwise), writing one partial result per row to a device buffer the
//! caller owns; [`GpuReduction::finish`] folds the partials, copied back
//! to the host, in row order as the CPU does. So a GPU reduction returns
//! the CPU's bits wherever the point values are the same (generated
//! kernels are compiled without contraction on both sides), for any
//! number of threads on either side.
//!
//! One thread per row leaves a GPU underused on small patches; a block
//! tree over each row would be faster but would change the order of the
//! additions, and with it the last bits.

use crate::cache::lower_cached;
use crate::checks::{CheckedReduction, ReduceRegion, bind_slots};
use crate::codegen::emit;
use crate::codegen::launch::LaunchShape;
use crate::codegen::nvrtc::{CudaKernel, cuda_reduction_of};
use crate::error::{OperatorError, OperatorResult};
use crate::expr::BoundField;
use crate::gpu::{check_inside, loaded_function, point_zero, slot_reads};
use crate::ir::Node;
use crate::vocabulary::Reduction;
use std::sync::Arc;
use watershed_fields::{Device, GpuStream, IndexBox, LocationKind, MemoryPool, ValidationEvent};

/// One reduction on a GPU, as data: the kernel, its arguments and the
/// region whose rows it reduces.
#[derive(Debug, Clone)]
pub struct GpuReduction {
    /// The kernel: its name, CUDA C source, PTX and argument layout.
    pub kernel: Arc<CudaKernel>,
    /// What it accumulates.
    pub reduction: Reduction,
    /// The box of points it reduces.
    pub region: IndexBox,
    /// One thread per row of `region` (`None` when the region is empty:
    /// nothing is launched and the result is the reduction's identity).
    pub shape: Option<LaunchShape>,
    /// The by-value argument struct ([`crate::codegen::launch::CudaArguments`]).
    pub arguments: Vec<u8>,
    /// Copies into the fields it reads that may still run: the stream
    /// waits on them before the kernel.
    pub waits: Vec<ValidationEvent>,
}

impl GpuReduction {
    /// The partial results the kernel writes: one per row of the region
    /// (`(j, k)` rows, j fastest). The caller provides a device buffer of
    /// at least this many `f64`.
    pub fn rows(&self) -> usize {
        let [_, ny, nz] = self.region.extent();
        if self.region.is_empty() { 0 } else { ny * nz }
    }

    /// The kernel's parameters after the struct, as the signature orders
    /// them: `partials`, `x0`, `x1`, `j0`, `j1`, `k0`, `k1`, each 8 bytes
    /// in the platform's byte order.
    pub fn trailing(&self, partials: u64) -> [[u8; 8]; 7] {
        let r = &self.region;
        [
            partials.to_ne_bytes(),
            (r.lo[0] as i64).to_ne_bytes(),
            (r.hi[0] as i64).to_ne_bytes(),
            (r.lo[1] as i64).to_ne_bytes(),
            (r.hi[1] as i64).to_ne_bytes(),
            (r.lo[2] as i64).to_ne_bytes(),
            (r.hi[2] as i64).to_ne_bytes(),
        ]
    }

    /// Enqueues the kernel on `stream` (after waiting, on the stream, for
    /// the copies in [`Self::waits`]); it writes [`Self::rows`] partial
    /// results from the device address `partials`. Returns before the GPU
    /// finishes; copy the partials back after the stream reaches them and
    /// call [`Self::finish`].
    ///
    /// # Safety
    /// Every device address in the launch must still be the memory
    /// [`gpu_reduction`] was given, on the stream's GPU, and nothing may
    /// free it or write it until the kernel completes; `partials` must be
    /// a device buffer of at least [`Self::rows`] `f64` on that GPU that
    /// nothing else uses meanwhile.
    pub unsafe fn enqueue(&self, stream: &GpuStream, partials: u64) -> OperatorResult<()> {
        let Some(shape) = self.shape else {
            return Ok(());
        };
        let Device::Gpu(ordinal) = stream.device() else {
            return Err(OperatorError::Backend {
                what: format!("launching CUDA reduction {}", self.kernel.name),
                reason: "the stream is not on a GPU".into(),
            });
        };
        let function = loaded_function(ordinal, &self.kernel)?;
        for event in &self.waits {
            stream.wait(event)?;
        }
        let trailing = self.trailing(partials);
        let mut blocks: Vec<&[u8]> = Vec::with_capacity(8);
        blocks.push(&self.arguments);
        blocks.extend(trailing.iter().map(|b| b.as_slice()));
        let action = format!(
            "launching CUDA {:?} reduction {} over {:?}..{:?}",
            self.reduction, self.kernel.name, self.region.lo, self.region.hi
        );
        // SAFETY: the blocks are the kernel's parameters in its signature's
        // order and sizes (the packed struct, then seven 8-byte numbers);
        // the field addresses are valid as the caller guarantees and
        // `gpu_reduction` checked every read of the region against the
        // buffers' lengths; the kernel writes `partials[0..rows)` only,
        // which the caller guarantees is there.
        unsafe {
            stream.launch(&function, shape.grid, shape.block, &blocks, &action)?;
        }
        Ok(())
    }

    /// Runs the reduction on `stream` and returns its value: enqueues the
    /// kernel into row partials from the GPU's pool, copies them to the
    /// host on the same stream, waits for the stream and folds them
    /// ([`Self::finish`]). `what` names the reduction in errors.
    ///
    /// # Safety
    /// As [`Self::enqueue`] for the fields the kernel reads: their device
    /// memory must stay allocated and unwritten until the stream reaches
    /// the kernel (this call waits for that before it returns, unless
    /// waiting itself fails).
    pub unsafe fn run_and_wait(&self, stream: &GpuStream, what: &str) -> OperatorResult<f64> {
        let rows = self.rows();
        let mut partials = vec![0.0_f64; rows];
        if rows > 0 {
            let device = stream.device();
            let bytes = rows.checked_mul(8).ok_or_else(|| OperatorError::Backend {
                what: format!("reducing {what} on {device}"),
                reason: format!("{rows} row partials overflow a byte count"),
            })?;
            let block =
                MemoryPool::global(device)?.allocate(bytes, format!("row partials of {what}"))?;
            let action = format!("copying the row partials of {what} to the host");
            // SAFETY: the caller keeps the fields read as `enqueue` needs;
            // `block` holds `rows` values on this GPU, used by nothing else
            // until the stream has finished with it; `partials` is host
            // memory of `bytes` bytes. Both outlive the wait below, and are
            // leaked instead of freed if the wait fails (the kernel or the
            // copy may still be running then).
            let enqueued = unsafe {
                self.enqueue(stream, block.address() as u64).and_then(|()| {
                    Ok(stream.copy(
                        (device, block.address()),
                        (Device::Cpu, partials.as_mut_ptr() as usize),
                        bytes,
                        &action,
                    )?)
                })
            };
            if let Err(error) = stream.synchronize() {
                std::mem::forget(block);
                std::mem::forget(partials);
                return Err(error.into());
            }
            enqueued?;
        }
        self.finish(&partials)
    }

    /// The result from the row partials the kernel wrote, folded in row
    /// order as the CPU folds its rows. Refuses a slice of another length.
    pub fn finish(&self, partials: &[f64]) -> OperatorResult<f64> {
        if partials.len() != self.rows() {
            return Err(OperatorError::Backend {
                what: format!("finishing CUDA reduction {}", self.kernel.name),
                reason: format!(
                    "{} partial results given, the launch writes {} (one per row)",
                    partials.len(),
                    self.rows()
                ),
            });
        }
        Ok(partials.iter().fold(self.reduction.identity(), |a, &b| {
            self.reduction.merge(a, b)
        }))
    }
}

/// The launch that reduces `root` (a `kind` expression) over `region` of
/// `fields` on `device`. Every field the kernel reads must be valid on
/// that GPU. Nothing is enqueued. Refuses, with the CPU path's errors, a
/// field on another patch, missing ghost layers or a missing field; and
/// a kernel CUDA cannot take (with the reason: reduce on the CPU then).
pub fn gpu_reduction(
    root: &Arc<Node>,
    kind: LocationKind,
    fields: &[&dyn BoundField],
    reduction: Reduction,
    region: ReduceRegion,
    device: Device,
) -> OperatorResult<GpuReduction> {
    let checked = CheckedReduction::new(root, kind, fields, reduction, region)?;
    let region = checked.region;
    let patch = checked.patch().clone();
    // The generic kernel (parameters as arguments), as the C back end
    // runs it; its slots are bound again because an interpreter kernel's
    // may have been specialised.
    let lowered = lower_cached(root, &patch, false)?;
    let kernel = &lowered.kernel;
    let slots = bind_slots(&lowered, None, fields, &patch, "")?;
    let cuda = cuda_reduction_of(kernel, reduction)?;
    let launch = || format!("launching the {reduction:?} reduction of {root} on a GPU");
    let mut addresses = Vec::with_capacity(slots.len());
    let mut strides = Vec::with_capacity(slots.len());
    let mut waits = Vec::new();
    for (k, slot) in kernel.fields.iter().zip(&slots) {
        let Some(field) = slot else {
            return Err(OperatorError::Backend {
                what: launch(),
                reason: "a reduction has no target to read".into(),
            });
        };
        let buffer = field.gpu_buffer(device)?;
        if let Some(event) = buffer.ready {
            waits.push(event);
        }
        if !region.is_empty() {
            let reads = slot_reads(k, &region);
            check_inside(field.layout(), buffer.len, &reads, field.name(), launch)?;
        }
        addresses.push(point_zero(buffer.pointer, field.layout()));
        let s = field.layout().strides();
        strides.push((s[1] as i64, s[2] as i64));
    }
    let arguments = cuda.arguments.pack(
        &addresses,
        &strides,
        &lowered.parameter_values(),
        &emit::geometry(kernel, &patch),
    )?;
    let shape = if region.is_empty() {
        None
    } else {
        let [_, ny, nz] = region.extent();
        let rows = ny.checked_mul(nz).ok_or_else(|| OperatorError::Backend {
            what: launch(),
            reason: format!("{ny} x {nz} rows overflow"),
        })?;
        let rows = isize::try_from(rows).map_err(|_| OperatorError::Backend {
            what: launch(),
            reason: format!("{rows} rows are more than a launch can index"),
        })?;
        Some(LaunchShape::covering(IndexBox::new(
            [0, 0, 0],
            [rows, 1, 1],
        ))?)
    };
    Ok(GpuReduction {
        kernel: cuda,
        reduction,
        region,
        shape,
        arguments,
        waits,
    })
}
