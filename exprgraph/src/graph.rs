//! The graph users hold: a plan ([`crate::plan`]) with its placement
//! ([`crate::placement`]) and the state of its executions (`state.rs`: the
//! field store and memory pool, statistics, which placeholders were
//! provided, field versions, the adaptive choice and the GPU streams,
//! finiteness watches and step replay). This file builds one, gives access
//! to its fields and answers questions about it; running it is
//! [`crate::scheduler`]'s job.

use crate::error::{GraphError, GraphResult};
use crate::expression::{Expression, ExpressionKind};
use crate::factory::Factory;
use crate::node::{FieldInfo, NodeForm};
use crate::placement::{self, DevicePlan};
use crate::plan::{GraphOptions, GraphPlan};
use crate::state::ExecutionState;
use crate::store::{AnyField, GraphLocation};
use crate::tag::Tag;
use std::sync::atomic::Ordering;
use watershed_fields::{FieldLayout, GhostWidth, IndexBox, LocationKind, MemoryPool, Patch};

/// A graph of expressions set up for repeated execution on one patch.
pub struct ExpressionGraph {
    /// What it computes, in which order, over which boxes.
    pub(crate) plan: GraphPlan,
    /// Placement, copies and stream steps ([`crate::placement`]).
    pub(crate) device_plan: DevicePlan,
    /// Its fields and the state its executions keep ([`crate::state`]).
    pub(crate) state: ExecutionState,
}

thread_local! {
    /// Graphs whose fields the current thread is inside `with_field` of.
    static FIELD_ACCESS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Marks the current thread as inside `with_field` of a graph while alive.
pub(crate) struct FieldAccess(usize);

impl FieldAccess {
    pub(crate) fn enter(graph: &ExpressionGraph) -> Self {
        let id = graph as *const ExpressionGraph as usize;
        FIELD_ACCESS.with(|a| a.borrow_mut().push(id));
        FieldAccess(id)
    }
}

impl Drop for FieldAccess {
    fn drop(&mut self) {
        FIELD_ACCESS.with(|a| {
            let mut a = a.borrow_mut();
            if let Some(p) = a.iter().rposition(|&g| g == self.0) {
                a.remove(p);
            }
        });
    }
}

/// True when the current thread is inside `with_field` of `graph`.
pub(crate) fn in_field_access(graph: &ExpressionGraph) -> bool {
    let id = graph as *const ExpressionGraph as usize;
    FIELD_ACCESS.with(|a| a.borrow().contains(&id))
}

impl std::fmt::Debug for ExpressionGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpressionGraph")
            .field("nodes", &self.node_count())
            .field("edges", &self.edge_count())
            .field("fields", &self.plan.fields.len())
            .finish()
    }
}

impl ExpressionGraph {
    /// Builds the graph that computes `roots` on `patch`.
    pub fn build(
        factory: &Factory,
        roots: &[Tag],
        patch: &Patch,
        options: &GraphOptions,
    ) -> GraphResult<Self> {
        let plan = GraphPlan::build(factory, roots, patch, options)?;
        let state = ExecutionState::new(&plan, options)?;
        let device_plan = placement::all_cpu(&plan);
        let mut graph = ExpressionGraph {
            plan,
            device_plan,
            state,
        };
        if GraphPlan::wants_placement(options) {
            graph.place(options.placement.clone(), options.streams)?;
        }
        Ok(graph)
    }

    /// Number of expression nodes (modifiers included).
    pub fn node_count(&self) -> usize {
        self.plan.nodes.len()
    }

    /// Number of dependency edges between nodes.
    pub fn edge_count(&self) -> usize {
        self.plan.children.iter().map(Vec::len).sum()
    }

    /// How many producers fusion inlined into their consumers.
    pub fn fusions(&self) -> usize {
        self.plan.fusions
    }

    /// How many shared subexpressions common-subexpression elimination
    /// hoisted into nodes of their own ([`crate::passes::cse`]).
    pub fn common_subexpressions(&self) -> usize {
        self.plan.hoisted
    }

    /// How many groups of independent nodes run as one loop nest
    /// ([`crate::passes::horizontal`]).
    pub fn horizontal_groups(&self) -> usize {
        self.plan.groups
    }

    /// The fields of the graph.
    pub fn fields(&self) -> &[FieldInfo] {
        &self.plan.fields
    }

    /// The field named `tag`, if the graph holds it.
    pub fn field_info(&self, tag: &Tag) -> Option<&FieldInfo> {
        self.plan.slot_of.get(tag).map(|&s| &self.plan.fields[s])
    }

    /// Node names in execution (plan) order.
    pub fn execution_order(&self) -> Vec<String> {
        self.plan
            .order
            .iter()
            .map(|&n| self.plan.nodes[n].name.clone())
            .collect()
    }

    /// The memory plan: peaks with and without reuse.
    pub fn memory_plan(&self) -> &crate::analyses::lifetimes::MemoryPlan {
        &self.plan.memory
    }

    /// The graph's pool (its statistics count this graph's fields).
    pub fn pool(&self) -> &MemoryPool {
        &self.state.pool
    }

    /// Whether the graph's persistent fields are allocated: always, unless
    /// it was built with [`GraphOptions::deferred_storage`] and nothing has
    /// read, written, rotated or executed it since.
    ///
    /// ```
    /// use watershed_exprgraph::{ExpressionGraph, Factory, GraphOptions, Tag};
    /// use watershed_fields::{CellCentre, Grid, LocationKind};
    /// let u = Tag::none("u");
    /// let mut factory = Factory::new();
    /// factory.placeholder(u.clone(), LocationKind::CellCentre)?;
    /// let patch = Grid::new([64, 64, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let options = GraphOptions { deferred_storage: true, ..GraphOptions::default() };
    /// let graph = ExpressionGraph::build(&factory, &[u.clone()], &patch, &options)?;
    /// graph.fill_placeholder(&u)?; // a flag: no memory yet
    /// assert!(!graph.holds_storage());
    /// assert_eq!(graph.with_field::<CellCentre, _>(&u, |f| f.values().map(|v| v[0]))??, 0.0);
    /// assert!(graph.holds_storage());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn holds_storage(&self) -> bool {
        !self.state.storage_pending.load(Ordering::Acquire)
    }

    /// The patch the graph computes on.
    pub fn patch(&self) -> &Patch {
        &self.plan.patch
    }

    pub(crate) fn slot(&self, tag: &Tag, what: &str) -> GraphResult<usize> {
        self.plan
            .slot_of
            .get(tag)
            .copied()
            .ok_or_else(|| GraphError::UnknownTag {
                tag: tag.clone(),
                what: what.to_string(),
            })
    }

    /// Runs `f` on the persistent field `tag` of location `L`.
    pub fn with_field<L: GraphLocation, R>(
        &self,
        tag: &Tag,
        f: impl FnOnce(&watershed_fields::SpatialField<L>) -> R,
    ) -> GraphResult<R> {
        let slot = self.slot(tag, "read")?;
        self.state.allocate_storage(&self.plan)?;
        // With GPU nodes, fields change location during an execution and
        // kernels may still use them: wait for a running execution, and
        // make the CPU copy current (a copy from the GPU, read-only).
        let _execution = self.waits_for_execution();
        self.current_on_cpu(slot, false)?;
        let _access = FieldAccess::enter(self);
        let guard = self.state.store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let field = guard.as_ref().ok_or_else(|| GraphError::FieldUnavailable {
            tag: tag.clone(),
            expression: "the caller".into(),
            reason: "it is a scratch field, alive only while the graph executes; flag it persistent to keep it".into(),
        })?;
        let typed = L::get(field).ok_or(GraphError::WrongLocation {
            tag: tag.clone(),
            actual: field.kind(),
            requested: L::KIND,
        })?;
        Ok(f(typed))
    }

    /// Runs `f` on the persistent field `tag` of location `L`, mutably (to
    /// set initial conditions or placeholder values).
    pub fn with_field_mut<L: GraphLocation, R>(
        &self,
        tag: &Tag,
        f: impl FnOnce(&mut watershed_fields::SpatialField<L>) -> R,
    ) -> GraphResult<R> {
        let slot = self.slot(tag, "written")?;
        self.state.allocate_storage(&self.plan)?;
        let _execution = self.waits_for_execution();
        self.current_on_cpu(slot, true)?;
        let _access = FieldAccess::enter(self);
        let mut guard = self.state.store.slots[slot]
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let field = guard.as_mut().ok_or_else(|| GraphError::FieldUnavailable {
            tag: tag.clone(),
            expression: "the caller".into(),
            reason: "it is a scratch field, alive only while the graph executes; flag it persistent to keep it".into(),
        })?;
        let actual = field.kind();
        let typed = L::get_mut(field).ok_or(GraphError::WrongLocation {
            tag: tag.clone(),
            actual,
            requested: L::KIND,
        })?;
        self.state.provided[slot].store(true, Ordering::Release);
        let result = f(typed);
        self.state.versions[slot].fetch_add(1, Ordering::AcqRel);
        Ok(result)
    }

    /// Sets every point of the persistent field `tag` of location `L`,
    /// ghosts included, to `value` (a placeholder's constant: a uniform
    /// velocity, a coefficient).
    ///
    /// ```
    /// use watershed_exprgraph::{ExpressionGraph, Factory, GraphOptions, Tag};
    /// use watershed_fields::{Grid, LocationKind, XFace};
    /// let u = Tag::none("u");
    /// let mut factory = Factory::new();
    /// factory.placeholder(u.clone(), LocationKind::XFace)?;
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let graph = ExpressionGraph::build(&factory, &[u.clone()], &patch, &GraphOptions::default())?;
    /// graph.fill_field::<XFace>(&u, 2.0)?;
    /// graph.set_field::<XFace>(&u, |[x, y, _]| x * y)?;
    /// let corner = graph.with_field::<XFace, _>(&u, |f| {
    ///     let layout = f.layout();
    ///     f.values().map(|v| v[layout.linear_index([1, 1, 0])])
    /// })??;
    /// assert_eq!(corner, 0.25 * 0.375); // the face at x = 1/4, y = 3/8
    /// # Ok::<(), watershed_exprgraph::GraphError>(())
    /// ```
    pub fn fill_field<L: GraphLocation>(&self, tag: &Tag, value: f64) -> GraphResult<()> {
        Ok(self.with_field_mut::<L, _>(tag, |field| field.fill(value))??)
    }

    /// Sets every point of the persistent field `tag` of location `L`,
    /// ghosts included, to `value([x, y, z])` at the point's coordinates (a
    /// face field's points are on its faces).
    pub fn set_field<L: GraphLocation>(
        &self,
        tag: &Tag,
        value: impl Fn([f64; 3]) -> f64,
    ) -> GraphResult<()> {
        self.with_field_mut::<L, _>(tag, |field| -> GraphResult<()> {
            let layout = field.layout().clone();
            let values = field.values_mut()?;
            for index in layout.allocated().iter() {
                values[layout.linear_index(index)] = value(layout.coordinate(index));
            }
            Ok(())
        })?
    }

    /// The execution lock, so that a host access waits for a running
    /// execution (on the CPU an input changed between two nodes of one
    /// execution gave torn results; with GPU nodes kernels run after their
    /// node returns); nothing when this thread is already inside an access
    /// to this graph, whose outer access holds the lock (a nested access
    /// would otherwise wait for itself).
    pub(crate) fn waits_for_execution(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        if in_field_access(self) {
            return None;
        }
        Some(
            self.state
                .execution
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// Makes the CPU copy of the field in `slot` current (and, for
    /// `writing`, the active one), copying from a GPU when needed.
    fn current_on_cpu(&self, slot: usize, writing: bool) -> GraphResult<()> {
        let cpu = watershed_fields::Device::Cpu;
        let ready = self.state.store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_none_or(|f| f.active_device() == cpu || (!writing && f.is_valid_on(cpu)));
        if ready {
            return Ok(());
        }
        let mut guard = self.state.store.slots[slot]
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(field) = guard.as_mut() {
            if writing {
                field.make_active_on(cpu, None)?;
            } else {
                field.validate_on(cpu)?;
            }
        }
        Ok(())
    }

    /// Nodes of `kind` (after fusion; modifiers included).
    pub fn nodes_of_kind(&self, kind: ExpressionKind) -> usize {
        self.plan
            .nodes
            .iter()
            .filter(|n| n.form.expression().kind() == kind)
            .count()
    }

    /// The names of the nodes of `kind` (after fusion), in plan order.
    pub fn node_names_of_kind(&self, kind: ExpressionKind) -> Vec<String> {
        self.plan
            .order
            .iter()
            .map(|&n| &self.plan.nodes[n])
            .filter(|n| n.form.expression().kind() == kind)
            .map(|n| n.name.clone())
            .collect()
    }

    /// The reduction nodes (after fusion), in plan order.
    pub(crate) fn reductions(&self) -> Vec<&crate::LanguageReduction> {
        self.plan
            .order
            .iter()
            .filter_map(|&n| self.plan.nodes[n].form.reduction())
            .collect()
    }

    /// The names of the nodes that read parameter `id` (a reduction's
    /// result) in the same execution, in plan order.
    pub(crate) fn parameter_readers(&self, id: u64) -> Vec<String> {
        self.plan
            .order
            .iter()
            .map(|&n| &self.plan.nodes[n])
            .filter(|n| n.parameters_read.contains(&id))
            .map(|n| n.name.clone())
            .collect()
    }

    /// The language kernels one execution runs after fusion: one per
    /// language node, one per masked assignment of each language modifier
    /// (a boundary condition is one per side and ghost layer).
    pub fn kernel_count(&self) -> usize {
        self.plan
            .nodes
            .iter()
            .map(|n| {
                let location = n
                    .form
                    .expression()
                    .computes()
                    .first()
                    .map_or(LocationKind::CellCentre, |(_, l)| *l);
                n.form
                    .expression()
                    .kernels(&FieldLayout::new(&self.plan.patch, location))
            })
            .sum()
    }

    /// The names of the nodes that check every value they write
    /// ([`LanguageExpression::checking_finite`](crate::LanguageExpression::checking_finite)),
    /// in execution order.
    pub fn finite_checked_nodes(&self) -> Vec<String> {
        let mut names = Vec::new();
        for node in &self.plan.nodes {
            match &node.form {
                NodeForm::Language(l) if l.checks_finite() => names.push(l.name()),
                NodeForm::Group(group) => names.extend(
                    group
                        .members()
                        .filter(|l| l.checks_finite())
                        .map(|l| l.name()),
                ),
                _ => {}
            }
        }
        names
    }

    /// Native (hand-written, CPU-only) nodes: what keeps a graph off a GPU.
    pub fn native_node_count(&self) -> usize {
        self.nodes_of_kind(ExpressionKind::Native)
    }

    /// Rotates the storage of persistent fields of one location without
    /// copying: the field in `tags[1]` moves to `tags[0]`, `tags[2]` to
    /// `tags[1]`, ..., and `tags[0]`'s to the last. With two tags it swaps
    /// them: advancing STATE_NP1 to STATE_N is a pointer exchange, not a
    /// copy. Each field is renamed after the tag it now holds; the values
    /// move, ghosts included.
    ///
    /// Every tag must be persistent (a placeholder, a root, or flagged
    /// persistent), of the same location and layout, and not currently
    /// borrowed through [`Self::with_field`].
    ///
    /// ```
    /// use watershed_exprgraph::{Context, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag};
    /// use watershed_fields::{CellCentre, Grid, LocationKind};
    /// let (now, next) = (Tag::new("u", Context::StateN), Tag::new("u", Context::StateNp1));
    /// let mut factory = Factory::new();
    /// factory.placeholder(now.clone(), LocationKind::CellCentre)?;
    /// let n = now.clone();
    /// factory.register(LanguageExpression::new::<CellCentre>(next.clone(), move |s| {
    ///     2.0 * s.field::<CellCentre>(&n)
    /// }))?;
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let graph = ExpressionGraph::build(&factory, &[next.clone()], &patch, &GraphOptions::default())?;
    /// graph.with_field_mut::<CellCentre, _>(&now, |u| u.fill(1.0))??;
    /// for _ in 0..3 {
    ///     graph.execute(watershed_exprgraph::ExecutionMode::Serial)?;
    ///     graph.rotate_fields(&[now.clone(), next.clone()])?;
    /// }
    /// let value = graph.with_field::<CellCentre, _>(&now, |u| {
    ///     u.values().map(|v| v[u.layout().linear_index([1, 1, 0])])
    /// })??;
    /// assert_eq!(value, 8.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rotate_fields(&self, tags: &[Tag]) -> GraphResult<()> {
        let mut slots = Vec::with_capacity(tags.len());
        for tag in tags {
            let slot = self.slot(tag, "rotated")?;
            if slots.contains(&slot) {
                return Err(GraphError::Native(format!(
                    "rotate_fields: {tag} is named twice; name each time level once"
                )));
            }
            let info = &self.plan.fields[slot];
            let first = &self.plan.fields[slots.first().copied().unwrap_or(slot)];
            if !(info.persistent || info.placeholder) {
                return Err(GraphError::FieldUnavailable {
                    tag: tag.clone(),
                    expression: "rotate_fields".into(),
                    reason: "it is a scratch field, alive only while the graph executes; flag it persistent to rotate it".into(),
                });
            }
            if info.location != first.location {
                return Err(GraphError::WrongLocation {
                    tag: tag.clone(),
                    actual: info.location,
                    requested: first.location,
                });
            }
            slots.push(slot);
        }
        if slots.len() < 2 {
            return Ok(());
        }
        self.state.allocate_storage(&self.plan)?;
        if in_field_access(self) {
            return Err(GraphError::Native(
                "rotate_fields was called inside with_field of the same graph; call it after the access ends".into(),
            ));
        }
        let _serial = self
            .state
            .execution
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Lock in slot order (every multi-slot locker does), so two rotations
        // cannot deadlock.
        let mut order: Vec<usize> = (0..slots.len()).collect();
        order.sort_by_key(|&i| slots[i]);
        let mut guards: Vec<Option<std::sync::RwLockWriteGuard<'_, Option<AnyField>>>> =
            (0..slots.len()).map(|_| None).collect();
        for &i in &order {
            guards[i] = Some(
                self.state.store.slots[slots[i]]
                    .write()
                    .unwrap_or_else(|p| p.into_inner()),
            );
        }
        let mut held: Vec<Option<AnyField>> = guards
            .iter_mut()
            .map(|g| g.as_mut().and_then(|g| g.take()))
            .collect();
        let layouts: Vec<Option<FieldLayout>> = held
            .iter()
            .map(|f| f.as_ref().map(|f| f.as_bound().layout().clone()))
            .collect();
        if let Some(bad) = (1..held.len()).find(|&i| layouts[i] != layouts[0]) {
            // Put everything back before reporting.
            for (guard, field) in guards.iter_mut().zip(held) {
                if let Some(guard) = guard {
                    **guard = field;
                }
            }
            return Err(GraphError::Native(format!(
                "rotate_fields: {} and {} have different layouts (ghost layers or allocation); they cannot exchange storage",
                tags[0], tags[bad]
            )));
        }
        held.rotate_left(1);
        for ((guard, mut field), tag) in guards.iter_mut().zip(held).zip(tags) {
            if let Some(f) = field.as_mut() {
                f.rename(&tag.to_string());
            }
            if let Some(guard) = guard {
                **guard = field;
            }
        }
        for &slot in &slots {
            self.state.provided[slot].store(true, Ordering::Release);
            self.state.versions[slot].fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Replaces the storage of placeholder `tag` with `field` (e.g. a field
    /// wrapping memory an outer framework owns). Returns the field it held.
    pub fn bind_placeholder<L: GraphLocation>(
        &self,
        tag: &Tag,
        field: watershed_fields::SpatialField<L>,
    ) -> GraphResult<Option<AnyField>> {
        let slot = self.slot(tag, "bound")?;
        let info = &self.plan.fields[slot];
        if !info.placeholder {
            return Err(GraphError::UnknownTag {
                tag: tag.clone(),
                what: "bound from outside, but it is computed by an expression, not a placeholder"
                    .into(),
            });
        }
        if info.location != L::KIND {
            return Err(GraphError::WrongLocation {
                tag: tag.clone(),
                actual: info.location,
                requested: L::KIND,
            });
        }
        let patch = field.layout().patch();
        if patch.grid() != self.plan.patch.grid()
            || patch.offset() != self.plan.patch.offset()
            || patch.cells() != self.plan.patch.cells()
        {
            return Err(GraphError::Native(format!(
                "field '{}' bound to {tag} lives on another patch than the graph's",
                field.name()
            )));
        }
        self.plan.regions.check_fits(
            slot,
            info,
            field.layout(),
            &format!("the bound field '{}'", field.name()),
        )?;
        let previous = self.state.store.put(slot, Some(L::wrap(field)));
        self.state.provided[slot].store(true, Ordering::Release);
        self.state.versions[slot].fetch_add(1, Ordering::AcqRel);
        Ok(previous)
    }

    /// Says that placeholder `tag` is meant to hold what it holds now (zeros
    /// unless written): reading a placeholder nobody bound, wrote or filled
    /// is otherwise an error at execute.
    pub fn fill_placeholder(&self, tag: &Tag) -> GraphResult<()> {
        let slot = self.slot(tag, "filled")?;
        if !self.plan.fields[slot].placeholder {
            return Err(GraphError::UnknownTag {
                tag: tag.clone(),
                what: "filled as a placeholder, but it is computed by an expression".into(),
            });
        }
        self.state.provided[slot].store(true, Ordering::Release);
        Ok(())
    }

    /// A number that changes whenever the field `tag` may have changed:
    /// an execution (for every field a node computes or modifies),
    /// [`Self::with_field_mut`], [`Self::bind_placeholder`] and
    /// [`Self::rotate_fields`] each move it on. The same number at two
    /// moments means the same values, so a driver can keep a scalar it
    /// derived from the field (a graph reduction's result, a norm) and
    /// tell when it has gone stale. `None` for a field bound to external
    /// memory, which its owner may write without the graph knowing.
    ///
    /// ```
    /// use watershed_exprgraph::{ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag};
    /// use watershed_fields::{CellCentre, Grid, LocationKind};
    /// let (u, twice) = (Tag::none("u"), Tag::none("2u"));
    /// let mut factory = Factory::new();
    /// factory.placeholder(u.clone(), LocationKind::CellCentre)?;
    /// let t = u.clone();
    /// factory.register(LanguageExpression::new::<CellCentre>(twice.clone(), move |s| {
    ///     2.0 * s.field::<CellCentre>(&t)
    /// }))?;
    /// let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let graph = ExpressionGraph::build(&factory, &[twice.clone()], &patch, &GraphOptions::default())?;
    /// let before = graph.field_version(&u)?;
    /// graph.with_field::<CellCentre, _>(&u, |_| ())?;
    /// assert_eq!(graph.field_version(&u)?, before); // read only
    /// graph.with_field_mut::<CellCentre, _>(&u, |f| f.fill(1.0))??;
    /// assert_ne!(graph.field_version(&u)?, before);
    /// let computed = graph.field_version(&twice)?;
    /// graph.execute(ExecutionMode::Serial)?;
    /// assert_ne!(graph.field_version(&twice)?, computed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn field_version(&self, tag: &Tag) -> GraphResult<Option<u64>> {
        let slot = self.slot(tag, "asked for its version")?;
        let external = self.state.store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(AnyField::is_external);
        Ok((!external).then(|| self.state.versions[slot].load(Ordering::Acquire)))
    }

    /// The ghost layers per side that the stencils reading `tag` need
    /// beyond its interior (from the extent analysis).
    pub fn required_ghosts(&self, tag: &Tag) -> GraphResult<GhostWidth> {
        let slot = self.slot(tag, "asked for its ghost width")?;
        Ok(self
            .plan
            .regions
            .ghosts_of(slot, &self.plan.fields[slot], &self.plan.patch))
    }

    /// The box of `tag`'s indices its producer computes each execution
    /// (`None` for placeholders and fields of native expressions).
    pub fn computed_region(&self, tag: &Tag) -> GraphResult<Option<IndexBox>> {
        let slot = self.slot(tag, "asked for its computed region")?;
        Ok(self.plan.producer[slot].and_then(|n| self.plan.nodes[n].region))
    }
}
