//! `SpatialField`: one logical field with locations on one or more devices.
//!
//! A field has a location on each device that holds a copy of it. Each
//! location is *valid* (holds current data) or not, and exactly one is
//! *active* (the one that may be written); the active location is always
//! valid. These are the four cases of Table 2.1 of the ExprLib/Wasatch thesis
//! (valid and active, valid, invalid, and the forbidden invalid-but-active),
//! and this API makes the forbidden case unreachable:
//!
//! * writing ([`SpatialField::values_mut`], [`SpatialField::gpu_buffer_mut`],
//!   [`SpatialField::fill`]) needs the active location and invalidates all
//!   others;
//! * reading ([`SpatialField::values`], [`SpatialField::gpu_buffer`]) needs a
//!   valid location;
//! * [`SpatialField::validate_on`] copies from a valid location (adding the
//!   location first if needed);
//! * [`SpatialField::set_active`] only accepts a valid location, and the active
//!   location cannot be removed.
//!
//! Misuse returns an error that names the field and prints every location's
//! state. The rules themselves live in [`crate::state::LocationTable`]; this
//! module adds memory and copies.

use crate::Device;
use crate::error::{FieldError, FieldResult};
use crate::external::ExternalBuffer;
use crate::gpu::{GpuStream, ValidationEvent};
use crate::grid::Patch;
use crate::layout::FieldLayout;
use crate::location::{Location, LocationKind};
use crate::pool::{MemoryPool, PoolBlock};
use crate::scalar::FieldScalar;
use crate::state::LocationTable;
use smallvec::SmallVec;
use std::marker::PhantomData;
use std::sync::Arc;

/// Whether a field lives beyond one use inside a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Lifetime {
    /// Intermediate value: its memory returns to the pool after its last use.
    #[default]
    Scratch,
    /// Kept for the life of the field (solution variables, output fields).
    Persistent,
}

/// How a new field's values start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldInit {
    /// Every point (ghosts included) is zero.
    #[default]
    Zero,
    /// Whatever the reused pool block held (finite or not): cheaper, for
    /// fields that are written completely before being read.
    Unspecified,
}

/// The state of one location of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocationState {
    /// The device of the location.
    pub device: Device,
    /// Holds current data.
    pub valid: bool,
    /// May be written (implies `valid`).
    pub active: bool,
}

/// Where a location's elements are stored.
enum Memory<T: FieldScalar> {
    Pool(PoolBlock),
    External(ExternalBuffer<T>),
}

impl<T: FieldScalar> Memory<T> {
    fn address(&self) -> usize {
        match self {
            Memory::Pool(block) => block.address(),
            Memory::External(buffer) => buffer.as_ptr() as usize,
        }
    }
}

/// The memory of one location; its state is in the field's [`LocationTable`]
/// at the same position.
struct FieldLocation<T: FieldScalar> {
    device: Device,
    memory: Memory<T>,
    /// The last asynchronous copy into or out of this location.
    pending: Option<ValidationEvent>,
}

/// Device memory of one GPU location, for kernels.
///
/// Carries the event of the last asynchronous copy involving the location:
/// a kernel on another stream must wait on it before touching the memory.
#[derive(Debug, Clone)]
pub struct GpuBuffer {
    /// The GPU holding the memory.
    pub device: Device,
    /// The `CUdeviceptr` of the first allocated element (ghosts included).
    pub pointer: u64,
    /// Number of elements.
    pub len: usize,
    /// Completion of the last asynchronous copy, if one may still run.
    pub ready: Option<ValidationEvent>,
}

/// A field of `T` at location `L` on a patch, with copies on one or more devices.
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])?;
/// let patch = grid.whole_domain(1);
/// let mut phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu)?;
/// phi.fill(2.0)?;
/// assert!(phi.values()?.iter().all(|&v| v == 2.0));
/// // No GPU here? Validating on one is an error, not a panic.
/// # if watershed_fields::gpu::gpu_count() == 0 {
/// assert!(phi.validate_on(Device::Gpu(0)).is_err());
/// # }
/// # Ok::<(), watershed_fields::FieldError>(())
/// ```
pub struct SpatialField<L: Location, T: FieldScalar = f64> {
    id: u64,
    name: Arc<str>,
    layout: FieldLayout,
    lifetime: Lifetime,
    locations: SmallVec<[FieldLocation<T>; 2]>,
    states: LocationTable,
    cpu_pool: Option<MemoryPool>,
    _location: PhantomData<L>,
}

impl<L: Location, T: FieldScalar> std::fmt::Debug for SpatialField<L, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpatialField")
            .field("name", &self.name)
            .field("location", &L::KIND)
            .field("extent", &self.layout.allocated_extent())
            .field("lifetime", &self.lifetime)
            .field("locations", &self.states.describe())
            .finish()
    }
}

/// Options for a new field; see [`SpatialField::builder`].
#[derive(Debug)]
pub struct FieldBuilder<L: Location, T: FieldScalar = f64> {
    name: Arc<str>,
    patch: Patch,
    device: Device,
    lifetime: Lifetime,
    init: FieldInit,
    pool: Option<MemoryPool>,
    stream_order: Option<GpuStream>,
    _types: PhantomData<(L, T)>,
}

impl<L: Location, T: FieldScalar> FieldBuilder<L, T> {
    /// The device of the first (active, valid) location. Default: CPU.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Scratch (default) or persistent.
    pub fn lifetime(mut self, lifetime: Lifetime) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// Starting values. Default: zero.
    pub fn init(mut self, init: FieldInit) -> Self {
        self.init = init;
        self
    }

    /// Take CPU memory from `pool` instead of the global CPU pool.
    pub fn cpu_pool(mut self, pool: MemoryPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Allocate the first location (on a GPU) in `stream`'s order from
    /// that GPU's stream-ordered pool ([`MemoryPool::stream_ordered`])
    /// instead of its size-class pool. The field must then be dropped only
    /// once every use of that memory is enqueued on `stream` or waited for
    /// by it, since the memory is freed on `stream`. Refused by
    /// [`FieldBuilder::build`] for a CPU field, a stream of another GPU,
    /// or [`FieldInit::Zero`] (zero it with a memset on the stream instead).
    pub fn in_stream_order(mut self, stream: &GpuStream) -> Self {
        self.stream_order = Some(stream.clone());
        self
    }

    /// Allocates the field.
    pub fn build(self) -> FieldResult<SpatialField<L, T>> {
        let layout = FieldLayout::new(&self.patch, L::KIND);
        if layout
            .checked_allocated_len(std::mem::size_of::<T>())
            .is_none()
        {
            return Err(FieldError::InvalidGrid {
                reason: format!(
                    "field '{}' on a patch of {:?} cells with ghost layers {:?} (minus) / {:?} (plus) would need more memory than this machine can address; use fewer cells or ghost layers",
                    self.name,
                    self.patch.cells(),
                    self.patch.ghosts().minus,
                    self.patch.ghosts().plus
                ),
            });
        }
        let mut field = SpatialField {
            id: next_field_id(),
            name: self.name,
            layout,
            lifetime: self.lifetime,
            locations: SmallVec::new(),
            states: LocationTable::new(self.device),
            cpu_pool: self.pool,
            _location: PhantomData,
        };
        let memory = match &self.stream_order {
            None => field.allocate(self.device)?,
            Some(stream) => {
                let refuse = |reason: String| FieldError::Allocation {
                    device: self.device,
                    bytes: field.bytes(),
                    reason: format!(
                        "field '{}' cannot be allocated in stream order: {reason}",
                        field.name
                    ),
                };
                let Device::Gpu(ordinal) = self.device else {
                    return Err(refuse(
                        "it lives on the CPU, which has no streams; drop in_stream_order".into(),
                    ));
                };
                if self.init == FieldInit::Zero {
                    return Err(refuse(
                        "zero-filling it would wait for the stream; build it with FieldInit::Unspecified and zero it with a memset on the stream".into(),
                    ));
                }
                Memory::Pool(MemoryPool::stream_ordered(ordinal)?.allocate_on(
                    stream,
                    field.bytes(),
                    field.name.clone(),
                )?)
            }
        };
        field.locations.push(FieldLocation {
            device: self.device,
            memory,
            pending: None,
        });
        if self.init == FieldInit::Zero {
            field.fill(T::ZERO)?;
        }
        Ok(field)
    }
}

impl<L: Location, T: FieldScalar> SpatialField<L, T> {
    /// Options for a new field named `name` on `patch`.
    pub fn builder(name: &str, patch: &Patch) -> FieldBuilder<L, T> {
        FieldBuilder {
            name: name.into(),
            patch: patch.clone(),
            device: Device::Cpu,
            lifetime: Lifetime::Scratch,
            init: FieldInit::Zero,
            pool: None,
            stream_order: None,
            _types: PhantomData,
        }
    }

    /// A zero-filled scratch field on `device`, from that device's global pool.
    pub fn new(name: &str, patch: &Patch, device: Device) -> FieldResult<Self> {
        Self::builder(name, patch).device(device).build()
    }

    /// A persistent CPU field whose storage is `buffer`, owned by the caller
    /// and never returned to a pool. The values in the buffer are the field's
    /// values (ghosts included, x fastest).
    pub fn from_external(
        name: &str,
        patch: &Patch,
        buffer: ExternalBuffer<T>,
    ) -> FieldResult<Self> {
        let layout = FieldLayout::new(patch, L::KIND);
        let Some(needed) = layout.checked_allocated_len(std::mem::size_of::<T>()) else {
            return Err(FieldError::ExternalStorage {
                field: name.to_string(),
                reason: format!(
                    "a field on a patch of {:?} cells with these ghost layers would need more memory than this machine can address",
                    patch.cells()
                ),
            });
        };
        let shape_mismatch = buffer
            .shape()
            .is_some_and(|shape| shape != layout.allocated_extent());
        if buffer.len() != needed || shape_mismatch {
            return Err(FieldError::ExternalStorage {
                field: name.to_string(),
                reason: format!(
                    "the buffer holds {} elements{}, but a {} field on this patch needs {:?} = {} (ghosts included)",
                    buffer.len(),
                    buffer
                        .shape()
                        .map(|s| format!(" in shape {s:?}"))
                        .unwrap_or_default(),
                    L::KIND,
                    layout.allocated_extent(),
                    needed
                ),
            });
        }
        let mut locations = SmallVec::new();
        locations.push(FieldLocation {
            device: Device::Cpu,
            memory: Memory::External(buffer),
            pending: None,
        });
        Ok(SpatialField {
            id: next_field_id(),
            name: name.into(),
            layout,
            lifetime: Lifetime::Persistent,
            locations,
            states: LocationTable::new(Device::Cpu),
            cpu_pool: None,
            _location: PhantomData,
        })
    }

    /// A number unique to this field within the process, for telling fields
    /// apart when names repeat (expression bindings, graph bookkeeping).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Gives the field a new name (e.g. when a graph swaps the storage of
    /// two time levels, each field takes the name of the level it now holds).
    pub fn rename(&mut self, name: &str) {
        self.name = name.into();
    }

    /// The field's layout (sizes, ghosts, coordinates).
    pub fn layout(&self) -> &FieldLayout {
        &self.layout
    }

    /// The field's staggered location.
    pub fn kind(&self) -> LocationKind {
        L::KIND
    }

    /// Scratch or persistent.
    pub fn lifetime(&self) -> Lifetime {
        self.lifetime
    }

    /// Changes the lifetime flag.
    pub fn set_lifetime(&mut self, lifetime: Lifetime) {
        self.lifetime = lifetime;
    }

    /// True when the CPU storage is caller-owned.
    pub fn is_external(&self) -> bool {
        self.locations
            .iter()
            .any(|l| matches!(l.memory, Memory::External(_)))
    }

    /// The device of the active location.
    pub fn active_device(&self) -> Device {
        self.states.active()
    }

    /// Devices that have a location, in the order they were added.
    pub fn devices(&self) -> impl Iterator<Item = Device> + '_ {
        self.states.devices()
    }

    /// The state of every location.
    pub fn location_states(&self) -> Vec<LocationState> {
        self.states
            .devices()
            .map(|device| LocationState {
                device,
                valid: self.states.is_valid(device),
                active: device == self.states.active(),
            })
            .collect()
    }

    /// The state of the location on `device`, if there is one.
    pub fn state_on(&self, device: Device) -> Option<LocationState> {
        self.location_states()
            .into_iter()
            .find(|s| s.device == device)
    }

    /// True when `device` has a location holding current data.
    pub fn is_valid_on(&self, device: Device) -> bool {
        self.states.is_valid(device)
    }

    fn bytes(&self) -> usize {
        self.layout.allocated_len() * std::mem::size_of::<T>()
    }

    fn allocate(&self, device: Device) -> FieldResult<Memory<T>> {
        let pool = match (&self.cpu_pool, device) {
            (Some(pool), Device::Cpu) => pool.clone(),
            _ => MemoryPool::global(device)?,
        };
        Ok(Memory::Pool(
            pool.allocate(self.bytes(), self.name.clone())?,
        ))
    }

    /// Adds an (invalid) location on `device`, allocated from its pool.
    ///
    /// Errors when the location exists or the device cannot be used.
    pub fn add_location(&mut self, device: Device) -> FieldResult<()> {
        if self.states.position(device).is_some() {
            // Let the table produce the error before anything is allocated.
            return self.states.clone().add(&self.name, device);
        }
        let memory = self.allocate(device)?;
        self.states.add(&self.name, device)?;
        self.locations.push(FieldLocation {
            device,
            memory,
            pending: None,
        });
        Ok(())
    }

    /// Removes the location on `device`, returning its memory to the pool.
    ///
    /// Errors when it is the active location or does not exist.
    pub fn remove_location(&mut self, device: Device) -> FieldResult<()> {
        let index = self.states.remove(&self.name, device)?;
        let removed = self.locations.remove(index);
        if let Some(event) = &removed.pending {
            // A copy may still read or write the memory: wait before freeing it.
            event.synchronize()?;
        }
        Ok(())
    }

    /// Makes the location on `device` hold current data, adding it if needed
    /// and copying from a valid location if it is invalid. Synchronous: the
    /// data is in place when this returns.
    pub fn validate_on(&mut self, device: Device) -> FieldResult<()> {
        if let Some(event) = self.validate_inner(device, None)? {
            event.synchronize()?;
        }
        Ok(())
    }

    /// Like [`validate_on`](Self::validate_on), but a copy involving a GPU is
    /// only enqueued on `stream`: this returns before the copy finishes, with
    /// the event a consumer waits on (`None` when no copy was needed). Later
    /// host access to the field waits for the copy by itself.
    pub fn validate_on_async(
        &mut self,
        device: Device,
        stream: &GpuStream,
    ) -> FieldResult<Option<ValidationEvent>> {
        self.validate_inner(device, Some(stream))
    }

    fn validate_inner(
        &mut self,
        device: Device,
        stream: Option<&GpuStream>,
    ) -> FieldResult<Option<ValidationEvent>> {
        let destination = match self.states.position(device) {
            Some(index) => index,
            None => {
                self.add_location(device)?;
                self.locations.len() - 1
            }
        };
        if self.states.is_valid(device) {
            return Ok(None);
        }
        // Copy from the active location (always valid); it is never `destination`.
        let source = self
            .states
            .require_valid(&self.name, self.states.active())?;
        let event = self.copy_between(source, destination, stream)?;
        self.states.mark_valid(&self.name, device)?;
        self.locations[destination].pending = Some(event.clone());
        self.locations[source].pending = Some(event.clone());
        Ok(Some(event))
    }

    /// Enqueues a copy of location `source` into `destination` (which differ
    /// and involve at least one GPU) and records its completion event.
    fn copy_between(
        &self,
        source: usize,
        destination: usize,
        stream: Option<&GpuStream>,
    ) -> FieldResult<ValidationEvent> {
        let from = &self.locations[source];
        let to = &self.locations[destination];
        let gpu_ordinal = to
            .device
            .gpu_ordinal()
            .or(from.device.gpu_ordinal())
            .expect("a field has one CPU location, so a copy involves a GPU");
        let owned_stream;
        let stream = match stream {
            Some(stream) => stream,
            None => {
                owned_stream = GpuStream::new(gpu_ordinal)?;
                &owned_stream
            }
        };
        for event in [&from.pending, &to.pending].into_iter().flatten() {
            stream.wait(event)?;
        }
        let bytes = self.layout.allocated_len() * std::mem::size_of::<T>();
        let action = format!(
            "copying field '{}' from {} to {}",
            self.name, from.device, to.device
        );
        // SAFETY: both locations hold the field's elements of T; pending
        // copies on either were waited for above; the host side is pinned
        // or pageable host memory that outlives the copy (the field waits on
        // the event before freeing or handing out host memory).
        unsafe {
            stream.copy(
                (from.device, from.memory.address()),
                (to.device, to.memory.address()),
                bytes,
                &action,
            )?;
        }
        stream.record()
    }

    /// Makes the valid location on `device` the active (writable) one.
    pub fn set_active(&mut self, device: Device) -> FieldResult<()> {
        self.states.set_active(&self.name, device)
    }

    /// Waits for a pending copy into or out of the CPU location.
    fn wait_for_host(&self, index: usize) -> FieldResult<()> {
        if let Some(event) = &self.locations[index].pending {
            event.synchronize()?;
        }
        Ok(())
    }

    /// The CPU values, ghosts included, x fastest. Needs a valid CPU location.
    pub fn values(&self) -> FieldResult<&[T]> {
        let index = self.states.require_valid(&self.name, Device::Cpu)?;
        self.wait_for_host(index)?;
        let len = self.layout.allocated_len();
        // SAFETY: the CPU location holds `len` initialised elements of T
        // (every bit pattern is a valid T), and `&self` prevents writes.
        Ok(unsafe {
            std::slice::from_raw_parts(self.locations[index].memory.address() as *const T, len)
        })
    }

    /// The CPU values for writing. Needs the CPU location to be active;
    /// every other location becomes invalid.
    pub fn values_mut(&mut self) -> FieldResult<&mut [T]> {
        let index = self.states.begin_write(&self.name, Device::Cpu)?;
        self.wait_for_host(index)?;
        self.locations[index].pending = None;
        let len = self.layout.allocated_len();
        // SAFETY: as in `values`, and `&mut self` makes the access exclusive.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.locations[index].memory.address() as *mut T, len)
        })
    }

    /// Sets every point (ghosts included) on the active location to `value`;
    /// every other location becomes invalid. Synchronous on GPUs.
    pub fn fill(&mut self, value: T) -> FieldResult<()> {
        match self.states.active() {
            Device::Cpu => {
                self.values_mut()?.fill(value);
                Ok(())
            }
            device @ Device::Gpu(ordinal) => {
                let buffer = self.gpu_buffer_mut(device)?;
                let stream = GpuStream::new(ordinal)?;
                if let Some(event) = &buffer.ready {
                    stream.wait(event)?;
                }
                let bytes = buffer.len * std::mem::size_of::<T>();
                let pattern = as_bytes(&value);
                let uniform = pattern.iter().all(|&b| b == pattern[0]);
                let host = (!uniform).then(|| vec![value; buffer.len]);
                let action = format!("filling field '{}'", self.name);
                // SAFETY: `buffer` is this field's device memory of `bytes`
                // bytes; `host` lives until the stream has been synchronised
                // (it is leaked if that fails, since the copy may still run).
                let result = unsafe {
                    match &host {
                        None => stream.memset(buffer.pointer as usize, pattern[0], bytes, &action),
                        Some(host) => stream.copy(
                            (Device::Cpu, host.as_ptr() as usize),
                            (device, buffer.pointer as usize),
                            bytes,
                            &action,
                        ),
                    }
                };
                let synchronized = stream.synchronize();
                if synchronized.is_err() {
                    std::mem::forget(host);
                }
                result?;
                synchronized
            }
        }
    }

    /// Makes this field's values, ghosts included, those of `source` (on
    /// the same layout), copied on the device where `source` is active
    /// (where it was last written). This field's location on that device
    /// (added when missing) becomes the active one and the only valid
    /// one, its earlier values never copied anywhere: two fields on one
    /// GPU are copied on that GPU, without a trip through the host.
    /// Synchronous. Errors when the layouts differ (naming both fields)
    /// or a copy fails.
    ///
    /// ```
    /// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let mut from = SpatialField::<CellCentre>::new("u*", &patch, Device::Cpu)?;
    /// from.fill(2.5)?;
    /// let mut to = SpatialField::<CellCentre>::new("u* of the next graph", &patch, Device::Cpu)?;
    /// to.copy_from(&from)?;
    /// assert!(to.values()?.iter().all(|&v| v == 2.5));
    /// # Ok::<(), watershed_fields::FieldError>(())
    /// ```
    pub fn copy_from(&mut self, source: &SpatialField<L, T>) -> FieldResult<()> {
        if source.layout != self.layout {
            return Err(FieldError::InvalidLayout {
                reason: format!(
                    "field '{}' cannot take the values of field '{}': they lie on different layouts ({:?} and {:?} ghost layers on {:?} cells and {:?}); build both on the same patch",
                    self.name,
                    source.name,
                    self.layout.ghosts(),
                    source.layout.ghosts(),
                    self.layout.interior_extent(),
                    source.layout.interior_extent()
                ),
            });
        }
        let device = source.active_device();
        if self.states.position(device).is_none() {
            self.add_location(device)?;
        }
        // The location takes the values below; its old ones are not copied.
        self.states.mark_valid(&self.name, device)?;
        self.states.set_active(&self.name, device)?;
        let Device::Gpu(ordinal) = device else {
            self.values_mut()?.copy_from_slice(source.values()?);
            return Ok(());
        };
        let to = self.gpu_buffer_mut(device)?;
        let from = source.gpu_buffer(device)?;
        let stream = GpuStream::new(ordinal)?;
        for event in [&from.ready, &to.ready].into_iter().flatten() {
            stream.wait(event)?;
        }
        let bytes = to
            .len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| FieldError::Allocation {
                device,
                bytes: usize::MAX,
                reason: format!(
                    "{} elements of field '{}' overflow a byte count",
                    to.len, self.name
                ),
            })?;
        let action = format!(
            "copying field '{}' into field '{}' on {device}",
            source.name, self.name
        );
        // SAFETY: both buffers hold `len` elements of T on this GPU (the
        // layouts are equal); their pending copies were waited for above,
        // and both fields outlive the synchronisation below (`&` and `&mut`
        // borrows), so nothing frees or writes them meanwhile.
        let copied = unsafe {
            stream.copy(
                (device, from.pointer as usize),
                (device, to.pointer as usize),
                bytes,
                &action,
            )
        };
        stream.synchronize()?;
        copied
    }

    /// A copy of the values (ghosts included) of the valid location on
    /// `device`, read without changing any location's state: a GPU
    /// location is copied to the host, and the call waits for it.
    pub fn values_on(&self, device: Device) -> FieldResult<Vec<T>> {
        let Device::Gpu(ordinal) = device else {
            return Ok(self.values()?.to_vec());
        };
        let buffer = self.gpu_buffer(device)?;
        let stream = GpuStream::new(ordinal)?;
        if let Some(event) = &buffer.ready {
            stream.wait(event)?;
        }
        let mut host = vec![T::ZERO; buffer.len];
        let action = format!("reading field '{}' from {device}", self.name);
        // SAFETY: the buffer holds `len` elements on the GPU and `host` as
        // many on the host; `host` lives until the stream has finished (it
        // is leaked if waiting fails, since the copy may still run).
        let copied = unsafe {
            stream.copy(
                (device, buffer.pointer as usize),
                (Device::Cpu, host.as_mut_ptr() as usize),
                buffer.len * std::mem::size_of::<T>(),
                &action,
            )
        };
        if let Err(error) = stream.synchronize() {
            std::mem::forget(host);
            return Err(error);
        }
        copied?;
        Ok(host)
    }

    /// The device memory of the valid location on GPU `device`, for reading.
    pub fn gpu_buffer(&self, device: Device) -> FieldResult<GpuBuffer> {
        let index = self.states.require_valid(&self.name, device)?;
        Ok(self.describe_gpu(index))
    }

    /// The device memory of the active location on GPU `device`, for
    /// writing; every other location becomes invalid.
    pub fn gpu_buffer_mut(&mut self, device: Device) -> FieldResult<GpuBuffer> {
        let index = self.states.begin_write(&self.name, device)?;
        Ok(self.describe_gpu(index))
    }

    fn describe_gpu(&self, index: usize) -> GpuBuffer {
        let location = &self.locations[index];
        GpuBuffer {
            device: location.device,
            pointer: location.memory.address() as u64,
            len: self.layout.allocated_len(),
            ready: location.pending.clone(),
        }
    }

    /// Hands back the caller's storage of an external field, after making
    /// the CPU location valid. Check [`is_external`](Self::is_external) first:
    /// for a pool-backed field this errors and the field's memory returns to
    /// its pool.
    pub fn into_external(mut self) -> FieldResult<ExternalBuffer<T>> {
        if !self.is_external() {
            return Err(FieldError::ExternalStorage {
                field: self.name.to_string(),
                reason: "the field's storage comes from a memory pool, not from the caller".into(),
            });
        }
        self.validate_on(Device::Cpu)?;
        let index = self.states.require_valid(&self.name, Device::Cpu)?;
        self.wait_for_host(index)?;
        // Drop GPU locations (after their copies finished) and take the buffer.
        for location in &self.locations {
            if let Some(event) = &location.pending {
                event.synchronize()?;
            }
        }
        let location = self.locations.remove(index);
        match location.memory {
            Memory::External(buffer) => Ok(buffer),
            Memory::Pool(_) => unreachable!("the CPU location of an external field is external"),
        }
    }
}

impl<L: Location, T: FieldScalar> Drop for SpatialField<L, T> {
    fn drop(&mut self) {
        // Memory must not return to a pool (or to the caller) while a copy
        // may still touch it.
        for location in &self.locations {
            if let Some(event) = &location.pending {
                let _ = event.synchronize();
            }
        }
    }
}

fn next_field_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn as_bytes<T: FieldScalar>(value: &T) -> &[u8] {
    // SAFETY: T is f32 or f64: plain bytes without padding.
    unsafe { std::slice::from_raw_parts(value as *const T as *const u8, std::mem::size_of::<T>()) }
}
