//! Assignment trees built once and reused. The lowering cache finds the
//! kernel of a tree it has seen by the tree's identity (a pointer), but a
//! tree rebuilt on every call is hashed and compared node by node first,
//! and building it allocates: on the multigrid's small levels that cost
//! more than the arithmetic. Solvers keep their trees here, keyed by what
//! they compute and the ids of the fields involved, and run them with
//! `assign_node`.

use std::collections::HashMap;
use std::sync::Arc;
use watershed_operators::ir::Node;

/// Trees kept before the memo is cleared (a caller that passes new fields
/// on every call must not make it grow without bound).
const CAPACITY: usize = 256;

/// Trees by use and field ids.
#[derive(Debug, Default)]
pub(crate) struct Trees {
    built: HashMap<(&'static str, [u64; 3]), Arc<Node>>,
}

impl Trees {
    /// The tree for `purpose` over the fields `ids` (the target first,
    /// then what it reads; unused places 0), built by `build` the first
    /// time. The tree must depend on nothing else that can change between
    /// calls, except parameters' values.
    pub(crate) fn get(
        &mut self,
        purpose: &'static str,
        ids: [u64; 3],
        build: impl FnOnce() -> Arc<Node>,
    ) -> Arc<Node> {
        if self.built.len() >= CAPACITY && !self.built.contains_key(&(purpose, ids)) {
            self.built.clear();
        }
        self.built
            .entry((purpose, ids))
            .or_insert_with(build)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use watershed_fields::{CellCentre, Device, Grid, SpatialField};
    use watershed_operators::field;

    #[test]
    fn a_tree_is_built_once_per_purpose_and_fields() {
        let patch = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let a = SpatialField::<CellCentre>::new("a", &patch, Device::Cpu).unwrap();
        let b = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu).unwrap();
        let mut trees = Trees::default();
        let mut builds = 0;
        let mut get = |trees: &mut Trees, purpose, x: &SpatialField<CellCentre>| {
            trees.get(purpose, [x.id(), 0, 0], || {
                builds += 1;
                (2.0 * field(x)).node().clone()
            })
        };
        let first = get(&mut trees, "double", &a);
        let again = get(&mut trees, "double", &a);
        assert!(Arc::ptr_eq(&first, &again));
        let other = get(&mut trees, "double", &b);
        assert!(!Arc::ptr_eq(&first, &other));
        get(&mut trees, "twice", &a);
        assert_eq!(builds, 3);
        for k in 0..(2 * CAPACITY as u64) {
            trees.get("many", [k, 0, 0], || first.clone());
        }
        assert!(trees.built.len() <= CAPACITY);
    }
}
