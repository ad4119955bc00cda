//! Memory pool tests: reuse, statistics, high-water marks, leak reports,
//! pinned fallback accounting and concurrent use.

use proptest::prelude::*;
use std::sync::Arc;
use watershed_fields::pool::size_class;
use watershed_fields::*;

#[test]
fn freed_blocks_are_reused_for_the_same_size_class() {
    let pool = MemoryPool::host(HostMemory::Pageable);
    let first = pool.allocate(10_000, "a").unwrap();
    let address = first.address();
    assert_eq!(first.bytes(), size_class(10_000));
    assert_eq!(first.address() % pool::HOST_ALIGNMENT, 0);
    drop(first);
    let second = pool.allocate(10_000, "b").unwrap();
    assert_eq!(
        second.address(),
        address,
        "the freed block is handed out again"
    );
    // A request in another class does not take it.
    let other = pool.allocate(100_000, "c").unwrap();
    assert_ne!(other.address(), address);
    let stats = pool.statistics();
    assert_eq!((stats.hits, stats.misses), (1, 2));
    assert_eq!(stats.blocks_active, 2);
    assert_eq!(stats.blocks_total, 2);
}

#[test]
fn statistics_and_high_water_marks_track_active_and_total_bytes() {
    let pool = MemoryPool::host(HostMemory::Pageable);
    let sizes = [4096, 8192, 4096];
    let blocks: Vec<_> = sizes
        .iter()
        .map(|&n| pool.allocate(n, "x").unwrap())
        .collect();
    let peak: usize = sizes.iter().map(|&n| size_class(n)).sum();
    let stats = pool.statistics();
    assert_eq!(stats.bytes_active, peak);
    assert_eq!(stats.high_water_bytes_active, peak);
    assert_eq!(stats.bytes_total, peak);
    drop(blocks);
    let stats = pool.statistics();
    assert_eq!(stats.bytes_active, 0);
    assert_eq!(stats.blocks_active, 0);
    assert_eq!(stats.bytes_total, peak, "freed blocks stay cached");
    assert_eq!(stats.high_water_bytes_active, peak);
    pool.reset_counters();
    assert_eq!(pool.statistics().high_water_bytes_active, 0);
    assert_eq!(pool.release_cached(), peak);
    let stats = pool.statistics();
    assert_eq!((stats.bytes_total, stats.blocks_total), (0, 0));
    assert_eq!(stats.high_water_bytes_total, peak);
}

#[test]
fn leak_check_names_the_holders() {
    let pool = MemoryPool::host(HostMemory::Pageable);
    let grid = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let kept = SpatialField::<CellCentre>::builder("pressure", &patch)
        .cpu_pool(pool.clone())
        .build()
        .unwrap();
    {
        let _temporary = SpatialField::<XFace>::builder("flux", &patch)
            .cpu_pool(pool.clone())
            .build()
            .unwrap();
        assert_eq!(pool.outstanding().len(), 2);
    }
    let err = pool.check_no_leaks().unwrap_err();
    let message = err.to_string();
    assert!(message.contains("1 outstanding block"), "{message}");
    assert!(
        message.contains("'pressure'") && !message.contains("'flux'"),
        "{message}"
    );
    drop(kept);
    assert!(pool.check_no_leaks().is_ok());
}

#[test]
fn fields_reuse_pool_memory_and_start_zeroed() {
    let pool = MemoryPool::host(HostMemory::Pageable);
    let grid = Grid::new([6, 5, 4], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(2);
    let mut a = SpatialField::<CellCentre>::builder("a", &patch)
        .cpu_pool(pool.clone())
        .build()
        .unwrap();
    a.fill(7.0).unwrap();
    drop(a);
    let b = SpatialField::<CellCentre>::builder("b", &patch)
        .cpu_pool(pool.clone())
        .build()
        .unwrap();
    assert!(
        b.values().unwrap().iter().all(|&v| v == 0.0),
        "a new field starts at zero"
    );
    drop(b);
    let c = SpatialField::<CellCentre>::builder("c", &patch)
        .cpu_pool(pool.clone())
        .init(FieldInit::Unspecified)
        .build()
        .unwrap();
    assert!(c.values().unwrap().iter().all(|&v| v == 0.0 || v == 7.0));
    let stats = pool.statistics();
    assert_eq!((stats.misses, stats.hits), (1, 2));
}

#[test]
fn pinned_pools_fall_back_to_pageable_memory_and_count_it() {
    let pool = MemoryPool::host(HostMemory::Pinned);
    let block = pool.allocate(1 << 16, "staging").unwrap();
    let stats = pool.statistics();
    if watershed_fields::gpu::gpu_count() == 0 {
        assert!(!block.is_pinned());
        assert_eq!(stats.pinned_fallbacks, 1);
    } else {
        assert_eq!(stats.pinned_fallbacks, u64::from(!block.is_pinned()));
    }
    // Usable memory either way.
    // SAFETY: the block holds 65536 writable host bytes.
    unsafe { std::ptr::write_bytes(block.address() as *mut u8, 0xAB, 1 << 16) };
}

#[test]
fn concurrent_get_and_put_from_several_threads_keeps_the_books_balanced() {
    let pool = MemoryPool::host(HostMemory::Pageable);
    let threads = 8;
    let rounds = 400;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let pool = pool.clone();
            scope.spawn(move || {
                let mut held = Vec::new();
                for r in 0..rounds {
                    let bytes = 512 * (1 + (t * 7 + r * 3) % 5);
                    let block = pool
                        .allocate(bytes, Arc::<str>::from(format!("t{t}")))
                        .unwrap();
                    // Write a thread-specific pattern and check nobody else did.
                    let p = block.address() as *mut u8;
                    // SAFETY: the block holds at least `bytes` writable bytes.
                    unsafe {
                        std::ptr::write_bytes(p, t as u8, bytes);
                    }
                    held.push((block, bytes));
                    if r % 3 == 0 {
                        let (block, bytes) = held.remove(0);
                        // SAFETY: as above.
                        let slice = unsafe {
                            std::slice::from_raw_parts(block.address() as *const u8, bytes)
                        };
                        assert!(
                            slice.iter().all(|&b| b == t as u8),
                            "block shared between threads"
                        );
                    }
                }
            });
        }
    });
    let stats = pool.statistics();
    assert_eq!(stats.blocks_active, 0);
    assert_eq!(stats.bytes_active, 0);
    assert_eq!(stats.hits + stats.misses, (threads * rounds) as u64);
    assert!(stats.hits > 0);
    assert!(stats.high_water_bytes_active <= stats.bytes_total.max(stats.high_water_bytes_total));
    pool.check_no_leaks().unwrap();
}

proptest! {
    /// Size classes hold the request with at most 25 % slack, and are
    /// monotone in the request.
    #[test]
    fn size_classes_bound_the_slack(bytes in 1usize..(1 << 40)) {
        let class = size_class(bytes);
        prop_assert!(class >= bytes);
        prop_assert!(bytes <= 256 || class as f64 <= bytes as f64 * 1.25 + 1.0);
        prop_assert!(size_class(bytes + 1) >= class);
    }

    /// Any interleaving of allocations and frees: books balance, the
    /// high-water mark is the true peak of active bytes.
    #[test]
    fn random_get_put_sequences_balance(
        steps in proptest::collection::vec((any::<bool>(), 1usize..5000), 1..80)
    ) {
        let pool = MemoryPool::host(HostMemory::Pageable);
        let mut held = Vec::new();
        let mut active = 0usize;
        let mut peak = 0usize;
        for (free, bytes) in steps {
            if free && !held.is_empty() {
                let block: PoolBlock = held.swap_remove(bytes % held.len());
                active -= block.bytes();
            } else {
                let block = pool.allocate(bytes, "p").unwrap();
                active += block.bytes();
                held.push(block);
            }
            peak = peak.max(active);
            let stats = pool.statistics();
            prop_assert_eq!(stats.bytes_active, active);
            prop_assert_eq!(stats.blocks_active, held.len());
            prop_assert_eq!(stats.high_water_bytes_active, peak);
            prop_assert!(stats.bytes_total >= stats.bytes_active);
        }
        drop(held);
        prop_assert!(pool.check_no_leaks().is_ok());
    }
}
