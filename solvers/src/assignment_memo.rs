//! Solver assignments prepared once and reused. Every assignment finds its
//! kernel, binds its fields and checks grids, ghosts and regions before it
//! runs; on the multigrid's small levels that cost more than the
//! arithmetic. Solvers keep each assignment here as a
//! [`PreparedAssignment`], keyed by what it computes and the ids of the
//! fields involved, so a repeated call only binds data pointers and runs
//! (the prepared assignment itself prepares again if a field's layout
//! changed). Reductions (dot products, norms, means,
//! maxima) are kept the same way as [`PreparedReduction`]s.
//!
//! **On a GPU.** An assignment whose target is active on a GPU runs there:
//! its recipe is kept (the tree and the fill's masked assignments), and
//! each call builds the launches over the fields' current device memory
//! ([`watershed_operators::gpu::gpu_launches`], the checks and errors of
//! the CPU path) and enqueues them on the GPU's stream, so consecutive
//! assignments are ordered by the stream and the host does not wait. A
//! reduction over fields on a GPU enqueues its kernel on the same stream
//! and waits for its value (the caller needs it to steer the loop). The
//! stream is the one lent with [`Assignments::use_stream`] (a graph
//! node's), else one made for the GPU on first use.

use crate::boundary::BoundaryConditions;
use crate::error::SolverResult;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use watershed_fields::hashing::QuickHash;
use watershed_fields::{Device, FieldLayout, GpuStream, Location, SpatialField, ValidationEvent};
use watershed_operators::gpu::{GpuTarget, gpu_launches};
use watershed_operators::gpu_reduction::gpu_reduction;
use watershed_operators::ir::Node;
use watershed_operators::{
    AssignOptions, BoundField, Expr, MaskedAssignment, OperatorResult, PreparedAssignment,
    PreparedReduction, Region,
};

/// Assignments kept before the memo is cleared (a caller that passes new
/// fields on every call must not make it grow without bound).
const CAPACITY: usize = 256;

/// What an assignment computes, given the first time it is asked for.
pub(crate) struct Recipe {
    /// The value.
    pub root: Arc<Node>,
    /// Leaves with this id read the target (in-place updates); a tree that
    /// does not read its target may use any id no field has.
    pub target_leaf: u64,
    /// Region and back end.
    pub options: AssignOptions,
    /// Boundary conditions filled into the target's ghosts right after it
    /// is written, or `None`.
    pub fill: Option<BoundaryConditions>,
    /// Only the fill runs: `root` and the region are ignored.
    pub ghosts_only: bool,
}

impl Recipe {
    /// `root` over the target's interior, reading the target through
    /// leaves of id `target_leaf`, with no fill.
    pub(crate) fn new(root: Arc<Node>, target_leaf: u64) -> Self {
        Recipe {
            root,
            target_leaf,
            options: AssignOptions::default(),
            fill: None,
            ghosts_only: false,
        }
    }

    /// Fills the ghosts of `target` with `conditions`, and writes nothing
    /// else.
    pub(crate) fn ghosts<L: Location>(
        target: &SpatialField<L>,
        conditions: BoundaryConditions,
    ) -> Self {
        let own = Expr::<L>::symbol(target.id(), target.name());
        Recipe {
            fill: Some(conditions),
            ghosts_only: true,
            ..Recipe::new(own.node().clone(), target.id())
        }
    }

    /// What runs: the tree, the leaf id that reads the target, the options
    /// and the masked assignments after the tree (for a target of `name`
    /// with `layout`). A fill alone runs its first masked assignment as
    /// the tree over that assignment's box, then the others.
    fn parts<L: Location>(self, layout: &FieldLayout, name: &str) -> SolverResult<Parts> {
        let mut then = match self.fill {
            Some(conditions) => conditions.assignments::<L>(layout, self.target_leaf, name)?,
            None => Vec::new(),
        };
        if self.ghosts_only {
            let empty = watershed_fields::IndexBox::new([0; 3], [0; 3]);
            let (first_box, first) = if then.is_empty() {
                (empty, self.root)
            } else {
                then.remove(0)
            };
            let options = AssignOptions {
                region: Region::Box(first_box),
                ..self.options
            };
            return Ok((first, self.target_leaf, options, then));
        }
        Ok((self.root, self.target_leaf, self.options, then))
    }

    /// The same, then filling the target's ghosts with `conditions`.
    pub(crate) fn filled(mut self, conditions: BoundaryConditions) -> Self {
        self.fill = Some(conditions);
        self
    }

    /// The same, with `options`.
    pub(crate) fn with_options(mut self, options: AssignOptions) -> Self {
        self.options = options;
        self
    }
}

/// A recipe's tree, target leaf, options and masked assignments after it.
type Parts = (Arc<Node>, u64, AssignOptions, Vec<MaskedAssignment>);

/// Prepared assignments and reductions by use and field ids.
#[derive(Debug, Default)]
pub(crate) struct Assignments {
    built: HashMap<(&'static str, [u64; 3]), PreparedAssignment, QuickHash>,
    reductions: HashMap<(&'static str, [u64; 2]), PreparedReduction, QuickHash>,
    /// The recipes of assignments whose target was on a GPU.
    on_gpu: HashMap<(&'static str, [u64; 3]), GpuRecipe, QuickHash>,
    /// The stream GPU work is enqueued on.
    stream: Option<GpuStream>,
}

/// What a GPU assignment launches: the tree (leaves `leaf` read the
/// target) over `region`, then the fill's masked assignments.
#[derive(Debug)]
struct GpuRecipe {
    root: Arc<Node>,
    leaf: u64,
    region: Region,
    then: Vec<MaskedAssignment>,
}

impl Assignments {
    /// Runs the assignment for `purpose` over the fields `ids` (the target
    /// first, then what it reads; unused places 0) into `target`, reading
    /// `fields`, then fills the target's ghosts if the recipe says so;
    /// `recipe` builds it the first time. The recipe must depend on
    /// nothing else that can change between calls, except parameters'
    /// values.
    ///
    /// The fill is the conditions' masked language assignments
    /// ([`BoundaryConditions::assignments`]) after the kernel, in the same
    /// prepared assignment: on a small level the CPU back end runs them as
    /// one ghost fill (one loop per box, no kernel call each), on a large
    /// one the x sides fuse as row epilogues.
    pub(crate) fn run<L: Location>(
        &mut self,
        purpose: &'static str,
        ids: [u64; 3],
        target: &mut SpatialField<L>,
        fields: &[&dyn BoundField],
        recipe: impl FnOnce(&SpatialField<L>) -> Recipe,
    ) -> SolverResult<()> {
        let key = (purpose, ids);
        if let device @ Device::Gpu(_) = target.active_device() {
            return self.run_on_gpu(key, device, target, fields, recipe);
        }
        if self.built.len() >= CAPACITY && !self.built.contains_key(&key) {
            self.built.clear();
        }
        let kept = match self.built.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                let (root, leaf, options, then) =
                    recipe(target).parts::<L>(target.layout(), target.name())?;
                entry.insert(PreparedAssignment::new(
                    target, leaf, &root, fields, options, &then,
                )?)
            }
        };
        kept.run(target, fields)?;
        Ok(())
    }

    /// [`Self::run`] for a target active on GPU `device`: the launches
    /// of the recipe over the fields' memory there, enqueued on the
    /// stream (after the copies still pending into the target).
    fn run_on_gpu<L: Location>(
        &mut self,
        key: (&'static str, [u64; 3]),
        device: Device,
        target: &mut SpatialField<L>,
        fields: &[&dyn BoundField],
        recipe: impl FnOnce(&SpatialField<L>) -> Recipe,
    ) -> SolverResult<()> {
        if self.on_gpu.len() >= CAPACITY && !self.on_gpu.contains_key(&key) {
            self.on_gpu.clear();
        }
        let stream = self.stream(device)?;
        let kept = match self.on_gpu.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                let (root, leaf, options, then) =
                    recipe(target).parts::<L>(target.layout(), target.name())?;
                if options.check_finite {
                    return Err(crate::error::SolverError::Setup {
                        equation: target.name().to_string(),
                        reason: format!(
                            "the solver's assignment '{}' checks finiteness, which its GPU path does not do; this is a bug in the solver, please report it",
                            key.0
                        ),
                    });
                }
                entry.insert(GpuRecipe {
                    root,
                    leaf,
                    region: options.region,
                    then,
                })
            }
        };
        let buffer = target.gpu_buffer_mut(device)?;
        if let Some(event) = &buffer.ready {
            stream.wait(event)?;
        }
        let gpu_target = GpuTarget {
            name: target.name(),
            layout: target.layout(),
            kind: L::KIND,
            device,
            pointer: buffer.pointer,
            len: buffer.len,
        };
        let launches = gpu_launches(
            gpu_target,
            kept.leaf,
            &kept.root,
            fields,
            kept.region,
            &kept.then,
        )?;
        for launch in &launches {
            // SAFETY: the launches were built over the target's and the
            // fields' memory on this GPU just now; the caller keeps those
            // fields alive and unwritten by other work until this stream
            // reaches the kernels (solvers synchronise the stream before
            // they hand fields back, and a graph orders readers and
            // writers of its fields after the node's stream).
            unsafe { launch.enqueue(&stream)? };
        }
        Ok(())
    }

    /// Sets every point (ghosts included) of `target` to zero where it is
    /// active: on the CPU at once, on a GPU enqueued on the stream.
    pub(crate) fn zero<L: Location>(&mut self, target: &mut SpatialField<L>) -> SolverResult<()> {
        let device = target.active_device();
        if device.is_cpu() {
            return Ok(target.fill(0.0)?);
        }
        let stream = self.stream(device)?;
        let buffer = target.gpu_buffer_mut(device)?;
        if let Some(event) = &buffer.ready {
            stream.wait(event)?;
        }
        let bytes = buffer
            .len
            .checked_mul(8)
            .ok_or_else(|| crate::error::SolverError::Setup {
                equation: target.name().to_string(),
                reason: format!("{} elements overflow a byte count", buffer.len),
            })?;
        // SAFETY: the buffer is the target's memory on this GPU, `len`
        // f64 long; work on other streams reaches it only after this one.
        unsafe {
            stream.memset(
                buffer.pointer as usize,
                0,
                bytes,
                &format!("zeroing field '{}'", target.name()),
            )?;
        }
        Ok(())
    }

    /// Runs the reduction for `purpose` over the fields `ids` (unused
    /// places 0) reading `fields` where they are, `device` (the first
    /// field's active device); `prepare` builds it the first time (from
    /// nothing else that can change between calls). On a GPU the host
    /// waits for the value, and so for everything enqueued before it.
    pub(crate) fn reduce(
        &mut self,
        purpose: &'static str,
        ids: [u64; 2],
        device: Device,
        fields: &[&dyn BoundField],
        prepare: impl FnOnce() -> OperatorResult<PreparedReduction>,
    ) -> SolverResult<f64> {
        let key = (purpose, ids);
        if self.reductions.len() >= CAPACITY && !self.reductions.contains_key(&key) {
            self.reductions.clear();
        }
        let prepared = match self.reductions.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(prepare()?),
        };
        if device.is_cpu() {
            return Ok(prepared.run(fields)?);
        }
        let launch = gpu_reduction(
            prepared.root(),
            prepared.location(),
            fields,
            prepared.reduction(),
            prepared.region(),
            device,
        )?;
        let stream = self.stream(device)?;
        // SAFETY: the fields are the caller's, alive and unwritten until
        // `run_and_wait` returns, by which time the stream has finished
        // the kernel.
        Ok(unsafe { launch.run_and_wait(&stream, purpose)? })
    }

    /// Makes GPU work go to `stream` (a graph node's) until
    /// [`Self::release_stream`]; without it, a stream is made for the GPU.
    pub(crate) fn use_stream(&mut self, stream: &GpuStream) {
        self.stream = Some(stream.clone());
    }

    /// Stops using the stream lent with [`Self::use_stream`] (without
    /// waiting for it).
    pub(crate) fn release_stream(&mut self) {
        self.stream = None;
    }

    /// Waits for the work enqueued on the stream in use, if any (a solve
    /// hands its fields back only once the GPU is done with them).
    pub(crate) fn synchronize(&self) -> SolverResult<()> {
        if let Some(stream) = &self.stream {
            stream.synchronize()?;
        }
        Ok(())
    }

    /// An event after the work enqueued on the stream in use (`None`
    /// when nothing ever ran on a GPU): what another stream waits for
    /// before it touches the fields that work writes.
    pub(crate) fn record(&self) -> SolverResult<Option<ValidationEvent>> {
        Ok(match &self.stream {
            Some(stream) => Some(stream.record()?),
            None => None,
        })
    }

    /// The stream for GPU `device`: the one in use if it is on that GPU,
    /// else a new one (kept for the next calls).
    fn stream(&mut self, device: Device) -> SolverResult<GpuStream> {
        if let Some(stream) = &self.stream
            && stream.device() == device
        {
            return Ok(stream.clone());
        }
        let Device::Gpu(ordinal) = device else {
            return Err(crate::error::SolverError::Setup {
                equation: "a solver's GPU work".into(),
                reason: "asked for a GPU stream on the CPU; this is a bug in the solver, please report it".into(),
            });
        };
        let stream = GpuStream::new(ordinal)?;
        self.stream = Some(stream.clone());
        Ok(stream)
    }

    /// How many assignments are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.built.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boundary::BoundaryCondition;
    use watershed_fields::{CellCentre, Device, Grid};
    use watershed_operators::field;

    #[test]
    fn an_assignment_is_prepared_once_per_purpose_and_fields_and_fills_its_target() {
        let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let mut a = SpatialField::<CellCentre>::new("a", &patch, Device::Cpu).unwrap();
        let mut b = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu).unwrap();
        let mut s = SpatialField::<CellCentre>::new("s", &patch, Device::Cpu).unwrap();
        s.fill(3.0).unwrap();
        let mut assignments = Assignments::default();
        let mut builds = 0;
        let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(1.0));
        for _ in 0..3 {
            for target in [&mut a, &mut b] {
                let ids = [target.id(), s.id(), 0];
                assignments
                    .run("double", ids, target, &[&s], |t| {
                        builds += 1;
                        Recipe::new((2.0 * field(&s)).node().clone(), t.id()).filled(walls.clone())
                    })
                    .unwrap();
            }
        }
        assert_eq!(builds, 2);
        assert_eq!(assignments.len(), 2);
        // Interior 2 * 3 = 6; a Dirichlet ghost mirrors it about 1: 2 - 6.
        let layout = a.layout().clone();
        let values = a.values().unwrap();
        assert_eq!(values[layout.linear_index([1, 1, 0])], 6.0);
        assert_eq!(values[layout.linear_index([-1, 1, 0])], -4.0);
        assert_eq!(values[layout.linear_index([1, 4, 0])], -4.0);
        for k in 0..(2 * CAPACITY as u64) {
            let _ = assignments.run("many", [k, 0, 0], &mut b, &[&s], |t| {
                Recipe::new(field(&s).node().clone(), t.id())
            });
        }
        assert!(assignments.len() <= CAPACITY);
    }

    #[test]
    fn a_ghosts_only_recipe_fills_as_the_conditions_do_and_leaves_the_interior() {
        let grid = Grid::new([5, 4, 3], [1.0, 0.5, 2.0], [0.0; 3])
            .unwrap()
            .with_periodic([false, true, false]);
        let patch = grid.whole_domain(1);
        let conditions = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.25))
            .with(
                watershed_fields::Side::PLUS_X,
                BoundaryCondition::Neumann(2.0),
            )
            .with(
                watershed_fields::Side::MINUS_Z,
                BoundaryCondition::Neumann(-1.0),
            );
        let mut filled = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
        let layout = filled.layout().clone();
        for (n, v) in filled.values_mut().unwrap().iter_mut().enumerate() {
            *v = (n as f64 * 0.37).sin();
        }
        let mut reference = SpatialField::<CellCentre>::new("r", &patch, Device::Cpu).unwrap();
        reference
            .values_mut()
            .unwrap()
            .copy_from_slice(filled.values().unwrap());
        conditions.apply(&mut reference).unwrap();
        let before = filled.values().unwrap().to_vec();
        let mut assignments = Assignments::default();
        let own = filled.id();
        assignments
            .run("ghosts", [own, 0, 0], &mut filled, &[], |x| {
                Recipe::ghosts(x, conditions)
            })
            .unwrap();
        let after = filled.values().unwrap();
        let want = reference.values().unwrap();
        for index in layout.allocated() {
            let at = layout.linear_index(index);
            assert_eq!(after[at].to_bits(), want[at].to_bits(), "{index:?}");
            if layout.interior().contains(index) {
                assert_eq!(after[at].to_bits(), before[at].to_bits(), "{index:?}");
            }
        }
        assert!(
            layout
                .allocated()
                .into_iter()
                .any(|i| after[layout.linear_index(i)] != before[layout.linear_index(i)]),
            "the fill wrote nothing"
        );
        // Zeroing a CPU field writes every point, ghosts included.
        assignments.zero(&mut filled).unwrap();
        assert!(filled.values().unwrap().iter().all(|&v| v == 0.0));
    }

    #[test]
    fn a_reduction_is_prepared_once_and_follows_new_data() {
        let patch = Grid::new([3, 2, 1], [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let mut a = SpatialField::<CellCentre>::new("a", &patch, Device::Cpu).unwrap();
        let mut assignments = Assignments::default();
        let mut builds = 0;
        for round in 1..=3 {
            a.fill(round as f64).unwrap();
            let squares = assignments
                .reduce("squares", [a.id(), 0], Device::Cpu, &[&a], || {
                    builds += 1;
                    PreparedReduction::new(
                        &a,
                        watershed_operators::Reduction::SumOfSquares,
                        watershed_operators::ReduceRegion::Interior,
                        watershed_operators::Parallelism::Serial,
                    )
                })
                .unwrap();
            // Six interior cells of `round`.
            assert_eq!(squares, 6.0 * (round * round) as f64);
        }
        assert_eq!(builds, 1);
    }
}
