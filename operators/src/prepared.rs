//! Assignments checked once and run many times.
//!
//! Every assignment does the same work before its kernel runs: find the
//! lowered (and compiled) kernel of its tree, bind each kernel slot to a
//! field, check grids, ghost layers, the region and reads of the target,
//! and decide which boundary modifiers fuse as row epilogues. On the small
//! levels of a multigrid V-cycle, or for the four sides of a boundary
//! fill, that costs more than the arithmetic. A [`PreparedAssignment`]
//! does it once and keeps what it found; each run then only checks that
//! nothing it relied on changed, binds the data pointers and runs.
//!
//! # What a run re-checks, and why that is enough
//!
//! Every check of [`crate::assign_node_then`] depends only on the tree,
//! the target's layout and location, the layouts of the fields each slot
//! reads and the region asked for (parameters are read as values on every
//! run, by every back end). A run compares exactly these (the target
//! layout, each slot's field by id and layout); the
//! first difference re-prepares the whole assignment with the fields
//! given, with the errors of an unprepared call. What can change from run
//! to run without any re-check is only data: the values, and whether the
//! CPU copy is valid (asked on every run, as before). So a prepared run
//! refuses exactly what an unprepared call refuses and computes bitwise
//! the same values, which `tests/prepared.rs` checks.

use crate::AssignOptions;
use crate::cache::{LoweredKernel, ParameterValues};
use crate::checks::{
    Binding, MaskedAssignment, Region, bind_slots, checked_region, is_row_epilogue, outside_rows,
};
use crate::codegen::{Backend, FiniteCheck, NativeKernel, lower_for};
use crate::cpu::{self, Epilogue, Parallelism, Plan};
use crate::error::{OperatorError, OperatorResult};
use crate::expr::BoundField;
use crate::ghost_fill::{self, GhostFill};
use crate::ir::Node;
use crate::kernel::KernelField;
use crate::vocabulary::{FieldData, TargetData};
use smallvec::SmallVec;
use std::sync::Arc;
use watershed_backends::fill::PointFill;
use watershed_fields::{FieldLayout, IndexBox, Location, LocationKind, SpatialField};

/// Per kernel slot: what it is bound to (inline for up to 4 slots, so
/// that binding a small kernel allocates nothing).
pub(crate) type Bound<'f> = SmallVec<[Binding<'f>; 4]>;

/// Per kernel slot: the evaluator's view of its data.
pub(crate) type Data<'f> = SmallVec<[FieldData<'f>; 4]>;

/// Per masked assignment. A `Vec`, not inline storage: `Staged` is moved
/// by value, and six inline slots of bindings and data made every call
/// copy kilobytes even with no masked assignment (an empty `Vec` does not
/// allocate).
pub(crate) type Masked<T> = Vec<T>;

/// What the checks need to know of the target.
#[derive(Clone, Copy)]
struct TargetShape<'a> {
    layout: &'a FieldLayout,
    kind: LocationKind,
    /// For messages.
    name: &'a str,
    /// Leaves with this id read the target.
    leaf: u64,
}

/// The field a kernel slot read when it was checked.
#[derive(Debug, Clone)]
struct SlotKey {
    id: u64,
    layout: FieldLayout,
}

/// One kernel of an assignment, checked for a target layout and the
/// layouts of the fields it reads.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) lowered: Arc<LoweredKernel>,
    /// The compiled kernel, when the back end has one.
    pub(crate) native: Option<Arc<NativeKernel>>,
    /// Per kernel slot: the field it read (`None`: the target).
    slots: Vec<Option<SlotKey>>,
    /// The points written.
    pub(crate) region: IndexBox,
}

impl Checked {
    /// Lowers `root` for a target with `layout`, binds its fields, resolves
    /// `region` and checks ghost layers and reads of the target itself.
    fn new(
        target: &TargetShape<'_>,
        root: &Arc<Node>,
        fields: &[&dyn BoundField],
        region: Region,
        backend: Backend,
        finite_check: FiniteCheck,
    ) -> OperatorResult<Checked> {
        let TargetShape {
            layout,
            kind,
            name,
            leaf: target_leaf,
        } = *target;
        if let Some(found) = root.location()
            && found != kind
        {
            return Err(OperatorError::LocationMismatch {
                target: name.to_string(),
                expected: kind,
                found,
            });
        }
        // Written straight into the target unless the kernel reads the
        // target in rows it also writes: then the result goes to a register
        // and is copied to the target after each block's reads, so no
        // reference ever aliases a row being written.
        let direct = lower_for(root, layout.patch(), true, backend, finite_check)?;
        let reads: Vec<KernelField> = direct
            .lowered
            .field_ids
            .iter()
            .zip(&direct.lowered.kernel.fields)
            .filter(|(id, _)| **id == target_leaf)
            .map(|(_, k)| k.clone())
            .collect();
        // A compiled kernel writes the target directly once its region is
        // checked: the check refuses any read of the target at a non-zero
        // offset inside the points written, so each read is either the
        // point's own value (read before its write, in the same row pass)
        // or a point the kernel never writes; its raw pointers form no
        // slice over a row being written (design note, aliasing points 2
        // and 3). The interpreter forms slices, so a read in a row it
        // writes goes through the register-then-copy path below.
        if direct.native.is_some() && !reads.is_empty() {
            return Self::resolve(direct, layout, name, target_leaf, fields, region);
        }
        // A read at row offset 0 (in-place updates, x ghosts) meets the
        // written rows in any non-empty region: no need to resolve first.
        let in_own_row = reads
            .iter()
            .any(|k| (1..3).all(|a| k.extent.min[a] <= 0 && 0 <= k.extent.max[a]));
        if !in_own_row {
            let checked = Self::resolve(direct, layout, name, target_leaf, fields, region)?;
            if !reads.iter().any(|k| reads_rows_of(k, &checked.region)) {
                return Ok(checked);
            }
        }
        let copied = lower_for(root, layout.patch(), false, backend, finite_check)?;
        Self::resolve(copied, layout, name, target_leaf, fields, region)
    }

    /// Binds a lowered kernel's slots and checks its region.
    fn resolve(
        runnable: crate::codegen::Runnable,
        layout: &FieldLayout,
        name: &str,
        target_leaf: u64,
        fields: &[&dyn BoundField],
        region: Region,
    ) -> OperatorResult<Checked> {
        let slots = bind_slots(
            &runnable.lowered,
            Some(target_leaf),
            fields,
            layout.patch(),
            name,
        )?;
        let region = checked_region(&runnable.lowered.kernel, &slots, layout, name, region)?;
        Ok(Checked {
            lowered: runnable.lowered,
            native: runnable.native,
            slots: slots
                .into_iter()
                .map(|slot| {
                    slot.map(|field| SlotKey {
                        id: field.id(),
                        layout: field.layout().clone(),
                    })
                })
                .collect(),
            region,
        })
    }

    /// The data of each slot, from `fields`, into `bound` (written in
    /// place: a returned vector of bindings was moved several times per
    /// run); `Ok(false)` when a slot's field is missing or has another
    /// layout (the kernel must be checked again). Errors when a field's CPU copy cannot be read.
    fn bind<'f>(
        &self,
        fields: &[&'f dyn BoundField],
        bound: &mut Bound<'f>,
    ) -> OperatorResult<bool> {
        bound.clear();
        for slot in &self.slots {
            let Some(key) = slot else {
                bound.push(Binding::Target);
                continue;
            };
            let Some(field) = fields.iter().find(|f| f.id() == key.id) else {
                return Ok(false);
            };
            if field.layout() != &key.layout {
                return Ok(false);
            }
            bound.push(Binding::Field(*field, field.cpu_values()?));
        }
        Ok(true)
    }
}

/// True when `field`, read over `region`, is read in some row (y, z) of
/// `region`.
fn reads_rows_of(field: &KernelField, region: &IndexBox) -> bool {
    (1..3).all(|a| {
        region.lo[a] + field.extent.min[a] < region.hi[a]
            && region.lo[a] < region.hi[a] + field.extent.max[a]
    })
}

/// An assignment (with its masked assignments) whose kernels, bindings,
/// regions and checks are found once: [`crate::assign_node_then`] for a
/// loop that runs the same assignment many times. Each
/// [`run`](Self::run) re-checks only what can make the preparation stale
/// (the target's layout, each field's id and layout) and prepares again
/// when something changed, so it refuses and computes exactly what an unprepared call
/// would.
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_operators::{AssignOptions, PreparedAssignment, field, interior_max, laplacian};
/// let patch = Grid::new([16, 16, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let mut x = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu)?;
/// let mut t = SpatialField::<CellCentre>::new("t", &patch, Device::Cpu)?;
/// x.fill(1.0)?;
/// let smooth = (field(&x) + 0.25 * laplacian(&x)).node().clone();
/// let mut step = PreparedAssignment::new(&t, t.id(), &smooth, &[&x], AssignOptions::default(), &[])?;
/// for _ in 0..10 {
///     step.run(&mut t, &[&x])?;
/// }
/// // A constant field (ghosts included) has a zero Laplacian.
/// assert_eq!(interior_max(field(&t))?, 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PreparedAssignment {
    kind: LocationKind,
    layout: FieldLayout,
    target_leaf: u64,
    root: Arc<Node>,
    then: Vec<MaskedAssignment>,
    options: AssignOptions,
    pub(crate) main: Checked,
    masked: Vec<Checked>,
    /// How many leading masked assignments run as row epilogues.
    fused: usize,
    /// The masked assignments as a ghost fill (small targets whose masked
    /// assignments all copy or mirror target points: `ghost_fill.rs`),
    /// run instead of the evaluator calls after the main kernel.
    ghost_fill: Option<GhostFill>,
    /// Per masked assignment, the same as a point fill when it has a fill
    /// shape (`ghost_fill::point_fill`): row epilogues run it instead of
    /// the kernel.
    masked_fills: Vec<Option<PointFill>>,
    /// The evaluator's plans, made by the first run (`None` until then).
    plans: Option<Plans>,
}

impl PreparedAssignment {
    /// Prepares `root` (whose leaves with id `target_leaf` read the target)
    /// and the masked assignments `then` for fields like `target` and
    /// `fields`: every check of [`crate::assign_node_then`] with their
    /// errors, nothing written.
    pub fn new<L: Location>(
        target: &SpatialField<L, f64>,
        target_leaf: u64,
        root: &Arc<Node>,
        fields: &[&dyn BoundField],
        options: AssignOptions,
        then: &[MaskedAssignment],
    ) -> OperatorResult<Self> {
        let layout = target.layout().clone();
        let shape = TargetShape {
            layout: &layout,
            kind: L::KIND,
            name: target.name(),
            leaf: target_leaf,
        };
        let (main, masked, mut fused) = check_all(&shape, root, fields, &options, then)?;
        let regions: Vec<IndexBox> = masked.iter().map(|m| m.region).collect();
        let ghost_fill = if layout.allocated().len() <= ghost_fill::MAX_POINTS {
            GhostFill::recognise(then, &regions, target_leaf)
        } else {
            None
        };
        if ghost_fill.is_some() {
            fused = 0;
        }
        let masked_fills = then
            .iter()
            .zip(&regions)
            .map(|((_, node), region)| ghost_fill::point_fill(node, region, target_leaf))
            .collect();
        Ok(PreparedAssignment {
            kind: L::KIND,
            layout,
            target_leaf,
            root: root.clone(),
            then: then.to_vec(),
            options,
            main,
            masked,
            fused,
            ghost_fill,
            masked_fills,
            plans: None,
        })
    }

    /// Runs the assignment into `target`, reading `fields` (bound by id as
    /// in [`crate::assign_node`]). Errors as [`crate::assign_node_then`],
    /// leaving the target unchanged unless the error is
    /// [`OperatorError::NotFinite`].
    pub fn run<L: Location>(
        &mut self,
        target: &mut SpatialField<L, f64>,
        fields: &[&dyn BoundField],
    ) -> OperatorResult<()> {
        let parallelism = self.options.parallelism;
        let check_finite = self.options.check_finite;
        let staged = self.stage(target, fields)?;
        let epilogues = staged.epilogues();
        let main = &staged.prepared.main;
        // SAFETY: `stage` made every check of `assign_node_then` for these
        // fields and this target (grids, ghost layers over each kernel's
        // read extents, regions inside the target, aliasing at offset zero
        // only) and bound the data of fields borrowed for this call; the
        // plans were made for these layouts and regions.
        let non_finite = unsafe {
            cpu::assign(
                &main.lowered.kernel,
                main.native.as_deref(),
                &staged.main_data,
                &staged.main_parameters,
                staged.prepared.layout.patch(),
                staged.target_data,
                main.region,
                staged.main_plan(),
                parallelism,
                check_finite,
                &epilogues,
            )
        };
        drop(epilogues);
        staged.finish(target, non_finite, parallelism)
    }

    /// The target layout the assignment was prepared for.
    pub(crate) fn layout(&self) -> &FieldLayout {
        &self.layout
    }

    /// Checks again, for `target` and `fields`, everything [`Self::new`]
    /// checked.
    fn refresh<L: Location>(
        &mut self,
        target: &SpatialField<L, f64>,
        fields: &[&dyn BoundField],
    ) -> OperatorResult<()> {
        let fresh = PreparedAssignment::new(
            target,
            self.target_leaf,
            &self.root,
            fields,
            self.options,
            &self.then,
        )?;
        *self = fresh;
        Ok(())
    }

    /// Every slot's data into `main` and `masked`, or `Ok(false)` when a
    /// kernel must be checked again.
    fn bind_all<'f>(
        &self,
        fields: &[&'f dyn BoundField],
        main: &mut Bound<'f>,
        masked: &mut Masked<Bound<'f>>,
    ) -> OperatorResult<bool> {
        if !self.main.bind(fields, main)? {
            return Ok(false);
        }
        if self.ghost_fill.is_some() {
            // A ghost fill reads only the target: nothing to bind.
            masked.clear();
            return Ok(true);
        }
        masked.resize_with(self.masked.len(), Bound::new);
        for (m, bound) in self.masked.iter().zip(masked.iter_mut()) {
            if !m.bind(fields, bound)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Binds the assignment to `target` and `fields` (preparing it again
    /// first if something it relied on changed) and refuses aliasing.
    pub(crate) fn stage<'a, L: Location>(
        &'a mut self,
        target: &mut SpatialField<L, f64>,
        fields: &[&'a dyn BoundField],
    ) -> OperatorResult<Staged<'a>> {
        let same_target = L::KIND == self.kind && target.layout() == &self.layout;
        let mut main_bound = Bound::new();
        let mut masked_bound = Masked::new();
        let fits = same_target && self.bind_all(fields, &mut main_bound, &mut masked_bound)?;
        if !fits {
            self.refresh(target, fields)?;
            if !self.bind_all(fields, &mut main_bound, &mut masked_bound)? {
                // Only a field whose layout or a parameter whose value
                // changes while this call runs can get here.
                return Err(OperatorError::Backend {
                    what: format!("the assignment to '{}'", target.name()),
                    reason: "a field's layout or a parameter's value changed while the assignment was being bound; bind fields and set parameters before running it".into(),
                });
            }
        }
        // Refuse aliasing before borrowing the target mutably: a `&mut`
        // slice over memory that a bound field's `&` slice also covers is
        // undefined behaviour even if nothing is written. (When the CPU
        // copy cannot be read, `values_mut` below reports why.)
        let target_id = target.id();
        if let Ok(current) = target.values() {
            let target_range = current.as_ptr_range();
            for b in main_bound.iter().chain(masked_bound.iter().flatten()) {
                let Binding::Field(field, data) = b else {
                    continue;
                };
                let range = data.as_ptr_range();
                if field.id() == target_id
                    || (range.start < target_range.end && target_range.start < range.end)
                {
                    return Err(OperatorError::Aliasing {
                        target: target.name().to_string(),
                        field: field.name().to_string(),
                    });
                }
            }
        }
        let values = target.values_mut()?;
        let target_data = TargetData {
            pointer: values.as_mut_ptr(),
            len: values.len(),
            origin: self.layout.linear_index([0; 3]) as isize,
            strides: self.layout.strides().map(|s| s as isize),
        };
        let main_data = field_data(&main_bound, &target_data, &self.layout);
        let masked_data: Masked<Data<'a>> = masked_bound
            .iter()
            .map(|b| field_data(b, &target_data, &self.layout))
            .collect();
        if self.plans.is_none() {
            self.plans = Some(self.make_plans(&main_data, &masked_data));
        }
        let this: &'a PreparedAssignment = self;
        let Some(plans) = this.plans.as_ref() else {
            return Err(OperatorError::Backend {
                what: format!("the assignment to '{}'", target.name()),
                reason: "its evaluator plans were not made (an internal error); please report it"
                    .into(),
            });
        };
        Ok(Staged {
            prepared: this,
            plans,
            main_parameters: this.main.lowered.parameter_values(),
            masked_parameters: if this.ghost_fill.is_some() {
                Masked::new()
            } else {
                this.masked
                    .iter()
                    .map(|m| m.lowered.parameter_values())
                    .collect()
            },
            main_bound,
            masked_bound,
            main_data,
            masked_data,
            target_data,
        })
    }

    /// The evaluator's plans for the kernels' regions, made with the first
    /// data bound after preparing (they depend only on what a run checks
    /// again: the layouts of the target and the fields).
    fn make_plans(&self, main_data: &[FieldData<'_>], masked_data: &[Data<'_>]) -> Plans {
        let patch = self.layout.patch();
        let main = &self.main;
        let plan = |checked: &Checked, data: &[FieldData<'_>], region: &IndexBox| {
            Plan::new(
                &checked.lowered.kernel,
                checked.native.is_some(),
                data,
                patch,
                region,
            )
        };
        let mut epilogues = Vec::with_capacity(self.fused);
        let mut rest = Vec::with_capacity(self.masked.len());
        for (i, (m, data)) in self.masked.iter().zip(masked_data).enumerate() {
            let regions: SmallVec<[IndexBox; 2]> = if i < self.fused {
                epilogues.push(plan(m, data, &rows_of(&m.region, &main.region)));
                outside_rows(&m.region, &main.region).into_iter().collect()
            } else {
                smallvec::smallvec![m.region]
            };
            rest.push(
                regions
                    .into_iter()
                    .map(|region| (region, plan(m, data, &region)))
                    .collect(),
            );
        }
        Plans {
            main: plan(main, main_data, &main.region),
            epilogues,
            rest,
        }
    }
}

/// The part of `region` in the rows (y, z) of `main`: where a row epilogue
/// writes.
fn rows_of(region: &IndexBox, main: &IndexBox) -> IndexBox {
    let mut inside = *region;
    for axis in 1..3 {
        inside.lo[axis] = inside.lo[axis].max(main.lo[axis]);
        inside.hi[axis] = inside.hi[axis].min(main.hi[axis]);
    }
    inside
}

/// The evaluator's plans of a prepared assignment.
#[derive(Debug, Clone)]
struct Plans {
    main: Plan,
    /// Per fused masked assignment: its plan as a row epilogue.
    epilogues: Vec<Plan>,
    /// Per masked assignment: the regions it runs over after the main
    /// kernel (outside the epilogues' rows, or its whole box), with plans.
    rest: Vec<Vec<(IndexBox, Plan)>>,
}

/// The checked kernels of `root` and `then` for a target with `layout`,
/// and how many masked assignments fuse as row epilogues.
fn check_all(
    target: &TargetShape<'_>,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    options: &AssignOptions,
    then: &[MaskedAssignment],
) -> OperatorResult<(Checked, Vec<Checked>, usize)> {
    // Only the main kernel's values are watched (`check_finite`): a
    // kernel generated without the test is cheaper where nobody watches.
    let main_check = if options.check_finite {
        FiniteCheck::Checked
    } else {
        FiniteCheck::Unchecked
    };
    let main = Checked::new(
        target,
        root,
        fields,
        options.region,
        options.backend,
        main_check,
    )?;
    // Masked assignments that will run as a ghost fill are checked as
    // usual but not compiled: their kernels only ever run on a GPU.
    let boxes: Vec<IndexBox> = then.iter().map(|(b, _)| *b).collect();
    let masked_backend = if target.layout.allocated().len() <= ghost_fill::MAX_POINTS
        && GhostFill::recognise(then, &boxes, target.leaf).is_some()
    {
        Backend::Interpreter
    } else {
        options.backend
    };
    let mut masked = Vec::with_capacity(then.len());
    for (region, node) in then {
        masked.push(Checked::new(
            target,
            node,
            fields,
            Region::Box(*region),
            masked_backend,
            FiniteCheck::Unchecked,
        )?);
    }
    let fused = masked
        .iter()
        .take_while(|m| is_row_epilogue(&main.region, &m.lowered, target.leaf, &m.region))
        .count();
    Ok((main, masked, fused))
}

/// The evaluator's view of `bound`; the target's slots read through raw
/// pointers into `target`.
fn field_data<'f>(bound: &[Binding<'f>], target: &TargetData, layout: &FieldLayout) -> Data<'f> {
    bound
        .iter()
        .map(|b| match *b {
            Binding::Field(f, data) => FieldData::new(data, f.layout()),
            // SAFETY: the target's storage outlives the evaluation (the
            // caller holds its `&mut`), and only raw pointers derived from
            // it touch it while the kernels run.
            Binding::Target => unsafe { FieldData::from_raw(target.pointer, target.len, layout) },
        })
        .collect()
}

/// A prepared assignment bound to its target and fields, ready to run.
pub(crate) struct Staged<'a> {
    pub(crate) prepared: &'a PreparedAssignment,
    /// The evaluator's plans of `prepared`.
    plans: &'a Plans,
    pub(crate) main_bound: Bound<'a>,
    pub(crate) masked_bound: Masked<Bound<'a>>,
    pub(crate) main_data: Data<'a>,
    pub(crate) main_parameters: ParameterValues,
    masked_data: Masked<Data<'a>>,
    masked_parameters: Masked<ParameterValues>,
    pub(crate) target_data: TargetData,
}

impl Staged<'_> {
    /// The row epilogues: the leading masked assignments that fuse, over
    /// their points in the main region's rows.
    pub(crate) fn epilogues(&self) -> Masked<Epilogue<'_>> {
        let masked = &self.prepared.masked;
        let plans = self.plans();
        (0..self.prepared.fused)
            .map(|i| Epilogue {
                kernel: &masked[i].lowered.kernel,
                native: masked[i].native.as_deref(),
                fields: &self.masked_data[i],
                parameters: &self.masked_parameters[i],
                region: rows_of(&masked[i].region, &self.prepared.main.region),
                plan: &plans.epilogues[i],
                fill: self.prepared.masked_fills.get(i).copied().flatten(),
            })
            .collect()
    }

    /// The plans (made by [`PreparedAssignment::stage`]).
    fn plans(&self) -> &Plans {
        self.plans
    }

    /// The main kernel's plan.
    pub(crate) fn main_plan(&self) -> &Plan {
        &self.plans().main
    }

    /// After the main kernel ran: the error for the first value that is
    /// not finite (`non_finite`), else the masked assignments' points the
    /// epilogues did not write.
    pub(crate) fn finish<L: Location>(
        self,
        target: &SpatialField<L, f64>,
        non_finite: Option<[isize; 3]>,
        parallelism: Parallelism,
    ) -> OperatorResult<()> {
        let prepared = self.prepared;
        if let Some(point) = non_finite {
            return Err(OperatorError::NotFinite {
                target: target.name().to_string(),
                point,
                value: target
                    .values()
                    .ok()
                    .and_then(|v| v.get(prepared.layout.linear_index(point)).copied())
                    .unwrap_or(f64::NAN),
            });
        }
        if let Some(fill) = &prepared.ghost_fill {
            // SAFETY: `target_data` is the target's memory, borrowed
            // mutably for this call with nothing else touching it now that
            // the main kernel is done; `stage` checked every masked
            // assignment's box and reads against this target's layout.
            unsafe { fill.run(self.target_data) };
            return Ok(());
        }
        let plans = self.plans();
        for (i, m) in prepared.masked.iter().enumerate() {
            if let Some(fill) = prepared.masked_fills.get(i).copied().flatten() {
                for (region, _) in &plans.rest[i] {
                    // SAFETY: as for the ghost fill above: `stage` checked
                    // the masked assignment's box and reads against this
                    // target, and `point_fill` refused a fill reading its
                    // own box.
                    unsafe { fill.run(self.target_data, region) };
                }
                continue;
            }
            for (region, plan) in &plans.rest[i] {
                // SAFETY: as for the main kernel in `run`: `stage` checked
                // each masked assignment's box and reads against the same
                // target and fields, and `plan` is its plan for `region`.
                unsafe {
                    cpu::assign(
                        &m.lowered.kernel,
                        m.native.as_deref(),
                        &self.masked_data[i],
                        &self.masked_parameters[i],
                        prepared.layout.patch(),
                        self.target_data,
                        *region,
                        plan,
                        parallelism,
                        false,
                        &[],
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Expr, field, shift};
    use watershed_fields::{CellCentre, Device, Grid, Patch, XFace};

    /// Deterministic values with both signs, some equal to the conditions'
    /// constants (so `c - t` meets `t == c`).
    fn fill_values<L: Location>(f: &mut SpatialField<L, f64>, seed: u64) {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        for v in f.values_mut().unwrap() {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (state >> 11) as f64 / (1u64 << 53) as f64;
            *v = if r < 0.1 { 0.75 } else { 4.0 * r - 2.0 };
        }
    }

    /// Boundary-condition shapes on every side of `layout`, ghost layer by
    /// ghost layer: Dirichlet, Neumann, periodic images and a face value,
    /// each reading the target through leaf `me`.
    fn conditions<L: Location>(layout: &FieldLayout, me: u64) -> Vec<MaskedAssignment> {
        let t = || Expr::<L>::symbol(me, "t");
        let n = layout.interior_extent().map(|e| e as isize);
        let ghosts = layout.ghosts();
        let mut out = Vec::new();
        for axis in 0..3 {
            if n[axis] <= 1 {
                continue;
            }
            for (plus, layers) in [(false, ghosts.minus[axis]), (true, ghosts.plus[axis])] {
                let (first, outward) = if plus { (n[axis] - 1, 1) } else { (0, -1) };
                for l in 1..=layers as isize {
                    let ghost = first + outward * l;
                    let mut slab = layout.allocated();
                    slab.lo[axis] = ghost;
                    slab.hi[axis] = ghost + 1;
                    let mut to = [0; 3];
                    to[axis] = first - outward * (l - 1) - ghost;
                    let value = match (axis, plus) {
                        (0, false) => Expr::constant(1.5) - shift(t(), to),
                        (0, true) => shift(t(), to) + Expr::constant(-0.25),
                        (1, _) => {
                            let mut image = [0; 3];
                            image[1] = if plus {
                                l - 1 - ghost
                            } else {
                                n[1] - l - ghost
                            };
                            shift(t(), image)
                        }
                        _ => Expr::constant(0.75) - shift(t(), to),
                    };
                    out.push((slab, value.node().clone()));
                }
            }
        }
        // A face value last (a Dirichlet boundary face).
        let mut face = layout.allocated();
        face.lo[0] = 0;
        face.hi[0] = 1;
        out.push((face, Expr::<L>::constant(0.75).node().clone()));
        out
    }

    /// A field named `name` on `patch` holding [`fill_values`]`(seed)`.
    fn filled<L: Location>(name: &str, patch: &Patch, seed: u64) -> SpatialField<L, f64> {
        let mut f = SpatialField::<L>::new(name, patch, Device::Cpu).unwrap();
        fill_values(&mut f, seed);
        f
    }

    /// Runs an update then `conditions` with the ghost fill and through
    /// the general path; the fields must be equal to the bit.
    fn same_bits<L: Location>(cells: [usize; 3], ghosts: usize) {
        let patch = Grid::new(cells, [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(ghosts);
        let source = filled::<L>("s", &patch, 3);
        let mut fast = filled::<L>("t", &patch, 5);
        let mut general = filled::<L>("t", &patch, 5);
        let me = fast.id();
        let then = conditions::<L>(fast.layout(), me);
        let root = (field(&source) * 2.0).node().clone();
        let options = AssignOptions::default();
        let mut with_fill =
            PreparedAssignment::new(&fast, me, &root, &[&source], options, &then).unwrap();
        assert!(with_fill.ghost_fill.is_some(), "{cells:?}: not recognised");
        let mut without = with_fill.clone();
        without.ghost_fill = None;
        with_fill.run(&mut fast, &[&source]).unwrap();
        without.run(&mut general, &[&source]).unwrap();
        let (a, b) = (fast.values().unwrap(), general.values().unwrap());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(x.to_bits() == y.to_bits(), "{cells:?} at {i}: {x} vs {y}");
        }
    }

    #[test]
    fn a_ghost_fill_gives_the_general_paths_bits() {
        same_bits::<CellCentre>([6, 5, 1], 1);
        same_bits::<CellCentre>([5, 4, 3], 2);
        same_bits::<XFace>([6, 4, 1], 1);
    }

    /// On a target too large for the ghost fill: the row epilogues (run
    /// once per plane's rows, `PendingRows`) and the remaining boxes run as
    /// point fills, and must give the bits of the masked assignments'
    /// kernels, as epilogues and as separate passes after the main kernel,
    /// serial and on 2 and 3 threads.
    fn same_bits_as_point_fills<L: Location>(cells: [usize; 3], threads: usize) {
        let patch = Grid::new(cells, [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let source = filled::<L>("s", &patch, 7);
        let mut fast = filled::<L>("t", &patch, 11);
        let mut general = filled::<L>("t", &patch, 11);
        let me = fast.id();
        let then = conditions::<L>(fast.layout(), me);
        let root = (field(&source) * 2.0 - 1.0).node().clone();
        let options = AssignOptions {
            parallelism: Parallelism::Threads(threads),
            ..Default::default()
        };
        let mut with_fills =
            PreparedAssignment::new(&fast, me, &root, &[&source], options, &then).unwrap();
        assert!(with_fills.ghost_fill.is_none(), "{cells:?}: small target");
        assert!(with_fills.fused >= 2, "{cells:?}: no row epilogue");
        assert_eq!(with_fills.masked_fills.len(), then.len());
        assert!(with_fills.masked_fills.iter().all(Option::is_some));
        let mut kernels = with_fills.clone();
        kernels.masked_fills = vec![None; then.len()];
        // The reference: no row epilogues, every masked assignment's kernel
        // after the main kernel, in order.
        let mut separate = kernels.clone();
        separate.fused = 0;
        let mut passes = filled::<L>("t", &patch, 11);
        with_fills.run(&mut fast, &[&source]).unwrap();
        kernels.run(&mut general, &[&source]).unwrap();
        separate.run(&mut passes, &[&source]).unwrap();
        let (a, b, c) = (
            fast.values().unwrap(),
            general.values().unwrap(),
            passes.values().unwrap(),
        );
        let mut differ = 0;
        for (i, ((x, y), z)) in a.iter().zip(b).zip(c).enumerate() {
            assert!(x.to_bits() == y.to_bits(), "{cells:?} at {i}: {x} vs {y}");
            assert!(
                x.to_bits() == z.to_bits(),
                "{cells:?} at {i}: {x} vs {z} (separate passes)"
            );
            differ += usize::from(x.to_bits() != 0.75f64.to_bits());
        }
        assert!(differ > a.len() / 2, "the values are not the conditions'");
    }

    #[test]
    fn point_fills_give_the_masked_kernels_bits_on_large_targets() {
        // 72 x 66 x 62 allocated points: above the ghost fill's limit.
        same_bits_as_point_fills::<CellCentre>([70, 64, 60], 1);
        same_bits_as_point_fills::<CellCentre>([70, 64, 60], 3);
        same_bits_as_point_fills::<XFace>([69, 64, 60], 2);
    }

    #[test]
    fn only_copies_and_mirrors_of_the_target_become_a_ghost_fill() {
        let patch = Grid::new([6, 6, 1], [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let t = SpatialField::<CellCentre>::new("t", &patch, Device::Cpu).unwrap();
        let other = SpatialField::<CellCentre>::new("o", &patch, Device::Cpu).unwrap();
        let me = t.id();
        let mut slab = t.layout().allocated();
        slab.lo[0] = -1;
        slab.hi[0] = 0;
        let mirror = shift(Expr::<CellCentre>::symbol(me, "t"), [1, 0, 0]);
        let regions = [slab];
        let shaped = |e: Expr<'_, CellCentre>| {
            GhostFill::recognise(&[(slab, e.node().clone())], &regions, me)
        };
        assert!(shaped(Expr::constant(2.0) - mirror.clone()).is_some());
        assert!(shaped(mirror.clone() + Expr::constant(2.0)).is_some());
        // Another field, a product, a read inside the box written: general path.
        assert!(shaped(shift(field(&other), [1, 0, 0])).is_none());
        assert!(shaped(mirror.clone() * 2.0).is_none());
        assert!(shaped(shift(Expr::<CellCentre>::symbol(me, "t"), [0, 1, 0])).is_none());
    }

    /// Generated kernels test what they write only where the assignment
    /// watches (`check_finite`); an unchecked kernel under a watching
    /// assignment (not made by `new`, but the evaluator's safety net) still
    /// reports the first NaN, found by scanning the rows it wrote.
    #[test]
    fn only_watched_assignments_get_the_finiteness_test_and_a_missing_test_is_scanned_for() {
        if crate::codegen::c_compiler().is_err() {
            eprintln!("skipped: no C compiler");
            return;
        }
        let patch = Grid::new([9, 7, 5], [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let mut source = SpatialField::<CellCentre>::new("source", &patch, Device::Cpu).unwrap();
        fill_values(&mut source, 7);
        let bad = [4, 3, 2];
        let at = source.layout().linear_index(bad);
        source.values_mut().unwrap()[at] = f64::NAN;
        let mut target = SpatialField::<CellCentre>::new("target", &patch, Device::Cpu).unwrap();
        let me = target.id();
        let root = (field(&source) * 2.0 + 1.0).node().clone();
        let prepare = |check_finite: bool| {
            let options = AssignOptions {
                backend: Backend::C,
                check_finite,
                ..Default::default()
            };
            PreparedAssignment::new(&target, me, &root, &[&source], options, &[]).unwrap()
        };
        let native = |p: &PreparedAssignment| p.main.native.clone().expect("a compiled kernel");
        let unwatched = prepare(false);
        assert!(!native(&unwatched).checks_finite());
        let mut watched = prepare(true);
        assert!(native(&watched).checks_finite());
        let nan_at = |result: OperatorResult<()>| match result {
            Err(OperatorError::NotFinite { target, point, .. }) => (target, point),
            other => panic!("expected NotFinite, got {other:?}"),
        };
        assert_eq!(
            nan_at(watched.run(&mut target, &[&source])),
            ("target".to_string(), bad)
        );
        // The same assignment given the unchecked kernel.
        watched.main.native = unwatched.main.native.clone();
        assert_eq!(
            nan_at(watched.run(&mut target, &[&source])),
            ("target".to_string(), bad)
        );
        // Without watching, the NaN is written and no error is raised.
        let mut unwatched = unwatched;
        unwatched.run(&mut target, &[&source]).unwrap();
        let written = target.values().unwrap()[target.layout().linear_index(bad)];
        assert!(written.is_nan());
    }
}
