//! The CPU back end's fast path for masked assignments that only copy or
//! mirror points of their own target: the shapes boundary conditions take
//! in the language (`c - shift(t, o)` for Dirichlet, `shift(t, o) + c` for
//! Neumann and flux, `shift(t, o)` for periodic images, `c` on a boundary
//! face).
//!
//! Those masked assignments stay the definition (the IR is what a GPU
//! launches and what the general path runs); on a small target each of
//! them as its own evaluator call costs more than the handful of points it
//! writes (a multigrid level of 4 x 4 cells has 16 ghost points), so a
//! prepared assignment whose masked assignments all have these shapes runs
//! them here instead: one serial loop per box, in order, over the target's
//! memory, with the operation the kernel would do on each point (`c - t`,
//! `t + c`, `t`, `c`), so the bits are the same (tested against the
//! general path). The general path's checks ran when the assignment was
//! prepared (regions inside the target, reads of the target only outside
//! the points each box writes).

use crate::assign::MaskedAssignment;
use crate::evaluate::TargetData;
use crate::ir::Node;
use crate::pointwise::BinaryOp;
use crate::stencil::StencilOp;
use watershed_fields::IndexBox;

/// Targets of at most this many allocated points (2 MiB of values, within
/// a core's L2 cache, so the rows the x sides read are still near) fill
/// their ghosts here; larger ones keep the general path, whose row
/// epilogues fill the x sides while each row is in L1. At 32^3 (39 304
/// points with one ghost layer) the ghost fill took the transport
/// solver's step from 468.0 M to 431.1 M instructions.
pub(crate) const MAX_POINTS: usize = 256 * 1024;

/// What one masked assignment writes at a point `p` of its box.
#[derive(Debug, Clone, Copy, PartialEq)]
enum FillOp {
    /// `c`.
    Set(f64),
    /// `t[p + offset]`.
    Copy,
    /// `c - t[p + offset]`.
    SubtractFrom(f64),
    /// `t[p + offset] + c`.
    Add(f64),
}

/// One masked assignment of a [`GhostFill`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct FillStep {
    region: IndexBox,
    op: FillOp,
    offset: [isize; 3],
}

/// Masked assignments recognised as copies and mirrors of target points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GhostFill {
    steps: Vec<FillStep>,
}

/// The offset of `node` when it reads the target (leaf `target`) at a
/// fixed offset: the leaf itself, or a shift of it.
fn target_read(node: &Node, target: u64) -> Option<[isize; 3]> {
    match node {
        Node::Field { id, .. } if *id == target => Some([0; 3]),
        Node::Stencil {
            op: StencilOp::Shift { offset },
            args,
        } if args.len() == 1 => {
            let inner = target_read(&args[0], target)?;
            Some([0, 1, 2].map(|a| inner[a] + offset[a]))
        }
        _ => None,
    }
}

/// The operation `node` applies, when it has one of the fill shapes.
fn fill_op(node: &Node, target: u64) -> Option<(FillOp, [isize; 3])> {
    if let Node::Constant(c) = node {
        return Some((FillOp::Set(*c), [0; 3]));
    }
    if let Some(offset) = target_read(node, target) {
        return Some((FillOp::Copy, offset));
    }
    let Node::Binary { op, left, right } = node else {
        return None;
    };
    match (op, left.as_ref(), right.as_ref()) {
        (BinaryOp::Subtract, Node::Constant(c), read) => {
            Some((FillOp::SubtractFrom(*c), target_read(read, target)?))
        }
        (BinaryOp::Add, read, Node::Constant(c)) => {
            Some((FillOp::Add(*c), target_read(read, target)?))
        }
        _ => None,
    }
}

impl GhostFill {
    /// The fill of `then` (boxes `regions`, as checked) when every masked
    /// assignment has a fill shape and reads no point its own box writes;
    /// `None` otherwise (the general path runs them).
    pub(crate) fn recognise(
        then: &[MaskedAssignment],
        regions: &[IndexBox],
        target: u64,
    ) -> Option<GhostFill> {
        if then.is_empty() || then.len() != regions.len() {
            return None;
        }
        let mut steps = Vec::with_capacity(then.len());
        for ((_, node), region) in then.iter().zip(regions) {
            let (op, offset) = fill_op(node, target)?;
            let reads = IndexBox::new(
                [0, 1, 2].map(|a| region.lo[a] + offset[a]),
                [0, 1, 2].map(|a| region.hi[a] + offset[a]),
            );
            let reads_target = !matches!(op, FillOp::Set(_));
            if reads_target && !region.is_empty() && !reads.intersect(region).is_empty() {
                return None;
            }
            steps.push(FillStep {
                region: *region,
                op,
                offset,
            });
        }
        Some(GhostFill { steps })
    }

    /// Runs every step in order over the target's memory.
    ///
    /// # Safety
    /// `target` describes the memory of the target the steps were
    /// recognised for, writable and not otherwise accessed during the
    /// call; every point of each step's region, and the same point moved by
    /// the step's offset, lies inside it (the checks of the masked
    /// assignments guarantee both).
    pub(crate) unsafe fn run(&self, target: TargetData) {
        let [sx, sy, sz] = target.strides;
        for step in &self.steps {
            let r = &step.region;
            let shift = step.offset[0] * sx + step.offset[1] * sy + step.offset[2] * sz;
            for k in r.lo[2]..r.hi[2] {
                for j in r.lo[1]..r.hi[1] {
                    let row = target.origin + j * sy + k * sz;
                    for i in r.lo[0]..r.hi[0] {
                        let at = row + i * sx;
                        // SAFETY: `at` and `at + shift` are points of the
                        // target's allocation (the caller's contract), and
                        // no other reference to it exists during the call.
                        unsafe {
                            let read = || *target.pointer.offset(at + shift);
                            let value = match step.op {
                                FillOp::Set(c) => c,
                                FillOp::Copy => read(),
                                FillOp::SubtractFrom(c) => c - read(),
                                FillOp::Add(c) => read() + c,
                            };
                            *target.pointer.offset(at) = value;
                        }
                    }
                }
            }
        }
    }
}
