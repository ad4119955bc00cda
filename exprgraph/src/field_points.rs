//! A persistent field read and written where it lives, without moving
//! it off its device: what a halo exchange and the hand-offs between the
//! graphs of a decomposed solver need of graphs whose nodes run on a GPU.
//!
//! [`ExpressionGraph::with_field`] makes the field's CPU copy current,
//! which for a field on a GPU copies the whole field to the host, and
//! [`ExpressionGraph::with_field_mut`] makes the CPU copy the active one,
//! so that the next GPU node copies the whole field back. An exchange
//! reads and writes only the field's rim. [`ExpressionGraph::read_points`]
//! and [`ExpressionGraph::write_points`] move only those points: from the
//! host copy when it is current, else gathered and scattered on the GPU
//! that holds the field ([`watershed_operators::gpu_points`]), whose
//! location stays the active one; [`ExpressionGraph::copy_points_from`]
//! copies points from another graph's fields (the seams between patches),
//! on their GPU when both live on one. [`ExpressionGraph::copy_field_from`]
//! copies a whole field of another graph on the device where it is
//! current ([`SpatialField::copy_from`]): a field handed from one graph
//! on a GPU to another stays on that GPU.

use crate::error::{GraphError, GraphResult};
use crate::graph::{ExpressionGraph, FieldAccess};
use crate::store::{AnyField, GraphLocation};
use crate::tag::Tag;
use std::sync::atomic::Ordering;
use std::sync::{RwLockReadGuard, RwLockWriteGuard};
use watershed_fields::{Device, SpatialField};
use watershed_operators::gpu_points::{
    PointBatch, copy_points_on_gpu, gather_points_on_gpu, scatter_points_on_gpu,
};

impl ExpressionGraph {
    /// Whether the persistent field `tag` is active on a GPU (its writes
    /// go there): a point access then runs on that GPU.
    pub fn field_lives_on_gpu(&self, tag: &Tag) -> GraphResult<bool> {
        let slot = self.slot(tag, "read")?;
        Ok(self.state.store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|field| field.active_device() != Device::Cpu))
    }

    /// Copies the values at linear indices `points` of the persistent
    /// fields `tags` (of location `L`) into `out`, field after field
    /// (`points.len()` values each, in point order), without moving the
    /// fields: from each one's CPU copy when that is current, else
    /// gathered on the GPU holding it (only these values cross to the
    /// host; the fields on one GPU in one copy), after what `batch`
    /// enqueued, which this finishes. Errors like
    /// [`ExpressionGraph::with_field`], and for a tag given twice, a point
    /// outside the fields or an `out` of another length.
    ///
    /// ```
    /// use watershed_exprgraph::{ExpressionGraph, Factory, GraphOptions, Tag};
    /// use watershed_fields::{CellCentre, Grid, LocationKind};
    /// use watershed_operators::gpu_points::PointBatch;
    /// let (a, b) = (Tag::none("a"), Tag::none("b"));
    /// let mut factory = Factory::new();
    /// factory.placeholder(a.clone(), LocationKind::CellCentre)?;
    /// factory.placeholder(b.clone(), LocationKind::CellCentre)?;
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let both = [a.clone(), b.clone()];
    /// let graph = ExpressionGraph::build(&factory, &both, &patch, &GraphOptions::default())?;
    /// let mut batch = PointBatch::new();
    /// // Field after field: a at points 0 and 7, then b at them.
    /// graph.write_points::<CellCentre>(&mut batch, &both, &[0, 7], &[2.5, -1.0, 4.0, 8.0])?;
    /// batch.finish()?;
    /// let mut out = [0.0; 4];
    /// graph.read_points::<CellCentre>(&mut batch, &both, &[7, 0], &mut out)?;
    /// assert_eq!(out, [-1.0, 2.5, 8.0, 4.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_points<L: GraphLocation>(
        &self,
        batch: &mut PointBatch,
        tags: &[Tag],
        points: &[usize],
        out: &mut [f64],
    ) -> GraphResult<()> {
        let slots = self.distinct_slots(tags, "read")?;
        check_lengths(tags, points.len(), out.len())?;
        self.state.allocate_storage(&self.plan)?;
        let _execution = self.waits_for_execution();
        let _access = FieldAccess::enter(self);
        let guards = self.read_slots(&slots);
        let fields = typed_all::<L>(&guards, tags)?;
        let n = points.len();
        if let Some(device) = one_gpu(
            fields
                .iter()
                .map(|f| (f.active_device(), f.is_valid_on(Device::Cpu))),
        ) {
            let buffers = fields
                .iter()
                .map(|f| f.gpu_buffer(device))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(gather_points_on_gpu(
                batch,
                &buffers,
                points,
                out,
                &names(tags),
            )?);
        }
        for ((field, tag), out) in fields.iter().zip(tags).zip(out.chunks_mut(n.max(1))) {
            if field.is_valid_on(Device::Cpu) {
                let values = field.values()?;
                for (slot, &point) in out.iter_mut().zip(points) {
                    *slot = *values
                        .get(point)
                        .ok_or_else(|| outside(tag, point, values.len()))?;
                }
            } else {
                let buffer = field.gpu_buffer(field.active_device())?;
                gather_points_on_gpu(batch, &[buffer], points, out, field.name())?;
            }
        }
        Ok(())
    }

    /// Writes `values` (field after field, `points.len()` values each, in
    /// point order) at linear indices `points` of the persistent fields
    /// `tags` (of location `L`) where each is active: on the host, or
    /// scattered on the GPU holding it (only these values cross from the
    /// host, the fields on one GPU in one copy; the fields stay there),
    /// enqueued in `batch`: finish it before anything else reads the
    /// fields. Every other copy of a field becomes stale, as after any
    /// write.
    /// Errors like [`ExpressionGraph::with_field_mut`], and for a tag
    /// given twice, a point outside the fields or `values` of another
    /// length.
    pub fn write_points<L: GraphLocation>(
        &self,
        batch: &mut PointBatch,
        tags: &[Tag],
        points: &[usize],
        values: &[f64],
    ) -> GraphResult<()> {
        let slots = self.distinct_slots(tags, "written")?;
        check_lengths(tags, points.len(), values.len())?;
        self.state.allocate_storage(&self.plan)?;
        let _execution = self.waits_for_execution();
        let _access = FieldAccess::enter(self);
        let mut guards = self.write_slots(&slots);
        let mut fields = typed_all_mut::<L>(&mut guards, tags)?;
        let n = points.len();
        if let Some(device) = one_gpu(fields.iter().map(|f| (f.active_device(), false))) {
            let buffers = fields
                .iter_mut()
                .map(|f| f.gpu_buffer_mut(device))
                .collect::<Result<Vec<_>, _>>()?;
            scatter_points_on_gpu(batch, &buffers, points, values, &names(tags))?;
        } else {
            for ((field, tag), values) in fields.iter_mut().zip(tags).zip(values.chunks(n.max(1))) {
                match field.active_device() {
                    Device::Cpu => {
                        let data = field.values_mut()?;
                        let len = data.len();
                        for (&point, &value) in points.iter().zip(values) {
                            *data
                                .get_mut(point)
                                .ok_or_else(|| outside(tag, point, len))? = value;
                        }
                    }
                    device => {
                        let name = field.name().to_string();
                        let buffer = field.gpu_buffer_mut(device)?;
                        scatter_points_on_gpu(batch, &[buffer], points, values, &name)?;
                    }
                }
            }
        }
        self.mark_written(&slots);
        Ok(())
    }

    /// Copies, for each of `tags` (location `L`), the values at linear
    /// indices `points` of graph `from`'s field to linear indices `at` of
    /// this graph's field (`from` may be this graph when no point read is
    /// among those written: a patch's own periodic images). Where every
    /// field lives on one GPU, without a current host copy of a source,
    /// the copy runs there, enqueued in `batch` (finish it before anything
    /// else reads the fields), and nothing crosses to the host; otherwise
    /// the values go through [`Self::read_points`] and
    /// [`Self::write_points`]. Errors as those do, and for lists of
    /// different lengths.
    pub fn copy_points_from<L: GraphLocation>(
        &self,
        batch: &mut PointBatch,
        tags: &[Tag],
        at: &[usize],
        from: &ExpressionGraph,
        points: &[usize],
    ) -> GraphResult<()> {
        if at.len() != points.len() {
            return check_lengths(tags, at.len(), points.len() * tags.len());
        }
        if std::ptr::eq(self, from) {
            return self.copy_points_within::<L>(batch, tags, at, points);
        }
        let sources = from.distinct_slots(tags, "read")?;
        let targets = self.distinct_slots(tags, "written")?;
        from.state.allocate_storage(&from.plan)?;
        self.state.allocate_storage(&self.plan)?;
        let on_one_gpu = {
            let _source_execution = from.waits_for_execution();
            let _source_access = FieldAccess::enter(from);
            let _execution = self.waits_for_execution();
            let _access = FieldAccess::enter(self);
            let source_guards = from.read_slots(&sources);
            let mut guards = self.write_slots(&targets);
            let source_fields = typed_all::<L>(&source_guards, tags)?;
            let mut fields = typed_all_mut::<L>(&mut guards, tags)?;
            let devices = source_fields
                .iter()
                .map(|f| (f.active_device(), f.is_valid_on(Device::Cpu)))
                .chain(fields.iter().map(|f| (f.active_device(), false)));
            match one_gpu(devices) {
                Some(device) => {
                    let read = source_fields
                        .iter()
                        .map(|f| f.gpu_buffer(device))
                        .collect::<Result<Vec<_>, _>>()?;
                    let written = fields
                        .iter_mut()
                        .map(|f| f.gpu_buffer_mut(device))
                        .collect::<Result<Vec<_>, _>>()?;
                    copy_points_on_gpu(batch, &read, points, &written, at, &names(tags))?;
                    true
                }
                None => false,
            }
        };
        if on_one_gpu {
            self.mark_written(&targets);
            return Ok(());
        }
        let mut values = vec![0.0; points.len() * tags.len()];
        from.read_points::<L>(batch, tags, points, &mut values)?;
        self.write_points::<L>(batch, tags, at, &values)
    }

    /// [`Self::copy_points_from`] within this graph's fields.
    fn copy_points_within<L: GraphLocation>(
        &self,
        batch: &mut PointBatch,
        tags: &[Tag],
        at: &[usize],
        points: &[usize],
    ) -> GraphResult<()> {
        let slots = self.distinct_slots(tags, "written")?;
        self.state.allocate_storage(&self.plan)?;
        let _execution = self.waits_for_execution();
        let _access = FieldAccess::enter(self);
        let mut guards = self.write_slots(&slots);
        let mut fields = typed_all_mut::<L>(&mut guards, tags)?;
        match one_gpu(fields.iter().map(|f| (f.active_device(), false))) {
            Some(device) => {
                let buffers = fields
                    .iter_mut()
                    .map(|f| f.gpu_buffer_mut(device))
                    .collect::<Result<Vec<_>, _>>()?;
                copy_points_on_gpu(batch, &buffers, points, &buffers, at, &names(tags))?;
            }
            None => {
                for (field, tag) in fields.iter_mut().zip(tags) {
                    if field.active_device() != Device::Cpu {
                        field.validate_on(Device::Cpu)?;
                        field.set_active(Device::Cpu)?;
                    }
                    let data = field.values_mut()?;
                    let len = data.len();
                    for (&to, &from) in at.iter().zip(points) {
                        let value = *data.get(from).ok_or_else(|| outside(tag, from, len))?;
                        *data.get_mut(to).ok_or_else(|| outside(tag, to, len))? = value;
                    }
                }
            }
        }
        self.mark_written(&slots);
        Ok(())
    }

    /// Runs `f` on the persistent field `tag` (of location `L`) where it
    /// lives, to read it without moving it: `f` finds the field's
    /// locations as they are (its active one on a GPU, say; the host copy
    /// may be stale there), so it reads where the field is valid
    /// ([`SpatialField::is_valid_on`]). For work that runs on the field's
    /// GPU, such as a copy into a solver's field there.
    ///
    /// ```
    /// use watershed_exprgraph::{ExpressionGraph, Factory, GraphOptions, Tag};
    /// use watershed_fields::{CellCentre, Device, Grid, LocationKind};
    /// let phi = Tag::none("phi");
    /// let mut factory = Factory::new();
    /// factory.placeholder(phi.clone(), LocationKind::CellCentre)?;
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let roots = [phi.clone()];
    /// let graph = ExpressionGraph::build(&factory, &roots, &patch, &GraphOptions::default())?;
    /// graph.fill_field::<CellCentre>(&phi, 2.5)?;
    /// let (on, first) = graph.with_field_in_place::<CellCentre, _>(&phi, |field| {
    ///     (field.active_device(), field.values().map(|v| v[0]))
    /// })?;
    /// assert_eq!((on, first?), (Device::Cpu, 2.5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_field_in_place<L: GraphLocation, R>(
        &self,
        tag: &Tag,
        f: impl FnOnce(&SpatialField<L>) -> R,
    ) -> GraphResult<R> {
        let slot = self.slot(tag, "read")?;
        self.state.allocate_storage(&self.plan)?;
        let _execution = self.waits_for_execution();
        let _access = FieldAccess::enter(self);
        let guard = self.state.store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner());
        Ok(f(typed::<L>(guard.as_ref(), tag)?))
    }

    /// Runs `f` on the persistent field `tag` (of location `L`) where it
    /// lives, without moving it: `f` finds the field's locations as they
    /// are (its active one on a GPU, say) and must write only through
    /// the active one (`gpu_buffer_mut` there, or `values_mut` on the
    /// host). The field counts as written. For work that runs on the
    /// field's GPU, such as a condition refilled there after an exchange.
    pub fn with_field_in_place_mut<L: GraphLocation, R>(
        &self,
        tag: &Tag,
        f: impl FnOnce(&mut SpatialField<L>) -> R,
    ) -> GraphResult<R> {
        let slot = self.slot(tag, "written")?;
        self.state.allocate_storage(&self.plan)?;
        let _execution = self.waits_for_execution();
        let _access = FieldAccess::enter(self);
        let mut guard = self.state.store.slots[slot]
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let result = f(typed_mut::<L>(guard.as_mut(), tag)?);
        self.mark_written(&[slot]);
        Ok(result)
    }

    /// Makes the persistent field `into` (of location `L`) of this graph
    /// a copy of the persistent field `tag` of graph `from` (on the same
    /// patch), copied where `tag` is current ([`SpatialField::copy_from`]):
    /// a field on a GPU is copied on that GPU and stays there. Errors
    /// like [`ExpressionGraph::with_field_mut`], for layouts that differ
    /// (naming both fields), and for a field copied onto itself.
    pub fn copy_field_from<L: GraphLocation>(
        &self,
        into: &Tag,
        from: &ExpressionGraph,
        tag: &Tag,
    ) -> GraphResult<()> {
        let (source_slot, slot) = (from.slot(tag, "read")?, self.slot(into, "written")?);
        if std::ptr::eq(self, from) && source_slot == slot {
            return Err(GraphError::FieldUnavailable {
                tag: into.clone(),
                expression: "the caller".into(),
                reason: "a field cannot be copied onto itself".into(),
            });
        }
        from.state.allocate_storage(&from.plan)?;
        self.state.allocate_storage(&self.plan)?;
        let _source_execution = from.waits_for_execution();
        let _source_access = FieldAccess::enter(from);
        let _execution = self.waits_for_execution();
        let _access = FieldAccess::enter(self);
        let source_guards = from.read_slots(&[source_slot]);
        let mut guards = self.write_slots(&[slot]);
        let source = typed_all::<L>(&source_guards, std::slice::from_ref(tag))?;
        let target = typed_all_mut::<L>(&mut guards, std::slice::from_ref(into))?;
        for (target, source) in target.into_iter().zip(source) {
            target.copy_from(source)?;
        }
        self.mark_written(&[slot]);
        Ok(())
    }

    /// Read locks on `slots`, in turn.
    fn read_slots(&self, slots: &[usize]) -> Vec<RwLockReadGuard<'_, Option<AnyField>>> {
        slots
            .iter()
            .map(|&slot| {
                self.state.store.slots[slot]
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
            })
            .collect()
    }

    /// Write locks on `slots`, in turn (distinct slots: a slot locked
    /// twice would wait for itself).
    fn write_slots(&self, slots: &[usize]) -> Vec<RwLockWriteGuard<'_, Option<AnyField>>> {
        slots
            .iter()
            .map(|&slot| {
                self.state.store.slots[slot]
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
            })
            .collect()
    }

    /// Marks the fields in `slots` provided and written (their versions
    /// move on), as after any write.
    fn mark_written(&self, slots: &[usize]) {
        for &slot in slots {
            self.state.provided[slot].store(true, Ordering::Release);
            self.state.versions[slot].fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The slots of `tags`, refusing a tag given twice (its field would
    /// be locked twice).
    fn distinct_slots(&self, tags: &[Tag], what: &str) -> GraphResult<Vec<usize>> {
        let mut slots = Vec::with_capacity(tags.len());
        for tag in tags {
            let slot = self.slot(tag, what)?;
            if slots.contains(&slot) {
                return Err(GraphError::FieldUnavailable {
                    tag: tag.clone(),
                    expression: "the caller".into(),
                    reason: "the tag is given twice; give each field once".into(),
                });
            }
            slots.push(slot);
        }
        Ok(slots)
    }
}

/// The GPU every field is active on, when all are on one GPU and none
/// has a current host copy (`(active device, host copy current)` per
/// field): their points then move in one batch there.
fn one_gpu(fields: impl Iterator<Item = (Device, bool)>) -> Option<Device> {
    let mut one = None;
    for (device, on_host) in fields {
        if on_host || device == Device::Cpu || one.is_some_and(|d| d != device) {
            return None;
        }
        one = Some(device);
    }
    one
}

/// The fields' names for an error, e.g. `phi0, phi1`.
fn names(tags: &[Tag]) -> String {
    tags.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The field of location `L` in a slot, or the error of a scratch field
/// or of another location.
fn typed<'f, L: GraphLocation>(
    field: Option<&'f AnyField>,
    tag: &Tag,
) -> GraphResult<&'f SpatialField<L>> {
    let field = field.ok_or_else(|| scratch(tag))?;
    L::get(field).ok_or(GraphError::WrongLocation {
        tag: tag.clone(),
        actual: field.kind(),
        requested: L::KIND,
    })
}

/// [`typed`], mutably.
fn typed_mut<'f, L: GraphLocation>(
    field: Option<&'f mut AnyField>,
    tag: &Tag,
) -> GraphResult<&'f mut SpatialField<L>> {
    let field = field.ok_or_else(|| scratch(tag))?;
    let actual = field.kind();
    L::get_mut(field).ok_or(GraphError::WrongLocation {
        tag: tag.clone(),
        actual,
        requested: L::KIND,
    })
}

/// The fields of location `L` behind `guards`, one per tag of `tags`.
fn typed_all<'f, L: GraphLocation>(
    guards: &'f [RwLockReadGuard<'_, Option<AnyField>>],
    tags: &[Tag],
) -> GraphResult<Vec<&'f SpatialField<L>>> {
    guards
        .iter()
        .zip(tags)
        .map(|(guard, tag)| typed::<L>(guard.as_ref(), tag))
        .collect()
}

/// [`typed_all`], mutably.
fn typed_all_mut<'f, L: GraphLocation>(
    guards: &'f mut [RwLockWriteGuard<'_, Option<AnyField>>],
    tags: &[Tag],
) -> GraphResult<Vec<&'f mut SpatialField<L>>> {
    guards
        .iter_mut()
        .zip(tags)
        .map(|(guard, tag)| typed_mut::<L>(guard.as_mut(), tag))
        .collect()
}

/// The error for a point access to a scratch field.
fn scratch(tag: &Tag) -> GraphError {
    GraphError::FieldUnavailable {
        tag: tag.clone(),
        expression: "the caller".into(),
        reason: "it is a scratch field, alive only while the graph executes; flag it persistent to keep it".into(),
    }
}

/// Refuses `values` values for `points` points of each of `tags`.
fn check_lengths(tags: &[Tag], points: usize, values: usize) -> GraphResult<()> {
    let Some(first) = tags.first() else {
        return Ok(());
    };
    if points.checked_mul(tags.len()) == Some(values) {
        return Ok(());
    }
    Err(GraphError::FieldUnavailable {
        tag: first.clone(),
        expression: "the caller".into(),
        reason: format!(
            "{points} point(s) of {} field(s) given with {values} value(s); give one value per point and field",
            tags.len()
        ),
    })
}

/// The error for linear index `point` of a field of `len` points.
fn outside(tag: &Tag, point: usize, len: usize) -> GraphError {
    GraphError::FieldUnavailable {
        tag: tag.clone(),
        expression: "the caller".into(),
        reason: format!(
            "linear index {point} lies outside the field's {len} points; the halo route was made for another layout"
        ),
    }
}
