//! Fused assignment vs a hand-written Rust loop (the operators issue's speed
//! target: >= 0.9x the hand loop's throughput).
//!
//! Two computations at 64^3 and 128^3 (one ghost layer), each with 1 and 2
//! threads:
//! * diffusion: `rhs = div(interp(gamma) * grad(phi))`, 7-point, field-valued gamma;
//! * chain: `rhs = gamma * exp(-phi) + 0.5 * phi * phi - 1`;
//! * functions: `rhs = log(gamma) * sin(phi) + pow(gamma, 0.7) + tanh(phi) +
//!   cos(phi)`, against a hand loop calling the scalar libm functions (the
//!   vector math of `vmath` against glibc, one call per element).
//!
//! The hand loops are what a performance-aware user writes: one pass, row
//! slices, fluxes computed on the fly. Both sides run on the same thread
//! counts, in the same rayon pool (the hand loop cuts the z planes into
//! runs as the evaluator cuts its rows). Reported: median time, points per second,
//! useful bytes per second (phi, gamma read, rhs written: 24 B per point)
//! next to the copy bandwidth measured in the same run, and the ratio.
//! Two copy figures: `copy_from_slice` of a whole field on one thread
//! (glibc's `memcpy`, which streams large copies past the cache with
//! non-temporal stores), and a STREAM-style copy with the kernels' thread
//! count and row partition (row-sized copies, which write-allocate like
//! the kernels and like STREAM's `c[i] = a[i]` built by gcc): "%copy bw"
//! is against the latter, the like-for-like yardstick.
//!
//! Then the per-call cost of small assignments (a multigrid smoother
//! `t = x + w (b - lap x)` on 8^2 to 128^2 cells, one thread): an
//! unprepared `assign_node` call against a `PreparedAssignment` run.
//! Run: `cargo bench -p watershed-operators --bench assign`
//! (`WATERSHED_SIZES=` with no size runs only the small table).

use rayon::prelude::*;
use std::hint::black_box;
use std::time::Instant;
use watershed_fields::{CellCentre, Device, FieldLayout, Grid, SpatialField};
use watershed_operators::{
    Assign, AssignOptions, Backend, Parallelism, PreparedAssignment, Region, assign_node, cos, div,
    exp, field, grad, interp, laplacian, log, pow, sin, tanh,
};

fn median_seconds(samples: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let mut times: Vec<f64> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(|a, b| a.partial_cmp(b).expect("finite times"));
    times[samples / 2]
}

/// Index arithmetic shared by the hand loops.
#[derive(Clone, Copy)]
struct Geometry {
    n: usize,
    origin: usize,
    sy: usize,
    sz: usize,
    inv: [f64; 3],
}

/// Hand-written diffusion over planes `k0..k1`; `out` starts at linear index `base`.
fn diffusion_planes(
    p: &[f64],
    g: &[f64],
    out: &mut [f64],
    base: usize,
    k0: usize,
    k1: usize,
    geo: Geometry,
) {
    let Geometry {
        n,
        origin,
        sy,
        sz,
        inv,
    } = geo;
    for k in k0..k1 {
        for j in 0..n {
            let c = origin + j * sy + k * sz;
            let p_c = &p[c - 1..c + n + 1];
            let g_c = &g[c - 1..c + n + 1];
            let (p_s, p_n) = (&p[c - sy..c - sy + n], &p[c + sy..c + sy + n]);
            let (g_s, g_n) = (&g[c - sy..c - sy + n], &g[c + sy..c + sy + n]);
            let (p_b, p_t) = (&p[c - sz..c - sz + n], &p[c + sz..c + sz + n]);
            let (g_b, g_t) = (&g[c - sz..c - sz + n], &g[c + sz..c + sz + n]);
            let o = &mut out[c - base..c - base + n];
            for i in 0..n {
                let (pc, gc) = (p_c[i + 1], g_c[i + 1]);
                let fx_hi = 0.5 * (g_c[i + 2] + gc) * (p_c[i + 2] - pc) * inv[0];
                let fx_lo = 0.5 * (gc + g_c[i]) * (pc - p_c[i]) * inv[0];
                let fy_hi = 0.5 * (g_n[i] + gc) * (p_n[i] - pc) * inv[1];
                let fy_lo = 0.5 * (gc + g_s[i]) * (pc - p_s[i]) * inv[1];
                let fz_hi = 0.5 * (g_t[i] + gc) * (p_t[i] - pc) * inv[2];
                let fz_lo = 0.5 * (gc + g_b[i]) * (pc - p_b[i]) * inv[2];
                o[i] =
                    (fx_hi - fx_lo) * inv[0] + (fy_hi - fy_lo) * inv[1] + (fz_hi - fz_lo) * inv[2];
            }
        }
    }
}

/// Calls `row(out_row, c)` for every interior row of planes `k0..k1`,
/// where `c` is the row's first linear index in the fields and `out_row`
/// the matching slice of `out` (which starts at linear index `base`).
#[inline(always)]
fn for_each_row(
    out: &mut [f64],
    base: usize,
    k0: usize,
    k1: usize,
    geo: Geometry,
    mut row: impl FnMut(&mut [f64], usize),
) {
    let Geometry {
        n, origin, sy, sz, ..
    } = geo;
    for k in k0..k1 {
        for j in 0..n {
            let c = origin + j * sy + k * sz;
            row(&mut out[c - base..c - base + n], c);
        }
    }
}

/// Hand-written pointwise chain over planes `k0..k1`.
fn chain_planes(
    p: &[f64],
    g: &[f64],
    out: &mut [f64],
    base: usize,
    k0: usize,
    k1: usize,
    geo: Geometry,
) {
    let n = geo.n;
    for_each_row(out, base, k0, k1, geo, |o, c| {
        for ((o, &pv), &gv) in o.iter_mut().zip(&p[c..c + n]).zip(&g[c..c + n]) {
            *o = gv * (-pv).exp() + 0.5 * pv * pv - 1.0;
        }
    });
}

/// Hand-written transcendental functions with the scalar libm.
fn functions_planes(
    p: &[f64],
    g: &[f64],
    out: &mut [f64],
    base: usize,
    k0: usize,
    k1: usize,
    geo: Geometry,
) {
    let n = geo.n;
    for_each_row(out, base, k0, k1, geo, |o, c| {
        for ((o, &pv), &gv) in o.iter_mut().zip(&p[c..c + n]).zip(&g[c..c + n]) {
            *o = gv.ln() * pv.sin() + gv.powf(0.7) + pv.tanh() + pv.cos();
        }
    });
}

/// STREAM-style copy of `p` into `out`, row by row (16 B per point).
fn copy_planes(
    p: &[f64],
    _g: &[f64],
    out: &mut [f64],
    base: usize,
    k0: usize,
    k1: usize,
    geo: Geometry,
) {
    let n = geo.n;
    for_each_row(out, base, k0, k1, geo, |o, c| {
        o.copy_from_slice(&p[c..c + n])
    });
}

type PlaneLoop = fn(&[f64], &[f64], &mut [f64], usize, usize, usize, Geometry);

/// Runs a hand loop on `threads` threads: the z planes are cut into
/// `4 * threads` runs (as the evaluator cuts its rows), each owning its
/// planes' rows of `out`.
fn hand_loop(
    threads: usize,
    body: PlaneLoop,
    p: &[f64],
    g: &[f64],
    out: &mut [f64],
    geo: Geometry,
) {
    if threads <= 1 {
        body(p, g, out, 0, 0, geo.n, geo);
        return;
    }
    let runs = 4 * threads;
    let mut pieces = Vec::new();
    let mut rest = out;
    let mut consumed = 0;
    for t in 0..runs {
        let (k0, k1) = (t * geo.n / runs, (t + 1) * geo.n / runs);
        let end = if t + 1 == runs {
            consumed + rest.len()
        } else {
            geo.origin + k1 * geo.sz
        };
        let (piece, tail) = rest.split_at_mut(end - consumed);
        pieces.push((piece, consumed, k0, k1));
        rest = tail;
        consumed = end;
    }
    pieces
        .into_par_iter()
        .for_each(|(piece, base, k0, k1)| body(p, g, piece, base, k0, k1, geo));
}

fn main() {
    println!(
        "threads available: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let sizes: Vec<usize> = std::env::var("WATERSHED_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![64, 128, 256]);
    let backends = [("interp", Backend::Interpreter), ("C", Backend::C)];
    for n in sizes {
        let grid = Grid::new([n, n, n], [1.0; 3], [0.0; 3]).expect("valid grid");
        let patch = grid.whole_domain(1);
        let layout = FieldLayout::new(&patch, watershed_fields::LocationKind::CellCentre);
        let mut phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu).expect("field");
        let mut gamma =
            SpatialField::<CellCentre>::new("gamma", &patch, Device::Cpu).expect("field");
        let mut rhs = SpatialField::<CellCentre>::new("rhs", &patch, Device::Cpu).expect("field");
        let mut reference =
            SpatialField::<CellCentre>::new("reference", &patch, Device::Cpu).expect("field");
        for index in layout.allocated() {
            let [x, y, z] = layout.coordinate(index);
            let at = layout.linear_index(index);
            phi.values_mut().expect("cpu")[at] = (6.0 * x).sin() * (4.0 * y).cos() + z;
            gamma.values_mut().expect("cpu")[at] = 1.0 + 0.5 * x * y + z * z;
        }
        let strides = layout.strides();
        let (sy, sz) = (strides[1], strides[2]);
        let origin = layout.linear_index([0; 3]);
        let h = grid.spacing();
        let geometry = Geometry {
            n,
            origin,
            sy,
            sz,
            inv: [1.0 / h[0], 1.0 / h[1], 1.0 / h[2]],
        };
        let points = (n * n * n) as f64;
        let bytes_per_point = 24.0;

        // Copy bandwidth in this run: read phi, write reference.
        let copy = {
            let src = phi.values().expect("cpu").to_vec();
            let mut dst = vec![0.0; src.len()];
            median_seconds(11, || {
                dst.copy_from_slice(black_box(&src));
                black_box(&dst);
            }) / src.len() as f64
        };
        println!(
            "\n== {n}^3 (one ghost layer)   memcpy of a field, 1 thread: {:.1} GB/s (read + write)",
            16.0 / copy / 1e9
        );
        println!(
            "{:<16} {:>7} {:>12} {:>12} {:>10} {:>11} {:>9} {:>7}",
            "case",
            "threads",
            "fused ms",
            "hand ms",
            "fused Gpt/s",
            "fused GB/s",
            "%copy bw",
            "ratio"
        );

        for threads in [1usize, 2] {
            let parallelism = if threads == 1 {
                Parallelism::Serial
            } else {
                Parallelism::Threads(threads)
            };
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");

            // STREAM-style copy with this thread count (read + write).
            let copy_bandwidth = {
                let (p, g) = (phi.values().expect("cpu"), gamma.values().expect("cpu"));
                let out = reference.values_mut().expect("cpu");
                let seconds = pool.install(|| {
                    median_seconds(31, || hand_loop(threads, copy_planes, p, g, out, geometry))
                });
                16.0 * points / seconds
            };
            println!(
                "   STREAM-style copy, {threads} thread(s): {:.1} GB/s (read + write)",
                copy_bandwidth / 1e9
            );

            // --- diffusion ---
            let hand = {
                let (p, g) = (phi.values().expect("cpu"), gamma.values().expect("cpu"));
                let out = reference.values_mut().expect("cpu");
                pool.install(|| {
                    median_seconds(31, || {
                        hand_loop(threads, diffusion_planes, p, g, out, geometry)
                    })
                })
            };
            for (name, backend) in backends {
                let options = AssignOptions {
                    region: Region::Interior,
                    parallelism,
                    backend,
                    ..AssignOptions::default()
                };
                let fused = pool.install(|| {
                    median_seconds(31, || {
                        rhs.assign_with(div(interp(&gamma) * grad(&phi)), options)
                            .expect("assign");
                    })
                });
                let worst = max_relative_difference(&rhs, &reference, &layout);
                report(
                    &format!("diffusion {name}"),
                    threads,
                    fused,
                    hand,
                    points,
                    bytes_per_point,
                    copy_bandwidth,
                    worst,
                );
            }

            // --- pointwise chain ---
            let hand = {
                let (p, g) = (phi.values().expect("cpu"), gamma.values().expect("cpu"));
                let out = reference.values_mut().expect("cpu");
                pool.install(|| {
                    median_seconds(31, || hand_loop(threads, chain_planes, p, g, out, geometry))
                })
            };
            for (name, backend) in backends {
                let options = AssignOptions {
                    region: Region::Interior,
                    parallelism,
                    backend,
                    ..AssignOptions::default()
                };
                let fused = pool.install(|| {
                    median_seconds(31, || {
                        rhs.assign_with(
                            &gamma * exp(-field(&phi)) + 0.5 * field(&phi) * &phi - 1.0,
                            options,
                        )
                        .expect("assign");
                    })
                });
                let worst = max_relative_difference(&rhs, &reference, &layout);
                report(
                    &format!("chain {name}"),
                    threads,
                    fused,
                    hand,
                    points,
                    bytes_per_point,
                    copy_bandwidth,
                    worst,
                );
            }

            // --- transcendental functions ---
            let hand = {
                let (p, g) = (phi.values().expect("cpu"), gamma.values().expect("cpu"));
                let out = reference.values_mut().expect("cpu");
                pool.install(|| {
                    median_seconds(11, || {
                        hand_loop(threads, functions_planes, p, g, out, geometry)
                    })
                })
            };
            for (name, backend) in backends {
                let options = AssignOptions {
                    region: Region::Interior,
                    parallelism,
                    backend,
                    ..AssignOptions::default()
                };
                let fused = pool.install(|| {
                    median_seconds(11, || {
                        rhs.assign_with(
                            log(&gamma) * sin(&phi) + pow(&gamma, 0.7) + tanh(&phi) + cos(&phi),
                            options,
                        )
                        .expect("assign");
                    })
                });
                let worst = max_relative_difference(&rhs, &reference, &layout);
                report(
                    &format!("functions {name}"),
                    threads,
                    fused,
                    hand,
                    points,
                    bytes_per_point,
                    copy_bandwidth,
                    worst,
                );
            }
        }
    }
    small_assignments();
}

/// Microseconds per call of a smoother sweep on `n`^2 cells, unprepared
/// and prepared, with `backend`.
fn small_assignment(n: usize, backend: Backend) -> (f64, f64) {
    let grid = Grid::new([n, n, 1], [1.0 / n as f64; 3], [0.0; 3]).expect("valid grid");
    let patch = grid.whole_domain(1);
    let make = |name: &str| SpatialField::<CellCentre>::new(name, &patch, Device::Cpu);
    let (mut x, mut b, mut t) = (
        make("x").expect("x"),
        make("b").expect("b"),
        make("t").expect("t"),
    );
    x.fill(1.0).expect("fill");
    b.fill(0.5).expect("fill");
    let root = (field(&x) + 0.2 * (field(&b) - laplacian(&x)))
        .node()
        .clone();
    let options = AssignOptions {
        parallelism: Parallelism::Serial,
        backend,
        ..AssignOptions::default()
    };
    let calls = 2000;
    let unprepared = median_seconds(11, || {
        for _ in 0..calls {
            assign_node(&mut t, &root, &[&x, &b], options).expect("assign");
        }
    });
    let mut step =
        PreparedAssignment::new(&t, t.id(), &root, &[&x, &b], options, &[]).expect("prepare");
    let prepared = median_seconds(11, || {
        for _ in 0..calls {
            step.run(&mut t, &[&x, &b]).expect("run");
        }
    });
    let per_call = |s: f64| s / calls as f64 * 1e6;
    (per_call(unprepared), per_call(prepared))
}

fn small_assignments() {
    println!();
    println!("## Small assignments: microseconds per call (smoother sweep, one thread)");
    println!("| cells | back end | assign_node | PreparedAssignment::run | ratio |");
    println!("| --- | --- | --- | --- | --- |");
    for n in [8, 16, 64, 128] {
        for (name, backend) in [("interp", Backend::Interpreter), ("C", Backend::C)] {
            let (unprepared, prepared) = small_assignment(n, backend);
            println!(
                "| {n}^2 | {name} | {unprepared:.2} | {prepared:.2} | {:.2} |",
                unprepared / prepared
            );
        }
    }
}

fn max_relative_difference(
    a: &SpatialField<CellCentre>,
    b: &SpatialField<CellCentre>,
    layout: &FieldLayout,
) -> f64 {
    let (a, b) = (a.values().expect("cpu"), b.values().expect("cpu"));
    layout
        .interior()
        .iter()
        .map(|i| {
            let at = layout.linear_index(i);
            (a[at] - b[at]).abs() / b[at].abs().max(1.0)
        })
        .fold(0.0, f64::max)
}

#[allow(clippy::too_many_arguments)]
fn report(
    case: &str,
    threads: usize,
    fused: f64,
    hand: f64,
    points: f64,
    bytes: f64,
    copy: f64,
    worst: f64,
) {
    assert!(
        worst < 1e-10,
        "{case}: fused and hand loop disagree by {worst:e}"
    );
    println!(
        "{:<16} {:>7} {:>12.3} {:>12.3} {:>10.3} {:>11.2} {:>8.0}% {:>7.2}",
        case,
        threads,
        fused * 1e3,
        hand * 1e3,
        points / fused / 1e9,
        points * bytes / fused / 1e9,
        100.0 * points * bytes / fused / copy,
        hand / fused
    );
}
