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
    CellCentre, Device, FieldInit, FieldResult, Lifetime, Location, LocationKind, MemoryPool,
    Patch, SpatialField, XFace, YFace, ZFace,
};
use watershed_operators::BoundField;

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

    /// Bytes of storage (ghosts included).
    pub fn bytes(&self) -> usize {
        self.as_bound().layout().allocated_len() * std::mem::size_of::<f64>()
    }
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
