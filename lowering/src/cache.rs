//! The lowering cache: each distinct expression is lowered once per grid
//! spacing, not on every assignment.
//!
//! Two levels, both process-wide and bounded:
//! * by tree identity: an expression graph re-runs the same `Arc<Node>`
//!   every execution, so a pointer comparison finds its lowered kernel (the
//!   entry holds a clone of the `Arc`, so the address cannot be reused by
//!   another tree while the entry exists);
//! * by structure ([`Node::structural_hash`], confirmed with
//!   [`Node::same_structure`]): a loop that rebuilds `x + w * p` every
//!   iteration over other fields shares one kernel. Field and parameter
//!   slots are then mapped to the new tree's fields and parameters by their
//!   order of first appearance, which structurally equal trees share.
//!
//! The key includes what lowering reads from the patch: the grid spacing
//! (stencil weights) and the active axes. Kernels never contain parameter
//! values, so changing a [`Parameter`](watershed_language::Parameter) never invalidates anything.

use crate::error::OperatorResult;
use crate::ir::Node;
use crate::kernel::Kernel;
use crate::parameter::ParameterCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use watershed_fields::Patch;
use watershed_fields::hashing::QuickHash;

/// Entries kept per level before the level is cleared.
const CAPACITY: usize = 4096;

/// A kernel's parameter values by slot (inline up to 8: reading them
/// allocates nothing on the hot path of a small assignment).
pub type ParameterValues = smallvec::SmallVec<[f64; 8]>;

/// A kernel ready for one tree: the shared lowered program and, by slot,
/// that tree's fields and parameters.
#[derive(Debug)]
pub struct LoweredKernel {
    /// The row program.
    pub kernel: Arc<Kernel>,
    /// Per field slot: the id of this tree's field.
    pub field_ids: Vec<u64>,
    /// Per field slot: the name of this tree's field (the shared kernel's
    /// own slot names are those of the tree it was first lowered from, which
    /// may be another tree of the same structure: an error names this one).
    pub field_names: Vec<Arc<str>>,
    /// Per parameter slot: this tree's parameter.
    pub parameters: Vec<Arc<ParameterCell>>,
}

impl LoweredKernel {
    /// The parameters' current values, by slot (read once per evaluation).
    pub fn parameter_values(&self) -> ParameterValues {
        self.parameters.iter().map(|p| p.value()).collect()
    }
}

/// What lowering depends on besides the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct GridKey {
    spacing: [u64; 3],
    active: [bool; 3],
    into_target: bool,
}

impl GridKey {
    fn of(patch: &Patch, into_target: bool) -> Self {
        let grid = patch.grid();
        GridKey {
            spacing: grid.spacing().map(f64::to_bits),
            active: grid.active_dimensions(),
            into_target,
        }
    }
}

struct Shared {
    root: Arc<Node>,
    kernel: Arc<Kernel>,
    /// Per field slot: index in the tree's first-appearance field list.
    field_order: Vec<usize>,
    /// Per parameter slot: index in the tree's parameter list.
    parameter_order: Vec<usize>,
}

/// A tree (kept alive, so its address is not reused) and its kernel.
type CachedKernel = (Arc<Node>, Arc<LoweredKernel>);

#[derive(Default)]
struct Cache {
    by_identity: HashMap<(usize, GridKey), CachedKernel, QuickHash>,
    by_structure: HashMap<(u64, GridKey), Vec<Arc<Shared>>>,
}

static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
static LOOKUPS: AtomicU64 = AtomicU64::new(0);
static LOWERINGS: AtomicU64 = AtomicU64::new(0);

/// Counters of the lowering cache since the process started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStatistics {
    /// Kernels asked for.
    pub lookups: u64,
    /// Kernels actually lowered (the rest came from the cache).
    pub lowerings: u64,
}

/// The cache's counters.
pub fn cache_statistics() -> CacheStatistics {
    CacheStatistics {
        lookups: LOOKUPS.load(Ordering::Relaxed),
        lowerings: LOWERINGS.load(Ordering::Relaxed),
    }
}

fn cache() -> std::sync::MutexGuard<'static, Cache> {
    CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn bind_to(shared: &Shared, root: &Node) -> LoweredKernel {
    let fields = root.fields();
    let parameters = root.parameters();
    LoweredKernel {
        kernel: shared.kernel.clone(),
        field_ids: shared.field_order.iter().map(|&i| fields[i].0).collect(),
        field_names: shared
            .field_order
            .iter()
            .map(|&i| fields[i].1.clone())
            .collect(),
        parameters: shared
            .parameter_order
            .iter()
            .map(|&i| parameters[i].clone())
            .collect(),
    }
}

/// The kernel of `root` on `patch` (see [`Kernel::compile`]), lowered at most
/// once per structure and grid spacing.
pub fn lower_cached(
    root: &Arc<Node>,
    patch: &Patch,
    into_target: bool,
) -> OperatorResult<Arc<LoweredKernel>> {
    LOOKUPS.fetch_add(1, Ordering::Relaxed);
    let key = GridKey::of(patch, into_target);
    let identity = (Arc::as_ptr(root) as usize, key);
    if let Some((_, found)) = cache().by_identity.get(&identity) {
        return Ok(found.clone());
    }
    let hash = root.structural_hash();
    let shared = cache()
        .by_structure
        .get(&(hash, key))
        .and_then(|list| list.iter().find(|s| s.root.same_structure(root)).cloned());
    let shared = match shared {
        Some(shared) => shared,
        None => {
            // Lower outside the lock: other threads keep using the cache.
            LOWERINGS.fetch_add(1, Ordering::Relaxed);
            let kernel = Kernel::compile(root, patch, into_target)?;
            let fields = root.fields();
            let parameters = root.parameters();
            let field_order = kernel
                .fields
                .iter()
                .map(|k| fields.iter().position(|f| f.0 == k.id).unwrap_or(0))
                .collect();
            let parameter_order = kernel
                .parameters
                .iter()
                .map(|k| {
                    parameters
                        .iter()
                        .position(|p| p.id() == k.id())
                        .unwrap_or(0)
                })
                .collect();
            let shared = Arc::new(Shared {
                root: root.clone(),
                kernel: Arc::new(kernel),
                field_order,
                parameter_order,
            });
            let mut cache = cache();
            if cache.by_structure.len() >= CAPACITY {
                cache.by_structure.clear();
            }
            cache
                .by_structure
                .entry((hash, key))
                .or_default()
                .push(shared.clone());
            shared
        }
    };
    let lowered = Arc::new(bind_to(&shared, root));
    let mut cache = cache();
    if cache.by_identity.len() >= CAPACITY {
        cache.by_identity.clear();
    }
    cache
        .by_identity
        .insert(identity, (root.clone(), lowered.clone()));
    Ok(lowered)
}
