//! Memory pools, one per device: size-class reuse, statistics and leak checks.
//!
//! Allocating and freeing device or pinned host memory is slow and
//! synchronising, and a time-stepping graph asks for the same sizes every step.
//! A [`MemoryPool`] therefore keeps freed blocks in free lists keyed by *size
//! class* and hands them out again. Classes are the powers of two and three
//! evenly spaced steps between them (at most 25 % slack); fields of one patch
//! share a few exact sizes, so in practice every reuse is an exact fit.
//!
//! Blocks come back to their pool when the [`PoolBlock`] is dropped, from any
//! thread. The pool tracks active and total bytes and blocks, their
//! high-water marks, hits and misses, and every outstanding block with a label
//! (the field name) so a leak report can say who holds memory.
//!
//! Host pools allocate page-locked (pinned) memory when a GPU is in use, which
//! makes host<->device copies asynchronous; when pinning fails they fall back
//! to pageable memory and count the fallback.
//!
//! A GPU can also serve blocks in *stream order* ([`MemoryPool::stream_ordered`]):
//! each request is a `cuMemAllocAsync` on a stream and each returned block a
//! `cuMemFreeAsync` on the same stream, so the driver's own pool does the
//! caching and a block may be reused by later work as soon as the stream
//! reaches the free. It has the same statistics and leak checks; every
//! request counts as a miss, since this pool keeps no free lists. Which of
//! the two is faster for a time step is measured by the GPU benchmark's
//! `allocation` section.

use crate::Device;
use crate::error::{FieldError, FieldResult};
use crate::gpu::{self, GpuStream};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Alignment of every host block, in bytes (a cache line; enough for AVX-512).
pub const HOST_ALIGNMENT: usize = 64;

/// Smallest size class in bytes.
const MIN_CLASS: usize = 256;

/// The size class a request of `bytes` is served from.
///
/// ```
/// use watershed_fields::pool::size_class;
/// assert_eq!(size_class(1), 256);
/// assert_eq!(size_class(1024), 1024);
/// assert_eq!(size_class(1025), 1280);
/// assert!(size_class(1_000_000) < 1_250_000);
/// ```
pub fn size_class(bytes: usize) -> usize {
    if bytes <= MIN_CLASS {
        return MIN_CLASS;
    }
    let power = bytes.next_power_of_two();
    let step = power / 8; // four classes between power/2 and power
    bytes.div_ceil(step) * step
}

/// How a host pool obtains memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMemory {
    /// Ordinary (pageable) memory.
    Pageable,
    /// Page-locked memory registered with the CUDA driver (through GPU 0's
    /// context); falls back to pageable memory, counted in
    /// [`PoolStatistics::pinned_fallbacks`], when pinning fails or no GPU exists.
    Pinned,
}

/// A snapshot of a pool's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStatistics {
    /// Bytes in blocks handed out and not yet returned (size-class bytes).
    pub bytes_active: usize,
    /// Blocks handed out and not yet returned.
    pub blocks_active: usize,
    /// Bytes held from the system: active plus cached in free lists.
    pub bytes_total: usize,
    /// Blocks held from the system.
    pub blocks_total: usize,
    /// Highest `bytes_active` seen.
    pub high_water_bytes_active: usize,
    /// Highest `bytes_total` seen.
    pub high_water_bytes_total: usize,
    /// Requests served from a free list.
    pub hits: u64,
    /// Requests that allocated from the system.
    pub misses: u64,
    /// Host blocks that should have been pinned but are pageable.
    pub pinned_fallbacks: u64,
}

/// A block that has not been returned yet, for leak reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutstandingBlock {
    /// Who took the block (usually a field name).
    pub label: Arc<str>,
    /// Size-class bytes of the block.
    pub bytes: usize,
}

/// Memory straight from the system, before pooling.
#[derive(Debug)]
struct RawBlock {
    address: usize,
    bytes: usize,
    pinned: bool,
    /// The stream a stream-ordered block was allocated on, and is freed on.
    stream: Option<GpuStream>,
}

/// Where a pool's blocks come from.
enum BlockSource {
    Host(HostMemory),
    Gpu(usize),
    /// `cuMemAllocAsync` / `cuMemFreeAsync` on GPU `ordinal`.
    StreamOrdered(usize),
}

impl BlockSource {
    fn device(&self) -> Device {
        match self {
            BlockSource::Host(_) => Device::Cpu,
            BlockSource::Gpu(ordinal) | BlockSource::StreamOrdered(ordinal) => {
                Device::Gpu(*ordinal)
            }
        }
    }

    /// Zero-filled memory of exactly `bytes` (a size class).
    fn allocate(&self, bytes: usize) -> FieldResult<RawBlock> {
        match self {
            BlockSource::Host(kind) => {
                if *kind == HostMemory::Pinned
                    && let Some(address) = allocate_pinned(bytes)
                {
                    return Ok(RawBlock {
                        address,
                        bytes,
                        pinned: true,
                        stream: None,
                    });
                }
                let layout = host_layout(bytes)?;
                // SAFETY: the layout has a non-zero size (classes are >= MIN_CLASS).
                let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
                if pointer.is_null() {
                    return Err(FieldError::Allocation {
                        device: Device::Cpu,
                        bytes,
                        reason: "the system allocator returned no memory".into(),
                    });
                }
                Ok(RawBlock {
                    address: pointer as usize,
                    bytes,
                    pinned: false,
                    stream: None,
                })
            }
            BlockSource::Gpu(ordinal) => Ok(RawBlock {
                address: gpu::device_alloc_zeroed(*ordinal, bytes)?,
                bytes,
                pinned: false,
                stream: None,
            }),
            BlockSource::StreamOrdered(ordinal) => Err(FieldError::Allocation {
                device: Device::Gpu(*ordinal),
                bytes,
                reason: "this pool allocates in stream order: ask it with MemoryPool::allocate_on and the stream that first uses the block".into(),
            }),
        }
    }

    /// Gives `block` back to the system.
    fn release(&self, block: RawBlock) {
        match self {
            BlockSource::Host(_) if block.pinned => gpu::pinned_free(block.address),
            BlockSource::Host(_) => {
                if let Ok(layout) = host_layout(block.bytes) {
                    // SAFETY: allocated by `alloc_zeroed` with this same layout.
                    unsafe { std::alloc::dealloc(block.address as *mut u8, layout) };
                }
            }
            BlockSource::Gpu(ordinal) => gpu::device_free(*ordinal, block.address),
            BlockSource::StreamOrdered(_) => {
                if let Some(stream) = &block.stream {
                    // SAFETY: the block came from `allocate_in_order` on this
                    // stream's GPU and is freed once (its `PoolBlock` is
                    // gone). Its holder's uses are ordered before this point
                    // of the stream: the contract of `allocate_on` asks that
                    // a block be dropped only once every use of it is
                    // enqueued on, or waited for by, its stream. Errors are
                    // ignored: this runs in destructors.
                    let _ = unsafe { stream.free_in_order(block.address) };
                }
            }
        }
    }
}

fn host_layout(bytes: usize) -> FieldResult<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(bytes, HOST_ALIGNMENT).map_err(|e| FieldError::Allocation {
        device: Device::Cpu,
        bytes,
        reason: e.to_string(),
    })
}

/// Page-locked host memory through GPU 0's context, or `None` when that fails.
fn allocate_pinned(bytes: usize) -> Option<usize> {
    gpu::pinned_alloc_zeroed(bytes)
}

struct PoolState {
    free: BTreeMap<usize, Vec<RawBlock>>,
    outstanding: HashMap<u64, OutstandingBlock>,
    statistics: PoolStatistics,
}

struct PoolInner {
    source: BlockSource,
    state: Mutex<PoolState>,
    next_id: AtomicU64,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for (_, blocks) in std::mem::take(&mut state.free) {
            for block in blocks {
                self.source.release(block);
            }
        }
    }
}

/// A thread-safe pool of memory blocks on one device. Cloning gives another
/// handle to the same pool.
///
/// ```
/// use watershed_fields::{MemoryPool, HostMemory};
/// let pool = MemoryPool::host(HostMemory::Pageable);
/// let block = pool.allocate(1000, "phi").unwrap();
/// assert_eq!(pool.statistics().blocks_active, 1);
/// drop(block);
/// let again = pool.allocate(1000, "phi").unwrap(); // reused
/// assert_eq!(pool.statistics().hits, 1);
/// # drop(again);
/// assert!(pool.check_no_leaks().is_ok());
/// ```
#[derive(Clone)]
pub struct MemoryPool {
    inner: Arc<PoolInner>,
}

impl std::fmt::Debug for MemoryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPool")
            .field("device", &self.device())
            .field("statistics", &self.statistics())
            .finish()
    }
}

/// The process-wide pools of one kind, one per GPU ordinal, each made on
/// first use.
struct GpuPools(OnceLock<Mutex<HashMap<usize, MemoryPool>>>);

impl GpuPools {
    const fn new() -> Self {
        GpuPools(OnceLock::new())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<usize, MemoryPool>> {
        self.0
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// GPU `ordinal`'s pool, made by `make` the first time.
    fn get_or_make(
        &self,
        ordinal: usize,
        make: impl FnOnce() -> FieldResult<MemoryPool>,
    ) -> FieldResult<MemoryPool> {
        let mut pools = self.lock();
        if let Some(pool) = pools.get(&ordinal) {
            return Ok(pool.clone());
        }
        let pool = make()?;
        pools.insert(ordinal, pool.clone());
        Ok(pool)
    }

    /// Each pool's statistics, by GPU ordinal (creates nothing).
    fn statistics(&self) -> Vec<(usize, PoolStatistics)> {
        let mut all: Vec<(usize, PoolStatistics)> = self
            .lock()
            .iter()
            .map(|(&ordinal, pool)| (ordinal, pool.statistics()))
            .collect();
        all.sort_by_key(|&(ordinal, _)| ordinal);
        all
    }
}

/// The process-wide size-class GPU pools ([`MemoryPool::global`]).
static SIZE_CLASS_GPU_POOLS: GpuPools = GpuPools::new();

/// The process-wide stream-ordered GPU pools ([`MemoryPool::stream_ordered`]).
static STREAM_ORDERED_GPU_POOLS: GpuPools = GpuPools::new();

impl MemoryPool {
    fn with_source(source: BlockSource) -> Self {
        MemoryPool {
            inner: Arc::new(PoolInner {
                source,
                state: Mutex::new(PoolState {
                    free: BTreeMap::new(),
                    outstanding: HashMap::new(),
                    statistics: PoolStatistics::default(),
                }),
                next_id: AtomicU64::new(0),
            }),
        }
    }

    /// A new, empty host pool.
    pub fn host(memory: HostMemory) -> Self {
        MemoryPool::with_source(BlockSource::Host(memory))
    }

    /// A new, empty pool of device memory on GPU `ordinal`.
    ///
    /// Errors with [`FieldError::NoCudaDevice`] when that GPU cannot be used.
    pub fn gpu(ordinal: usize) -> FieldResult<Self> {
        gpu::require_gpu(ordinal)?;
        Ok(MemoryPool::with_source(BlockSource::Gpu(ordinal)))
    }

    /// The process-wide pool of `device`, created on first use. The CPU pool
    /// pins its memory when a CUDA device is present.
    pub fn global(device: Device) -> FieldResult<Self> {
        static CPU: OnceLock<MemoryPool> = OnceLock::new();
        match device {
            Device::Cpu => Ok(CPU
                .get_or_init(|| {
                    let memory = if gpu::gpu_count() > 0 {
                        HostMemory::Pinned
                    } else {
                        HostMemory::Pageable
                    };
                    MemoryPool::host(memory)
                })
                .clone()),
            Device::Gpu(ordinal) => {
                SIZE_CLASS_GPU_POOLS.get_or_make(ordinal, || MemoryPool::gpu(ordinal))
            }
        }
    }

    /// GPU `ordinal`'s process-wide stream-ordered pool, created on first
    /// use: every block is allocated on the stream given to
    /// [`MemoryPool::allocate_on`] (`cuMemAllocAsync`) and freed on that
    /// stream when dropped (`cuMemFreeAsync`); the driver's pool of the
    /// device caches the memory. Errors with [`FieldError::NoCudaDevice`]
    /// when that GPU cannot be used.
    ///
    /// ```
    /// use watershed_fields::{gpu, GpuStream, MemoryPool};
    /// # if gpu::gpu_count() > 0 {
    /// let pool = MemoryPool::stream_ordered(0)?;
    /// let stream = GpuStream::new(0)?;
    /// let block = pool.allocate_on(&stream, 4096, "flux")?;
    /// // ... enqueue work using `block.address()` on `stream` ...
    /// drop(block); // freed when the stream gets there
    /// stream.synchronize()?;
    /// # }
    /// # Ok::<(), watershed_fields::FieldError>(())
    /// ```
    pub fn stream_ordered(ordinal: usize) -> FieldResult<Self> {
        gpu::require_gpu(ordinal)?;
        STREAM_ORDERED_GPU_POOLS.get_or_make(ordinal, || {
            Ok(MemoryPool::with_source(BlockSource::StreamOrdered(ordinal)))
        })
    }

    /// True for a pool that allocates in stream order
    /// ([`MemoryPool::stream_ordered`]).
    pub fn is_stream_ordered(&self) -> bool {
        matches!(self.inner.source, BlockSource::StreamOrdered(_))
    }

    /// A block of at least `bytes` bytes for work that starts on `stream`.
    /// A stream-ordered pool allocates it in `stream`'s order, contents
    /// unspecified: work on another stream must wait on an event recorded
    /// on `stream` after this call before touching it, and the block must
    /// be dropped only once every use of it is enqueued on `stream` or
    /// waited for by it (it is freed on `stream`). Any other pool ignores
    /// the stream and behaves as [`MemoryPool::allocate`].
    ///
    /// Errors when `stream` belongs to another GPU than the pool, or the
    /// allocation fails.
    pub fn allocate_on(
        &self,
        stream: &GpuStream,
        bytes: usize,
        label: impl Into<Arc<str>>,
    ) -> FieldResult<PoolBlock> {
        if !self.is_stream_ordered() {
            return self.allocate(bytes, label);
        }
        let label = label.into();
        if stream.device() != self.device() {
            return Err(FieldError::Allocation {
                device: self.device(),
                bytes,
                reason: format!(
                    "block '{label}' was asked of the stream-ordered pool of {} on a stream of {}; use a stream of the pool's GPU",
                    self.device(),
                    stream.device()
                ),
            });
        }
        let address = stream.allocate_in_order(bytes)?;
        let raw = RawBlock {
            address,
            bytes: bytes.max(1),
            pinned: false,
            stream: Some(stream.clone()),
        };
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        let stats = &mut state.statistics;
        stats.misses += 1;
        stats.bytes_active += raw.bytes;
        stats.blocks_active += 1;
        stats.bytes_total += raw.bytes;
        stats.blocks_total += 1;
        stats.high_water_bytes_active = stats.high_water_bytes_active.max(stats.bytes_active);
        stats.high_water_bytes_total = stats.high_water_bytes_total.max(stats.bytes_total);
        state.outstanding.insert(
            id,
            OutstandingBlock {
                label,
                bytes: raw.bytes,
            },
        );
        drop(state);
        Ok(PoolBlock {
            pool: self.clone(),
            raw: Some(raw),
            requested_bytes: bytes,
            id,
        })
    }

    /// The statistics of every process-wide GPU pool created so far
    /// ([`MemoryPool::global`]), by GPU ordinal; empty when no GPU memory
    /// was ever taken. Creates nothing and makes no CUDA call.
    ///
    /// ```
    /// use watershed_fields::MemoryPool;
    /// for (gpu, statistics) in MemoryPool::global_gpu_statistics() {
    ///     println!("GPU {gpu}: {} bytes at most", statistics.high_water_bytes_total);
    /// }
    /// ```
    pub fn global_gpu_statistics() -> Vec<(usize, PoolStatistics)> {
        SIZE_CLASS_GPU_POOLS.statistics()
    }

    /// The statistics of every process-wide stream-ordered pool created so
    /// far ([`MemoryPool::stream_ordered`]), by GPU ordinal. Creates nothing
    /// and makes no CUDA call.
    pub fn global_stream_ordered_statistics() -> Vec<(usize, PoolStatistics)> {
        STREAM_ORDERED_GPU_POOLS.statistics()
    }

    /// The device this pool allocates on.
    pub fn device(&self) -> Device {
        self.inner.source.device()
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A panic while holding the lock cannot leave the counters torn in a
        // way that matters more than losing the pool, so recover the guard.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block of at least `bytes` bytes (zero-filled when newly allocated,
    /// holding stale data when reused), labelled for leak reports.
    ///
    /// Refused by a stream-ordered pool, which needs a stream
    /// ([`MemoryPool::allocate_on`]).
    pub fn allocate(&self, bytes: usize, label: impl Into<Arc<str>>) -> FieldResult<PoolBlock> {
        let class = size_class(bytes);
        let label = label.into();
        if self.is_stream_ordered() {
            return Err(FieldError::Allocation {
                device: self.device(),
                bytes,
                reason: format!(
                    "block '{label}' was asked of a stream-ordered pool without a stream; use MemoryPool::allocate_on with the stream that first uses it"
                ),
            });
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let reused = {
            let mut state = self.lock();
            let block = state.free.get_mut(&class).and_then(Vec::pop);
            if let Some(block) = &block {
                let stats = &mut state.statistics;
                stats.hits += 1;
                stats.bytes_active += block.bytes;
                stats.blocks_active += 1;
                stats.high_water_bytes_active =
                    stats.high_water_bytes_active.max(stats.bytes_active);
                state.outstanding.insert(
                    id,
                    OutstandingBlock {
                        label: label.clone(),
                        bytes: class,
                    },
                );
            }
            block
        };
        let raw = match reused {
            Some(block) => block,
            None => {
                // Allocate outside the lock: device allocation can be slow.
                if let BlockSource::Host(_) = self.inner.source {
                    crate::host_memory::check_host_allocation(class, &label)?;
                }
                let block = self.inner.source.allocate(class)?;
                let mut state = self.lock();
                let stats = &mut state.statistics;
                stats.misses += 1;
                if matches!(self.inner.source, BlockSource::Host(HostMemory::Pinned))
                    && !block.pinned
                {
                    stats.pinned_fallbacks += 1;
                }
                stats.bytes_active += block.bytes;
                stats.blocks_active += 1;
                stats.bytes_total += block.bytes;
                stats.blocks_total += 1;
                stats.high_water_bytes_active =
                    stats.high_water_bytes_active.max(stats.bytes_active);
                stats.high_water_bytes_total = stats.high_water_bytes_total.max(stats.bytes_total);
                state.outstanding.insert(
                    id,
                    OutstandingBlock {
                        label,
                        bytes: class,
                    },
                );
                block
            }
        };
        Ok(PoolBlock {
            pool: self.clone(),
            raw: Some(raw),
            requested_bytes: bytes,
            id,
        })
    }

    fn give_back(&self, id: u64, block: RawBlock) {
        let mut state = self.lock();
        if self.is_stream_ordered() && gpu::recording_open() {
            // Work that uses the block may be logged in the recording and
            // not enqueued yet, so a free in stream order now could run
            // first. The block stays allocated and outstanding, relabelled
            // so that a leak check names it and says why.
            if let Some(held) = state.outstanding.get_mut(&id) {
                held.label = format!(
                    "{} (dropped inside a step recording, so never freed)",
                    held.label
                )
                .into();
            }
            std::mem::forget(block);
            return;
        }
        state.outstanding.remove(&id);
        state.statistics.bytes_active -= block.bytes;
        state.statistics.blocks_active -= 1;
        if self.is_stream_ordered() {
            state.statistics.bytes_total -= block.bytes;
            state.statistics.blocks_total -= 1;
            drop(state);
            self.inner.source.release(block);
        } else {
            state.free.entry(block.bytes).or_default().push(block);
        }
    }

    /// The counters now.
    pub fn statistics(&self) -> PoolStatistics {
        self.lock().statistics
    }

    /// Resets the high-water marks to the current values and the hit/miss
    /// counters to zero (e.g. to measure one time step).
    pub fn reset_counters(&self) {
        let mut state = self.lock();
        let stats = &mut state.statistics;
        stats.high_water_bytes_active = stats.bytes_active;
        stats.high_water_bytes_total = stats.bytes_total;
        stats.hits = 0;
        stats.misses = 0;
    }

    /// Blocks handed out and not yet returned, largest first.
    pub fn outstanding(&self) -> Vec<OutstandingBlock> {
        let mut blocks: Vec<_> = self.lock().outstanding.values().cloned().collect();
        blocks.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.label.cmp(&b.label)));
        blocks
    }

    /// `Ok` when no block is outstanding, otherwise [`FieldError::Leak`]
    /// listing who holds memory.
    pub fn check_no_leaks(&self) -> FieldResult<()> {
        let outstanding = self.outstanding();
        if outstanding.is_empty() {
            return Ok(());
        }
        let report = outstanding
            .iter()
            .map(|b| format!("'{}' ({} bytes)", b.label, b.bytes))
            .collect::<Vec<_>>()
            .join(", ");
        Err(FieldError::Leak {
            device: self.device(),
            blocks: outstanding.len(),
            bytes: outstanding.iter().map(|b| b.bytes).sum(),
            report,
        })
    }

    /// Returns every cached (free) block to the system; active blocks are
    /// untouched. Returns the number of bytes released.
    pub fn release_cached(&self) -> usize {
        let free = std::mem::take(&mut self.lock().free);
        let mut released = 0;
        let mut blocks_released = 0;
        for (_, blocks) in free {
            for block in blocks {
                released += block.bytes;
                blocks_released += 1;
                self.inner.source.release(block);
            }
        }
        let mut state = self.lock();
        state.statistics.bytes_total -= released;
        state.statistics.blocks_total -= blocks_released;
        released
    }
}

/// A block of pool memory. Returned to its pool when dropped.
pub struct PoolBlock {
    pool: MemoryPool,
    raw: Option<RawBlock>,
    requested_bytes: usize,
    id: u64,
}

impl std::fmt::Debug for PoolBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBlock")
            .field("device", &self.device())
            .field("bytes", &self.bytes())
            .field("requested_bytes", &self.requested_bytes)
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

impl PoolBlock {
    fn raw(&self) -> &RawBlock {
        self.raw
            .as_ref()
            .expect("a live block always holds its memory")
    }

    /// Host pointer (CPU pools) or `CUdeviceptr` value (GPU pools).
    pub fn address(&self) -> usize {
        self.raw().address
    }

    /// Usable bytes (the size class).
    pub fn bytes(&self) -> usize {
        self.raw().bytes
    }

    /// Bytes asked for.
    pub fn requested_bytes(&self) -> usize {
        self.requested_bytes
    }

    /// True for page-locked host memory.
    pub fn is_pinned(&self) -> bool {
        self.raw().pinned
    }

    /// The device the memory is on.
    pub fn device(&self) -> Device {
        self.pool.device()
    }

    /// The pool the block returns to.
    pub fn pool(&self) -> &MemoryPool {
        &self.pool
    }
}

impl Drop for PoolBlock {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            self.pool.give_back(self.id, raw);
        }
    }
}
