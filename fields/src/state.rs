//! The location state machine of a field, separate from its memory.
//!
//! [`LocationTable`] holds, for each device a field has a location on,
//! whether that location is valid, and which one is active. It enforces the
//! rules of Table 2.1 of the ExprLib/Wasatch thesis:
//!
//! | valid | active | allowed |
//! | --- | --- | --- |
//! | yes | yes | yes: the one writable copy |
//! | yes | no | yes: a current read-only copy |
//! | no | no | yes: allocated, stale |
//! | no | yes | **never** |
//!
//! Exactly one location is active at any time (the one the field was created
//! on, until [`LocationTable::set_active`] moves it). Keeping the rules in this
//! small type lets them be property-tested over any number of devices, GPU or
//! not; [`crate::SpatialField`] adds the memory and the copies.

use crate::Device;
use crate::error::{FieldError, FieldResult};
use smallvec::SmallVec;

/// Validity of each location of a field and which one is active.
///
/// ```
/// use watershed_fields::{Device, state::LocationTable};
/// let mut table = LocationTable::new(Device::Cpu);
/// table.add("phi", Device::Gpu(0)).unwrap();
/// assert!(table.set_active("phi", Device::Gpu(0)).is_err()); // not valid yet
/// table.mark_valid("phi", Device::Gpu(0)).unwrap();
/// table.set_active("phi", Device::Gpu(0)).unwrap();
/// table.begin_write("phi", Device::Gpu(0)).unwrap();
/// assert!(!table.is_valid(Device::Cpu)); // the write invalidated the CPU copy
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationTable {
    entries: SmallVec<[(Device, bool); 2]>,
    active: Device,
}

impl LocationTable {
    /// A table with one location, on `device`, valid and active.
    pub fn new(device: Device) -> Self {
        let mut entries = SmallVec::new();
        entries.push((device, true));
        LocationTable {
            entries,
            active: device,
        }
    }

    /// Devices with a location, in the order they were added.
    pub fn devices(&self) -> impl Iterator<Item = Device> + '_ {
        self.entries.iter().map(|(d, _)| *d)
    }

    /// The active device.
    pub fn active(&self) -> Device {
        self.active
    }

    /// Position of `device`'s location, if any.
    pub fn position(&self, device: Device) -> Option<usize> {
        self.entries.iter().position(|(d, _)| *d == device)
    }

    /// True when `device` has a valid location.
    pub fn is_valid(&self, device: Device) -> bool {
        self.entries.iter().any(|&(d, valid)| d == device && valid)
    }

    /// "CPU: valid, active; GPU 0: invalid"
    pub fn describe(&self) -> String {
        self.entries
            .iter()
            .map(|&(device, valid)| {
                let state = if valid { "valid" } else { "invalid" };
                let active = if device == self.active {
                    ", active"
                } else {
                    ""
                };
                format!("{device}: {state}{active}")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Position of `device`'s location, or [`FieldError::LocationMissing`].
    pub fn require_location(&self, field: &str, device: Device) -> FieldResult<usize> {
        self.position(device)
            .ok_or_else(|| FieldError::LocationMissing {
                field: field.to_string(),
                device,
                states: self.describe(),
            })
    }

    /// Position of `device`'s location if it is valid, or an error saying why not.
    pub fn require_valid(&self, field: &str, device: Device) -> FieldResult<usize> {
        let index = self.require_location(field, device)?;
        if !self.entries[index].1 {
            return Err(FieldError::NotValid {
                field: field.to_string(),
                device,
                states: self.describe(),
            });
        }
        Ok(index)
    }

    /// Position of `device`'s location if it is active, or an error saying why not.
    pub fn require_active(&self, field: &str, device: Device) -> FieldResult<usize> {
        let index = self.require_location(field, device)?;
        if device != self.active {
            return Err(FieldError::NotActive {
                field: field.to_string(),
                device,
                states: self.describe(),
            });
        }
        Ok(index)
    }

    /// Adds an invalid location on `device` (at the end).
    pub fn add(&mut self, field: &str, device: Device) -> FieldResult<()> {
        if self.position(device).is_some() {
            return Err(FieldError::LocationExists {
                field: field.to_string(),
                device,
                states: self.describe(),
            });
        }
        self.entries.push((device, false));
        Ok(())
    }

    /// Removes the location on `device`; returns its former position. The
    /// active location cannot be removed.
    pub fn remove(&mut self, field: &str, device: Device) -> FieldResult<usize> {
        let index = self.require_location(field, device)?;
        if device == self.active {
            return Err(FieldError::RemoveActive {
                field: field.to_string(),
                device,
                states: self.describe(),
            });
        }
        self.entries.remove(index);
        Ok(index)
    }

    /// Records that `device`'s location now holds current data (after a copy).
    pub fn mark_valid(&mut self, field: &str, device: Device) -> FieldResult<()> {
        let index = self.require_location(field, device)?;
        self.entries[index].1 = true;
        Ok(())
    }

    /// Makes `device`'s valid location the active one.
    pub fn set_active(&mut self, field: &str, device: Device) -> FieldResult<()> {
        self.require_valid(field, device)?;
        self.active = device;
        Ok(())
    }

    /// Starts a write on `device`, which must be active: every other location
    /// becomes invalid. Returns the position of the written location.
    pub fn begin_write(&mut self, field: &str, device: Device) -> FieldResult<usize> {
        let index = self.require_active(field, device)?;
        for (i, entry) in self.entries.iter_mut().enumerate() {
            entry.1 = i == index;
        }
        Ok(index)
    }

    /// Checks the invariants: one entry per device, the active device has a
    /// location and it is valid.
    pub fn invariants_hold(&self) -> bool {
        let unique = self
            .entries
            .iter()
            .enumerate()
            .all(|(i, (d, _))| self.entries[..i].iter().all(|(e, _)| e != d));
        unique && self.is_valid(self.active)
    }
}
