//! Staggered-grid locations as zero-sized marker types.
//!
//! Cell centres and the x, y and z faces form the staggered family that
//! SpatialOps calls SVol, XVol, YVol and ZVol. Operators are typed by these
//! markers so that, for example, a gradient from cells lands on faces at
//! compile time. The runtime counterpart, [`LocationKind`], is what layouts,
//! file attributes and error messages use.

use std::fmt::Debug;

/// The runtime name of a staggered location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocationKind {
    /// Cell centres (SVol).
    CellCentre,
    /// Faces normal to x (XVol), at the lower x face of each cell.
    XFace,
    /// Faces normal to y (YVol).
    YFace,
    /// Faces normal to z (ZVol).
    ZFace,
}

impl LocationKind {
    /// All four locations.
    pub const ALL: [LocationKind; 4] = [
        LocationKind::CellCentre,
        LocationKind::XFace,
        LocationKind::YFace,
        LocationKind::ZFace,
    ];

    /// The stable name used in files and messages.
    pub fn name(self) -> &'static str {
        match self {
            LocationKind::CellCentre => "CellCentre",
            LocationKind::XFace => "XFace",
            LocationKind::YFace => "YFace",
            LocationKind::ZFace => "ZFace",
        }
    }

    /// The location with this [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        LocationKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The axis a face location is normal to; `None` for cell centres.
    pub fn face_axis(self) -> Option<usize> {
        match self {
            LocationKind::CellCentre => None,
            LocationKind::XFace => Some(0),
            LocationKind::YFace => Some(1),
            LocationKind::ZFace => Some(2),
        }
    }

    /// The face location normal to `axis` (0, 1, 2); `None` for any other
    /// axis.
    pub fn face_normal_to(axis: usize) -> Option<Self> {
        [
            LocationKind::XFace,
            LocationKind::YFace,
            LocationKind::ZFace,
        ]
        .get(axis)
        .copied()
    }

    /// Offset of point (0, 0, 0) from the lower corner of its cell, in cells:
    /// 0.5 on every axis for centres, 0 on the normal axis for faces.
    pub fn stagger(self) -> [f64; 3] {
        let mut s = [0.5; 3];
        if let Some(axis) = self.face_axis() {
            s[axis] = 0.0;
        }
        s
    }
}

impl std::fmt::Display for LocationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A compile-time location marker.
///
/// ```
/// use watershed_fields::{Location, LocationKind, XFace};
/// assert_eq!(XFace::KIND, LocationKind::XFace);
/// ```
pub trait Location: Copy + Default + Debug + Send + Sync + 'static {
    /// The runtime location this marker stands for.
    const KIND: LocationKind;
}

/// Cell centres (SpatialOps' SVol).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CellCentre;
/// Faces normal to x (SpatialOps' XVol).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XFace;
/// Faces normal to y (SpatialOps' YVol).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct YFace;
/// Faces normal to z (SpatialOps' ZVol).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZFace;

impl Location for CellCentre {
    const KIND: LocationKind = LocationKind::CellCentre;
}
impl Location for XFace {
    const KIND: LocationKind = LocationKind::XFace;
}
impl Location for YFace {
    const KIND: LocationKind = LocationKind::YFace;
}
impl Location for ZFace {
    const KIND: LocationKind = LocationKind::ZFace;
}

/// Runs a block with a type alias standing for the face location normal to
/// an axis: `XFace` for 0, `YFace` for 1, `ZFace` for 2. It replaces the
/// `match axis { 0 => f::<XFace>(..), 1 => f::<YFace>(..), _ => ... }`
/// that generic code over faces otherwise repeats. An axis above 2 takes
/// the z branch, so call it with axes of a grid only.
///
/// ```
/// use watershed_fields::{Location, LocationKind, on_face};
/// fn kind<L: Location>() -> LocationKind { L::KIND }
/// let kinds: Vec<LocationKind> = (0..3).map(|axis| on_face!(axis, F => kind::<F>())).collect();
/// assert_eq!(kinds, [LocationKind::XFace, LocationKind::YFace, LocationKind::ZFace]);
/// ```
#[macro_export]
macro_rules! on_face {
    ($axis:expr, $face:ident => $body:expr) => {
        match $axis {
            0 => {
                #[allow(dead_code)]
                type $face = $crate::XFace;
                $body
            }
            1 => {
                #[allow(dead_code)]
                type $face = $crate::YFace;
                $body
            }
            _ => {
                #[allow(dead_code)]
                type $face = $crate::ZFace;
                $body
            }
        }
    };
}
