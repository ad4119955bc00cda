//! What an assignment or a reduction is asked ([`Region`],
//! [`AssignOptions`], [`MaskedAssignment`], [`ReduceRegion`]) and the checks
//! before one runs: binding the kernel's slots to fields, checking grids,
//! aliasing and ghost layers, choosing the region and which masked
//! assignments run as row epilogues. `assign.rs` (the one-shot calls) and
//! `prepared.rs` (assignments prepared once) both run what these checks
//! accept.

use crate::cache::LoweredKernel;
use crate::codegen::{Backend, FiniteCheck, Runnable, lower_for};
use crate::cpu::{self, Parallelism, Plan};
use crate::error::{OperatorError, OperatorResult};
use crate::expr::BoundField;
use crate::ir::Node;
use crate::kernel::Kernel;
use crate::stencil::StencilOp;
use crate::vocabulary::{FieldData, Reduction};
use smallvec::SmallVec;
use std::sync::Arc;
use watershed_fields::{FieldLayout, IndexBox, LocationKind, Patch};

/// Which points of the target an assignment computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Region {
    /// The interior (valid region): the usual case.
    #[default]
    Interior,
    /// The interior and up to this many ghost layers per side (clipped to
    /// the target's ghosts); the inputs must have the ghosts this needs.
    InteriorAndGhosts(usize),
    /// Every point of the target the inputs' ghost layers allow (asked for
    /// explicitly: the region then depends on the inputs' ghost widths).
    LargestComputable,
    /// Exactly this box of the target's indices; an error when it is not
    /// inside the target's allocation or the inputs cannot supply it. The
    /// expression graph computes each node over the box its consumers need.
    Box(IndexBox),
}

/// Options of [`Assign::assign_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AssignOptions {
    /// Points to compute.
    pub region: Region,
    /// Threads to use.
    pub parallelism: Parallelism,
    /// Scan the values written, right after each block is computed (while
    /// they are in cache), and fail with [`OperatorError::NotFinite`] naming
    /// the first point that is not finite. Costs a small fraction of a pass
    /// over the target instead of a separate one.
    pub check_finite: bool,
    /// The back end that runs the kernel ([`Backend::Default`]: the
    /// process default, compiled C when a C compiler exists).
    pub backend: Backend,
}

/// One masked assignment: the box of the target's indices it writes and
/// the value there (an IR tree that may read the target through leaves of
/// the target's id, outside the box, as boundary conditions do).
pub type MaskedAssignment = (IndexBox, Arc<Node>);

/// What a kernel slot is bound to.
pub(crate) enum Binding<'f> {
    /// A field given by the caller, with its CPU data.
    Field(&'f dyn BoundField, &'f [f64]),
    /// The target itself (read where the assignment does not write).
    Target,
}

/// True when the masked assignment `lowered` over `region` reads only the
/// target (`target_leaf`), only along x within its own row, and only
/// points of `main`'s x range: then it may run right after each group of
/// `main`'s rows with the values of a later, separate pass.
pub(crate) fn is_row_epilogue(
    main: &IndexBox,
    lowered: &LoweredKernel,
    target_leaf: u64,
    region: &IndexBox,
) -> bool {
    if main.is_empty() || region.is_empty() {
        return false;
    }
    lowered
        .field_ids
        .iter()
        .zip(&lowered.kernel.fields)
        .all(|(&id, k)| {
            id == target_leaf
                && k.transfer.is_none()
                && k.extent.min[1..] == [0, 0]
                && k.extent.max[1..] == [0, 0]
                && region.lo[0] + k.extent.min[0] >= main.lo[0]
                && region.hi[0] + k.extent.max[0] <= main.hi[0]
        })
}

/// The parts of `region` in rows (y, z) outside `main`'s rows, as boxes.
pub(crate) fn outside_rows(
    region: &IndexBox,
    main: &IndexBox,
) -> smallvec::SmallVec<[IndexBox; 4]> {
    let mut out = smallvec::SmallVec::new();
    let mut take = |lo: [isize; 3], hi: [isize; 3]| {
        let b = IndexBox::new(lo, hi).intersect(region);
        if !b.is_empty() {
            out.push(b);
        }
    };
    let (r, m) = (region, main);
    // Planes below and above main's z range, whole.
    take(r.lo, [r.hi[0], r.hi[1], m.lo[2]]);
    take([r.lo[0], r.lo[1], m.hi[2]], r.hi);
    // Within main's z range: rows below and above main's y range.
    let (z0, z1) = (r.lo[2].max(m.lo[2]), r.hi[2].min(m.hi[2]));
    take([r.lo[0], r.lo[1], z0], [r.hi[0], m.lo[1], z1]);
    take([r.lo[0], m.hi[1], z0], [r.hi[0], r.hi[1], z1]);
    out
}

/// The box `region` stands for on a target with `layout`, checked: inside
/// the target's allocation, within every slot's ghost layers, and never
/// reading the target (slot `None`) at a non-zero offset inside the box.
/// Shared by the CPU evaluator and the GPU launches, so both refuse the
/// same assignments with the same errors.
pub(crate) fn checked_region(
    kernel: &Kernel,
    slots: &[Option<&dyn BoundField>],
    layout: &FieldLayout,
    name: &str,
    region: Region,
) -> OperatorResult<IndexBox> {
    let layouts: Vec<&FieldLayout> = slots
        .iter()
        .map(|b| match b {
            Some(f) => f.layout(),
            None => layout,
        })
        .collect();
    let names: Vec<&str> = slots
        .iter()
        .map(|b| match b {
            Some(f) => f.name(),
            None => name,
        })
        .collect();
    let region = match region {
        Region::Interior => layout.interior(),
        Region::InteriorAndGhosts(width) => layout.interior_with_ghosts(width),
        Region::LargestComputable => largest_computable(kernel, &layouts, layout),
        Region::Box(region) => {
            let allocated = layout.allocated();
            if !region.is_empty() && region.intersect(&allocated) != region {
                return Err(OperatorError::RegionOutsideTarget {
                    target: name.to_string(),
                    region: describe_region(&region, &layout.interior()),
                    allocated: describe_region(&allocated, &layout.interior()),
                });
            }
            region
        }
    };
    check_ghosts(kernel, &layouts, &names, &region, name)?;
    for (k, b) in kernel.fields.iter().zip(slots) {
        if b.is_some() || region.is_empty() {
            continue;
        }
        let pointwise = k.extent.min == [0; 3] && k.extent.max == [0; 3];
        let read = IndexBox::new(
            [0, 1, 2].map(|a| region.lo[a] + k.extent.min[a]),
            [0, 1, 2].map(|a| region.hi[a] + k.extent.max[a]),
        );
        if !pointwise && !read.intersect(&region).is_empty() {
            let offset = [0, 1, 2].map(|a| {
                if k.extent.min[a] != 0 {
                    k.extent.min[a]
                } else {
                    k.extent.max[a]
                }
            });
            return Err(OperatorError::SelfOverlap {
                target: name.to_string(),
                offset,
                region: describe_region(&region, &layout.interior()),
            });
        }
    }
    Ok(region)
}

/// The field each of the kernel's slots reads (`None`: the target, for
/// `target_leaf`), checked to share `patch`'s cells (or, for inter-grid
/// operators, to be its coarsening or refinement).
pub(crate) fn bind_slots<'f>(
    lowered: &LoweredKernel,
    target_leaf: Option<u64>,
    fields: &[&'f dyn BoundField],
    patch: &Patch,
    target: &str,
) -> OperatorResult<Vec<Option<&'f dyn BoundField>>> {
    lowered
        .field_ids
        .iter()
        .zip(&lowered.kernel.fields)
        .zip(&lowered.field_names)
        .map(|((&id, k), name)| {
            if Some(id) == target_leaf {
                return Ok(None);
            }
            let field = *fields.iter().find(|f| f.id() == id).ok_or_else(|| {
                OperatorError::UnboundField {
                    id,
                    name: name.to_string(),
                }
            })?;
            let theirs = field.layout().patch();
            if let Some(op) = k.transfer {
                check_transfer(op, field.name(), theirs, patch)?;
                return Ok(Some(field));
            }
            if theirs.grid() != patch.grid() || theirs.offset() != patch.offset() || theirs.cells() != patch.cells() {
                return Err(OperatorError::GridMismatch {
                    target: target.to_string(),
                    field: field.name().to_string(),
                    detail: format!(
                        "its patch has cells {:?} at offset {:?} of a {:?} grid, the target's has {:?} at {:?} of a {:?} grid",
                        theirs.cells(),
                        theirs.offset(),
                        theirs.grid().cells(),
                        patch.cells(),
                        patch.offset(),
                        patch.grid().cells()
                    ),
                });
            }
            Ok(Some(field))
        })
        .collect()
}

/// Refuses an inter-grid operator between patches that are not a patch and
/// its refinement by the operator's ratio (cells, offsets, origin, spacing).
fn check_transfer(op: StencilOp, field: &str, theirs: &Patch, ours: &Patch) -> OperatorResult<()> {
    let ratio = op.transfer_ratio().unwrap_or([1; 3]);
    let (fine, coarse) = match op {
        StencilOp::Restrict { .. } => (theirs, ours),
        _ => (ours, theirs),
    };
    let refined = |c: [usize; 3]| [0, 1, 2].map(|a| c[a].checked_mul(ratio[a]));
    let scaled_offset = [0, 1, 2].map(|a| coarse.offset()[a].checked_mul(ratio[a]));
    let spacing_ok = (0..3).all(|a| {
        let expected = fine.grid().spacing()[a] * ratio[a] as f64;
        (coarse.grid().spacing()[a] - expected).abs() <= 1e-12 * expected.abs()
    });
    let origin_ok = (0..3).all(|a| {
        let (f, c) = (fine.grid().origin()[a], coarse.grid().origin()[a]);
        (f - c).abs() <= 1e-12 * fine.grid().spacing()[a].abs().max(f.abs())
    });
    let matches = refined(coarse.cells()) == fine.cells().map(Some)
        && refined(coarse.grid().cells()) == fine.grid().cells().map(Some)
        && scaled_offset == fine.offset().map(Some)
        && spacing_ok
        && origin_ok;
    if matches {
        return Ok(());
    }
    Err(OperatorError::InterGrid {
        field: field.to_string(),
        reason: format!(
            "{} needs a fine patch that refines the coarse one by {ratio:?}; the fine patch has {:?} cells at offset {:?} of a {:?} grid (spacing {:?}, origin {:?}), the coarse one {:?} cells at offset {:?} of a {:?} grid (spacing {:?}, origin {:?})",
            op.name(),
            fine.cells(),
            fine.offset(),
            fine.grid().cells(),
            fine.grid().spacing(),
            fine.grid().origin(),
            coarse.cells(),
            coarse.offset(),
            coarse.grid().cells(),
            coarse.grid().spacing(),
            coarse.grid().origin()
        ),
    })
}

fn describe_region(region: &IndexBox, interior: &IndexBox) -> String {
    let ranges: Vec<String> = (0..3)
        .map(|a| format!("[{}, {})", region.lo[a], region.hi[a]))
        .collect();
    let what = if region == interior {
        "the interior"
    } else {
        "the region"
    };
    format!("{what} {}", ranges.join(" x "))
}

/// Refuses a region the fields' ghost layers cannot cover.
fn check_ghosts(
    kernel: &Kernel,
    layouts: &[&FieldLayout],
    names: &[&str],
    region: &IndexBox,
    target: &str,
) -> OperatorResult<()> {
    for ((k, layout), field) in kernel.fields.iter().zip(layouts).zip(names) {
        let allocated = layout.allocated();
        let interior = layout.interior_extent();
        let ghosts = layout.ghosts();
        let mut reads = IndexBox::new(
            [0, 1, 2].map(|a| region.lo[a] + k.extent.min[a]),
            [0, 1, 2].map(|a| region.hi[a] + k.extent.max[a]),
        );
        if let Some(mapped) = k.transfer.and_then(|op| op.transfer_reads(&reads)) {
            reads = mapped;
        }
        for (axis, &interior) in interior.iter().enumerate() {
            let lowest = reads.lo[axis];
            let beyond_high = reads.hi[axis];
            let (side, needed, available) = if lowest < allocated.lo[axis] {
                ("-", (-lowest) as usize, ghosts.minus[axis])
            } else if beyond_high > allocated.hi[axis] {
                (
                    "+",
                    (beyond_high - interior as isize) as usize,
                    ghosts.plus[axis],
                )
            } else {
                continue;
            };
            return Err(OperatorError::MissingGhosts {
                target: target.to_string(),
                field: field.to_string(),
                side: format!("{side}{}", crate::stencil::axis_name(axis)),
                needed,
                available,
                region: describe_region(region, &layout_interior(layout, kernel)),
            });
        }
    }
    Ok(())
}

fn layout_interior(layout: &FieldLayout, kernel: &Kernel) -> IndexBox {
    let kind = kernel.location.unwrap_or(layout.kind());
    FieldLayout::new(layout.patch(), kind).interior()
}

/// The largest box within `layout`'s allocation where every read is inside
/// its field's allocation.
fn largest_computable(kernel: &Kernel, layouts: &[&FieldLayout], layout: &FieldLayout) -> IndexBox {
    let mut region = layout.allocated();
    for (k, field) in kernel.fields.iter().zip(layouts) {
        let mut allocated = field.allocated();
        if let Some(computable) = k.transfer.and_then(|op| op.transfer_computable(&allocated)) {
            allocated = computable;
        }
        for axis in 0..3 {
            region.lo[axis] = region.lo[axis].max(allocated.lo[axis] - k.extent.min[axis]);
            region.hi[axis] = region.hi[axis].min(allocated.hi[axis] - k.extent.max[axis]);
        }
    }
    region
}

/// Where a reduction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReduceRegion {
    /// Every point where the expression can be computed (for a plain field,
    /// ghosts included).
    #[default]
    Computable,
    /// The interior only.
    Interior,
}

/// A reduction of a tree checked for fields with given ids and layouts:
/// its kernel, the region and each slot's field.
#[derive(Debug, Clone)]
pub(crate) struct CheckedReduction {
    pub(crate) runnable: Runnable,
    /// Per kernel slot: the id and layout of the field it reads.
    pub(crate) slots: Vec<(u64, FieldLayout)>,
    pub(crate) region: IndexBox,
    pub(crate) reduction: Reduction,
    patch: Patch,
}

impl CheckedReduction {
    /// Lowers `node` (a `kind` expression), binds its slots to `fields`
    /// and checks `region` against their ghost layers.
    pub(crate) fn new(
        node: &Arc<Node>,
        kind: LocationKind,
        fields: &[&dyn BoundField],
        reduction: Reduction,
        region: ReduceRegion,
    ) -> OperatorResult<Self> {
        // Named in errors only: printing the tree costs more than a small
        // reduction, so the checks run unnamed and, when one fails, again
        // with the name.
        let what = || format!("{reduction:?} reduction of {node}");
        let Some(first) = fields.first() else {
            return Err(OperatorError::NoGrid { what: what() });
        };
        let patch = first.layout().patch().clone();
        let layout = FieldLayout::new(&patch, node.location().unwrap_or(kind));
        // A reduction's values go to registers, never to a target: there
        // is nothing for the check to test.
        let runnable = lower_for(
            node,
            &patch,
            false,
            Backend::Default,
            FiniteCheck::Unchecked,
        )?;
        let lowered = &runnable.lowered;
        let kernel = &lowered.kernel;
        let bound = bind_slots(lowered, None, fields, &patch, "")
            .or_else(|_| bind_slots(lowered, None, fields, &patch, &what()))?;
        let bound: Vec<&dyn BoundField> = bound.into_iter().flatten().collect();
        let layouts: Vec<&FieldLayout> = bound.iter().map(|f| f.layout()).collect();
        let names: Vec<&str> = bound.iter().map(|f| f.name()).collect();
        let region = match region {
            ReduceRegion::Interior => layout.interior(),
            ReduceRegion::Computable => largest_computable(kernel, &layouts, &layout),
        };
        check_ghosts(kernel, &layouts, &names, &region, "")
            .or_else(|_| check_ghosts(kernel, &layouts, &names, &region, &what()))?;
        let slots = bound.iter().map(|f| (f.id(), f.layout().clone())).collect();
        Ok(CheckedReduction {
            runnable,
            slots,
            region,
            reduction,
            patch,
        })
    }

    /// The patch the reduction runs on.
    pub(crate) fn patch(&self) -> &Patch {
        &self.patch
    }

    /// True when `fields` still fit: every slot's field is there with the
    /// same layout.
    pub(crate) fn fits(&self, fields: &[&dyn BoundField]) -> bool {
        self.slots
            .iter()
            .all(|(id, layout)| fields.iter().any(|f| f.id() == *id && f.layout() == layout))
    }

    /// Each slot's data, from `fields` (which must fit).
    pub(crate) fn data<'f>(
        &self,
        fields: &[&'f dyn BoundField],
    ) -> OperatorResult<SmallVec<[FieldData<'f>; 4]>> {
        let mut data = SmallVec::with_capacity(self.slots.len());
        for (id, _) in &self.slots {
            let Some(field) = fields.iter().find(|f| f.id() == *id) else {
                return Err(OperatorError::UnboundField {
                    id: *id,
                    name: format!("slot of the {:?} reduction", self.reduction),
                });
            };
            data.push(FieldData::new(field.cpu_values()?, field.layout()));
        }
        Ok(data)
    }

    /// The evaluator's plan for fields like `data`.
    pub(crate) fn plan(&self, data: &[FieldData<'_>]) -> Plan {
        Plan::new(
            &self.runnable.lowered.kernel,
            self.runnable.native.is_some(),
            data,
            &self.patch,
            &self.region,
        )
    }

    /// Runs the reduction over `data` with `plan`.
    pub(crate) fn run(&self, data: &[FieldData<'_>], plan: &Plan, parallelism: Parallelism) -> f64 {
        let lowered = &self.runnable.lowered;
        // SAFETY: `CheckedReduction::new` checked the region against every
        // bound field's ghost layers over the kernel's read extents; `data`
        // holds those fields (bound by slot), read-only for this call, and
        // `plan` was made by `Self::plan` for them.
        unsafe {
            cpu::reduce(
                &lowered.kernel,
                self.runnable.native.as_deref(),
                data,
                &lowered.parameter_values(),
                &self.patch,
                self.region,
                plan,
                self.reduction,
                parallelism,
            )
        }
    }
}
