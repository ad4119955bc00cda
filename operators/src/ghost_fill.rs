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
//! them as one serial loop per box, in order, over the target's memory
//! (`watershed_backends::fill`), with the operation the kernel would do on
//! each point (`c - t`, `t + c`, `t`, `c`), so the bits are the same
//! (tested against the general path). Larger targets run the same loops as
//! row epilogues, for each masked assignment [`point_fill`] recognises. The general path's checks ran when the assignment was
//! prepared (regions inside the target, reads of the target only outside
//! the points each box writes).

use crate::checks::MaskedAssignment;
use crate::ir::Node;
use crate::pointwise::BinaryOp;
use crate::stencil::StencilOp;
use crate::vocabulary::TargetData;
use watershed_backends::fill::{FillOp, PointFill};
use watershed_fields::IndexBox;

/// Targets of at most this many allocated points (2 MiB of values, within
/// a core's L2 cache, so the rows the x sides read are still near) fill
/// their ghosts here; larger ones keep the general path, whose row
/// epilogues fill the x sides while each row is in L1 (with the same
/// loops, `watershed_backends::fill`, when [`point_fill`] recognises
/// them). At 32^3 (39 304 points with one ghost layer) the ghost fill took
/// the transport solver's step from 468.0 M to 431.1 M instructions.
pub(crate) const MAX_POINTS: usize = 256 * 1024;

/// One masked assignment of a [`GhostFill`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct FillStep {
    region: IndexBox,
    fill: PointFill,
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
fn fill_op(node: &Node, target: u64) -> Option<PointFill> {
    let fill = |op, offset| Some(PointFill { op, offset });
    if let Node::Constant(c) = node {
        return fill(FillOp::Set(*c), [0; 3]);
    }
    if let Some(offset) = target_read(node, target) {
        return fill(FillOp::Copy, offset);
    }
    let Node::Binary { op, left, right } = node else {
        return None;
    };
    // The kernels compute `c - t` and `t + c` as linear forms, which leave
    // out a zero constant: `0 - t` is `-t` and `t + 0` is `t`, also in the
    // sign of a zero result. A fill computes the same bits with the zero
    // taken as -0.0 (`-0.0 - t` is `-t`, `t + -0.0` is `t`, for every t).
    let same_as_kernels = |c: f64| if c == 0.0 { -0.0 } else { c };
    match (op, left.as_ref(), right.as_ref()) {
        (BinaryOp::Subtract, Node::Constant(c), read) => fill(
            FillOp::SubtractFrom(same_as_kernels(*c)),
            target_read(read, target)?,
        ),
        (BinaryOp::Add, read, Node::Constant(c)) => {
            fill(FillOp::Add(same_as_kernels(*c)), target_read(read, target)?)
        }
        _ => None,
    }
}

/// The masked assignment `node` over `region` (as checked) as a point
/// fill of the target (leaf `target`), when it has a fill shape and reads
/// no point of `region` itself; `None` otherwise.
pub(crate) fn point_fill(node: &Node, region: &IndexBox, target: u64) -> Option<PointFill> {
    let fill = fill_op(node, target)?;
    let offset = fill.offset;
    let reads = IndexBox::new(
        [0, 1, 2].map(|a| region.lo[a] + offset[a]),
        [0, 1, 2].map(|a| region.hi[a] + offset[a]),
    );
    let reads_target = !matches!(fill.op, FillOp::Set(_));
    if reads_target && !region.is_empty() && !reads.intersect(region).is_empty() {
        return None;
    }
    Some(fill)
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
            steps.push(FillStep {
                region: *region,
                fill: point_fill(node, region, target)?,
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
        for step in &self.steps {
            // SAFETY: the caller's contract, per step; `recognise` refused
            // steps that read their own box.
            unsafe { step.fill.run(target, &step.region) };
        }
    }
}
