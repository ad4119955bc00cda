//! Benchmarks of the foundation layer, with a small harness (median of
//! repeated timings; run with `scripts/bench.sh` or
//! `cargo bench -p watershed-fields --bench fields`).
//!
//! * the cost of obtaining a field: a warm pool hit versus a fresh zeroed
//!   allocation that is then touched (what a pool saves every time step);
//! * host memory bandwidth (copy and triad) on field-sized arrays: the
//!   ceiling the fused evaluator of the operators crate is measured against;
//! * HDF5 write throughput of one field.

use std::hint::black_box;
use std::time::{Duration, Instant};
use watershed_fields::io::{GhostSelection, write_field};
use watershed_fields::*;

/// Median seconds per call of `f` over `samples` timings of `batch` calls.
fn time_median(samples: usize, batch: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let mut times: Vec<Duration> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed()
        })
        .collect();
    times.sort();
    times[samples / 2].as_secs_f64() / batch as f64
}

fn main() {
    // `cargo bench` passes "--bench"; ignore arguments.
    println!(
        "machine: {} threads available",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for n in [64usize, 128, 256] {
        let grid = Grid::new([n, n, n], [1.0; 3], [0.0; 3]).unwrap();
        let patch = grid.whole_domain(1);
        let points = FieldLayout::new(&patch, LocationKind::CellCentre).allocated_len();
        let bytes = points * 8;
        println!(
            "\n== {n}^3 cells, 1 ghost layer: {points} points, {:.1} MiB per field",
            bytes as f64 / (1 << 20) as f64
        );

        // Obtaining a field.
        let pool = MemoryPool::host(HostMemory::Pageable);
        let hit = time_median(21, 20, || {
            let field = SpatialField::<CellCentre>::builder("f", &patch)
                .cpu_pool(pool.clone())
                .init(FieldInit::Unspecified)
                .build()
                .unwrap();
            black_box(&field);
        });
        let hit_zero = time_median(21, 5, || {
            let field = SpatialField::<CellCentre>::builder("f", &patch)
                .cpu_pool(pool.clone())
                .build()
                .unwrap();
            black_box(&field);
        });
        let fresh = time_median(21, 5, || {
            let mut v = vec![0.0f64; points];
            // Touch every page, as the first use of the field would.
            for x in v.iter_mut().step_by(512) {
                *x = 1.0;
            }
            black_box(&v);
        });
        println!("pool hit, unspecified values: {:>10.2} us", hit * 1e6);
        println!("pool hit, zero-filled:        {:>10.2} us", hit_zero * 1e6);
        println!(
            "fresh zeroed Vec, touched:    {:>10.2} us  (pool hit is {:.0}x cheaper)",
            fresh * 1e6,
            fresh / hit
        );

        // Bandwidth.
        let src = vec![1.0f64; points];
        let other = vec![2.0f64; points];
        let mut dst = vec![0.0f64; points];
        let copy = time_median(15, 3, || {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        });
        let triad = time_median(15, 3, || {
            for ((d, a), b) in dst.iter_mut().zip(black_box(&src)).zip(black_box(&other)) {
                *d = a + 0.5 * b;
            }
            black_box(&dst);
        });
        println!(
            "copy bandwidth:  {:>7.2} GB/s (read + write)",
            2.0 * bytes as f64 / copy / 1e9
        );
        println!(
            "triad bandwidth: {:>7.2} GB/s (2 reads + write)",
            3.0 * bytes as f64 / triad / 1e9
        );

        // HDF5 write of one field (interior only).
        let mut field = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu).unwrap();
        field.fill(1.0).unwrap();
        let dir = std::env::temp_dir().join(format!("watershed-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bench.h5");
        let mut counter = 0;
        let file = hdf5::File::create(&path).unwrap();
        let write = time_median(7, 1, || {
            counter += 1;
            write_field(
                &file,
                &format!("phi{counter}"),
                &field,
                GhostSelection::Interior,
            )
            .unwrap();
        });
        drop(file);
        let _ = std::fs::remove_dir_all(&dir);
        let interior_bytes = (n * n * n * 8) as f64;
        println!(
            "HDF5 write (interior): {:>7.2} ms, {:.2} GB/s",
            write * 1e3,
            interior_bytes / write / 1e9
        );
    }
}
