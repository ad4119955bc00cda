//! The ExprLib scalability test of the thesis (section 5.2): N transport
//! equations (N = 30 by default, `WATERSHED_PDES` to change), each with
//! diffusive fluxes in x, y and z, a source term, a right-hand side and a
//! forward-Euler update, in three variants:
//! * diffusion only;
//! * independent sources `s_i = exp(phi_i)`;
//! * coupled sources `s_i = sum_j exp(phi_j)`.
//!
//! On 32^3 and 64^3 it reports time per step with 1 and 2 threads, the
//! speedup, peak scratch memory with and without reuse, and the effect of
//! fusion; and compares the fused diffusion-only graph with one hand-fused
//! stencil loop doing the same update (target: >= 0.8x its throughput).
//! Run: `cargo bench -p watershed-cases --bench scalability` (the graph is
//! the case library's, `watershed_cases::cases::scalability`).

use rayon::prelude::*;
use std::time::Instant;
use watershed_cases::cases::scalability::exprlib_graph;
use watershed_exprgraph::{ExecutionMode, ExpressionGraph};
use watershed_fields::{Grid, LocationKind, Patch};

const DT: f64 = 1e-6;

const VARIANTS: [&str; 3] = ["diffusion", "independent", "coupled"];

/// The case library's ExprLib graph (fluxes, source, right-hand side and
/// update per equation), with gamma and the phi_i set.
fn build(patch: &Patch, pdes: usize, variant: &str, fusion: bool) -> ExpressionGraph {
    exprlib_graph(patch, pdes, variant, DT, fusion).expect("build")
}

fn seconds_per_step(graph: &ExpressionGraph, mode: ExecutionMode, steps: usize) -> f64 {
    graph.execute(mode).expect("warm-up");
    let mut times: Vec<f64> = (0..steps)
        .map(|_| graph.execute(mode).expect("execute").elapsed.as_secs_f64())
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[steps / 2]
}

/// One hand-fused loop per equation: phi_next = phi + dt * div(gamma grad phi).
fn hand_fused_step(
    patch: &Patch,
    gamma: &[f64],
    phis: &[Vec<f64>],
    out: &mut [Vec<f64>],
    threads: usize,
) -> f64 {
    let layout = watershed_fields::FieldLayout::new(patch, LocationKind::CellCentre);
    let [n, _, _] = layout.interior_extent();
    let strides = layout.strides();
    let (sy, sz) = (strides[1], strides[2]);
    let origin = layout.linear_index([0; 3]);
    let h = patch.grid().spacing();
    let inv = [1.0 / h[0], 1.0 / h[1], 1.0 / h[2]];
    let update = |p: &[f64], o: &mut [f64]| {
        for k in 0..n {
            for j in 0..n {
                let c = origin + j * sy + k * sz;
                let g = gamma;
                for i in c..c + n {
                    let (pc, gc) = (p[i], g[i]);
                    let fx = 0.5 * (g[i + 1] + gc) * (p[i + 1] - pc) * inv[0]
                        - 0.5 * (gc + g[i - 1]) * (pc - p[i - 1]) * inv[0];
                    let fy = 0.5 * (g[i + sy] + gc) * (p[i + sy] - pc) * inv[1]
                        - 0.5 * (gc + g[i - sy]) * (pc - p[i - sy]) * inv[1];
                    let fz = 0.5 * (g[i + sz] + gc) * (p[i + sz] - pc) * inv[2]
                        - 0.5 * (gc + g[i - sz]) * (pc - p[i - sz]) * inv[2];
                    o[i] = pc + DT * (fx * inv[0] + fy * inv[1] + fz * inv[2]);
                }
            }
        }
    };
    let start = Instant::now();
    if threads <= 1 {
        for (p, o) in phis.iter().zip(out.iter_mut()) {
            update(p, o);
        }
    } else {
        phis.par_iter()
            .zip(out.par_iter_mut())
            .for_each(|(p, o)| update(p, o));
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    let pdes: usize = std::env::var("WATERSHED_PDES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    println!("N = {pdes} equations; times are medians per step");
    for n in [32usize, 64] {
        let patch = Grid::new([n, n, n], [1.0; 3], [0.0; 3])
            .expect("grid")
            .whole_domain(1);
        let points = (n * n * n * pdes) as f64;
        println!("\n== {n}^3 ==");
        println!(
            "{:<12} {:<7} {:>6} {:>13} {:>13} {:>8} {:>16} {:>16}",
            "variant",
            "fusion",
            "nodes",
            "1 thread ms",
            "2 threads ms",
            "speedup",
            "peak reuse MiB",
            "peak no-reuse MiB"
        );
        let steps = if n == 32 { 9 } else { 5 };
        let mut fused_diffusion = (0.0, 0.0);
        for variant in VARIANTS {
            for fusion in [false, true] {
                let graph = build(&patch, pdes, variant, fusion);
                let serial = seconds_per_step(&graph, ExecutionMode::Serial, steps);
                let threaded = seconds_per_step(&graph, ExecutionMode::Threaded(2), steps);
                let plan = graph.memory_plan();
                let mib = |b: usize| b as f64 / (1 << 20) as f64;
                println!(
                    "{:<12} {:<7} {:>6} {:>13.2} {:>13.2} {:>8.2} {:>16.1} {:>16.1}",
                    variant,
                    if fusion { "on" } else { "off" },
                    graph.node_count(),
                    serial * 1e3,
                    threaded * 1e3,
                    serial / threaded,
                    mib(plan.peak_with_reuse),
                    mib(plan.peak_without_reuse)
                );
                if variant == "diffusion" && fusion {
                    fused_diffusion = (serial, threaded);
                }
            }
        }
        // The hand-fused reference for the diffusion-only update.
        let layout = watershed_fields::FieldLayout::new(&patch, LocationKind::CellCentre);
        let len = layout.allocated_len();
        let gamma: Vec<f64> = vec![1.0; len];
        let phis: Vec<Vec<f64>> = (0..pdes)
            .map(|i| (0..len).map(|k| ((k + i) as f64).sin()).collect())
            .collect();
        let mut out: Vec<Vec<f64>> = vec![vec![0.0; len]; pdes];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let mut hand = [0.0f64; 2];
        for (slot, threads) in [(0, 1usize), (1, 2)] {
            let mut v: Vec<f64> = (0..steps)
                .map(|_| pool.install(|| hand_fused_step(&patch, &gamma, &phis, &mut out, threads)))
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            hand[slot] = v[steps / 2];
        }
        println!(
            "hand-fused diffusion update: {:.2} ms (1 thread), {:.2} ms (2 threads); fused graph / hand throughput: {:.2} (1 thread), {:.2} (2 threads); graph {:.1} Mpoint-updates/s",
            hand[0] * 1e3,
            hand[1] * 1e3,
            hand[0] / fused_diffusion.0,
            hand[1] / fused_diffusion.1,
            points / fused_diffusion.0 / 1e6
        );
    }
}
