//! Point fills: the CPU back end's plain loops for masked assignments that
//! only copy or mirror points of their own target, the shapes boundary
//! conditions take in the language (`c - shift(t, o)` for Dirichlet,
//! `shift(t, o) + c` for Neumann and flux, `shift(t, o)` for periodic
//! images, `c` on a boundary face).
//!
//! The masked assignment stays the definition (its kernel is what a GPU
//! launches and what the general path runs); `watershed-operators`
//! recognises the shapes and hands this back end a [`PointFill`]. A kernel
//! call per group of rows costs far more than the one or two points a row
//! of a ghost column holds (a vectorised loop's set-up for one point), so
//! the executor runs a recognised fill as the loop below instead: for each
//! point `p` of a box, `t[p] = op(t[p + offset])`, with the operation the
//! kernel does, so the bits are the same (tested against the kernels in
//! `watershed-operators`).

use crate::evaluate::TargetData;
use watershed_fields::IndexBox;

/// What a [`PointFill`] writes at a point `p`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FillOp {
    /// `c`.
    Set(f64),
    /// `t[p + offset]`.
    Copy,
    /// `c - t[p + offset]`.
    SubtractFrom(f64),
    /// `t[p + offset] + c`.
    Add(f64),
}

/// A masked assignment recognised as a copy or mirror of target points:
/// `t[p] = op(t[p + offset])` at each point of a box.
///
/// ```
/// use watershed_backends::evaluate::TargetData;
/// use watershed_backends::fill::{FillOp, PointFill};
/// use watershed_fields::IndexBox;
///
/// // A row of 6 points, x = -1..5: the ghost at x = -1 takes the image
/// // of x = 3 (periodic), the ghost at x = 4 the mirror 1 - t(3).
/// let mut row = [0.0, 1.0, 2.0, 3.0, 4.0, 0.0];
/// let target = TargetData {
///     pointer: row.as_mut_ptr(),
///     len: row.len(),
///     origin: 1,
///     strides: [1, 6, 6],
/// };
/// let image = PointFill { op: FillOp::Copy, offset: [4, 0, 0] };
/// let mirror = PointFill { op: FillOp::SubtractFrom(1.0), offset: [-1, 0, 0] };
/// // SAFETY: the boxes and their reads lie inside `row`, which nothing
/// // else touches during the calls.
/// unsafe {
///     image.run(target, &IndexBox::new([-1, 0, 0], [0, 1, 1]));
///     mirror.run(target, &IndexBox::new([4, 0, 0], [5, 1, 1]));
/// }
/// assert_eq!(row, [4.0, 1.0, 2.0, 3.0, 4.0, -3.0]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointFill {
    /// The operation.
    pub op: FillOp,
    /// Where each point reads the target, relative to itself (unused by
    /// [`FillOp::Set`]).
    pub offset: [isize; 3],
}

impl PointFill {
    /// Runs the fill over the points of `region`, in (k, j, i) order.
    ///
    /// # Safety
    /// `target` describes memory that is writable and that nothing else
    /// reads or writes during the call; every point of `region`, and the
    /// same point moved by `offset` (unless the operation is
    /// [`FillOp::Set`]), lies inside it; no point the fill reads is a
    /// point of `region` (so rows written and rows read are different
    /// memory, and the order of the points does not matter).
    pub unsafe fn run(&self, target: TargetData, region: &IndexBox) {
        let [sx, sy, sz] = target.strides;
        let shift = self.offset[0] * sx + self.offset[1] * sy + self.offset[2] * sz;
        let n = region.extent()[0];
        for k in region.lo[2]..region.hi[2] {
            for j in region.lo[1]..region.hi[1] {
                let row = target.origin + j * sy + k * sz + region.lo[0] * sx;
                if let FillOp::Set(c) = self.op {
                    for i in 0..n as isize {
                        // SAFETY: the point lies inside the target (the
                        // caller's contract), which nothing else touches
                        // during the call.
                        unsafe { *target.pointer.offset(row + i * sx) = c };
                    }
                } else if sx == 1 {
                    // SAFETY: the row's points and their reads lie inside
                    // the target (the caller's contract); the reads are
                    // points outside the region, hence other memory than
                    // the row written, so the two slices do not overlap,
                    // and no other reference to the target exists during
                    // the call.
                    let (out, read) = unsafe {
                        (
                            std::slice::from_raw_parts_mut(target.pointer.offset(row), n),
                            std::slice::from_raw_parts(target.pointer.offset(row + shift), n),
                        )
                    };
                    self.apply(out, read);
                } else {
                    for i in 0..n as isize {
                        let at = row + i * sx;
                        // SAFETY: as above, point by point.
                        unsafe {
                            let read =
                                std::slice::from_raw_parts(target.pointer.offset(at + shift), 1);
                            let out = std::slice::from_raw_parts_mut(target.pointer.offset(at), 1);
                            self.apply(out, read);
                        }
                    }
                }
            }
        }
    }

    /// `out[i] = op(read[i])` for the operations that read.
    fn apply(&self, out: &mut [f64], read: &[f64]) {
        match self.op {
            FillOp::Set(c) => out.fill(c),
            // A ghost column's rows hold one or two points: a `memcpy`
            // call for them costs more than the copy.
            FillOp::Copy => match (out, read) {
                ([o], [r]) => *o = *r,
                ([o0, o1], [r0, r1]) => (*o0, *o1) = (*r0, *r1),
                (out, read) => out.copy_from_slice(read),
            },
            FillOp::SubtractFrom(c) => out.iter_mut().zip(read).for_each(|(o, r)| *o = c - r),
            FillOp::Add(c) => out.iter_mut().zip(read).for_each(|(o, r)| *o = r + c),
        }
    }
}
