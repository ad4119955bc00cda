//! Masks: sets of points, usable as conditions in `cond` chains (boundary
//! conditions are their first use).

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Arc;
use watershed_fields::{FieldLayout, IndexBox, Location};

pub use watershed_fields::Side;

/// The points a mask selects, in the shared (i, j, k) index space.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PointSet {
    /// The interior points next to a physical boundary side: index 0 (minus)
    /// or the last interior index (plus) along the side's axis, where the
    /// patch touches the domain boundary on that side; empty otherwise.
    /// For faces normal to the axis these are the boundary faces themselves.
    Boundary(Side),
    /// The points of a box.
    Region(IndexBox),
    /// An explicit list of points.
    Points(BTreeSet<[isize; 3]>),
}

impl PointSet {
    /// True when `index` of a field with `layout` is in the set.
    #[inline]
    pub fn contains(&self, index: [isize; 3], layout: &FieldLayout) -> bool {
        match self {
            PointSet::Boundary(side) => {
                let patch = layout.patch();
                let touches = if side.plus {
                    patch.plus_boundary()[side.axis]
                } else {
                    patch.minus_boundary()[side.axis]
                };
                let at = if side.plus {
                    layout.interior_extent()[side.axis] as isize - 1
                } else {
                    0
                };
                touches && index[side.axis] == at && layout.interior().contains(index)
            }
            PointSet::Region(region) => region.contains(index),
            PointSet::Points(points) => points.contains(&index),
        }
    }

    /// Short description for printed IR.
    pub fn describe(&self) -> String {
        match self {
            PointSet::Boundary(side) => format!("boundary{}", side.name()),
            PointSet::Region(b) => format!("region{:?}..{:?}", b.lo, b.hi),
            PointSet::Points(p) => format!("{} points", p.len()),
        }
    }
}

/// A set of points of location `L`, turned into a condition with
/// [`crate::on`].
///
/// ```
/// use watershed_fields::XFace;
/// use watershed_language::{Mask, Side};
/// let inflow = Mask::<XFace>::boundary(Side::MINUS_X);
/// let corner = Mask::<XFace>::points([[0, 0, 0], [0, 1, 0]]);
/// # let _ = (inflow, corner);
/// ```
#[derive(Debug, Clone)]
pub struct Mask<L: Location> {
    pub(crate) set: Arc<PointSet>,
    _location: PhantomData<L>,
}

impl<L: Location> Mask<L> {
    /// The points of `L` on a physical boundary side (see [`PointSet::Boundary`]).
    pub fn boundary(side: Side) -> Self {
        Self::from_set(PointSet::Boundary(side))
    }

    /// The points of a box.
    pub fn region(region: IndexBox) -> Self {
        Self::from_set(PointSet::Region(region))
    }

    /// An explicit list of points.
    pub fn points(points: impl IntoIterator<Item = [isize; 3]>) -> Self {
        Self::from_set(PointSet::Points(points.into_iter().collect()))
    }

    fn from_set(set: PointSet) -> Self {
        Mask {
            set: Arc::new(set),
            _location: PhantomData,
        }
    }

    /// The selected points.
    pub fn set(&self) -> &PointSet {
        &self.set
    }
}
