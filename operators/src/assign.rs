//! Assignment (`target.assign(expr)`, Nebo's `target <<= expr`) and
//! reductions as one-shot calls: each is checked ([`crate::checks`]),
//! prepared ([`crate::prepared`]) and run in one fused pass.

use crate::cache::lower_cached;
use crate::checks::{
    AssignOptions, Binding, CheckedReduction, MaskedAssignment, ReduceRegion, is_row_epilogue,
};
use crate::cpu::{self, Epilogue, Parallelism};
use crate::error::{OperatorError, OperatorResult};
use crate::expr::{BoundField, Expr, IntoExpr};
use crate::ir::Node;
use crate::prepared::{PreparedAssignment, Staged};
use crate::vocabulary::Reduction;
use rayon::prelude::*;
use std::sync::Arc;
use watershed_fields::{FieldLayout, IndexBox, Location, LocationKind, SpatialField};

/// `target.assign(expr)`: evaluates `expr` into the target in one fused pass.
pub trait Assign<'a, L: Location> {
    /// Computes `expr` over the target's interior, on the current rayon pool.
    ///
    /// Errors (leaving the target unchanged) when a field is on another
    /// patch, lacks ghost layers the stencils need, shares the target's
    /// memory, or has no valid CPU copy; the target must have its CPU
    /// location active.
    fn assign(&mut self, expr: impl IntoExpr<'a, L>) -> OperatorResult<()> {
        self.assign_with(expr, AssignOptions::default())
    }

    /// [`assign`](Self::assign) with a region and a thread count.
    fn assign_with(
        &mut self,
        expr: impl IntoExpr<'a, L>,
        options: AssignOptions,
    ) -> OperatorResult<()>;
}

impl<'a, L: Location> Assign<'a, L> for SpatialField<L, f64> {
    fn assign_with(
        &mut self,
        expr: impl IntoExpr<'a, L>,
        options: AssignOptions,
    ) -> OperatorResult<()> {
        let expr = expr.into_expr();
        assign_node(self, expr.node(), expr.fields(), options)
    }
}

/// Assigns an IR tree whose fields are given separately: the entry point for
/// the expression graph, which binds fields by id at run time.
pub fn assign_node<L: Location>(
    target: &mut SpatialField<L, f64>,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    options: AssignOptions,
) -> OperatorResult<()> {
    let own = target.id();
    assign_node_reading_target(target, own, root, fields, options)
}

/// Updates `target` in place: `build` receives the target as an expression
/// leaf and returns its new value, e.g. the Shu-Osher stage
/// `u = a u_n + b (u + dt L)` as one pass without a second buffer.
///
/// The new value may read the target only at offset 0 (pointwise): a
/// stencil of the target would read points the same pass overwrites, which
/// is refused with [`OperatorError::SelfOverlap`].
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_operators::{Parameter, field, interior_max, update};
/// let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let mut u = SpatialField::<CellCentre>::new("u", &patch, Device::Cpu)?;
/// let rhs = SpatialField::<CellCentre>::new("rhs", &patch, Device::Cpu)?;
/// u.fill(1.0)?;
/// let dt = Parameter::new("dt", 0.1);
/// update(&mut u, |u| 2.0 * u + dt.expr() * field(&rhs))?;
/// assert_eq!(interior_max(field(&u))?, 2.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn update<'a, L: Location>(
    target: &mut SpatialField<L, f64>,
    build: impl FnOnce(Expr<'static, L>) -> Expr<'a, L>,
) -> OperatorResult<()> {
    update_with(target, AssignOptions::default(), build)
}

/// [`update`] with a region, a thread count and the finiteness check of
/// [`AssignOptions`].
pub fn update_with<'a, L: Location>(
    target: &mut SpatialField<L, f64>,
    options: AssignOptions,
    build: impl FnOnce(Expr<'static, L>) -> Expr<'a, L>,
) -> OperatorResult<()> {
    let own = target.id();
    let expr = build(Expr::symbol(own, target.name()));
    assign_node_reading_target(target, own, expr.node(), expr.fields(), options)
}

/// [`assign_node`] for trees whose leaves with id `target_leaf` stand for the
/// target itself: in-place pointwise updates (the target read at offset 0
/// only) and boundary modifiers (the target read only outside the points
/// written, e.g. ghosts from their interior mirror partners). Any other
/// self-read is refused with [`OperatorError::SelfOverlap`].
pub fn assign_node_reading_target<L: Location>(
    target: &mut SpatialField<L, f64>,
    target_leaf: u64,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    options: AssignOptions,
) -> OperatorResult<()> {
    assign_node_then(target, target_leaf, root, fields, options, &[])
}

/// [`assign_node_reading_target`] followed by the masked assignments
/// `then`, in order, with the same results as separate calls, but fused
/// where the data allows: each leading masked assignment that reads only
/// the target, and only points of the same row inside the main region
/// (ghost points along x from their mirror partners or periodic images),
/// runs as a *row epilogue*: right after the main kernel writes a group
/// of rows, while they are in cache, instead of in a later pass that
/// fetches every row again (one cache line per point for a layer normal to
/// x). The points of its box outside the main region's rows, and the
/// assignments after the first that cannot be fused, run afterwards.
/// [`row_epilogue_count`] says how many fuse.
///
/// Every check of the separate calls is made before anything is written:
/// regions inside the target, ghost layers, self-overlap, aliasing.
pub fn assign_node_then<L: Location>(
    target: &mut SpatialField<L, f64>,
    target_leaf: u64,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    options: AssignOptions,
    then: &[MaskedAssignment],
) -> OperatorResult<()> {
    PreparedAssignment::new(target, target_leaf, root, fields, options, then)?.run(target, fields)
}

/// One member of [`assign_nodes_then`]: what [`assign_node_then`] takes.
pub struct NodeAssignment<'t, L: Location> {
    /// The field written.
    pub target: &'t mut SpatialField<L, f64>,
    /// Leaves with this id stand for the target.
    pub target_leaf: u64,
    /// The value.
    pub root: &'t Arc<Node>,
    /// Region, finiteness check and back end (the parallelism of the first
    /// member applies to the whole group).
    pub options: AssignOptions,
    /// Masked assignments after it (boundary conditions).
    pub then: &'t [MaskedAssignment],
}

/// Several independent [`assign_node_then`] calls run as one loop nest
/// (horizontal fusion): every member computes its rows of a strip of
/// planes before the next strip starts, so inputs the members share (a
/// diffusivity every equation reads) are fetched from memory once per
/// strip rather than once per member. Values are bitwise those of separate
/// calls. Every check of the separate calls is made before anything is
/// written, and also that no member reads or aliases another member's
/// target ([`OperatorError::Aliasing`]). A value that is not finite is
/// reported for the first member (in order) that watches and met one.
pub fn assign_nodes_then<L: Location>(
    members: &mut [NodeAssignment<'_, L>],
    fields: &[&dyn BoundField],
) -> OperatorResult<()> {
    let Some(parallelism) = members.first().map(|m| m.options.parallelism) else {
        return Ok(());
    };
    let mut prepared = Vec::with_capacity(members.len());
    for m in members.iter() {
        prepared.push(PreparedAssignment::new(
            m.target,
            m.target_leaf,
            m.root,
            fields,
            m.options,
            m.then,
        )?);
    }
    let mut staged = Vec::with_capacity(members.len());
    for (p, m) in prepared.iter_mut().zip(members.iter_mut()) {
        staged.push(p.stage(m.target, fields)?);
    }
    let names: Vec<&str> = members.iter().map(|m| m.target.name()).collect();
    for (i, writer) in staged.iter().enumerate() {
        let written = writer.target_data.pointer as usize
            ..writer.target_data.pointer as usize + 8 * writer.target_data.len;
        for (j, reader) in staged.iter().enumerate() {
            if i == j {
                continue;
            }
            for b in reader
                .main_bound
                .iter()
                .chain(reader.masked_bound.iter().flatten())
            {
                let Binding::Field(field, data) = b else {
                    continue;
                };
                let range = data.as_ptr_range();
                let (lo, hi) = (range.start as usize, range.end as usize);
                if lo < written.end && written.start < hi {
                    return Err(OperatorError::Aliasing {
                        target: names[i].to_string(),
                        field: format!(
                            "{} (read by the assignment to {} in the same group)",
                            field.name(),
                            names[j]
                        ),
                    });
                }
            }
            let other = reader.target_data.pointer as usize;
            if other >= written.start && other < written.end {
                return Err(OperatorError::Aliasing {
                    target: names[i].to_string(),
                    field: format!("{} (another target of the same group)", names[j]),
                });
            }
        }
    }
    let epilogues: Vec<crate::prepared::Masked<Epilogue<'_>>> =
        staged.iter().map(|s| s.epilogues()).collect();
    let assignments: Vec<cpu::Assignment<'_>> = staged
        .iter()
        .zip(&epilogues)
        .zip(members.iter())
        .map(|((s, e), m)| cpu::Assignment {
            kernel: &s.prepared.main.lowered.kernel,
            native: s.prepared.main.native.as_deref(),
            fields: &s.main_data,
            parameters: &s.main_parameters,
            target: s.target_data,
            region: s.prepared.main.region,
            watch_finite: m.options.check_finite,
            epilogues: e,
        })
        .collect();
    let patch = match staged.first() {
        Some(s) => s.prepared.layout().patch().clone(),
        None => return Ok(()),
    };
    // SAFETY: each member was staged by `PreparedAssignment::stage`, which
    // made every check of `assign_node_then` (grids, ghost layers over the
    // kernel's read extents, region inside the target, aliasing at offset
    // zero only) and bound data pointers of fields that outlive this call;
    // the loop above refused members whose targets overlap or that read
    // another member's target.
    let non_finite = unsafe { cpu::assign_many(&assignments, &patch, parallelism) };
    drop(assignments);
    drop(epilogues);
    drop(names);
    // Each member's remaining masked assignments write only its own
    // target and read no other member's (checked above), so the members
    // finish on the pool's threads at once; the first error in member
    // order is the one reported, as when they ran in turn. Small targets
    // (a multigrid level) finish on this thread: handing them to the
    // pool costs more than their ghost layers.
    let points: usize = staged
        .iter()
        .map(|s| s.prepared.layout().allocated().len())
        .sum();
    let parallel_finish = if points < cpu::PARALLEL_THRESHOLD {
        Parallelism::Serial
    } else {
        parallelism
    };
    let jobs: Vec<_> = staged
        .into_iter()
        .zip(members.iter().map(|m| &*m.target))
        .zip(non_finite)
        .collect();
    let finish = |((s, target), bad): ((Staged<'_>, &SpatialField<L, f64>), _)| {
        s.finish(target, bad, parallelism)
    };
    let results: Vec<OperatorResult<()>> = parallel_finish.run(|threads| {
        if threads <= 1 {
            jobs.into_iter().map(finish).collect()
        } else {
            jobs.into_par_iter().map(finish).collect()
        }
    });
    results.into_iter().collect()
}

/// How many of the leading masked assignments `then` run as row epilogues
/// of an assignment to `main_region` of a field with `layout` whose leaves
/// `target_leaf` are the target (see [`assign_node_then`]): the graph's
/// census counts the others as kernels of their own.
pub fn row_epilogue_count(
    layout: &FieldLayout,
    main_region: &IndexBox,
    target_leaf: u64,
    then: &[MaskedAssignment],
) -> OperatorResult<usize> {
    let mut count = 0;
    for (region, node) in then {
        let lowered = lower_cached(node, layout.patch(), false)?;
        if !is_row_epilogue(main_region, lowered.as_ref(), target_leaf, region) {
            break;
        }
        count += 1;
    }
    Ok(count)
}

/// Reduces `expr` over `region`, with `parallelism`. The result is the same
/// bit for bit whatever the thread count. A loop that reduces the same
/// expression many times should prepare it once
/// ([`crate::PreparedReduction`]).
pub fn reduce<'a, L: Location>(
    expr: impl IntoExpr<'a, L>,
    reduction: Reduction,
    region: ReduceRegion,
    parallelism: Parallelism,
) -> OperatorResult<f64> {
    let expr: Expr<'a, L> = expr.into_expr();
    let checked = CheckedReduction::new(expr.node(), L::KIND, expr.fields(), reduction, region)?;
    let data = checked.data(expr.fields())?;
    let plan = checked.plan(&data);
    Ok(checked.run(&data, &plan, parallelism))
}

macro_rules! reduction_functions {
    ($(#[$doc:meta])* $all:ident, $(#[$doc_interior:meta])* $interior:ident, $kind:expr, $finish:expr) => {
        $(#[$doc])*
        pub fn $all<'a, L: Location>(expr: impl IntoExpr<'a, L>) -> OperatorResult<f64> {
            reduce(expr, $kind, ReduceRegion::Computable, Parallelism::Rayon).map($finish)
        }
        $(#[$doc_interior])*
        pub fn $interior<'a, L: Location>(expr: impl IntoExpr<'a, L>) -> OperatorResult<f64> {
            reduce(expr, $kind, ReduceRegion::Interior, Parallelism::Rayon).map($finish)
        }
    };
}

reduction_functions!(
    /// Sum over every computable point (ghosts included for a plain field).
    sum,
    /// Sum over the interior.
    interior_sum,
    Reduction::Sum,
    |v| v
);
reduction_functions!(
    /// Smallest value over every computable point.
    field_min,
    /// Smallest value over the interior.
    interior_min,
    Reduction::Min,
    |v| v
);
reduction_functions!(
    /// Largest value over every computable point.
    field_max,
    /// Largest value over the interior.
    interior_max,
    Reduction::Max,
    |v| v
);
reduction_functions!(
    /// `sqrt(sum v^2)` over every computable point.
    norm_l2,
    /// `sqrt(sum v^2)` over the interior.
    interior_norm_l2,
    Reduction::SumOfSquares,
    f64::sqrt
);

/// The location kinds, re-exported for callers that reduce IR trees.
pub fn location_of(node: &Node) -> Option<LocationKind> {
    node.location()
}
