//! Points of a field read and written on the GPU that holds it: how a
//! field living on a GPU gives and takes the ghost points of a halo
//! exchange (the seams of a decomposed run) without the whole field
//! crossing to the host and back.
//!
//! [`gather_points_on_gpu`] gathers the values at a list of linear
//! indices of one or more fields into a device buffer (one launch per
//! field, one thread per point) and copies only those values to the
//! host, in one copy; [`scatter_points_on_gpu`] copies values to the
//! device in one copy and scatters them into the fields. The values
//! travel through one block of the host pool, which is pinned whenever
//! the process sees a GPU ([`MemoryPool::global`]), and one block of the
//! GPU's pool. The index lists are kept on each GPU after their first
//! use (a halo route reads and writes the same points every step),
//! compared value by value with the list asked for, never trusted to a
//! hash alone. Both calls wait for their stream before returning, since
//! the values are wanted on the host at once (for a message to another
//! rank) or the host's buffer is reused: one host wait per call.
//!
//! The kernels are written by hand, not generated from the IR: a gather
//! and a scatter through an index list are not assignments of the field
//! language. They are compiled with NVRTC like every kernel (and for the
//! host on emulated GPUs), once per process and GPU.

use crate::codegen::launch::CudaArguments;
use crate::codegen::nvrtc::{CudaKernel, compile_unit};
use crate::error::{OperatorError, OperatorResult};
use crate::gpu::loaded_function;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use watershed_fields::{Device, GpuBuffer, GpuStream, MemoryPool, PoolBlock};

/// Threads per block of the point kernels.
const BLOCK: u32 = 256;

/// The gather: `values[i] = field[points[i]]` for `i < a.n`.
const GATHER: &str = "ws_gather_points";

/// The scatter: `field[points[i]] = values[i]` for `i < a.n`.
const SCATTER: &str = "ws_scatter_points";

/// The CUDA C of the gather and of the scatter, each its own translation
/// unit (header-free, its argument struct first, as the emulated GPU
/// reads a kernel's signature).
fn unit(name: &str) -> String {
    let (field, values, body) = if name == GATHER {
        (
            "const double *field",
            "double *values",
            "values[i] = field[points[i]];",
        )
    } else {
        (
            "double *field",
            "const double *values",
            "field[points[i]] = values[i];",
        )
    };
    format!(
        "struct {name}_args {{ unsigned long long n; }};\n\
         extern \"C\" __global__ void {name}(const struct {name}_args a, {field}, const unsigned long long *points, {values})\n\
         {{\n\
         \x20   unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20   if (i < a.n) {{ {body} }}\n\
         }}\n"
    )
}

/// Kernel `name` (the gather or the scatter), compiled once per process.
fn kernel(name: &'static str) -> OperatorResult<Arc<CudaKernel>> {
    static GATHER_KERNEL: OnceLock<Arc<CudaKernel>> = OnceLock::new();
    static SCATTER_KERNEL: OnceLock<Arc<CudaKernel>> = OnceLock::new();
    let slot = if name == GATHER {
        &GATHER_KERNEL
    } else {
        &SCATTER_KERNEL
    };
    if let Some(done) = slot.get() {
        return Ok(done.clone());
    }
    let source = unit(name);
    let ptx = compile_unit(name, &source)?;
    let compiled = Arc::new(CudaKernel {
        name: name.to_string(),
        source,
        ptx,
        arguments: CudaArguments {
            fields: 0,
            parameters: 0,
            geometry: 0,
        },
    });
    Ok(slot.get_or_init(|| compiled).clone())
}

/// The CUDA C translation unit of the gather (`gather`) or of the scatter
/// (NVRTC compiles it; tests read it).
pub fn point_kernel_source(gather: bool) -> String {
    unit(if gather { GATHER } else { SCATTER })
}

/// Index lists kept on the GPUs: at most this many, then the cache is
/// emptied (a run's halo routes have a few dozen).
const CACHED_LISTS: usize = 1024;

/// An index list on a GPU, with the host's copy it is compared with.
struct DeviceList {
    points: Vec<usize>,
    block: PoolBlock,
}

/// The index lists on each GPU, by (GPU, hash of the list).
type ListCache = Mutex<HashMap<(usize, u64), Vec<Arc<DeviceList>>>>;

/// `points` on GPU `ordinal`: the cached list when one equals it, else
/// a new device block that `stream` fills from the start of `staging` (a
/// host block of at least `points.len()` 8-byte words that must outlive
/// the stream's copy) and that the cache keeps.
fn device_list(
    ordinal: usize,
    points: &[usize],
    stream: &GpuStream,
    staging: &PoolBlock,
    what: &str,
) -> OperatorResult<Arc<DeviceList>> {
    static CACHE: OnceLock<ListCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    points.hash(&mut hasher);
    let key = (ordinal, hasher.finish());
    if let Some(found) = cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .and_then(|lists| lists.iter().find(|l| l.points == points))
    {
        return Ok(found.clone());
    }
    let bytes = points.len() * 8;
    let block = MemoryPool::global(Device::Gpu(ordinal))?
        .allocate(bytes, format!("halo point list of {what}"))?;
    // SAFETY: `staging` is a host block of at least `bytes` bytes that
    // this transfer alone uses, 8-byte aligned.
    let host =
        unsafe { std::slice::from_raw_parts_mut(staging.address() as *mut u64, points.len()) };
    for (slot, &point) in host.iter_mut().zip(points) {
        *slot = point as u64;
    }
    // SAFETY: both blocks hold `bytes` bytes; the caller keeps `staging`
    // until the stream has run the copy, and the device block is kept by
    // the cache (and by the caller's `Arc`) as long as any launch uses it.
    unsafe {
        stream.copy(
            (Device::Cpu, staging.address()),
            (Device::Gpu(ordinal), block.address()),
            bytes,
            &format!("copying the halo point list of {what} to GPU {ordinal}"),
        )?;
    }
    let list = Arc::new(DeviceList {
        points: points.to_vec(),
        block,
    });
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if cache.values().map(Vec::len).sum::<usize>() >= CACHED_LISTS {
        cache.clear();
    }
    cache.entry(key).or_default().push(list.clone());
    Ok(list)
}

/// Refuses a point outside any of `buffers` (each of its `len` elements),
/// or buffers on different GPUs, naming `what`.
fn check_buffers(buffers: &[GpuBuffer], points: &[usize], what: &str) -> OperatorResult<usize> {
    let refuse = |device: Device, reason: String| {
        Err(OperatorError::Backend {
            what: format!("moving halo points of {what} on {device}"),
            reason,
        })
    };
    let Some(first) = buffers.first() else {
        return refuse(Device::Cpu, "no field given".into());
    };
    let Device::Gpu(ordinal) = first.device else {
        return refuse(first.device, "the field is not on a GPU".into());
    };
    let shortest = buffers.iter().map(|b| b.len).min().unwrap_or(0);
    for buffer in buffers {
        if buffer.device != first.device {
            return refuse(
                buffer.device,
                format!(
                    "the fields lie on {} and {}; move them together",
                    first.device, buffer.device
                ),
            );
        }
    }
    if let Some(&outside) = points.iter().find(|&&p| p >= shortest) {
        return refuse(
            first.device,
            format!(
                "linear index {outside} lies outside the field's {shortest} points; the halo route was made for another layout"
            ),
        );
    }
    Ok(ordinal)
}

/// What a transfer does with the values: gather them into `Out`, or
/// scatter those of `In` (field after field, each `points.len()` values).
enum Values<'v> {
    Out(&'v mut [f64]),
    In(&'v [f64]),
}

impl Values<'_> {
    fn len(&self) -> usize {
        match self {
            Values::Out(values) => values.len(),
            Values::In(values) => values.len(),
        }
    }
}

/// Runs the gather or the scatter of the points `points` of every field
/// of `buffers` (all on one GPU): the index list from the GPU's cache,
/// the values staged through a block of the host pool and a block of
/// the GPU's pool in one copy, one launch per field. Waits for the
/// stream.
fn transfer(
    buffers: &[GpuBuffer],
    points: &[usize],
    mut values: Values<'_>,
    what: &str,
) -> OperatorResult<()> {
    let n = points.len();
    if n == 0 || buffers.is_empty() {
        return Ok(());
    }
    let gather = matches!(values, Values::Out(_));
    let overflow = || OperatorError::Backend {
        what: format!("moving halo points of {what}"),
        reason: format!(
            "{n} points of {} field(s) overflow a byte count or a launch grid",
            buffers.len()
        ),
    };
    let total = n.checked_mul(buffers.len()).ok_or_else(overflow)?;
    if values.len() != total {
        return Err(OperatorError::Backend {
            what: format!("moving halo points of {what}"),
            reason: format!(
                "{n} point(s) of {} field(s) but {} value(s); give one value per point and field",
                buffers.len(),
                values.len()
            ),
        });
    }
    let ordinal = check_buffers(buffers, points, what)?;
    let device = Device::Gpu(ordinal);
    let bytes = total.checked_mul(8).ok_or_else(overflow)?;
    let list_bytes = n.checked_mul(8).ok_or_else(overflow)?;
    let blocks = u32::try_from(n.div_ceil(BLOCK as usize)).map_err(|_| overflow())?;
    let name = if gather { GATHER } else { SCATTER };
    let function = loaded_function(ordinal, kernel(name)?.as_ref())?;
    // The host block: the list (when new) first, then the values.
    let host_bytes = list_bytes.checked_add(bytes).ok_or_else(overflow)?;
    let host =
        MemoryPool::global(Device::Cpu)?.allocate(host_bytes, format!("halo values of {what}"))?;
    let host_values = host.address() + list_bytes;
    let staged = MemoryPool::global(device)?.allocate(bytes, format!("halo values of {what}"))?;
    let stream = GpuStream::new(ordinal)?;
    for event in buffers.iter().filter_map(|b| b.ready.as_ref()) {
        stream.wait(event)?;
    }
    let list = device_list(ordinal, points, &stream, &host, what)?;
    let action = format!("moving {n} halo points of {what} on {device}");
    let enqueued = (|| -> OperatorResult<()> {
        if let Values::In(values) = &values {
            // SAFETY: the host block's values part holds `total` f64 that
            // this call alone uses (8-byte aligned, after the list's part).
            let staging = unsafe { std::slice::from_raw_parts_mut(host_values as *mut f64, total) };
            staging.copy_from_slice(values);
            // SAFETY: both blocks hold `bytes` bytes there, alive until
            // the wait below.
            unsafe {
                stream.copy(
                    (Device::Cpu, host_values),
                    (device, staged.address()),
                    bytes,
                    &action,
                )?;
            }
        }
        let count = (n as u64).to_ne_bytes();
        let indices = (list.block.address() as u64).to_ne_bytes();
        for (t, buffer) in buffers.iter().enumerate() {
            let field = buffer.pointer.to_ne_bytes();
            let at = ((staged.address() + t * list_bytes) as u64).to_ne_bytes();
            let arguments: [&[u8]; 4] = [&count, &field, &indices, &at];
            // SAFETY: the kernel reads `n` indices of the list, each
            // checked to lie inside every field's `len` elements, and reads
            // or writes `n` values of the staging block from field `t`'s
            // offset; the field's memory is the caller's valid (for a
            // scatter, active) location on this GPU, which the caller keeps
            // alive and unused meanwhile.
            unsafe {
                stream.launch(
                    &function,
                    [blocks, 1, 1],
                    [BLOCK, 1, 1],
                    &arguments,
                    &action,
                )?;
            }
        }
        if gather {
            // SAFETY: as above; the host block's values part holds
            // `bytes` bytes.
            unsafe {
                stream.copy(
                    (device, staged.address()),
                    (Device::Cpu, host_values),
                    bytes,
                    &action,
                )?;
            }
        }
        Ok(())
    })();
    // Every block outlives the wait, and is leaked instead of freed if
    // the wait fails (the copies or the kernels may still run then).
    if let Err(error) = stream.synchronize() {
        std::mem::forget(host);
        std::mem::forget(staged);
        return Err(error.into());
    }
    enqueued?;
    if let Values::Out(out) = &mut values {
        // SAFETY: the stream has finished writing the `total` values of
        // the host block's values part.
        let gathered = unsafe { std::slice::from_raw_parts(host_values as *const f64, total) };
        out.copy_from_slice(gathered);
    }
    Ok(())
}

/// Copies the values at linear indices `points` of every field whose
/// valid location on a GPU is one of `buffers` (all on one GPU) into
/// `out`, field after field (`points.len()` values each, in point order),
/// gathering them on the GPU: only those values cross to the host,
/// whatever the fields' size, in one copy. Waits for it. `what` names
/// the fields in errors; a point outside a field, or fields on different
/// GPUs, are refused.
///
/// ```
/// use watershed_operators::gpu_points::point_kernel_source;
/// // The gather reads the field through the index list, one thread a point.
/// assert!(point_kernel_source(true).contains("values[i] = field[points[i]];"));
/// ```
pub fn gather_points_on_gpu(
    buffers: &[GpuBuffer],
    points: &[usize],
    out: &mut [f64],
    what: &str,
) -> OperatorResult<()> {
    transfer(buffers, points, Values::Out(out), what)
}

/// Writes `values` (field after field, `points.len()` values each, in
/// point order) at linear indices `points` of every field whose active
/// location on a GPU is one of `buffers` (all on one GPU), scattering
/// them on the GPU: only those values cross from the host, in one copy,
/// and the fields stay on the GPU. Waits for it. `what` names the fields
/// in errors; a point outside a field, or fields on different GPUs, are
/// refused.
pub fn scatter_points_on_gpu(
    buffers: &[GpuBuffer],
    points: &[usize],
    values: &[f64],
    what: &str,
) -> OperatorResult<()> {
    transfer(buffers, points, Values::In(values), what)
}
