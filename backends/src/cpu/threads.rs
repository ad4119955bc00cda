//! The thread policy: serial, rayon's pool, or a pool of a given size, and
//! the cutting of work into contiguous chunks for the threads.

use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::OnceLock;

/// Regions smaller than this many points run on the calling thread: waking
/// a pool costs more than it saves (results are the same either way).
pub const PARALLEL_THRESHOLD: usize = 32 * 1024;

/// How an evaluation uses threads (a value, not a flag: see faer's `Par`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Parallelism {
    /// One thread, the caller's.
    Serial,
    /// The current rayon pool (the global one, or the pool an enclosing
    /// scheduler installed): nested parallelism without oversubscription.
    #[default]
    Rayon,
    /// A dedicated pool of this many threads (cached per thread count).
    Threads(usize),
}

impl Parallelism {
    /// Runs `work` with the threads this value names, passing the thread count.
    pub fn run<R: Send>(self, work: impl FnOnce(usize) -> R + Send) -> R {
        match self {
            Parallelism::Serial => work(1),
            Parallelism::Rayon => work(rayon::current_num_threads()),
            Parallelism::Threads(n) if n <= 1 => work(1),
            Parallelism::Threads(n) => {
                static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> =
                    OnceLock::new();
                let pool = {
                    let mut pools = POOLS
                        .get_or_init(Default::default)
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    pools
                        .entry(n)
                        .or_insert_with(|| {
                            Arc::new(
                                rayon::ThreadPoolBuilder::new()
                                    .num_threads(n)
                                    .thread_name(move |i| format!("watershed-eval-{n}-{i}"))
                                    .build()
                                    .expect("building a thread pool only fails when threads cannot be spawned"),
                            )
                        })
                        .clone()
                };
                pool.install(|| work(n))
            }
        }
    }
}

/// Splits `count` items into contiguous ranges for `threads` threads
/// (several per thread, for balance).
pub(super) fn chunk_ranges(count: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let chunks = (threads * 4).clamp(1, count.max(1));
    (0..chunks)
        .map(|c| c * count / chunks..(c + 1) * count / chunks)
        .collect()
}

/// `run` over all of `items` (serial), or over contiguous chunks of them
/// on the threads of `parallelism`, the results combined with `merge`
/// (`identity` is its neutral element).
pub(super) fn run_in_chunks<T: Sync, R: Send>(
    parallelism: Parallelism,
    items: &[T],
    run: impl Fn(&[T]) -> R + Sync + Send,
    identity: impl Fn() -> R + Sync + Send,
    merge: impl Fn(R, R) -> R + Sync + Send,
) -> R {
    parallelism.run(|threads| {
        if threads <= 1 || items.len() < 2 {
            run(items)
        } else {
            chunk_ranges(items.len(), threads)
                .into_par_iter()
                .map(|range| run(&items[range]))
                .reduce(identity, merge)
        }
    })
}
