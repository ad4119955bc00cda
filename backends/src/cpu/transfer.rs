//! Grid-transfer rows: restriction and prolongation between multigrid
//! levels.

use crate::stencil::StencilOp;
use crate::vocabulary::FieldData;
use smallvec::SmallVec;
use watershed_fields::IndexBox;

/// One row of an inter-grid operator: `out[i]` is the restriction or
/// prolongation of `field` (on the other grid) at point `(start + i, row)`
/// of the result's grid. The row's reads are checked against the field's
/// length before any is made.
pub(super) fn transfer_row(
    out: &mut [f64],
    op: StencilOp,
    field: &FieldData<'_>,
    start: isize,
    row: [isize; 2],
) {
    if out.is_empty() {
        return;
    }
    let last = start + out.len() as isize - 1;
    let index = |point: [isize; 3]| {
        field.origin
            + point[0] * field.strides[0]
            + point[1] * field.strides[1]
            + point[2] * field.strides[2]
    };
    let Some(reads) = op.transfer_reads(&IndexBox::new(
        [start, row[0], row[1]],
        [last + 1, row[0] + 1, row[1] + 1],
    )) else {
        unreachable!("Transfer instructions hold inter-grid operators");
    };
    // The binding checks make this unreachable; it keeps a bug from
    // reading foreign memory.
    assert!(
        index(reads.lo) >= 0
            && (index([reads.hi[0] - 1, reads.hi[1] - 1, reads.hi[2] - 1]) as usize) < field.len,
        "inter-grid read outside the field's data"
    );
    // SAFETY (both arms): every index read lies in `reads` (the operator's
    // footprint of this row), whose first and last points were checked
    // above; strides are positive, so every point between is in bounds.
    match op {
        StencilOp::Restrict { ratio } => {
            let r = ratio.map(|r| r as isize);
            let children: SmallVec<[isize; 8]> = IndexBox::new([0; 3], r)
                .iter()
                .map(|c| {
                    c[0] * field.strides[0] + c[1] * field.strides[1] + c[2] * field.strides[2]
                })
                .collect();
            let weight = 1.0 / children.len() as f64;
            let first = index([r[0] * start, r[1] * row[0], r[2] * row[1]]);
            for (i, o) in out.iter_mut().enumerate() {
                let at = first + r[0] * field.strides[0] * i as isize;
                let mut sum = 0.0;
                for c in &children {
                    // SAFETY: `at + c` is a child inside `reads`, checked above.
                    sum += unsafe { *field.pointer.offset(at + c) };
                }
                *o = weight * sum;
            }
        }
        StencilOp::Prolongate { ratio } => {
            let r = ratio.map(|r| r as isize);
            let refined: SmallVec<[usize; 3]> = (0..3).filter(|&a| r[a] == 2).collect();
            let corners = 1usize << refined.len();
            for (i, o) in out.iter_mut().enumerate() {
                let point = [start + i as isize, row[0], row[1]];
                let parent = index([0, 1, 2].map(|a| point[a].div_euclid(r[a])));
                let mut value = 0.0;
                for corner in 0..corners {
                    let (mut at, mut w) = (parent, 1.0);
                    for (bit, &axis) in refined.iter().enumerate() {
                        if corner >> bit & 1 == 1 {
                            let stride = field.strides[axis];
                            at += if point[axis].rem_euclid(2) == 0 {
                                -stride
                            } else {
                                stride
                            };
                            w *= 0.25;
                        } else {
                            w *= 0.75;
                        }
                    }
                    // SAFETY: `at` is the parent or its neighbour, inside
                    // `reads`, checked above.
                    value += w * unsafe { *field.pointer.offset(at) };
                }
                *o = value;
            }
        }
        _ => unreachable!("Transfer instructions hold inter-grid operators"),
    }
}
