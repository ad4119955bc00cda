//! The element types a field can hold.

use std::fmt::Debug;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// A floating-point element type of a field: `f64` (the default) or `f32`.
///
/// Every bit pattern of these types is a valid value, which is what lets pool
/// memory be reused without clearing it.
pub trait FieldScalar:
    sealed::Sealed
    + Copy
    + Default
    + PartialEq
    + PartialOrd
    + Debug
    + Send
    + Sync
    + 'static
    + hdf5::H5Type
{
    /// The name of the type in files and generated code ("f64", "f32").
    const NAME: &'static str;
    /// Zero.
    const ZERO: Self;
    /// Converts from `f64` (rounding for `f32`).
    fn from_f64(value: f64) -> Self;
    /// Converts to `f64`.
    fn to_f64(self) -> f64;
}

impl FieldScalar for f64 {
    const NAME: &'static str = "f64";
    const ZERO: Self = 0.0;
    fn from_f64(value: f64) -> Self {
        value
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl FieldScalar for f32 {
    const NAME: &'static str = "f32";
    const ZERO: Self = 0.0;
    fn from_f64(value: f64) -> Self {
        value as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}
