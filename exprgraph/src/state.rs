//! The state of a graph's executions, apart from its plan: the field store
//! and its memory pool, per-node statistics, which placeholders were
//! provided, field versions, the lock that serialises executions, the
//! adaptive mode's trials, and the GPU side (streams, finiteness watches,
//! step replay, scratch and timing switches). The scheduler and the GPU
//! executor change it; the plan ([`crate::plan`]) never changes with it.

use crate::error::GraphResult;
use crate::plan::{GraphOptions, GraphPlan};
use crate::scheduler::Statistics;
use crate::store::{AnyField, FieldStore};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use watershed_fields::{FieldInit, Lifetime, MemoryPool};

/// What a graph's executions change (see the module docs).
pub(crate) struct ExecutionState {
    pub(crate) store: FieldStore,
    pub(crate) pool: MemoryPool,
    pub(crate) statistics: Mutex<Statistics>,
    /// Per field: a placeholder that was bound, written or filled (reading
    /// one that was not is an error at execute).
    pub(crate) provided: Vec<AtomicBool>,
    /// Per field: a count bumped by everything that may write it (see
    /// [`ExpressionGraph::field_version`](crate::ExpressionGraph::field_version)).
    pub(crate) versions: Vec<AtomicU64>,
    /// Serialises executions of this graph.
    pub(crate) execution: Mutex<()>,
    /// Trials and choice of [`crate::ExecutionMode::Adaptive`].
    pub(crate) adaptive: Mutex<crate::adaptive::AdaptiveState>,
    /// The plan's GPU streams, reused across executions.
    pub(crate) gpu_streams: crate::gpu::executor::StreamPool,
    /// The finiteness checks of GPU kernels in the execution in progress.
    pub(crate) finite_watches: crate::gpu::executor::FiniteWatches,
    /// Replay of steps as CUDA graphs ([`crate::StepReplay`]).
    pub(crate) replay: Mutex<crate::gpu::replay::ReplayState>,
    /// Scratch fields of GPU nodes are allocated in stream order
    /// ([`crate::GpuScratch::StreamOrdered`]); changed under the replay lock.
    pub(crate) stream_ordered_scratch: AtomicBool,
    /// Executions time their GPU side ([`crate::gpu::timeline`]).
    pub(crate) gpu_timeline: AtomicBool,
    /// The first half of a split execution ran and kept its scratch
    /// fields for the second ([`crate::overlap`]).
    pub(crate) split_pending: AtomicBool,
    /// The persistent fields are not allocated yet
    /// ([`GraphOptions::deferred_storage`]); cleared under `storage_lock`.
    pub(crate) storage_pending: AtomicBool,
    pub(crate) storage_lock: Mutex<()>,
}

impl ExecutionState {
    /// The state of a fresh graph of `plan`: its persistent fields
    /// allocated (zero) from a pool of the host memory `options` ask for,
    /// or with [`GraphOptions::deferred_storage`] at the first
    /// [`Self::allocate_storage`]; nothing provided, run or replayed yet.
    pub(crate) fn new(plan: &GraphPlan, options: &GraphOptions) -> GraphResult<Self> {
        let pool = MemoryPool::host(GraphPlan::host_memory(options));
        let store = FieldStore::with_slots(plan.fields.len());
        if !options.deferred_storage {
            allocate_persistent(plan, &pool, &store)?;
        }
        let field_count = plan.fields.len();
        Ok(ExecutionState {
            store,
            pool,
            statistics: Mutex::new(Statistics::new(plan.nodes.len())),
            provided: (0..field_count).map(|_| AtomicBool::new(false)).collect(),
            versions: (0..field_count).map(|_| AtomicU64::new(0)).collect(),
            execution: Mutex::new(()),
            adaptive: Mutex::new(Default::default()),
            gpu_streams: Default::default(),
            finite_watches: Default::default(),
            replay: Default::default(),
            stream_ordered_scratch: AtomicBool::new(false),
            gpu_timeline: AtomicBool::new(false),
            split_pending: AtomicBool::new(false),
            storage_pending: AtomicBool::new(options.deferred_storage),
            storage_lock: Mutex::new(()),
        })
    }

    /// Allocates the persistent fields of a graph built with
    /// [`GraphOptions::deferred_storage`] (zero, as at a build without
    /// it), once; nothing when they are allocated. A placeholder bound to
    /// a field in the meantime keeps it.
    pub(crate) fn allocate_storage(&self, plan: &GraphPlan) -> GraphResult<()> {
        if !self.storage_pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let _once = self.storage_lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.storage_pending.load(Ordering::Acquire) {
            allocate_persistent(plan, &self.pool, &self.store)?;
            self.storage_pending.store(false, Ordering::Release);
        }
        Ok(())
    }
}

/// Allocates (zero, from `pool`) every persistent field of `plan` whose
/// slot in `store` is empty.
fn allocate_persistent(plan: &GraphPlan, pool: &MemoryPool, store: &FieldStore) -> GraphResult<()> {
    for (slot, field) in plan.fields.iter().enumerate() {
        let empty = store.slots[slot]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none();
        if field.persistent && empty {
            let value = AnyField::new(
                field.location,
                &field.tag.name,
                &plan.patch,
                Lifetime::Persistent,
                pool,
                FieldInit::Zero,
            )?;
            store.put(slot, Some(value));
        }
    }
    Ok(())
}
