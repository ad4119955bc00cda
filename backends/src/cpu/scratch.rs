//! Per-thread scratch registers for blocks, taken from a bounded pool so
//! that steps after the first allocate nothing.

use std::sync::OnceLock;

/// Registers for one evaluation, from a process-wide pool and given back
/// when dropped: a small evaluation (a boundary layer, a coarse multigrid
/// level) runs many times, and allocating and freeing its registers cost
/// more than its arithmetic. Every register point an instruction reads was
/// written before in the same block (invariant 5 of `cpu/design.md`), so a
/// reused buffer is not cleared (clearing the registers of a 64^2 sweep,
/// tens of KiB, cost as much as the sweep's arithmetic); in builds with
/// debug assertions (the test suite) it is filled with NaN instead, so
/// that a read before a write shows as a non-finite result.
///
/// The pool is shared by all threads and every buffer in it is as large
/// as the largest request so far, so that once each kernel of a time step
/// has run and as many buffers as threads have been in use at once, no
/// later step allocates registers, whichever thread the scheduler puts a
/// node on. (Per-thread pools, handing out whichever buffer came back
/// last, grew a buffer now and then for as long as work stealing moved
/// large kernels onto a thread that had not run one before.)
pub(super) struct Scratch {
    /// Always `largest` points long (the pool's largest request when it
    /// was taken), so that reuse never zero-fills a tail again.
    pub(super) values: Vec<f64>,
    /// The points handed out: `values[..len]`.
    pub(super) len: usize,
}

/// Buffers the pool keeps; more given back at once are freed.
pub(super) const SCRATCH_POOL_BUFFERS: usize = 256;

/// Free register buffers, the largest request so far, and how many
/// buffers exist (free or taken).
pub(super) struct ScratchPool {
    pub(super) buffers: Vec<Vec<f64>>,
    pub(super) largest: usize,
    pub(super) existing: usize,
}

pub(super) static SCRATCH_POOL: std::sync::Mutex<ScratchPool> =
    std::sync::Mutex::new(ScratchPool {
        buffers: Vec::new(),
        largest: 0,
        existing: 0,
    });

/// Makes sure enough buffers exist for every thread that may run a chunk
/// meanwhile to hold `per_thread` at once: called by a parallel loop
/// before each chunk takes its registers. A thread holds one chunk's
/// registers at a time (a chunk runs its blocks without waiting on other
/// work), so the buffers in use never outnumber those threads times the
/// most one chunk takes, and no step after the first allocates
/// registers, however the scheduler interleaves nodes (taking one buffer
/// at a time, a new buffer was made whenever an interleaving held more at
/// once than any before it). The threads are the current pool's and, as
/// many again as the machine has cores, those of another pool running at
/// the same time (a graph node on the graph's pool driving assignments on
/// a pool of its own, as the multigrid inside the projection's solve
/// node does).
pub(super) fn reserve_scratch(per_thread: usize) {
    // Asked once: `available_parallelism` reads cgroup files on Linux,
    // which cost more than a small kernel.
    static CORES: OnceLock<usize> = OnceLock::new();
    let elsewhere =
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let wanted = per_thread
        .saturating_mul(rayon::current_num_threads().saturating_add(elsewhere))
        .min(SCRATCH_POOL_BUFFERS);
    let (missing, largest) = {
        let mut pool = scratch_pool();
        if pool.existing >= wanted {
            return;
        }
        let missing = wanted - pool.existing;
        pool.existing = wanted;
        (missing, pool.largest)
    };
    let fresh: Vec<Vec<f64>> = (0..missing).map(|_| vec![0.0; largest]).collect();
    scratch_pool().buffers.extend(fresh);
}

/// The pool, also after a panic elsewhere while it was locked: its buffers
/// are plain memory whose values nobody relies on.
pub(super) fn scratch_pool() -> std::sync::MutexGuard<'static, ScratchPool> {
    SCRATCH_POOL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Scratch {
    /// `len` registers points (initialised memory; see the type's doc for
    /// their values).
    pub(super) fn take(len: usize) -> Scratch {
        let (reused, largest) = {
            let mut pool = scratch_pool();
            if len > pool.largest {
                // Grow every free buffer now, while this request is new
                // (a first step), not when a later step happens to take
                // one that no step has used yet (the reserve's spares).
                pool.largest = len;
                for buffer in &mut pool.buffers {
                    buffer.resize(len, 0.0);
                }
            }
            // All buffers are normally of the largest size; the smallest
            // that fits keeps the others for larger requests.
            let fitting = pool
                .buffers
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= len)
                .min_by_key(|(_, b)| b.len())
                .map(|(i, _)| i);
            let index = fitting.or_else(|| pool.buffers.len().checked_sub(1));
            if index.is_none() {
                pool.existing += 1;
            }
            (index.map(|i| pool.buffers.swap_remove(i)), pool.largest)
        };
        let mut values = reused.unwrap_or_default();
        if values.len() < largest {
            values.reserve_exact(largest - values.len());
            values.resize(largest, 0.0);
        }
        if cfg!(debug_assertions) {
            values[..len].fill(f64::NAN);
        }
        Scratch { values, len }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let mut values = std::mem::take(&mut self.values);
        let largest = scratch_pool().largest;
        // A buffer out while a larger request came is grown now, in the
        // step that made that request, not in a later one that takes it.
        if values.len() < largest {
            values.reserve_exact(largest - values.len());
            values.resize(largest, 0.0);
        }
        let mut pool = scratch_pool();
        if pool.buffers.len() < SCRATCH_POOL_BUFFERS {
            pool.buffers.push(values);
        } else {
            pool.existing = pool.existing.saturating_sub(1);
        }
    }
}

impl std::ops::Deref for Scratch {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        &self.values[..self.len]
    }
}

impl std::ops::DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [f64] {
        &mut self.values[..self.len]
    }
}
