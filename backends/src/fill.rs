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

use crate::vocabulary::TargetData;
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
/// use watershed_backends::vocabulary::TargetData;
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
                (FillOp::Set(c), true) => each_run(target, region, shift, |out, _, len| {
                    rows_mut(out, len).fill(c)
                }),
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
                (FillOp::Copy, true) => each_run(target, region, shift, |out, read, len| {
                    std::ptr::copy_nonoverlapping(read, out, len)
                }),
                (FillOp::SubtractFrom(c), true) => {
                    each_run(target, region, shift, |out, read, len| {
                        for (o, r) in rows_mut(out, len).iter_mut().zip(rows(read, len)) {
                            *o = c - r;
                        }
                    })
                }
                (FillOp::Add(c), true) => each_run(target, region, shift, |out, read, len| {
                    for (o, r) in rows_mut(out, len).iter_mut().zip(rows(read, len)) {
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

/// Calls `run(out, read, len)` for each run of consecutive memory that
/// the rows of `region` form, with pointers to the run's first point and
/// to the point it reads (`shift` elements further) and the run's length:
/// one run per row, except that rows spanning a whole allocated row (the
/// region's x extent equal to the row stride, unit x stride) join into
/// one run per plane, and planes spanning a whole allocated plane join
/// into one run for the region. A face of ghosts over the whole
/// allocation (the z layers of a periodic or mirror fill) is then one
/// `memcpy` instead of one per row. The points are the same and each
/// point's operation is the same, so the values are too.
///
/// # Safety
/// As [`PointFill::run`]; `run` touches only the run's points and the
/// points they read. The points a run reads are the points of the read
/// box that correspond, point by point, to the run's points (the same
/// shift for all); both runs are contiguous because the rows are, and
/// they are disjoint because the read box misses `region`.
#[inline(always)]
unsafe fn each_run(
    target: TargetData,
    region: &IndexBox,
    shift: isize,
    mut run: impl FnMut(*mut f64, *const f64, usize),
) {
    let [sx, sy, sz] = target.strides;
    let [nx, ny, nz] = region.extent();
    let whole_rows = sx == 1 && nx as isize == sy;
    let whole_planes = whole_rows && (nx * ny) as isize == sz;
    if whole_planes {
        let at = target.origin + region.lo[2] * sz + region.lo[1] * sy + region.lo[0];
        // SAFETY: the region is `nx * ny * nz` consecutive points from
        // `at`, and its reads as many from `at + shift` (the caller's
        // contract, with rows and planes adjacent in memory).
        unsafe {
            run(
                target.pointer.offset(at),
                target.pointer.wrapping_offset(at + shift),
                nx * ny * nz,
            )
        };
    } else if whole_rows {
        for k in region.lo[2]..region.hi[2] {
            let at = target.origin + k * sz + region.lo[1] * sy + region.lo[0];
            // SAFETY: the plane's rows of the region are `nx * ny`
            // consecutive points from `at`, their reads as many from
            // `at + shift`.
            unsafe {
                run(
                    target.pointer.offset(at),
                    target.pointer.wrapping_offset(at + shift),
                    nx * ny,
                )
            };
        }
    } else {
        // SAFETY: the caller's contract, row by row.
        unsafe { each_row(target, region, shift, |out, read| run(out, read, nx)) };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A 5 x 4 x 4 allocation (one ghost layer around 3 x 2 x 2 points),
    /// point (i, j, k) at `origin + i + 5 j + 20 k`, holding distinct values.
    fn allocation() -> Vec<f64> {
        (0..80).map(|v| 1.0 + v as f64 * 0.5).collect()
    }

    fn target(values: &mut [f64]) -> TargetData {
        TargetData {
            pointer: values.as_mut_ptr(),
            len: values.len(),
            origin: 1 + 5 + 20,
            strides: [1, 5, 20],
        }
    }

    /// What `fill` must write over `region`, point by point, written as
    /// three nested loops over the region's indices.
    fn expected(before: &[f64], fill: PointFill, region: &IndexBox) -> Vec<f64> {
        let at = |[i, j, k]: [isize; 3]| (26 + i + 5 * j + 20 * k) as usize;
        let mut after = before.to_vec();
        for k in region.lo[2]..region.hi[2] {
            for j in region.lo[1]..region.hi[1] {
                for i in region.lo[0]..region.hi[0] {
                    let read =
                        || before[at([i + fill.offset[0], j + fill.offset[1], k + fill.offset[2]])];
                    after[at([i, j, k])] = match fill.op {
                        FillOp::Set(c) => c,
                        FillOp::Copy => read(),
                        FillOp::SubtractFrom(c) => c - read(),
                        FillOp::Add(c) => read() + c,
                    };
                }
            }
        }
        after
    }

    /// Regions over whole allocated planes (one run), whole allocated rows
    /// of part of a plane (a run per plane) and parts of rows (a run per
    /// row) write what a point-by-point loop writes, for every operation.
    #[test]
    fn whole_planes_and_whole_rows_fill_as_points_do() {
        let cases = [
            // The z = -1 ghost plane from the plane z = 1 (periodic image).
            (IndexBox::new([-1, -1, -1], [4, 3, 0]), [0, 0, 2]),
            // The two top ghost planes' mirror from the two planes below.
            (IndexBox::new([-1, -1, 1], [4, 3, 3]), [0, 0, -2]),
            // The y = -1 ghost rows of every plane, from y = 1.
            (IndexBox::new([-1, -1, -1], [4, 0, 3]), [0, 2, 0]),
            // Two whole rows of each of two planes, from the rows above.
            (IndexBox::new([-1, -1, 0], [4, 1, 2]), [0, 2, 0]),
            // Parts of rows: two points of each row, from three points left.
            (IndexBox::new([2, -1, -1], [4, 3, 3]), [-3, 0, 0]),
        ];
        let ops = [
            FillOp::Copy,
            FillOp::Set(-7.0),
            FillOp::SubtractFrom(2.5),
            FillOp::Add(0.25),
        ];
        for (region, offset) in cases {
            for op in ops {
                let fill = PointFill { op, offset };
                let before = allocation();
                let want = expected(&before, fill, &region);
                let mut values = before.clone();
                // SAFETY: every region and its reads lie inside the 80
                // values, the reads miss the region, and nothing else
                // touches `values` during the call.
                unsafe { fill.run(target(&mut values), &region) };
                assert_eq!(values, want, "{op:?} over {region:?} from {offset:?}");
            }
        }
    }
}
