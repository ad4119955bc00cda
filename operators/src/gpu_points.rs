//! Points of a field read and written on the GPU that holds it: how a
//! field living on a GPU gives and takes the ghost points of a halo
//! exchange (the seams of a decomposed run) without the whole field
//! crossing to the host and back.
//!
//! [`gather_points_on_gpu`] gathers the values at a list of linear
//! indices of one or more fields into a device buffer and copies only
//! those values to the host, in one copy; [`scatter_points_on_gpu`]
//! copies values to the device in one copy and scatters them into the
//! fields; [`copy_points_on_gpu`] copies points between fields of one
//! GPU (the seams a rank's patches give each other) without the host.
//! Each is one launch for all its fields (a thread per point, the field
//! the grid's y index, the fields' device addresses in a table). The
//! values travel through one block of the host pool, which is pinned
//! whenever the process sees a GPU ([`MemoryPool::global`]), and one
//! block of the GPU's pool. The index lists and address tables are kept
//! on each GPU after their first use (a halo route reads and writes the
//! same points of the same fields every step), each compared value by
//! value with the list asked for, never trusted to a hash alone.
//!
//! Scatters and copies are enqueued in a [`PointBatch`], one stream per
//! GPU, and waited for together when the batch is finished: an exchange
//! waits once, not once per piece (on a GPU each host wait costs
//! microseconds). A gather waits at once, since its values are wanted on
//! the host (for a message to another rank); it runs on the batch's
//! stream, after what the batch enqueued before it.
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
use watershed_fields::{Device, GpuBuffer, GpuStream, MemoryPool, PoolBlock, ValidationEvent};

/// Threads per block of the point kernels.
const BLOCK: u32 = 256;

/// The gather: `values[t n + i] = fields[t][points[i]]` for `i < a.n`,
/// field `t` the grid's y index (the fields' addresses in a table).
const GATHER: &str = "ws_gather_points";

/// The scatter: `fields[t][points[i]] = values[t n + i]` for `i < a.n`.
const SCATTER: &str = "ws_scatter_points";

/// The copy between fields of one GPU: `to[t][at[i]] =
/// from[t][points[i]]` for `i < a.n`.
const COPY: &str = "ws_copy_points";

/// The CUDA C of the gather, the scatter or the copy, each its own
/// translation unit (header-free, its argument struct first, as the
/// emulated GPU reads a kernel's signature).
fn unit(name: &str) -> String {
    let (parameters, body) = match name {
        GATHER => (
            "const unsigned long long *fields, const unsigned long long *points, double *values",
            "const double *field = (const double *)fields[blockIdx.y];\n\
             \x20       values[blockIdx.y * a.n + i] = field[points[i]];",
        ),
        SCATTER => (
            "const unsigned long long *fields, const unsigned long long *points, const double *values",
            "double *field = (double *)fields[blockIdx.y];\n\
             \x20       field[points[i]] = values[blockIdx.y * a.n + i];",
        ),
        _ => (
            "const unsigned long long *from, const unsigned long long *points, const unsigned long long *to, const unsigned long long *at",
            "const double *source = (const double *)from[blockIdx.y];\n\
             \x20       double *target = (double *)to[blockIdx.y];\n\
             \x20       target[at[i]] = source[points[i]];",
        ),
    };
    format!(
        "struct {name}_args {{ unsigned long long n; }};\n\
         extern \"C\" __global__ void {name}(const struct {name}_args a, {parameters})\n\
         {{\n\
         \x20   unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20   if (i < a.n) {{\n\
         \x20       {body}\n\
         \x20   }}\n\
         }}\n"
    )
}

/// Kernel `name` (the gather, the scatter or the copy), compiled once
/// per process.
fn kernel(name: &'static str) -> OperatorResult<Arc<CudaKernel>> {
    static KERNELS: [OnceLock<Arc<CudaKernel>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = &KERNELS[match name {
        GATHER => 0,
        SCATTER => 1,
        _ => 2,
    }];
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

/// The CUDA C translation unit of the gather (`"gather"`), the scatter
/// (`"scatter"`) or the copy (anything else). NVRTC compiles it; tests
/// read it.
pub fn point_kernel_source(which: &str) -> String {
    unit(match which {
        "gather" => GATHER,
        "scatter" => SCATTER,
        _ => COPY,
    })
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
/// a new device block that `stream` fills from host address `staging`
/// (at least `points.len()` 8-byte words of a host block that this call
/// alone uses and that must outlive the stream's copy) and that the
/// cache keeps.
fn device_list(
    ordinal: usize,
    points: &[usize],
    stream: &GpuStream,
    staging: usize,
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
    let bytes = points
        .len()
        .checked_mul(8)
        .ok_or_else(|| overflow(what, points.len(), 1))?;
    let block = MemoryPool::global(Device::Gpu(ordinal))?
        .allocate(bytes, format!("halo point list of {what}"))?;
    // SAFETY: `staging` is a host block of at least `bytes` bytes that
    // this transfer alone uses, 8-byte aligned.
    let host = unsafe { std::slice::from_raw_parts_mut(staging as *mut u64, points.len()) };
    for (slot, &point) in host.iter_mut().zip(points) {
        *slot = point as u64;
    }
    // SAFETY: both blocks hold `bytes` bytes; the caller keeps `staging`
    // until the stream has run the copy, and the device block is kept by
    // the cache (and by the caller's `Arc`) as long as any launch uses it.
    unsafe {
        stream.copy(
            (Device::Cpu, staging),
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

/// Scatters and copies of points enqueued on one stream per GPU, with
/// the staging memory and index lists they use, until [`Self::finish`]
/// waits for them all. Until then nothing else may read or write the
/// fields they write (their locations already say they hold the new
/// values). Dropping a batch waits for it too (and leaks its memory if
/// that wait fails, since the GPU may still use it).
#[derive(Default)]
pub struct PointBatch {
    streams: Vec<GpuStream>,
    blocks: Vec<PoolBlock>,
    lists: Vec<Arc<DeviceList>>,
    /// Whether work was enqueued since the last wait.
    enqueued: bool,
}

impl std::fmt::Debug for PointBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PointBatch")
            .field("streams", &self.streams.len())
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

impl PointBatch {
    /// An empty batch.
    pub fn new() -> Self {
        PointBatch::default()
    }

    /// The batch's stream on GPU `ordinal`, made on first use, for work
    /// about to be enqueued.
    fn stream(&mut self, ordinal: usize) -> OperatorResult<GpuStream> {
        self.enqueued = true;
        if let Some(stream) = self
            .streams
            .iter()
            .find(|s| s.device() == Device::Gpu(ordinal))
        {
            return Ok(stream.clone());
        }
        let stream = halo_stream(ordinal)?;
        self.streams.push(stream.clone());
        Ok(stream)
    }

    /// Makes the batch's moves on GPU `ordinal` wait for `event` (work on
    /// another stream that writes or reads the fields they touch), on the
    /// GPU: the host does not wait.
    pub fn after(&mut self, ordinal: usize, event: &ValidationEvent) -> OperatorResult<()> {
        Ok(self.stream(ordinal)?.wait(event)?)
    }

    /// Waits for everything enqueued (nothing to wait for when nothing was
    /// enqueued since the last wait), then frees the staging memory. On
    /// an error the memory is leaked (the GPU may still use it).
    pub fn finish(&mut self) -> OperatorResult<()> {
        if !self.enqueued {
            return Ok(());
        }
        self.enqueued = false;
        let mut failed = None;
        for stream in &self.streams {
            if let Err(error) = stream.synchronize() {
                failed.get_or_insert(error);
            }
        }
        if let Some(error) = failed {
            std::mem::forget(std::mem::take(&mut self.blocks));
            std::mem::forget(std::mem::take(&mut self.lists));
            return Err(error.into());
        }
        self.blocks.clear();
        self.lists.clear();
        Ok(())
    }
}

/// GPU `ordinal`'s stream for point moves, made once per process (a
/// stream per exchange would cost a creation and a destruction each).
fn halo_stream(ordinal: usize) -> OperatorResult<GpuStream> {
    static STREAMS: OnceLock<Mutex<HashMap<usize, GpuStream>>> = OnceLock::new();
    let mut streams = STREAMS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(stream) = streams.get(&ordinal) {
        return Ok(stream.clone());
    }
    let stream = GpuStream::new(ordinal)?;
    streams.insert(ordinal, stream.clone());
    Ok(stream)
}

impl Drop for PointBatch {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The overflow error of moving `n` points of `fields` fields.
fn overflow(what: &str, n: usize, fields: usize) -> OperatorError {
    OperatorError::Backend {
        what: format!("moving halo points of {what}"),
        reason: format!("{n} points of {fields} field(s) overflow a byte count or a launch grid"),
    }
}

/// Refuses `values` values for `n` points of `fields` fields.
fn check_values(what: &str, n: usize, fields: usize, values: usize) -> OperatorResult<()> {
    if n.checked_mul(fields) == Some(values) {
        return Ok(());
    }
    Err(OperatorError::Backend {
        what: format!("moving halo points of {what}"),
        reason: format!(
            "{n} point(s) of {fields} field(s) but {values} value(s); give one value per point and field"
        ),
    })
}

/// Blocks of `BLOCK` threads covering `n` points.
fn grid(what: &str, n: usize, fields: usize) -> OperatorResult<[u32; 3]> {
    let blocks =
        u32::try_from(n.div_ceil(BLOCK as usize)).map_err(|_| overflow(what, n, fields))?;
    Ok([blocks, 1, 1])
}

/// Launches kernel `name` on `stream` once over `n` points of `fields`
/// fields (the grid's y index), with `addresses` after the count.
///
/// # Safety
/// Every address among the arguments (and in the tables they point to)
/// must be memory of the stream's GPU that the kernel may read and write
/// as its source says, alive and unused by other work until the stream
/// has run the launch.
unsafe fn launch_over(
    stream: &GpuStream,
    name: &'static str,
    n: usize,
    fields: usize,
    addresses: &[[u8; 8]],
    action: &str,
) -> OperatorResult<()> {
    let Device::Gpu(ordinal) = stream.device() else {
        return Ok(());
    };
    let function = loaded_function(ordinal, kernel(name)?.as_ref())?;
    let count = (n as u64).to_ne_bytes();
    let mut shape = grid(action, n, fields)?;
    shape[1] = u32::try_from(fields)
        .ok()
        .filter(|&f| f <= 65_535)
        .ok_or_else(|| overflow(action, n, fields))?;
    let mut arguments: Vec<&[u8]> = Vec::with_capacity(addresses.len() + 1);
    arguments.push(&count);
    arguments.extend(addresses.iter().map(|a| a.as_slice()));
    // SAFETY: forwarded from the caller.
    unsafe { stream.launch(&function, shape, [BLOCK, 1, 1], &arguments, action)? };
    Ok(())
}

/// The device addresses of `buffers`, a table a kernel indexes by field.
fn table(buffers: &[GpuBuffer]) -> Vec<usize> {
    buffers.iter().map(|b| b.pointer as usize).collect()
}

/// An address as a kernel argument.
fn address(value: usize) -> [u8; 8] {
    (value as u64).to_ne_bytes()
}

/// The staging of a gather or a scatter of `n` points of `fields`
/// fields on one GPU: the index list and the fields' address table on
/// the GPU, a staging block there for the values, and a host block whose
/// values part (`host_values`, after the lists' staging) holds them on
/// the host.
struct Staging {
    ordinal: usize,
    stream: GpuStream,
    host: PoolBlock,
    host_values: usize,
    staged: PoolBlock,
    bytes: usize,
    list: Arc<DeviceList>,
    fields: Arc<DeviceList>,
}

impl Staging {
    /// Checks the points, the fields and `values` values against each
    /// other, then stages on `batch`'s stream of the fields' GPU (after
    /// their pending copies). `None` when there is nothing to move.
    fn new(
        batch: &mut PointBatch,
        buffers: &[GpuBuffer],
        points: &[usize],
        values: usize,
        what: &str,
    ) -> OperatorResult<Option<Staging>> {
        let n = points.len();
        check_values(what, n, buffers.len(), values)?;
        if n == 0 || buffers.is_empty() {
            return Ok(None);
        }
        let ordinal = check_buffers(buffers, points, what)?;
        let too_many = || overflow(what, n, buffers.len());
        let bytes = values.checked_mul(8).ok_or_else(too_many)?;
        let list_bytes = n.checked_mul(8).ok_or_else(too_many)?;
        let table_bytes = buffers.len().checked_mul(8).ok_or_else(too_many)?;
        let lists = list_bytes.checked_add(table_bytes).ok_or_else(too_many)?;
        let host = MemoryPool::global(Device::Cpu)?.allocate(
            lists.checked_add(bytes).ok_or_else(too_many)?,
            format!("halo values of {what}"),
        )?;
        let staged = MemoryPool::global(Device::Gpu(ordinal))?
            .allocate(bytes, format!("halo values of {what}"))?;
        let stream = batch.stream(ordinal)?;
        for event in buffers.iter().filter_map(|b| b.ready.as_ref()) {
            stream.wait(event)?;
        }
        let list = device_list(ordinal, points, &stream, host.address(), what)?;
        let fields = device_list(
            ordinal,
            &table(buffers),
            &stream,
            host.address() + list_bytes,
            what,
        )?;
        Ok(Some(Staging {
            ordinal,
            stream,
            host_values: host.address() + lists,
            host,
            staged,
            bytes,
            list,
            fields,
        }))
    }

    /// The kernel's addresses after its count: the table, the list, the
    /// staged values.
    fn addresses(&self) -> [[u8; 8]; 3] {
        [
            address(self.fields.block.address()),
            address(self.list.block.address()),
            address(self.staged.address()),
        ]
    }

    /// Hands the GPU's blocks to `batch`, which keeps them until it is
    /// finished; the host block is returned.
    fn keep_in(self, batch: &mut PointBatch) -> PoolBlock {
        batch.lists.push(self.fields);
        batch.lists.push(self.list);
        batch.blocks.push(self.staged);
        self.host
    }
}

/// Copies the values at linear indices `points` of every field whose
/// valid location on a GPU is one of `buffers` (all on one GPU) into
/// `out`, field after field (`points.len()` values each, in point order),
/// gathering them on the GPU: only those values cross to the host,
/// whatever the fields' size, in one copy. Runs on `batch`'s stream after
/// what it enqueued, and waits for it (the whole batch is finished).
/// `what` names the fields in errors; a point outside a field, fields on
/// different GPUs or an `out` of another length are refused.
///
/// ```
/// use watershed_operators::gpu_points::point_kernel_source;
/// // The gather reads each field through the index list, one thread a
/// // point, the field the launch grid's y index.
/// let source = point_kernel_source("gather");
/// assert!(source.contains("fields[blockIdx.y]"));
/// assert!(source.contains("values[blockIdx.y * a.n + i] = field[points[i]];"));
/// ```
pub fn gather_points_on_gpu(
    batch: &mut PointBatch,
    buffers: &[GpuBuffer],
    points: &[usize],
    out: &mut [f64],
    what: &str,
) -> OperatorResult<()> {
    let Some(staging) = Staging::new(batch, buffers, points, out.len(), what)? else {
        return Ok(());
    };
    let (n, device) = (points.len(), Device::Gpu(staging.ordinal));
    let host_values = staging.host_values;
    let action = format!("gathering {n} halo points of {what} on {device}");
    // SAFETY: the gather reads `n` indices of the list, each checked to
    // lie inside every field, reads the fields through their table (the
    // caller's valid locations on this GPU, kept alive and unwritten
    // meanwhile) and writes `n` values per field into the staging block;
    // the copy moves its `bytes` bytes into the host block's values part.
    // All blocks outlive the wait below (the batch keeps the GPU's, this
    // call the host's, each leaked if the wait fails).
    let enqueued = unsafe {
        launch_over(
            &staging.stream,
            GATHER,
            n,
            buffers.len(),
            &staging.addresses(),
            &action,
        )
        .and_then(|()| {
            Ok(staging.stream.copy(
                (device, staging.staged.address()),
                (Device::Cpu, host_values),
                staging.bytes,
                &action,
            )?)
        })
    };
    let host = staging.keep_in(batch);
    if let Err(error) = batch.finish() {
        // The copy into `host` may still run.
        std::mem::forget(host);
        return Err(error);
    }
    enqueued?;
    // SAFETY: the stream has finished writing the `out.len()` values of
    // the host block's values part, which this call still holds.
    let gathered = unsafe { std::slice::from_raw_parts(host_values as *const f64, out.len()) };
    out.copy_from_slice(gathered);
    Ok(())
}

/// Writes `values` (field after field, `points.len()` values each, in
/// point order) at linear indices `points` of every field whose active
/// location on a GPU is one of `buffers` (all on one GPU), scattering
/// them on the GPU: only those values cross from the host, in one copy,
/// and the fields stay on the GPU. Enqueued in `batch`: the fields hold
/// the values once it is finished. `what` names the fields in errors; a
/// point outside a field, fields on different GPUs or values of another
/// length are refused.
pub fn scatter_points_on_gpu(
    batch: &mut PointBatch,
    buffers: &[GpuBuffer],
    points: &[usize],
    values: &[f64],
    what: &str,
) -> OperatorResult<()> {
    let Some(staging) = Staging::new(batch, buffers, points, values.len(), what)? else {
        return Ok(());
    };
    let (n, device) = (points.len(), Device::Gpu(staging.ordinal));
    // SAFETY: the host block's values part holds `values.len()` f64 that
    // this call alone uses (8-byte aligned, after the lists' parts).
    unsafe { std::slice::from_raw_parts_mut(staging.host_values as *mut f64, values.len()) }
        .copy_from_slice(values);
    let action = format!("scattering {n} halo points of {what} on {device}");
    // SAFETY: the copy moves `bytes` bytes from the host block into the
    // staging block; the scatter reads `n` indices of the list, each
    // checked to lie inside every field, and `n` staged values per field,
    // and writes the fields through their table (the caller's active
    // locations on this GPU, kept alive and unused until the batch is
    // finished). The batch keeps every block until then.
    let enqueued = unsafe {
        staging
            .stream
            .copy(
                (Device::Cpu, staging.host_values),
                (device, staging.staged.address()),
                staging.bytes,
                &action,
            )
            .map_err(OperatorError::from)
            .and_then(|()| {
                launch_over(
                    &staging.stream,
                    SCATTER,
                    n,
                    buffers.len(),
                    &staging.addresses(),
                    &action,
                )
            })
    };
    let host = staging.keep_in(batch);
    batch.blocks.push(host);
    enqueued
}

/// Copies, for every field pair, the values at linear indices `points`
/// of the field whose valid location is `from[t]` to linear indices `at`
/// of the field whose active location is `to[t]`, all on one GPU: one
/// launch per pair, nothing through the host (the index lists kept on
/// the GPU after their first use). `from[t]` and `to[t]` may be one field
/// when no point read is among those written (a patch's own periodic
/// images). Enqueued in `batch`: the fields hold the values once it is
/// finished. `what` names the fields in errors; a point outside a field,
/// fields on different GPUs, or lists of different lengths are refused.
pub fn copy_points_on_gpu(
    batch: &mut PointBatch,
    from: &[GpuBuffer],
    points: &[usize],
    to: &[GpuBuffer],
    at: &[usize],
    what: &str,
) -> OperatorResult<()> {
    let n = points.len();
    if at.len() != n || to.len() != from.len() {
        return Err(OperatorError::Backend {
            what: format!("copying halo points of {what}"),
            reason: format!(
                "{n} point(s) of {} field(s) read, {} point(s) of {} field(s) written; give as many of each",
                from.len(),
                at.len(),
                to.len()
            ),
        });
    }
    if n == 0 || from.is_empty() {
        return Ok(());
    }
    let all: Vec<GpuBuffer> = from.iter().chain(to).cloned().collect();
    // One GPU for all, then each list inside the fields it indexes.
    let ordinal = check_buffers(&all, &[], what)?;
    check_buffers(from, points, what)?;
    check_buffers(to, at, what)?;
    let too_many = || overflow(what, n, from.len());
    let list_bytes = n.checked_mul(8).ok_or_else(too_many)?;
    let table_bytes = from.len().checked_mul(8).ok_or_else(too_many)?;
    let host_bytes = list_bytes
        .checked_add(table_bytes)
        .and_then(|b| b.checked_mul(2))
        .ok_or_else(too_many)?;
    let host = MemoryPool::global(Device::Cpu)?
        .allocate(host_bytes, format!("halo point lists of {what}"))?;
    let stream = batch.stream(ordinal)?;
    for event in all.iter().filter_map(|b| b.ready.as_ref()) {
        stream.wait(event)?;
    }
    let mut staging = host.address();
    let mut list = |values: &[usize], bytes: usize| {
        let made = device_list(ordinal, values, &stream, staging, what);
        staging += bytes;
        made
    };
    let read = list(points, list_bytes)?;
    let written = list(at, list_bytes)?;
    let sources = list(&table(from), table_bytes)?;
    let targets = list(&table(to), table_bytes)?;
    let addresses = [
        address(sources.block.address()),
        address(read.block.address()),
        address(targets.block.address()),
        address(written.block.address()),
    ];
    let action = format!("copying {n} halo points of {what} on GPU {ordinal}");
    // SAFETY: the copy reads `n` indices of both lists, each checked to
    // lie inside the fields it indexes, reads each source field at the
    // first and writes its target at the second (never a point it reads,
    // as the caller guarantees when both are one field), the fields
    // through their tables; they are the caller's valid (the targets'
    // active) locations on this GPU, kept alive and unused until the
    // batch is finished, which keeps the lists, the tables and the host
    // block (their staging) until then.
    let enqueued = unsafe { launch_over(&stream, COPY, n, from.len(), &addresses, &action) };
    batch.lists.push(sources);
    batch.lists.push(targets);
    batch.lists.push(read);
    batch.lists.push(written);
    batch.blocks.push(host);
    enqueued
}
