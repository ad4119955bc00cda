//! The sides of a patch: an axis and its minus or plus end (where boundary
//! conditions, masks and ghost layers are named).

use crate::location::LocationKind;

/// A side of the patch: an axis and its minus or plus end.
///
/// ```
/// use watershed_fields::{LocationKind, Side};
/// assert_eq!(Side::PLUS_Y.name(), "+y");
/// assert_eq!(Side::PLUS_Y.normal_face(), LocationKind::YFace);
/// assert_eq!(Side::ALL.len(), 6);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Side {
    /// 0, 1, 2 for x, y, z.
    pub axis: usize,
    /// The plus (upper) end.
    pub plus: bool,
}

impl Side {
    /// The six sides.
    pub const ALL: [Side; 6] = [
        Side::MINUS_X,
        Side::PLUS_X,
        Side::MINUS_Y,
        Side::PLUS_Y,
        Side::MINUS_Z,
        Side::PLUS_Z,
    ];
    /// Lower x end.
    pub const MINUS_X: Side = Side {
        axis: 0,
        plus: false,
    };
    /// Upper x end.
    pub const PLUS_X: Side = Side {
        axis: 0,
        plus: true,
    };
    /// Lower y end.
    pub const MINUS_Y: Side = Side {
        axis: 1,
        plus: false,
    };
    /// Upper y end.
    pub const PLUS_Y: Side = Side {
        axis: 1,
        plus: true,
    };
    /// Lower z end.
    pub const MINUS_Z: Side = Side {
        axis: 2,
        plus: false,
    };
    /// Upper z end.
    pub const PLUS_Z: Side = Side {
        axis: 2,
        plus: true,
    };

    /// "-x", "+y", ...
    pub fn name(self) -> String {
        format!(
            "{}{}",
            if self.plus { "+" } else { "-" },
            ["x", "y", "z"][self.axis]
        )
    }
}

impl Side {
    /// The face location normal to this side's axis.
    pub fn normal_face(self) -> LocationKind {
        LocationKind::face_normal_to(self.axis).unwrap_or(LocationKind::ZFace)
    }
}
