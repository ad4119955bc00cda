//! Assignments on a GPU: the launches of generated CUDA kernels that compute
//! what [`crate::assign_node_then`] computes on the CPU, and enqueueing them
//! on a stream.
//!
//! [`gpu_launches`] checks an assignment exactly as the CPU path does (the
//! same binding of slots to fields, the same region, ghost-layer and
//! self-overlap checks, with the same errors), then describes each launch
//! as data ([`GpuLaunch`]): the kernel's PTX, the box, the grid that covers
//! it, and the by-value argument block holding every field's device
//! address and strides, the parameters' values and the patch's geometry.
//! [`GpuLaunch::enqueue`] loads the kernel on the stream's GPU (once per
//! GPU and kernel) and launches it; it returns before the GPU finishes.
//!
//! Differences from the CPU path, by design:
//! * Modifiers (boundary conditions) run after the main kernel on the
//!   same stream, which orders them as the CPU's row epilogues are
//!   ordered (each reads the main kernel's values). Two or more that
//!   write at most 65536 points in all run as one launch, a fill
//!   sequence: one block of threads runs them in order with a barrier
//!   between them, so a corner filled from an edge reads the edge's new
//!   values ([`crate::codegen::emit::cuda_sequence_function`]). Larger
//!   fills are a launch each, which spreads them over the GPU.
//! * One thread computes one point and reads the target only at offset 0
//!   or outside the box it writes (the checks guarantee it), so there is
//!   no race between threads and no copy through scratch rows.
//! * A launch that checks what it writes ([`gpu_launches_watching`]) does
//!   not stop at the first value that is not finite: every thread writes,
//!   and the first bad point in storage order is left in a device word
//!   (`atomicMin` of its storage key) that the caller reads after the
//!   kernel. The CPU may stop writing sooner; the point reported is the
//!   same, the first in storage order.

use crate::cache::lower_cached;
use crate::checks::{MaskedAssignment, Region, bind_slots, checked_region};
use crate::codegen::emit;
use crate::codegen::launch::LaunchShape;
use crate::codegen::nvrtc::{CudaKernel, cuda_checked_of, cuda_of, cuda_sequence_of};
use crate::error::{OperatorError, OperatorResult};
use crate::expr::BoundField;
use crate::ir::Node;
use crate::kernel::{Kernel, KernelField};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use watershed_fields::{
    Device, FieldError, FieldLayout, GpuFunction, GpuStream, IndexBox, LocationKind,
    ValidationEvent,
};

/// The field an assignment writes, on a GPU.
#[derive(Debug, Clone, Copy)]
pub struct GpuTarget<'a> {
    /// The field's name (for errors).
    pub name: &'a str,
    /// Its layout.
    pub layout: &'a FieldLayout,
    /// Its location kind.
    pub kind: LocationKind,
    /// The GPU holding it.
    pub device: Device,
    /// The device address of its first allocated element (ghosts included).
    pub pointer: u64,
    /// Its number of allocated elements.
    pub len: usize,
}

/// One launch of a generated CUDA kernel, as data.
#[derive(Debug, Clone)]
pub struct GpuLaunch {
    /// The kernel: its name, CUDA C source, PTX and argument layout.
    pub kernel: Arc<CudaKernel>,
    /// The box of the target's indices it writes.
    pub region: IndexBox,
    /// Blocks and threads covering `region`.
    pub shape: LaunchShape,
    /// The by-value argument struct ([`crate::codegen::launch::CudaArguments`]).
    pub arguments: Vec<u8>,
    /// The target's point (0, 0, 0) as a device address, and its y and z
    /// strides in elements.
    pub target: (u64, i64, i64),
    /// Copies into the fields it reads that may still run: the stream
    /// waits on them before the kernel.
    pub waits: Vec<ValidationEvent>,
    /// For a launch that checks what it writes ([`gpu_launches_watching`]):
    /// the device address of the `u64` the kernel lowers to the storage
    /// key of the first point that is not finite ([`Self::not_finite_at`]).
    pub watch: Option<u64>,
    /// For a fill sequence (masked assignments run in order by one block,
    /// [`crate::codegen::emit::cuda_sequence_function`]): the box of each
    /// assignment, packed into the argument struct, and `region` is
    /// their bounding box. Empty for a launch over `region`.
    pub sequence: Vec<IndexBox>,
}

impl GpuTarget<'_> {
    /// The target's point (0, 0, 0) as a device address, and its y and z
    /// strides in elements (what [`GpuLaunch::target`] holds).
    fn point_zero_and_strides(&self) -> (u64, i64, i64) {
        let s = self.layout.strides();
        (
            point_zero(self.pointer, self.layout),
            s[1] as i64,
            s[2] as i64,
        )
    }
}

impl GpuLaunch {
    /// The kernel's parameters after the struct, as the signature orders
    /// them: `t`, `tsy`, `tsz`, `x0`, `x1`, `j0`, `j1`, `k0`, `k1`, then
    /// `bad` for a watching launch, each 8 bytes in the platform's byte
    /// order; a fill sequence takes `t`, `tsy` and `tsz` only.
    pub fn trailing(&self) -> Vec<[u8; 8]> {
        let (t, tsy, tsz) = self.target;
        if !self.sequence.is_empty() {
            return vec![t.to_ne_bytes(), tsy.to_ne_bytes(), tsz.to_ne_bytes()];
        }
        let r = &self.region;
        let mut trailing = vec![
            t.to_ne_bytes(),
            tsy.to_ne_bytes(),
            tsz.to_ne_bytes(),
            (r.lo[0] as i64).to_ne_bytes(),
            (r.hi[0] as i64).to_ne_bytes(),
            (r.lo[1] as i64).to_ne_bytes(),
            (r.hi[1] as i64).to_ne_bytes(),
            (r.lo[2] as i64).to_ne_bytes(),
            (r.hi[2] as i64).to_ne_bytes(),
        ];
        if let Some(bad) = self.watch {
            trailing.push(bad.to_ne_bytes());
        }
        trailing
    }

    /// The point a watching launch's key names (`key` as the kernel left
    /// it in its `u64`): `None` when it is still all bits set (every value
    /// written was finite) or names no point of the region.
    pub fn not_finite_at(&self, key: u64) -> Option<[isize; 3]> {
        if key == u64::MAX {
            return None;
        }
        let offset = i64::try_from(key).ok()? - emit::FINITE_KEY_OFFSET;
        let (_, tsy, tsz) = self.target;
        let r = &self.region;
        for k in r.lo[2]..r.hi[2] {
            for j in r.lo[1]..r.hi[1] {
                let x = offset - j as i64 * tsy - k as i64 * tsz;
                if (r.lo[0] as i64..r.hi[0] as i64).contains(&x) {
                    return Some([x as isize, j, k]);
                }
            }
        }
        None
    }

    /// Enqueues the launch on `stream` (after waiting, on the stream, for
    /// the copies in [`Self::waits`]). Returns before the GPU finishes.
    ///
    /// # Safety
    /// Every device address in the launch (fields, target and the watched
    /// word) must still be the memory [`gpu_launches`] was given, on the
    /// stream's GPU, and nothing may free it or write what the kernel
    /// reads or writes until the kernel completes (an event recorded on
    /// `stream` after it).
    pub unsafe fn enqueue(&self, stream: &GpuStream) -> OperatorResult<()> {
        let device = stream.device();
        let Device::Gpu(ordinal) = device else {
            return Err(OperatorError::Backend {
                what: format!("launching CUDA kernel {}", self.kernel.name),
                reason: "the stream is not on a GPU".into(),
            });
        };
        let function = loaded_function(ordinal, &self.kernel)?;
        for event in &self.waits {
            stream.wait(event)?;
        }
        let trailing = self.trailing();
        let mut blocks: Vec<&[u8]> = Vec::with_capacity(11);
        blocks.push(&self.arguments);
        blocks.extend(trailing.iter().map(|b| b.as_slice()));
        // Named only when the launch fails: formatting it for every launch
        // cost as much as the launch.
        let action = || {
            format!(
                "launching CUDA kernel {} over {:?}..{:?}",
                self.kernel.name, self.region.lo, self.region.hi
            )
        };
        // SAFETY: the blocks are the kernel's parameters in its signature's
        // order and sizes (the struct packed for its argument layout, then
        // nine 8-byte numbers, and the watched word's address for a
        // watching kernel); the addresses are valid as the caller
        // guarantees, and `gpu_launches` checked every read and write of
        // the box against the buffers' lengths.
        unsafe {
            stream
                .launch(
                    &function,
                    self.shape.grid,
                    self.shape.block,
                    &blocks,
                    "launching a CUDA kernel",
                )
                .map_err(|error| match error {
                    FieldError::Cuda {
                        device, message, ..
                    } => FieldError::Cuda {
                        device,
                        action: action(),
                        message,
                    },
                    other => other,
                })?;
        }
        Ok(())
    }
}

/// The kernel `kernel` loaded on GPU `ordinal`, loading it on first use.
pub(crate) fn loaded_function(ordinal: usize, kernel: &CudaKernel) -> OperatorResult<GpuFunction> {
    // Per GPU, by kernel name: looked up by `&str`, so that the lookup
    // before every launch allocates nothing.
    type Loaded = Mutex<HashMap<usize, HashMap<String, GpuFunction>>>;
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    let loaded = LOADED.get_or_init(Default::default);
    let found = loaded
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&ordinal)
        .and_then(|kernels| kernels.get(kernel.name.as_str()))
        .cloned();
    if let Some(found) = found {
        return Ok(found);
    }
    let function = GpuFunction::load(ordinal, &kernel.ptx, &kernel.source, &kernel.name)?;
    loaded
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(ordinal)
        .or_default()
        .insert(kernel.name.clone(), function.clone());
    Ok(function)
}

/// The launches that assign `root` into `target` over `region`, then each
/// masked assignment of `then` over its box, in order. Leaves with id
/// `target_leaf` read the target. Every field of `fields` the kernels read
/// must be valid on the target's GPU. Nothing is enqueued.
///
/// Refuses, with the CPU path's errors, a field on another patch, missing
/// ghost layers, a region outside the target and a read of the target at
/// a non-zero offset inside the box written.
pub fn gpu_launches(
    target: GpuTarget<'_>,
    target_leaf: u64,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    region: Region,
    then: &[MaskedAssignment],
) -> OperatorResult<Vec<GpuLaunch>> {
    launches(target, target_leaf, root, fields, region, then, None)
}

/// [`gpu_launches`] whose main kernel checks what it writes, as
/// `AssignOptions::check_finite` does on the CPU: it lowers the `u64` at
/// device address `bad` (set it to all bits before the launch) to the
/// storage key of the first point it wrote that is not finite;
/// [`GpuLaunch::not_finite_at`] turns the key back into the point. The
/// modifiers after it are not checked, as on the CPU.
pub fn gpu_launches_watching(
    target: GpuTarget<'_>,
    target_leaf: u64,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    region: Region,
    then: &[MaskedAssignment],
    bad: u64,
) -> OperatorResult<Vec<GpuLaunch>> {
    launches(target, target_leaf, root, fields, region, then, Some(bad))
}

fn launches(
    target: GpuTarget<'_>,
    target_leaf: u64,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    region: Region,
    then: &[MaskedAssignment],
    watch: Option<u64>,
) -> OperatorResult<Vec<GpuLaunch>> {
    let mut launches = Vec::with_capacity(1 + then.len());
    if let Some(launch) = one_launch(target, target_leaf, root, fields, region, watch)? {
        launches.push(launch);
    }
    if then.len() >= 2
        && let Some(sequence) = fill_sequence(target, target_leaf, fields, then)?
    {
        launches.push(sequence);
        return Ok(launches);
    }
    for (b, node) in then {
        if let Some(launch) = one_launch(target, target_leaf, node, fields, Region::Box(*b), None)?
        {
            launches.push(launch);
        }
    }
    Ok(launches)
}

/// Most points a fill sequence writes: one block of threads runs it, so
/// larger fills are faster as launches of their own.
const SEQUENCE_POINTS: usize = 1 << 16;

/// Threads of the block that runs a fill sequence.
const SEQUENCE_THREADS: u32 = 256;

/// The masked assignments `then` as one launch of a fill sequence, or
/// `None` when fewer than two write points or they write more than
/// [`SEQUENCE_POINTS`] (then each is a launch of its own).
fn fill_sequence(
    target: GpuTarget<'_>,
    target_leaf: u64,
    fields: &[&dyn BoundField],
    then: &[MaskedAssignment],
) -> OperatorResult<Option<GpuLaunch>> {
    let mut parts = Vec::with_capacity(then.len());
    let mut points = 0usize;
    for (b, node) in then {
        if let Some(part) = prepare(target, target_leaf, node, fields, Region::Box(*b))? {
            points = points.saturating_add(part.region.len());
            parts.push(part);
        }
    }
    if parts.len() < 2 || points > SEQUENCE_POINTS {
        return Ok(None);
    }
    let kernels: Vec<&Kernel> = parts.iter().map(|p| &*p.lowered.kernel).collect();
    let cuda = cuda_sequence_of(&kernels)?;
    let mut arguments = Vec::new();
    let mut waits = Vec::new();
    let mut bounds = parts[0].region;
    for part in &parts {
        arguments.extend_from_slice(&part.arguments);
        waits.extend(part.waits.iter().cloned());
        bounds = IndexBox::new(
            [0, 1, 2].map(|a| bounds.lo[a].min(part.region.lo[a])),
            [0, 1, 2].map(|a| bounds.hi[a].max(part.region.hi[a])),
        );
    }
    for part in &parts {
        let r = &part.region;
        for value in [r.lo[0], r.hi[0], r.lo[1], r.hi[1], r.lo[2], r.hi[2]] {
            arguments.extend_from_slice(&(value as i64).to_ne_bytes());
        }
    }
    Ok(Some(GpuLaunch {
        target: target.point_zero_and_strides(),
        kernel: cuda,
        region: bounds,
        shape: LaunchShape {
            block: [SEQUENCE_THREADS, 1, 1],
            grid: [1, 1, 1],
        },
        arguments,
        waits,
        watch: None,
        sequence: parts.iter().map(|p| p.region).collect(),
    }))
}

/// One assignment checked and bound for a GPU: its lowered kernel, the box
/// it writes, its argument struct and the copies it waits for.
struct Prepared {
    lowered: Arc<crate::cache::LoweredKernel>,
    region: IndexBox,
    arguments: Vec<u8>,
    waits: Vec<ValidationEvent>,
}

/// Checks and binds one assignment (`None`: its box is empty), with the
/// CPU path's errors.
fn prepare(
    target: GpuTarget<'_>,
    target_leaf: u64,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    region: Region,
) -> OperatorResult<Option<Prepared>> {
    if let Some(found) = root.location()
        && found != target.kind
    {
        return Err(OperatorError::LocationMismatch {
            target: target.name.to_string(),
            expected: target.kind,
            found,
        });
    }
    let patch = target.layout.patch();
    let lowered = lower_cached(root, patch, true)?;
    let kernel = &lowered.kernel;
    let slots = bind_slots(&lowered, Some(target_leaf), fields, patch, target.name)?;
    let region = checked_region(kernel, &slots, target.layout, target.name, region)?;
    if region.is_empty() {
        return Ok(None);
    }
    let launch = || format!("launching the assignment to {} on a GPU", target.name);
    let mut addresses = Vec::with_capacity(slots.len());
    let mut strides = Vec::with_capacity(slots.len());
    let mut waits = Vec::new();
    for (k, slot) in kernel.fields.iter().zip(&slots) {
        let (name, layout, pointer, len) = match slot {
            None => (target.name, target.layout, target.pointer, target.len),
            Some(field) => {
                let buffer = field.gpu_buffer(target.device)?;
                if let Some(event) = buffer.ready {
                    waits.push(event);
                }
                (field.name(), field.layout(), buffer.pointer, buffer.len)
            }
        };
        let reads = slot_reads(k, &region);
        check_inside(layout, len, &reads, name, launch)?;
        addresses.push(point_zero(pointer, layout));
        let s = layout.strides();
        strides.push((s[1] as i64, s[2] as i64));
    }
    check_inside(target.layout, target.len, &region, target.name, launch)?;
    let arguments = emit::cuda_arguments(kernel).pack(
        &addresses,
        &strides,
        &lowered.parameter_values(),
        &emit::geometry(kernel, patch),
    )?;
    Ok(Some(Prepared {
        lowered,
        region,
        arguments,
        waits,
    }))
}

/// The launch of one assignment (`None`: its box is empty).
fn one_launch(
    target: GpuTarget<'_>,
    target_leaf: u64,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    region: Region,
    watch: Option<u64>,
) -> OperatorResult<Option<GpuLaunch>> {
    let Some(prepared) = prepare(target, target_leaf, root, fields, region)? else {
        return Ok(None);
    };
    let kernel = &prepared.lowered.kernel;
    let cuda = match watch {
        Some(_) => cuda_checked_of(kernel)?,
        None => cuda_of(kernel)?,
    };
    Ok(Some(GpuLaunch {
        target: target.point_zero_and_strides(),
        kernel: cuda,
        region: prepared.region,
        shape: LaunchShape::covering(prepared.region)?,
        arguments: prepared.arguments,
        waits: prepared.waits,
        watch,
        sequence: Vec::new(),
    }))
}

/// The points of its field that kernel slot `k` reads over `region` (on
/// the field's own grid for an inter-grid transfer).
pub(crate) fn slot_reads(k: &KernelField, region: &IndexBox) -> IndexBox {
    let reads = IndexBox::new(
        [0, 1, 2].map(|a| region.lo[a] + k.extent.min[a]),
        [0, 1, 2].map(|a| region.hi[a] + k.extent.max[a]),
    );
    k.transfer
        .and_then(|op| op.transfer_reads(&reads))
        .unwrap_or(reads)
}

/// The device address of index (0, 0, 0) of a field whose allocation starts
/// at `pointer` (the ghost layers come first).
pub(crate) fn point_zero(pointer: u64, layout: &FieldLayout) -> u64 {
    let origin = layout.linear_index([0; 3]) as u64;
    pointer.wrapping_add(origin.wrapping_mul(8))
}

/// Refuses a box whose first or last point lies outside a buffer of `len`
/// elements with `layout` (a last line of defence: the region checks
/// above already keep every read within the ghost layers).
pub(crate) fn check_inside(
    layout: &FieldLayout,
    len: usize,
    points: &IndexBox,
    field: &str,
    launch: impl Fn() -> String,
) -> OperatorResult<()> {
    let inside = points.intersect(&layout.allocated()) == *points;
    // Inside the allocation, the last point's linear index is the largest.
    let fits = inside && layout.linear_index([0, 1, 2].map(|a| points.hi[a] - 1)) < len;
    if fits {
        return Ok(());
    }
    Err(OperatorError::Backend {
        what: launch(),
        reason: format!(
            "it would touch points {:?}..{:?} of {field}, outside its {} allocated elements",
            points.lo, points.hi, len
        ),
    })
}
