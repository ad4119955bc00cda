//! Solver assignments prepared once and reused. Every assignment finds its
//! kernel, binds its fields and checks grids, ghosts and regions before it
//! runs; on the multigrid's small levels that cost more than the
//! arithmetic. Solvers keep each assignment here as a
//! [`PreparedAssignment`], keyed by what it computes and the ids of the
//! fields involved, so a repeated call only binds data pointers and runs
//! (the prepared assignment itself prepares again if a field's layout or a
//! folded parameter changed). Reductions (dot products, norms, means,
//! maxima) are kept the same way as [`PreparedReduction`]s.

use crate::boundary::BoundaryConditions;
use crate::error::SolverResult;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use watershed_fields::{Location, SpatialField};
use watershed_operators::ir::Node;
use watershed_operators::{
    AssignOptions, BoundField, OperatorResult, PreparedAssignment, PreparedReduction,
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
        }
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

/// Prepared assignments and reductions by use and field ids.
#[derive(Debug, Default)]
pub(crate) struct Assignments {
    built: HashMap<(&'static str, [u64; 3]), PreparedAssignment, BuildHasherDefault<KeyHasher>>,
    reductions: HashMap<(&'static str, [u64; 2]), PreparedReduction, BuildHasherDefault<KeyHasher>>,
}

/// A multiply-rotate hash (as rustc's Fx hash) for the memo's short keys:
/// a V-cycle looks assignments up hundreds of times per solve, and the
/// default SipHash cost about as much as a coarse level's kernel call.
/// The keys come from the solver's own code, not from outside input, so
/// resistance to crafted collisions is not needed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl KeyHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        for &byte in chunks.remainder() {
            self.add(u64::from(byte));
        }
    }
    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }
    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }
    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
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
        if self.built.len() >= CAPACITY && !self.built.contains_key(&key) {
            self.built.clear();
        }
        let kept = match self.built.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                let recipe = recipe(target);
                let then = match recipe.fill {
                    Some(conditions) => conditions.assignments::<L>(
                        target.layout(),
                        recipe.target_leaf,
                        target.name(),
                    )?,
                    None => Vec::new(),
                };
                entry.insert(PreparedAssignment::new(
                    target,
                    recipe.target_leaf,
                    &recipe.root,
                    fields,
                    recipe.options,
                    &then,
                )?)
            }
        };
        kept.run(target, fields)?;
        Ok(())
    }

    /// Runs the reduction for `purpose` over the fields `ids` (unused
    /// places 0) reading `fields`; `prepare` builds it the first time (from
    /// nothing else that can change between calls).
    pub(crate) fn reduce(
        &mut self,
        purpose: &'static str,
        ids: [u64; 2],
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
        Ok(prepared.run(fields)?)
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
                        Recipe::new((2.0 * field(&s)).node().clone(), t.id()).filled(walls)
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
                .reduce("squares", [a.id(), 0], &[&a], || {
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
