//! What the CPU executor and the code generator agree on, so that neither
//! imports the other: the tile width along x, the raw views of fields and
//! targets that kernels read and write, and the reduction kinds with the
//! order in which partial results combine (the C and CUDA emitters
//! reproduce it bit for bit).

use watershed_fields::FieldLayout;

/// Largest number of x points in a block.
pub const TILE: usize = 512;

/// A field's data with its indexing. It holds a raw pointer so that a
/// field may be the target itself (in-place updates, boundary modifiers):
/// no `&[f64]` then overlaps the rows being written.
#[derive(Clone, Copy)]
pub struct FieldData<'a> {
    pub(crate) pointer: *const f64,
    pub(crate) len: usize,
    /// Linear index of point (0, 0, 0).
    pub origin: isize,
    /// Elements between neighbours along x, y and z.
    pub strides: [isize; 3],
    pub(crate) _data: std::marker::PhantomData<&'a [f64]>,
}

// SAFETY: the data is only read, and writers (the target rows of an
// in-place assignment) never write a point another thread reads (see
// `assign_node_reading_target`).

unsafe impl Send for FieldData<'_> {}
// SAFETY: as above.

unsafe impl Sync for FieldData<'_> {}

impl<'a> FieldData<'a> {
    /// A field's values with the indexing of `layout`.
    #[inline]
    pub fn new(data: &'a [f64], layout: &FieldLayout) -> Self {
        // SAFETY: a slice is valid for reads of its length for 'a.
        unsafe { Self::from_raw(data.as_ptr(), data.len(), layout) }
    }

    /// # Safety
    /// `pointer` must be valid for reads of `len` values for `'a`.
    #[inline]
    pub unsafe fn from_raw(pointer: *const f64, len: usize, layout: &FieldLayout) -> Self {
        FieldData {
            pointer,
            len,
            origin: layout.linear_index([0; 3]) as isize,
            strides: layout.strides().map(|s| s as isize),
            _data: std::marker::PhantomData,
        }
    }
}

/// The target's memory, written row by row from several threads.
#[derive(Clone, Copy)]
pub struct TargetData {
    /// The first allocated element (ghosts included).
    pub pointer: *mut f64,
    /// Allocated elements.
    pub len: usize,
    /// Linear index of point (0, 0, 0).
    pub origin: isize,
    /// Elements between neighbours along x, y and z.
    pub strides: [isize; 3],
}

// SAFETY: threads write disjoint rows of the target (each row belongs to
// exactly one chunk), and nothing reads it during the evaluation.

unsafe impl Send for TargetData {}
// SAFETY: as above.

unsafe impl Sync for TargetData {}

/// Independent accumulators per row of a reduction ([`Reduction`]).
pub(crate) const REDUCTION_LANES: usize = 8;

/// What a reduction accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// Sum of the values.
    Sum,
    /// Smallest value (NaN if any value is NaN).
    Min,
    /// Largest value (NaN if any value is NaN).
    Max,
    /// Sum of the squares (the L2 norm is its square root).
    SumOfSquares,
}

impl Reduction {
    /// The value of a reduction over no point (0 for sums, +inf for the
    /// minimum, -inf for the maximum).
    pub fn identity(self) -> f64 {
        match self {
            Reduction::Sum | Reduction::SumOfSquares => 0.0,
            Reduction::Min => f64::INFINITY,
            Reduction::Max => f64::NEG_INFINITY,
        }
    }

    #[inline]
    pub(crate) fn combine(self, accumulator: f64, value: f64) -> f64 {
        match self {
            Reduction::Sum => accumulator + value,
            Reduction::SumOfSquares => accumulator + value * value,
            Reduction::Min => {
                if value < accumulator || value.is_nan() || accumulator.is_nan() {
                    if accumulator.is_nan() {
                        accumulator
                    } else {
                        value
                    }
                } else {
                    accumulator
                }
            }
            Reduction::Max => {
                if value > accumulator || value.is_nan() || accumulator.is_nan() {
                    if accumulator.is_nan() {
                        accumulator
                    } else {
                        value
                    }
                } else {
                    accumulator
                }
            }
        }
    }

    /// Combines two partial results.
    pub fn merge(self, a: f64, b: f64) -> f64 {
        match self {
            Reduction::Sum | Reduction::SumOfSquares => a + b,
            _ => self.combine(a, b),
        }
    }
}
