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
        if n == 0 {
            return;
        }
        // SAFETY (every arm): the caller's contract, row by row: each row
        // and the points it reads lie inside the target, and they are
        // different points (the read box misses `region`), hence different
        // memory, so the slices formed over them never overlap. The
        // operation is chosen once, outside the loops over rows: a ghost
        // column is one point per row, so the per-row cost is the cost.
        unsafe {
            use std::slice::{from_raw_parts as rows, from_raw_parts_mut as rows_mut};
            match (self.op, sx == 1) {
                (FillOp::Set(c), true) => {
                    each_row(target, region, shift, |out, _| rows_mut(out, n).fill(c))
                }
                // Rows of one or two points (ghost columns): a plain loop;
                // a `memcpy` call or a vectorised loop's set-up costs more.
                (FillOp::Copy, true) if n <= 2 => each_row(target, region, shift, |out, read| {
                    for i in 0..n {
                        *out.add(i) = *read.add(i);
                    }
                }),
                (FillOp::SubtractFrom(c), true) if n <= 2 => {
                    each_row(target, region, shift, |out, read| {
                        for i in 0..n {
                            *out.add(i) = c - *read.add(i);
                        }
                    })
                }
                (FillOp::Add(c), true) if n <= 2 => each_row(target, region, shift, |out, read| {
                    for i in 0..n {
                        *out.add(i) = *read.add(i) + c;
                    }
                }),
                (FillOp::Copy, true) => each_row(target, region, shift, |out, read| {
                    std::ptr::copy_nonoverlapping(read, out, n)
                }),
                (FillOp::SubtractFrom(c), true) => each_row(target, region, shift, |out, read| {
                    for (o, r) in rows_mut(out, n).iter_mut().zip(rows(read, n)) {
                        *o = c - r;
                    }
                }),
                (FillOp::Add(c), true) => each_row(target, region, shift, |out, read| {
                    for (o, r) in rows_mut(out, n).iter_mut().zip(rows(read, n)) {
                        *o = r + c;
                    }
                }),
                (op, false) => each_row(target, region, shift, |out, read| {
                    for i in 0..n as isize {
                        let (o, r) = (out.offset(i * sx), read.wrapping_offset(i * sx));
                        *o = match op {
                            FillOp::Set(c) => c,
                            FillOp::Copy => *r,
                            FillOp::SubtractFrom(c) => c - *r,
                            FillOp::Add(c) => *r + c,
                        };
                    }
                }),
            }
        }
    }
}

/// Calls `row(out, read)` for each row of `region`, in (k, j) order, with
/// pointers to the row's first point and to the point it reads (`shift`
/// elements further; not dereferenced by a constant fill).
///
/// # Safety
/// As [`PointFill::run`]; `row` touches only the row's points and the
/// points they read.
#[inline(always)]
unsafe fn each_row(
    target: TargetData,
    region: &IndexBox,
    shift: isize,
    mut row: impl FnMut(*mut f64, *const f64),
) {
    let [sx, sy, sz] = target.strides;
    for k in region.lo[2]..region.hi[2] {
        let mut at = target.origin + region.lo[1] * sy + k * sz + region.lo[0] * sx;
        for _ in region.lo[1]..region.hi[1] {
            // SAFETY: `at` is the first point of a row of `region` and
            // `at + shift` the point it reads, both inside the target (the
            // caller's contract); `wrapping_offset` forms the read pointer
            // of a constant fill, which is never dereferenced, without
            // asserting it in bounds.
            unsafe {
                row(
                    target.pointer.offset(at),
                    target.pointer.wrapping_offset(at + shift),
                )
            };
            at += sy;
        }
    }
}
