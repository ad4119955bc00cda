//! The executor's entry points: one assignment ([`assign`]), several over
//! strips of rows ([`assign_many`]), reductions ([`reduce`]), with row
//! epilogues and the finiteness scan.

use super::blocks::Block;
use super::blocks::Plan;
use super::blocks::RowGroup;
use super::blocks::blocks_of;
use super::blocks::runs_many_planes;
use super::interpreter::Context;
use super::interpreter::context;
use super::scratch::Scratch;
use super::scratch::reserve_scratch;
use super::threads::PARALLEL_THRESHOLD;
use super::threads::Parallelism;
use super::threads::chunk_ranges;
use super::threads::run_in_chunks;
use crate::codegen::NativeKernel;
use crate::fill::PointFill;
use crate::kernel::Kernel;
use crate::kernel::OUTPUT;
use crate::vocabulary::FieldData;
use crate::vocabulary::Reduction;
use crate::vocabulary::TargetData;
use rayon::prelude::*;
use smallvec::SmallVec;
use watershed_fields::IndexBox;
use watershed_fields::Patch;

/// The earlier of two points in storage order (z, then y, then x).
pub(super) fn earlier(a: Option<[isize; 3]>, b: Option<[isize; 3]>) -> Option<[isize; 3]> {
    match (a, b) {
        (Some(p), Some(q)) => Some(if (p[2], p[1], p[0]) <= (q[2], q[1], q[0]) {
            p
        } else {
            q
        }),
        (p, None) => p,
        (None, q) => q,
    }
}

/// A masked assignment run as a *row epilogue* of another kernel: right
/// after the main kernel has written a group of rows, this kernel fills its
/// points of the same rows (ghost points at the ends of the rows, read from
/// values just written and still in cache). The caller
/// (`watershed_operators::assign_node_then`) only builds one when the kernel
/// reads nothing but points of the same row inside the main region, so the
/// values are those of running it after the whole main kernel.
pub struct Epilogue<'a> {
    /// The masked assignment's kernel.
    pub kernel: &'a Kernel,
    /// Its compiled form, if it has one.
    pub native: Option<&'a NativeKernel>,
    /// The fields it reads, by slot.
    pub fields: &'a [FieldData<'a>],
    /// The values of the parameters it reads, by slot.
    pub parameters: &'a [f64],
    /// The points it writes (the part of its box in the main region's rows).
    pub region: IndexBox,
    /// Its plan over `region`.
    pub plan: &'a Plan,
    /// The same masked assignment as a plain copy or mirror of target
    /// points, when it has that shape: run instead of the kernel (the same
    /// values, without a kernel call per group of rows).
    pub fill: Option<PointFill>,
}

/// Runs `block` of `ctx`'s kernel, stores its rows (copying the result
/// register when the kernel reads the target) and, with `watch_finite`,
/// returns the first point written that is not finite.
pub(super) fn run_and_store(
    ctx: &Context<'_>,
    scratch: &mut [f64],
    target: &TargetData,
    block: Block,
    watch_finite: bool,
) -> Option<[isize; 3]> {
    let may_be_bad = ctx.run_block(scratch, Some(target), block);
    let copy_result = ctx.kernel.result != OUTPUT;
    // The generated kernel checked the rows it wrote itself; a copied
    // result row (or the interpreter's output) is scanned here.
    let watch_finite = watch_finite && (copy_result || may_be_bad);
    if !copy_result && !watch_finite {
        return None; // the kernel wrote its rows itself (bounds checked there)
    }
    if block.planes > 1 {
        // Only kernels writing the target directly get several planes
        // (`Plan::new`): scan each plane's rows for the first bad point.
        return (0..block.planes)
            .map(|q| scan_rows(ctx, scratch, target, block.plane(q), false, watch_finite))
            .fold(None, earlier);
    }
    scan_rows(ctx, scratch, target, block, copy_result, watch_finite)
}

/// For the rows of one plane of `block`, just computed: copies the result
/// register into the target (`copy_result`) and, with `watch_finite`,
/// returns the first point written that is not finite.
pub(super) fn scan_rows(
    ctx: &Context<'_>,
    scratch: &[f64],
    target: &TargetData,
    block: Block,
    copy_result: bool,
    watch_finite: bool,
) -> Option<[isize; 3]> {
    let n = (block.x1 - block.x0) as usize;
    let mut first_bad = None;
    for r in 0..block.rows {
        let first = target.origin
            + block.x0
            + (block.j0 + r as isize) * target.strides[1]
            + block.k * target.strides[2];
        assert!(
            first >= 0 && first as usize + n <= target.len,
            "target write outside the target"
        );
        if copy_result {
            let row = ctx.result_row(scratch, r, n);
            // SAFETY: in bounds (checked above); `row` is in the thread's
            // scratch, never in the target.
            unsafe {
                std::ptr::copy_nonoverlapping(row.as_ptr(), target.pointer.offset(first), n);
            }
        }
        if watch_finite {
            // SAFETY: in bounds (checked above); these are the rows this
            // block just wrote, which no other block reads or writes.
            let written = unsafe {
                std::slice::from_raw_parts(target.pointer.offset(first) as *const f64, n)
            };
            if !written.iter().fold(true, |ok, v| ok & v.is_finite()) {
                let i = written.iter().position(|v| !v.is_finite()).unwrap_or(0);
                first_bad = earlier(
                    first_bad,
                    Some([block.x0 + i as isize, block.j0 + r as isize, block.k]),
                );
            }
        }
    }
    first_bad
}

/// Runs `ctx`'s kernel over the rows `j_lo..j_hi` of the planes
/// `k_lo..k_hi` within `region` (split into blocks the context's
/// registers hold; a compiled kernel that writes the target directly takes
/// all the planes in each call).
pub(super) fn run_rows(
    ctx: &Context<'_>,
    scratch: &mut [f64],
    target: &TargetData,
    region: &IndexBox,
    rows: (isize, isize, isize, isize),
) {
    let (j_lo, j_hi, k_lo, k_hi) = rows;
    let (j_lo, j_hi) = (j_lo.max(region.lo[1]), j_hi.min(region.hi[1]));
    let (k_lo, k_hi) = (k_lo.max(region.lo[2]), k_hi.min(region.hi[2]));
    if k_lo >= k_hi || j_lo >= j_hi || region.is_empty() {
        return;
    }
    let planes_per_call = if runs_many_planes(ctx.kernel, ctx.native.is_some()) {
        (k_hi - k_lo) as usize
    } else {
        1
    };
    let mut k = k_lo;
    while k < k_hi {
        let mut j0 = j_lo;
        while j0 < j_hi {
            let count = ctx.rows.min((j_hi - j0) as usize);
            let group = RowGroup {
                j0,
                rows: count,
                k,
                planes: planes_per_call,
                first_row: 0,
            };
            for block in blocks_of(&group, region) {
                run_and_store(ctx, scratch, target, block, false);
            }
            j0 += count as isize;
        }
        k += planes_per_call as isize;
    }
}

/// Evaluates `kernel` into `target` over `region`. With `watch_finite`,
/// each block's rows are scanned right after they are written (while they
/// are in cache) and the first point (z, y, x order) holding a value that
/// is not finite is returned; otherwise `None`. Every epilogue runs, in
/// order, over its points of the rows a thread has finished: after each
/// run of consecutive row groups of the same planes (`PendingRows`).
///
/// # Safety
/// The caller has done every check of `watershed_operators::assign`
/// (`cpu/design.md` lists them as the evaluator's invariants): every point
/// the kernel reads over `region`, extended by the kernel's read extents,
/// lies inside the memory each [`FieldData`] describes; every point written
/// lies inside the target's memory; nothing else reads or writes the
/// target meanwhile, and a field that aliases the target is read only at
/// offset zero or outside the rows written. `plan` was made by
/// [`Plan::new`] for this kernel, region and field layouts.
/// Each epilogue's fields, target and region satisfy the same.
#[allow(clippy::too_many_arguments)]
pub unsafe fn assign(
    kernel: &Kernel,
    native: Option<&NativeKernel>,
    fields: &[FieldData<'_>],
    parameters: &[f64],
    patch: &Patch,
    target: TargetData,
    region: IndexBox,
    plan: &Plan,
    parallelism: Parallelism,
    watch_finite: bool,
    epilogues: &[Epilogue<'_>],
) -> Option<[isize; 3]> {
    if region.is_empty() {
        return None;
    }
    let ctx = context(kernel, native, fields, parameters, patch, plan);
    let groups = plan.assignment_order();
    let epilogue_contexts: SmallVec<[Context<'_>; 2]> = epilogues
        .iter()
        .map(|e| context(e.kernel, e.native, e.fields, e.parameters, patch, e.plan))
        .collect();
    let parallelism = if region.len() < PARALLEL_THRESHOLD {
        Parallelism::Serial
    } else {
        parallelism
    };
    let member = Assignment {
        kernel,
        native,
        fields,
        parameters,
        target,
        region,
        watch_finite,
        epilogues,
    };
    let run_groups = |groups: &[RowGroup]| -> Option<[isize; 3]> {
        reserve_scratch(1 + epilogue_contexts.len());
        let mut scratch = ctx.scratch();
        let mut epilogue_scratch: SmallVec<[Scratch; 4]> =
            epilogue_contexts.iter().map(|c| c.scratch()).collect();
        let mut first_bad = None;
        let mut pending = None;
        for group in groups {
            let bad = run_group(&member, &ctx, &mut scratch, group);
            first_bad = earlier(first_bad, bad);
            if !epilogues.is_empty() {
                PendingRows::add(&mut pending, group, |rows| {
                    run_epilogues(&member, &epilogue_contexts, &mut epilogue_scratch, rows)
                });
            }
        }
        if let Some(rows) = pending {
            run_epilogues(&member, &epilogue_contexts, &mut epilogue_scratch, rows);
        }
        first_bad
    };
    run_in_chunks(parallelism, groups, run_groups, || None, earlier)
}

/// Runs the blocks of one group of rows of `member`; returns the first
/// point written that is not finite when `member.watch_finite`. Its
/// epilogues run later, through [`PendingRows`].
pub(super) fn run_group(
    member: &Assignment<'_>,
    ctx: &Context<'_>,
    scratch: &mut [f64],
    group: &RowGroup,
) -> Option<[isize; 3]> {
    let mut first_bad = None;
    for block in blocks_of(group, &member.region) {
        let bad = run_and_store(ctx, scratch, &member.target, block, member.watch_finite);
        first_bad = earlier(first_bad, bad);
    }
    first_bad
}

/// Rows `j_lo..j_hi` of planes `k_lo..k_hi` whose main blocks one thread
/// has run and whose epilogues have not run yet.
///
/// Epilogues read and write only the target's points in the rows they
/// run over (`cpu/design.md`, aliasing rule 4), and the main kernel reads
/// the target at most pointwise in its own rows, so an epilogue may run
/// over the union of consecutive groups of one plane as well as after
/// each group: the same values. One call per side over a plane's rows
/// instead of one per group (a group is a block's 8 rows at 64 points per
/// row) cuts the periodic x fills' calls eightfold.
#[derive(Clone, Copy)]
pub(super) struct PendingRows {
    pub(super) j_lo: isize,
    pub(super) j_hi: isize,
    pub(super) k_lo: isize,
    pub(super) k_hi: isize,
}

impl PendingRows {
    /// Adds `group` (whose blocks have just run) to `pending`: extended
    /// when it continues the same planes' rows, else `pending`'s
    /// epilogues run first (`flush`) and `group` starts a new run.
    pub(super) fn add(
        pending: &mut Option<PendingRows>,
        group: &RowGroup,
        mut flush: impl FnMut(PendingRows),
    ) {
        let (k_lo, k_hi) = (group.k, group.k + group.planes as isize);
        let (j_lo, j_hi) = (group.j0, group.j0 + group.rows as isize);
        if let Some(p) = pending
            && (p.k_lo, p.k_hi) == (k_lo, k_hi)
            && p.j_hi == j_lo
        {
            p.j_hi = j_hi;
            return;
        }
        if let Some(p) = pending.take() {
            flush(p);
        }
        *pending = Some(PendingRows {
            j_lo,
            j_hi,
            k_lo,
            k_hi,
        });
    }
}

/// Runs every epilogue of `member`, in order, over the rows of `rows`.
pub(super) fn run_epilogues(
    member: &Assignment<'_>,
    epilogue_contexts: &[Context<'_>],
    epilogue_scratch: &mut [Scratch],
    rows: PendingRows,
) {
    for ((e, c), s) in member
        .epilogues
        .iter()
        .zip(epilogue_contexts)
        .zip(epilogue_scratch.iter_mut())
    {
        match &e.fill {
            Some(fill) => {
                let mut points = e.region;
                points.lo[1] = points.lo[1].max(rows.j_lo);
                points.hi[1] = points.hi[1].min(rows.j_hi);
                points.lo[2] = points.lo[2].max(rows.k_lo);
                points.hi[2] = points.hi[2].min(rows.k_hi);
                if !points.is_empty() {
                    // SAFETY: `assign`'s contract covers each epilogue:
                    // its points and reads lie inside the target, it reads
                    // only points of its own rows that the main kernel has
                    // written, and this thread alone touches these rows.
                    unsafe { fill.run(member.target, &points) };
                }
            }
            None => run_rows(
                c,
                s,
                &member.target,
                &e.region,
                (rows.j_lo, rows.j_hi, rows.k_lo, rows.k_hi),
            ),
        }
    }
}

/// One assignment of a horizontal group (see [`assign_many`]): what
/// [`assign`] takes, as a value.
pub struct Assignment<'a> {
    /// The kernel.
    pub kernel: &'a Kernel,
    /// Its compiled form, if it has one.
    pub native: Option<&'a NativeKernel>,
    /// The fields it reads, by slot.
    pub fields: &'a [FieldData<'a>],
    /// The values of the parameters it reads, by slot.
    pub parameters: &'a [f64],
    /// Where it writes.
    pub target: TargetData,
    /// The points it writes.
    pub region: IndexBox,
    /// Whether to return the first point written that is not finite.
    pub watch_finite: bool,
    /// Masked assignments run on each group of rows right after it.
    pub epilogues: &'a [Epilogue<'a>],
}

/// Rows of a plane in one strip of a horizontal group.
pub(super) const STRIP_ROWS: isize = 16;

/// Evaluates independent assignments (distinct targets, none reading
/// another's target) as one loop nest: the union of their regions is cut
/// into strips of `STRIP_ROWS` (16) rows of one plane, and every member
/// computes its rows of a strip (with its epilogues) before the next strip
/// starts, so the inputs they share (a diffusivity read by every equation)
/// come from memory once per strip instead of once per member. Each
/// member's rows, blocks and arithmetic are those of [`assign`], so the
/// values are bitwise the same as separate calls. Returns, per member, the
/// first point written that is not finite (members that watch).
///
/// # Safety
/// Every member satisfies the contract of [`assign`] (with a plan its
/// region makes), no member reads another member's target, and the
/// targets do not overlap.
pub unsafe fn assign_many(
    members: &[Assignment<'_>],
    patch: &Patch,
    parallelism: Parallelism,
) -> Vec<Option<[isize; 3]>> {
    let count = members.len();
    let mut span: Option<IndexBox> = None;
    for m in members.iter().filter(|m| !m.region.is_empty()) {
        span = Some(match span {
            None => m.region,
            Some(s) => IndexBox::new(
                [0, 1, 2].map(|a| s.lo[a].min(m.region.lo[a])),
                [0, 1, 2].map(|a| s.hi[a].max(m.region.hi[a])),
            ),
        });
    }
    let Some(span) = span else {
        return vec![None; count];
    };
    let plans: Vec<Plan> = members
        .iter()
        .map(|m| Plan::new(m.kernel, m.native.is_some(), m.fields, patch, &m.region))
        .collect();
    let contexts: Vec<(Context<'_>, Vec<Context<'_>>)> = members
        .iter()
        .zip(&plans)
        .map(|(m, plan)| {
            let ctx = context(m.kernel, m.native, m.fields, m.parameters, patch, plan);
            let epilogue_contexts = m
                .epilogues
                .iter()
                .map(|e| context(e.kernel, e.native, e.fields, e.parameters, patch, e.plan))
                .collect();
            (ctx, epilogue_contexts)
        })
        .collect();
    let mut strips = Vec::new();
    for k in span.lo[2]..span.hi[2] {
        let mut j = span.lo[1];
        while j < span.hi[1] {
            strips.push((k, j, (j + STRIP_ROWS).min(span.hi[1])));
            j += STRIP_ROWS;
        }
    }
    let points: usize = members.iter().map(|m| m.region.len()).sum();
    let parallelism = if points < PARALLEL_THRESHOLD {
        Parallelism::Serial
    } else {
        parallelism
    };
    let run_strips = |strips: &[(isize, isize, isize)]| -> Vec<Option<[isize; 3]>> {
        reserve_scratch(contexts.iter().map(|(_, e)| 1 + e.len()).sum());
        let mut scratch: Vec<(Scratch, SmallVec<[Scratch; 4]>)> = contexts
            .iter()
            .map(|(c, e)| (c.scratch(), e.iter().map(|c| c.scratch()).collect()))
            .collect();
        let mut first_bad = vec![None; count];
        let mut pending: Vec<Option<PendingRows>> = vec![None; count];
        for &(k, strip_lo, strip_hi) in strips {
            for (m, member) in members.iter().enumerate() {
                let region = &member.region;
                let (j_lo, j_hi) = (strip_lo.max(region.lo[1]), strip_hi.min(region.hi[1]));
                if region.is_empty() || k < region.lo[2] || k >= region.hi[2] || j_lo >= j_hi {
                    continue;
                }
                let (ctx, epilogue_contexts) = &contexts[m];
                let (own, epilogue_scratch) = &mut scratch[m];
                let mut j0 = j_lo;
                while j0 < j_hi {
                    let rows = ctx.rows.min((j_hi - j0) as usize);
                    let group = RowGroup {
                        j0,
                        rows,
                        k,
                        planes: 1,
                        first_row: 0,
                    };
                    let bad = run_group(member, ctx, own, &group);
                    first_bad[m] = earlier(first_bad[m], bad);
                    if !member.epilogues.is_empty() {
                        PendingRows::add(&mut pending[m], &group, |rows| {
                            run_epilogues(member, epilogue_contexts, epilogue_scratch, rows)
                        });
                    }
                    j0 += rows as isize;
                }
            }
        }
        for (m, rows) in pending.into_iter().enumerate() {
            if let Some(rows) = rows {
                let (_, epilogue_contexts) = &contexts[m];
                let (_, epilogue_scratch) = &mut scratch[m];
                run_epilogues(&members[m], epilogue_contexts, epilogue_scratch, rows);
            }
        }
        first_bad
    };
    run_in_chunks(
        parallelism,
        &strips,
        run_strips,
        || vec![None; count],
        |a, b| a.into_iter().zip(b).map(|(p, q)| earlier(p, q)).collect(),
    )
}

/// Reduces the values of `kernel`'s result over `region`.
///
/// # Safety
/// As for [`assign`], without a target: every point the kernel reads over
/// `region`, extended by its read extents, lies inside the memory each
/// [`FieldData`] describes, and nothing writes those fields meanwhile.
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce(
    kernel: &Kernel,
    native: Option<&NativeKernel>,
    fields: &[FieldData<'_>],
    parameters: &[f64],
    patch: &Patch,
    region: IndexBox,
    plan: &Plan,
    reduction: Reduction,
    parallelism: Parallelism,
) -> f64 {
    if region.is_empty() {
        return reduction.identity();
    }
    let ctx = context(kernel, native, fields, parameters, patch, plan);
    let groups = &plan.groups;
    let parallelism = if region.len() < PARALLEL_THRESHOLD {
        Parallelism::Serial
    } else {
        parallelism
    };
    let rows = region.extent()[1] * region.extent()[2];
    let mut partials = vec![reduction.identity(); rows];
    // Per-row partials, accumulated along x in block order.
    let run_groups = |groups: &[RowGroup], out: &mut [f64]| {
        reserve_scratch(1);
        let mut scratch = ctx.scratch();
        let offset = groups.first().map_or(0, |g| g.first_row);
        for group in groups {
            for block in blocks_of(group, &region) {
                ctx.run_block(&mut scratch, None, block);
                let n = (block.x1 - block.x0) as usize;
                for r in 0..group.rows {
                    let partial = &mut out[group.first_row - offset + r];
                    let block_value = reduction.of_row(ctx.result_row(&scratch, r, n));
                    *partial = reduction.merge(*partial, block_value);
                }
            }
        }
    };
    parallelism.run(|threads| {
        if threads <= 1 || groups.len() < 2 {
            run_groups(groups, &mut partials);
        } else {
            // Split the partials at the row boundaries of the group chunks.
            let ranges = chunk_ranges(groups.len(), threads);
            let mut pieces = Vec::with_capacity(ranges.len());
            let mut rest: &mut [f64] = &mut partials;
            for range in &ranges {
                let rows_in: usize = groups[range.clone()].iter().map(|g| g.rows).sum();
                let (piece, tail) = rest.split_at_mut(rows_in);
                pieces.push((range.clone(), piece));
                rest = tail;
            }
            pieces
                .into_par_iter()
                .for_each(|(range, piece)| run_groups(&groups[range], piece));
        }
    });
    partials
        .into_iter()
        .fold(reduction.identity(), |a, b| reduction.merge(a, b))
}
