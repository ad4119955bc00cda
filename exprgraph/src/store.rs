//! Fields of any location, and the per-graph store that holds them.
//!
//! A graph computes fields of all four staggered locations; [`AnyField`]
//! holds one of them, and [`GraphLocation`] converts between it and the typed
//! [`SpatialField`]. The store keeps one slot per tag behind a reader-writer
//! lock: the scheduler's dependency order already guarantees that a field is
//! written only while nobody reads it, and the lock turns a violation of
//! that guarantee into a wait instead of undefined behaviour.

use std::sync::RwLock;
use watershed_fields::{
    CellCentre, Device, FieldError, FieldInit, FieldResult, GpuBuffer, GpuStream, Lifetime,
    Location, LocationKind, MemoryPool, Patch, SpatialField, ValidationEvent, XFace, YFace, ZFace,
};
use watershed_operators::BoundField;

/// Runs `$body` with `$f` bound to the typed field inside `$field`.
macro_rules! each {
    ($field:expr, $f:ident => $body:expr) => {
        match $field {
            AnyField::Cell($f) => $body,
            AnyField::XFace($f) => $body,
            AnyField::YFace($f) => $body,
            AnyField::ZFace($f) => $body,
        }
    };
}

/// The locations a graph can hold, with their conversions to [`AnyField`].
pub trait GraphLocation: Location {
    /// Wraps a typed field.
    fn wrap(field: SpatialField<Self>) -> AnyField;
    /// The typed field, if `field` has this location.
    fn get(field: &AnyField) -> Option<&SpatialField<Self>>;
    /// The typed field, mutably, if `field` has this location.
    fn get_mut(field: &mut AnyField) -> Option<&mut SpatialField<Self>>;
}

macro_rules! graph_location {
    ($marker:ty, $variant:ident) => {
        impl GraphLocation for $marker {
            fn wrap(field: SpatialField<Self>) -> AnyField {
                AnyField::$variant(field)
            }
            fn get(field: &AnyField) -> Option<&SpatialField<Self>> {
                match field {
                    AnyField::$variant(f) => Some(f),
                    _ => None,
                }
            }
            fn get_mut(field: &mut AnyField) -> Option<&mut SpatialField<Self>> {
                match field {
                    AnyField::$variant(f) => Some(f),
                    _ => None,
                }
            }
        }
    };
}

graph_location!(CellCentre, Cell);
graph_location!(XFace, XFace);
graph_location!(YFace, YFace);
graph_location!(ZFace, ZFace);

/// One slot per tag of a graph.
#[derive(Debug, Default)]
pub struct FieldStore {
    pub(crate) slots: Vec<RwLock<Option<AnyField>>>,
}

impl FieldStore {
    /// A store of `count` empty slots.
    pub fn with_slots(count: usize) -> Self {
        FieldStore {
            slots: (0..count).map(|_| RwLock::new(None)).collect(),
        }
    }

    /// Puts `field` in `slot`, returning what was there.
    pub fn put(&self, slot: usize, field: Option<AnyField>) -> Option<AnyField> {
        let mut guard = self.slots[slot].write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *guard, field)
    }
}

/// A field of any location.
#[derive(Debug)]
pub enum AnyField {
    /// Cell centres.
    Cell(SpatialField<CellCentre>),
    /// x faces.
    XFace(SpatialField<XFace>),
    /// y faces.
    YFace(SpatialField<YFace>),
    /// z faces.
    ZFace(SpatialField<ZFace>),
}

impl AnyField {
    /// A new CPU field of `kind` on `patch`, from `pool`.
    pub fn new(
        kind: LocationKind,
        name: &str,
        patch: &Patch,
        lifetime: Lifetime,
        pool: &MemoryPool,
        init: FieldInit,
    ) -> FieldResult<AnyField> {
        fn build<L: GraphLocation>(
            name: &str,
            patch: &Patch,
            lifetime: Lifetime,
            pool: &MemoryPool,
            init: FieldInit,
        ) -> FieldResult<AnyField> {
            Ok(L::wrap(
                SpatialField::<L>::builder(name, patch)
                    .device(Device::Cpu)
                    .lifetime(lifetime)
                    .cpu_pool(pool.clone())
                    .init(init)
                    .build()?,
            ))
        }
        match kind {
            LocationKind::CellCentre => build::<CellCentre>(name, patch, lifetime, pool, init),
            LocationKind::XFace => build::<XFace>(name, patch, lifetime, pool, init),
            LocationKind::YFace => build::<YFace>(name, patch, lifetime, pool, init),
            LocationKind::ZFace => build::<ZFace>(name, patch, lifetime, pool, init),
        }
    }

    /// The field's location.
    pub fn kind(&self) -> LocationKind {
        match self {
            AnyField::Cell(_) => LocationKind::CellCentre,
            AnyField::XFace(_) => LocationKind::XFace,
            AnyField::YFace(_) => LocationKind::YFace,
            AnyField::ZFace(_) => LocationKind::ZFace,
        }
    }

    /// The field as an expression binding.
    pub fn as_bound(&self) -> &dyn BoundField {
        match self {
            AnyField::Cell(f) => f,
            AnyField::XFace(f) => f,
            AnyField::YFace(f) => f,
            AnyField::ZFace(f) => f,
        }
    }

    /// Renames the field.
    pub fn rename(&mut self, name: &str) {
        match self {
            AnyField::Cell(f) => f.rename(name),
            AnyField::XFace(f) => f.rename(name),
            AnyField::YFace(f) => f.rename(name),
            AnyField::ZFace(f) => f.rename(name),
        }
    }

    /// True when the field's CPU storage belongs to an outer framework
    /// (bound from external memory), which may write it at any time.
    pub fn is_external(&self) -> bool {
        match self {
            AnyField::Cell(f) => f.is_external(),
            AnyField::XFace(f) => f.is_external(),
            AnyField::YFace(f) => f.is_external(),
            AnyField::ZFace(f) => f.is_external(),
        }
    }

    /// Bytes of storage (ghosts included).
    pub fn bytes(&self) -> usize {
        self.as_bound().layout().allocated_len() * std::mem::size_of::<f64>()
    }
    /// A new field of `kind` on GPU `device`, not initialised (zero it on
    /// a stream with [`Self::zero_on`]): from that GPU's size-class pool,
    /// or, given `stream_order`, allocated in that stream's order (see
    /// [`watershed_fields::FieldBuilder::in_stream_order`]). A CPU copy,
    /// if one is made, comes from `host_pool`.
    pub fn new_on_gpu(
        kind: LocationKind,
        name: &str,
        patch: &Patch,
        lifetime: Lifetime,
        device: Device,
        host_pool: &MemoryPool,
        stream_order: Option<&GpuStream>,
    ) -> FieldResult<AnyField> {
        fn build<L: GraphLocation>(
            name: &str,
            patch: &Patch,
            lifetime: Lifetime,
            device: Device,
            host_pool: &MemoryPool,
            stream_order: Option<&GpuStream>,
        ) -> FieldResult<AnyField> {
            let mut builder = SpatialField::<L>::builder(name, patch)
                .device(device)
                .lifetime(lifetime)
                .cpu_pool(host_pool.clone())
                .init(FieldInit::Unspecified);
            if let Some(stream) = stream_order {
                builder = builder.in_stream_order(stream);
            }
            Ok(L::wrap(builder.build()?))
        }
        let (pool, order) = (host_pool, stream_order);
        match kind {
            LocationKind::CellCentre => {
                build::<CellCentre>(name, patch, lifetime, device, pool, order)
            }
            LocationKind::XFace => build::<XFace>(name, patch, lifetime, device, pool, order),
            LocationKind::YFace => build::<YFace>(name, patch, lifetime, device, pool, order),
            LocationKind::ZFace => build::<ZFace>(name, patch, lifetime, device, pool, order),
        }
    }

    /// True when the location on `device` holds current values.
    pub fn is_valid_on(&self, device: Device) -> bool {
        each!(self, f => f.is_valid_on(device))
    }

    /// The device whose location is written.
    pub fn active_device(&self) -> Device {
        each!(self, f => f.active_device())
    }

    /// Makes the location on `device` current, copying synchronously.
    pub fn validate_on(&mut self, device: Device) -> FieldResult<()> {
        each!(self, f => f.validate_on(device))
    }

    /// Makes the location on `device` current, a copy only enqueued on
    /// `stream` (see [`SpatialField::validate_on_async`]).
    pub fn validate_on_async(
        &mut self,
        device: Device,
        stream: &GpuStream,
    ) -> FieldResult<Option<ValidationEvent>> {
        each!(self, f => f.validate_on_async(device, stream))
    }

    /// Makes the (valid) location on `device` the written one.
    pub fn set_active(&mut self, device: Device) -> FieldResult<()> {
        each!(self, f => f.set_active(device))
    }

    /// The active GPU location's memory for writing (every other location
    /// becomes invalid).
    pub fn gpu_buffer_mut(&mut self, device: Device) -> FieldResult<GpuBuffer> {
        each!(self, f => f.gpu_buffer_mut(device))
    }

    /// Makes `device` the written location with current values: a copy
    /// (synchronous for the CPU, enqueued on `stream` for a GPU) when it
    /// is not valid there.
    pub fn make_active_on(
        &mut self,
        device: Device,
        stream: Option<&GpuStream>,
    ) -> FieldResult<()> {
        if self.active_device() == device {
            return Ok(());
        }
        match stream {
            Some(stream) => {
                self.validate_on_async(device, stream)?;
            }
            None => self.validate_on(device)?,
        }
        self.set_active(device)
    }

    /// Enqueues zeroing every point (ghosts included) of the active GPU
    /// location on `stream`; every other location becomes invalid.
    pub fn zero_on(&mut self, stream: &GpuStream) -> FieldResult<()> {
        let device = stream.device();
        let buffer = self.gpu_buffer_mut(device)?;
        if let Some(event) = &buffer.ready {
            stream.wait(event)?;
        }
        let bytes = buffer
            .len
            .checked_mul(std::mem::size_of::<f64>())
            .ok_or_else(|| FieldError::Allocation {
                device,
                bytes: usize::MAX,
                reason: format!(
                    "{} elements of 8 bytes overflow the address space",
                    buffer.len
                ),
            })?;
        // SAFETY: the buffer is this field's device memory of `bytes`
        // bytes on the stream's GPU; its last copy was waited for above,
        // and the field (hence the memory) outlives the execution, which
        // synchronises the stream before releasing it.
        unsafe { stream.memset(buffer.pointer as usize, 0, bytes, "zeroing a scratch field") }
    }
}
