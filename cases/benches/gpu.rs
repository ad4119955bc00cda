//! GPU benchmarks of the thesis' comparisons (issue 12), for a machine with
//! a CUDA device; without one it prints why and exits successfully.
//!
//! `cargo bench -p watershed-cases --bench gpu` (or build it with
//! `--no-run` and run the binary where the GPU is). Sections:
//! * **speed-up**: the ExprLib graph (three variants, 30 PDEs unless
//!   `WATERSHED_PDES`) on one CPU thread and all on GPU 0, 16^3 to 128^3
//!   (`WATERSHED_SIZES=16,32`), time per execution, the ratio;
//! * **streams**: asynchronous (a stream per node) vs synchronous (one
//!   stream), 20 PDEs at 16^3 and 128^3;
//!   Both for the fused graph and the fine-grained one (no fusion: a
//!   kernel per expression, as the thesis ran it);
//! * **heterogeneous**: the fine-grained ExprLib graph with CPU-only
//!   (native) sources placed by the thesis' rule against the same graph on
//!   one CPU thread and the homogeneous fine-grained graph all on the GPU,
//!   30 PDEs at 64^3 and 128^3 (`WATERSHED_HETEROGENEOUS_SIZES`); walked
//!   by one thread and with the CPU nodes as tasks on every core; pinned
//!   against pageable host memory, and the share of the step that the
//!   copies of the fields crossing take (the same bytes copied alone);
//! * **bandwidth**: the fused diffusion kernel's bytes per second against
//!   a device-to-device copy of the same bytes, same run;
//! * **flow**: the lid-driven cavity (Re 100, forward Euler) with its whole
//!   step, the multigrid-preconditioned CG pressure solve included, on
//!   GPU 0 against one CPU thread and all CPU threads, 64^2 to 512^2
//!   (`WATERSHED_FLOW_SIZES`): ms per step and per CG iteration, after
//!   checking that three steps give the CPU's bits;
//! * **replay**: the fused ExprLib graph (diffusion, 30 PDEs) on GPU 0
//!   with each execution's launches enqueued one by one against the same
//!   step replayed as a CUDA graph, 16^3 to 64^3 (`WATERSHED_REPLAY_SIZES`),
//!   asynchronous and synchronous streams, after checking that both give
//!   the same bits;
//! * **allocation**: the coupled ExprLib graph (10 PDEs), fused and a node
//!   per expression, on GPU 0 with its scratch fields from the size-class
//!   pool against allocated in stream order (`cuMemAllocAsync` on each
//!   node's stream, `cuMemFreeAsync` at the end of the execution), 16^3 to
//!   128^3: ms per execution, measured alternately, identical bits checked.
//! * **calls**: the ExprLib graph (fused diffusion, asynchronous and
//!   synchronous streams; the coupled one with a node per expression),
//!   30 PDEs, 16^3 to 64^3 (`WATERSHED_CALLS_SIZES`), with every stream
//!   wait, event record and host wait the engine asks for made, against
//!   those that order nothing left out (the default): the driver calls of
//!   one execution and ms per execution, alternated, identical bits
//!   checked.
//!
//! Every GPU result is first compared with the CPU's (largest relative
//! difference printed) so that a fast wrong answer is never reported.

use std::time::Instant;
use watershed_cases::cases::scalability::{
    exprlib_graph_placed, exprlib_heterogeneous_graph, gamma, gamma_value, initial_phi, phi,
    phi_next,
};
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, GpuScratch, PlacementPolicy, StepReplay, StreamMode, Tag,
};
use watershed_fields::gpu::{GpuStream, gpu_unavailable_reason};
use watershed_fields::{
    CellCentre, Device, Grid, HostMemory, MemoryPool, Side, SpatialField, XFace, YFace,
};
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, IncompressibleFlow, IncompressibleFlowBuilder,
    TimeIntegrator,
};

fn sizes() -> Vec<usize> {
    sizes_from("WATERSHED_SIZES", &[16, 32, 64, 128])
}

/// The comma-separated sizes in `variable`, else `default`.
fn sizes_from(variable: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(variable)
        .ok()
        .map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn pdes() -> usize {
    std::env::var("WATERSHED_PDES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

/// The fused ExprLib graph on an n^3 periodic patch, placed by `placement`.
fn graph(n: usize, pdes: usize, variant: &str, placement: PlacementPolicy) -> ExpressionGraph {
    graph_fused(n, pdes, variant, placement, true)
}

fn periodic_patch(n: usize) -> watershed_fields::Patch {
    Grid::new([n; 3], [1.0; 3], [0.0; 3])
        .map(|g| g.with_periodic([true; 3]))
        .expect("grid")
        .whole_domain(1)
}

/// The ExprLib graph, fused or fine-grained (a node per expression).
fn graph_fused(
    n: usize,
    pdes: usize,
    variant: &str,
    placement: PlacementPolicy,
    fusion: bool,
) -> ExpressionGraph {
    let graph = exprlib_graph_placed(&periodic_patch(n), pdes, variant, 1e-6, fusion, placement)
        .expect("graph");
    graph
        .set_field::<CellCentre>(&gamma(), gamma_value)
        .expect("gamma");
    for i in 0..pdes {
        graph
            .set_field::<CellCentre>(&phi(i), initial_phi(i))
            .expect("phi");
    }
    graph
}

/// Median seconds per execution over `runs` after two warm-up runs.
fn seconds_per_execution(graph: &ExpressionGraph, mode: ExecutionMode, runs: usize) -> f64 {
    for _ in 0..2 {
        graph.execute(mode).expect("execute");
    }
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            graph.execute(mode).expect("execute");
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn results(graph: &ExpressionGraph, tags: &[Tag]) -> Vec<Vec<f64>> {
    tags.iter()
        .map(|t| {
            graph
                .with_field::<CellCentre, _>(t, |f| f.values().expect("values").to_vec())
                .expect("field")
        })
        .collect()
}

fn largest_relative_difference(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let scale = b
        .iter()
        .flatten()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(1e-300);
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| {
            if x.is_finite() {
                (x - y).abs() / scale
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
}

fn speed_up(gpu: usize) {
    println!("\n## speed-up: ExprLib graph, 1 CPU thread vs all on GPU {gpu} (ms per execution)\n");
    println!("| variant | cells | PDEs | CPU 1 thread | GPU | speed-up | max rel. diff |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let pdes = pdes();
    let tags: Vec<Tag> = (0..pdes).map(phi_next).collect();
    for variant in ["diffusion", "independent", "coupled"] {
        for n in sizes() {
            let cpu = graph(n, pdes, variant, PlacementPolicy::Cpu);
            let on_gpu = graph(n, pdes, variant, PlacementPolicy::Gpu(gpu));
            let runs = if n >= 128 { 5 } else { 11 };
            let t_cpu = seconds_per_execution(&cpu, ExecutionMode::Serial, runs);
            let launched = watershed_fields::gpu::emulated_launches();
            let t_gpu = seconds_per_execution(&on_gpu, ExecutionMode::Serial, runs * 4);
            if watershed_fields::gpu::gpus_are_emulated() {
                // Two warm-up executions and the timed ones.
                let per_execution = (watershed_fields::gpu::emulated_launches() - launched) as f64
                    / (runs * 4 + 2) as f64;
                println!("(emulated: {per_execution:.0} kernel launches per execution)");
            }
            let difference =
                largest_relative_difference(&results(&on_gpu, &tags), &results(&cpu, &tags));
            println!(
                "| {variant} | {n}^3 | {pdes} | {:.3} | {:.3} | {:.1}x | {difference:.1e} |",
                t_cpu * 1e3,
                t_gpu * 1e3,
                t_cpu / t_gpu
            );
        }
    }
}

fn streams(gpu: usize) {
    println!("\n## streams: asynchronous vs synchronous, 20 PDEs, diffusion (ms per execution)\n");
    println!("| graph | cells | kernels | asynchronous | synchronous | sync / async |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for fusion in [true, false] {
        for n in [16, 128] {
            let time = |streams: StreamMode| {
                let mut g = graph_fused(n, 20, "diffusion", PlacementPolicy::Cpu, fusion);
                g.place(PlacementPolicy::Gpu(gpu), streams)
                    .expect("placement");
                (
                    seconds_per_execution(&g, ExecutionMode::Serial, 21),
                    g.node_count(),
                )
            };
            let (a, nodes) = time(StreamMode::default());
            let (s, _) = time(StreamMode::Synchronous);
            println!(
                "| {} | {n}^3 | {nodes} | {:.3} | {:.3} | {:.2}x |",
                if fusion { "fused" } else { "fine-grained" },
                a * 1e3,
                s * 1e3,
                s / a
            );
        }
    }
}

/// Median seconds of `runs` copies of `bytes` from `from` to `to` on a
/// stream of GPU `gpu`.
fn copy_seconds(
    gpu: usize,
    from: (Device, usize),
    to: (Device, usize),
    bytes: usize,
    runs: usize,
) -> f64 {
    let stream = GpuStream::new(gpu).expect("stream");
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        // SAFETY: the callers pass ranges of `bytes` bytes on their devices
        // that nothing else uses until the stream is synchronised below.
        unsafe {
            stream.copy(from, to, bytes, "timing a copy").expect("copy");
        }
        stream.synchronize().expect("synchronize");
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn heterogeneous(gpu: usize) {
    let pdes = pdes();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "\n## heterogeneous: fine-grained ExprLib graph with CPU-only sources (thesis' rule) vs the homogeneous one all on the GPU, {pdes} PDEs (ms per execution; speed-ups against one CPU thread)\n"
    );
    println!(
        "| variant | cells | CPU 1 thread | CPU {threads} threads | homogeneous GPU | speed-up | heterogeneous pinned, 1 thread | speed-up | pinned, {threads} threads | speed-up | pageable, {threads} threads | copies per execution | copy share pinned | copy share pageable | max rel. diff |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let tags: Vec<Tag> = (0..pdes).map(phi_next).collect();
    let many = ExecutionMode::Threaded(threads);
    // The independent sources: a native coupled source would evaluate all
    // the exponentials once per equation (the language graph hoists them).
    for variant in ["independent"] {
        for n in sizes_from("WATERSHED_HETEROGENEOUS_SIZES", &[64, 128]) {
            let patch = periodic_patch(n);
            let het = |placement, memory| {
                exprlib_heterogeneous_graph(
                    &patch,
                    pdes,
                    variant,
                    1e-6,
                    false,
                    placement,
                    Some(memory),
                )
                .expect("heterogeneous graph")
            };
            let runs = if n >= 128 { 5 } else { 11 };
            let cpu = het(PlacementPolicy::Cpu, HostMemory::Pageable);
            let t_cpu = seconds_per_execution(&cpu, ExecutionMode::Serial, runs);
            let t_cpu_threads = seconds_per_execution(&cpu, many, runs);
            let homogeneous = graph_fused(n, pdes, variant, PlacementPolicy::Gpu(gpu), false);
            let t_homogeneous =
                seconds_per_execution(&homogeneous, ExecutionMode::Serial, runs * 4);
            let pinned = het(PlacementPolicy::Heterogeneous(gpu), HostMemory::Pinned);
            assert!(
                pinned.device_plan().is_heterogeneous(),
                "the sources stay on the CPU"
            );
            let t_pinned = seconds_per_execution(&pinned, ExecutionMode::Serial, runs);
            let mut difference =
                largest_relative_difference(&results(&pinned, &tags), &results(&cpu, &tags));
            let t_threads = seconds_per_execution(&pinned, many, runs);
            difference = difference.max(largest_relative_difference(
                &results(&pinned, &tags),
                &results(&cpu, &tags),
            ));
            let pageable = het(PlacementPolicy::Heterogeneous(gpu), HostMemory::Pageable);
            let t_pageable = seconds_per_execution(&pageable, many, runs);
            difference = difference.max(largest_relative_difference(
                &results(&pageable, &tags),
                &results(&cpu, &tags),
            ));
            // The copies each execution makes: fields written by a node on
            // one device and read on the other.
            let per_execution: Vec<usize> = pinned
                .device_plan()
                .transfers()
                .iter()
                .filter(|t| t.after.is_some())
                .map(|t| t.bytes)
                .collect();
            let bytes = per_execution.iter().copied().max().unwrap_or(0);
            let (share_pinned, share_pageable) = if bytes == 0 {
                (0.0, 0.0)
            } else {
                let block = MemoryPool::global(Device::Gpu(gpu))
                    .expect("pool")
                    .allocate(bytes, "copy target")
                    .expect("block");
                let host_pinned = MemoryPool::host(HostMemory::Pinned)
                    .allocate(bytes, "pinned copy source")
                    .expect("pinned");
                let host_pageable = vec![0u8; bytes];
                let count = per_execution.len() as f64;
                let target = (Device::Gpu(gpu), block.address());
                // Both host buffers and the GPU block hold `bytes` bytes and
                // serve only these copies.
                let pinned_copies = count
                    * copy_seconds(gpu, (Device::Cpu, host_pinned.address()), target, bytes, 11);
                let pageable_copies = count
                    * copy_seconds(
                        gpu,
                        (Device::Cpu, host_pageable.as_ptr() as usize),
                        target,
                        bytes,
                        11,
                    );
                (pinned_copies / t_threads, pageable_copies / t_pageable)
            };
            println!(
                "| {variant} | {n}^3 | {:.3} | {:.3} | {:.3} | {:.1}x | {:.3} | {:.1}x | {:.3} | {:.1}x | {:.3} | {} x {:.1} MB | {:.0}% | {:.0}% | {difference:.1e} |",
                t_cpu * 1e3,
                t_cpu_threads * 1e3,
                t_homogeneous * 1e3,
                t_cpu / t_homogeneous,
                t_pinned * 1e3,
                t_cpu / t_pinned,
                t_threads * 1e3,
                t_cpu / t_threads,
                t_pageable * 1e3,
                per_execution.len(),
                bytes as f64 / 1e6,
                share_pinned * 100.0,
                share_pageable * 100.0,
            );
        }
    }
}

fn bandwidth(gpu: usize) {
    println!("\n## bandwidth: fused diffusion kernel vs device-to-device copy, 256^3 cells\n");
    let n = 256;
    let g = graph(n, 1, "diffusion", PlacementPolicy::Gpu(gpu));
    let t = seconds_per_execution(&g, ExecutionMode::Serial, 21);
    // The fused node reads phi and gamma and writes phi_next: three
    // streams of the allocated field (ghosts included).
    let grid = Grid::new([n; 3], [1.0; 3], [0.0; 3]).expect("grid");
    let patch = grid.whole_domain(1);
    let mut a = SpatialField::<CellCentre>::new("a", &patch, Device::Gpu(gpu)).expect("a");
    let mut b = SpatialField::<CellCentre>::new("b", &patch, Device::Gpu(gpu)).expect("b");
    let bytes = a.layout().allocated_len() * 8;
    let kernel_bandwidth = 3.0 * bytes as f64 / t;
    let source = a.gpu_buffer_mut(Device::Gpu(gpu)).expect("buffer").pointer as usize;
    let destination = b.gpu_buffer_mut(Device::Gpu(gpu)).expect("buffer").pointer as usize;
    // Both buffers are `bytes` long on this GPU and used by nothing else.
    let copy = copy_seconds(
        gpu,
        (Device::Gpu(gpu), source),
        (Device::Gpu(gpu), destination),
        bytes,
        23,
    );
    let copy_bandwidth = 2.0 * bytes as f64 / copy;
    println!(
        "fused diffusion: {:.1} GB/s (3 streams of {bytes} bytes in {:.3} ms, execution included); copy: {:.1} GB/s; ratio {:.2}",
        kernel_bandwidth / 1e9,
        t * 1e3,
        copy_bandwidth / 1e9,
        kernel_bandwidth / copy_bandwidth
    );
}

/// The lid-driven cavity on an n x n grid (Re 100, forward Euler), placed
/// by `placement`, run with `mode`.
fn cavity(n: usize, placement: PlacementPolicy, mode: ExecutionMode) -> IncompressibleFlow {
    let grid = Grid::new([n, n, 1], [1.0; 3], [0.0; 3]).expect("grid");
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0)),
        )
        .velocity_conditions(1, walls)
        .integrator(TimeIntegrator::ForwardEuler)
        .mode(mode)
        .placement(placement)
        .build()
        .expect("flow")
}

/// Median seconds per step over `steps` steps of `dt`, and the mean CG
/// iterations of their pressure solves.
fn seconds_per_step(flow: &mut IncompressibleFlow, dt: f64, steps: usize) -> (f64, f64) {
    flow.step(dt).expect("step");
    let mut times = Vec::with_capacity(steps);
    let mut iterations = 0;
    for _ in 0..steps {
        let start = Instant::now();
        flow.step(dt).expect("step");
        times.push(start.elapsed().as_secs_f64());
        iterations += flow.last_projection().iterations;
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], iterations as f64 / steps as f64)
}

fn velocity_and_pressure(flow: &IncompressibleFlow) -> Vec<Vec<f64>> {
    vec![
        flow.with_velocity::<XFace, _>(|f| f.values().expect("u").to_vec())
            .expect("u"),
        flow.with_velocity::<YFace, _>(|f| f.values().expect("v").to_vec())
            .expect("v"),
        flow.with_pressure(|f| f.values().expect("p").to_vec())
            .expect("p"),
    ]
}

fn flow(gpu: usize) {
    println!(
        "\n## flow: lid-driven cavity, whole step with the pressure solve on GPU {gpu} (ms per step)\n"
    );
    println!(
        "| cells | CG iterations | CPU 1 thread | CPU {} threads | GPU | GPU ms per CG iteration | speed-up vs 1 thread | max rel. diff (3 steps) |",
        watershed_exprgraph::scheduler::max_threads()
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let sizes: Vec<usize> = sizes_from("WATERSHED_FLOW_SIZES", &[64, 128, 256, 512]);
    for n in sizes {
        let dt = 0.2 / n as f64;
        let threads = ExecutionMode::Threaded(watershed_exprgraph::scheduler::max_threads());
        let mut on_gpu = cavity(n, PlacementPolicy::Gpu(gpu), ExecutionMode::Serial);
        let mut serial = cavity(n, PlacementPolicy::Cpu, ExecutionMode::Serial);
        for flow in [&mut on_gpu, &mut serial] {
            for _ in 0..3 {
                flow.step(dt).expect("step");
            }
        }
        let difference = largest_relative_difference(
            &velocity_and_pressure(&on_gpu),
            &velocity_and_pressure(&serial),
        );
        let steps = if n >= 256 { 5 } else { 11 };
        let launched = watershed_fields::gpu::emulated_launches();
        let (t_gpu, iterations) = seconds_per_step(&mut on_gpu, dt, steps * 2);
        if watershed_fields::gpu::gpus_are_emulated() {
            // The warm-up step and the timed ones.
            let per_step = (watershed_fields::gpu::emulated_launches() - launched) as f64
                / (steps * 2 + 1) as f64;
            println!(
                "(emulated: {per_step:.0} kernel launches per step, {:.0} per CG iteration counting the whole step)",
                per_step / iterations.max(1.0)
            );
        }
        let (t_serial, _) = seconds_per_step(&mut serial, dt, steps);
        let mut threaded = cavity(n, PlacementPolicy::Cpu, threads);
        let (t_threaded, _) = seconds_per_step(&mut threaded, dt, steps);
        println!(
            "| {n}^2 | {iterations:.1} | {:.2} | {:.2} | {:.2} | {:.3} | {:.1}x | {difference:.1e} |",
            t_serial * 1e3,
            t_threaded * 1e3,
            t_gpu * 1e3,
            t_gpu * 1e3 / iterations.max(1.0),
            t_serial / t_gpu
        );
    }
}

fn replay(gpu: usize) {
    println!(
        "\n## replay: ExprLib graph (diffusion, 30 PDEs) on GPU {gpu}, launches one by one vs one CUDA graph (ms per execution)\n"
    );
    println!(
        "| cells | streams | kernels per step | launched | replayed | launched / replayed | same bits |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let sizes: Vec<usize> = sizes_from("WATERSHED_REPLAY_SIZES", &[16, 32, 64]);
    let pdes = 30;
    let tags: Vec<Tag> = (0..pdes).map(phi_next).collect();
    for n in sizes {
        for (label, streams) in [
            ("async", StreamMode::default()),
            ("sync", StreamMode::Synchronous),
        ] {
            let build = || {
                let mut g = graph(n, pdes, "diffusion", PlacementPolicy::Cpu);
                g.place(PlacementPolicy::Gpu(gpu), streams)
                    .expect("placement");
                g
            };
            let (launched, replayed) = (build(), build());
            replayed
                .set_step_replay(StepReplay::CudaGraph)
                .expect("replay");
            // The first execution copies the inputs in; the second runs
            // directly, the third is captured: replay from the fourth on.
            for g in [&launched, &replayed] {
                for _ in 0..3 {
                    g.execute(ExecutionMode::Serial).expect("execute");
                }
            }
            let same = results(&launched, &tags) == results(&replayed, &tags);
            let runs = 21;
            let graph_launches = watershed_fields::gpu::emulated_graph_launches();
            // Alternated, so that both see the same machine state.
            let mut t_launched = Vec::new();
            let mut t_replayed = Vec::new();
            for _ in 0..3 {
                t_launched.push(seconds_per_execution(
                    &launched,
                    ExecutionMode::Serial,
                    runs,
                ));
                t_replayed.push(seconds_per_execution(
                    &replayed,
                    ExecutionMode::Serial,
                    runs,
                ));
            }
            t_launched.sort_by(f64::total_cmp);
            t_replayed.sort_by(f64::total_cmp);
            let statistics = replayed.replay_statistics();
            if watershed_fields::gpu::gpus_are_emulated() {
                println!(
                    "(emulated: {} graph launches for {} timed executions; {statistics:?})",
                    watershed_fields::gpu::emulated_graph_launches() - graph_launches,
                    3 * (runs + 2)
                );
            }
            println!(
                "| {n}^3 | {label} | {} | {:.3} | {:.3} | {:.2}x | {} |",
                statistics.launches_per_step,
                t_launched[1] * 1e3,
                t_replayed[1] * 1e3,
                t_launched[1] / t_replayed[1],
                if same { "yes" } else { "NO" }
            );
        }
    }
}

/// The GPU calls of one execution (after `warm` executions) and the
/// median seconds per execution over `runs`.
fn calls_and_seconds(graph: &ExpressionGraph, runs: usize) -> (watershed_fields::GpuCalls, f64) {
    let t = seconds_per_execution(graph, ExecutionMode::Serial, runs);
    let before = watershed_fields::gpu_calls();
    graph.execute(ExecutionMode::Serial).expect("execute");
    (watershed_fields::gpu_calls().since(&before), t)
}

/// Every stream wait, event record and host wait the engine asks for
/// against those left out because they order nothing (`stream_book.rs` in
/// the device layer): the driver calls of one execution and its time,
/// the two settings alternated in three rounds (median round kept).
fn calls(gpu: usize) {
    println!(
        "\n## calls: every wait and record made vs those that order nothing left out, ExprLib graph on GPU {gpu} (30 PDEs, ms per execution)\n"
    );
    println!(
        "| graph | cells | streams | calls, all made | calls, elided | all made | elided | all / elided | same bits |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let pdes = 30;
    let tags: Vec<Tag> = (0..pdes).map(phi_next).collect();
    for n in sizes_from("WATERSHED_CALLS_SIZES", &[16, 32, 64]) {
        for (label, variant, fusion, streams) in [
            ("diffusion, fused", "diffusion", true, StreamMode::default()),
            (
                "diffusion, fused",
                "diffusion",
                true,
                StreamMode::Synchronous,
            ),
            (
                "coupled, a node per expression",
                "coupled",
                false,
                StreamMode::default(),
            ),
        ] {
            let build = || {
                let mut g = graph_fused(n, pdes, variant, PlacementPolicy::Cpu, fusion);
                g.place(PlacementPolicy::Gpu(gpu), streams)
                    .expect("placement");
                g
            };
            let (all, elided) = (build(), build());
            let runs = if n >= 64 { 11 } else { 21 };
            let mut rounds = Vec::new();
            for _ in 0..3 {
                watershed_fields::gpu::set_call_elision(false);
                let made = calls_and_seconds(&all, runs);
                watershed_fields::gpu::set_call_elision(true);
                let left_out = calls_and_seconds(&elided, runs);
                rounds.push((made, left_out));
            }
            rounds.sort_by(|a, b| (a.0.1 / a.1.1).total_cmp(&(b.0.1 / b.1.1)));
            let ((made, t_all), (left_out, t_elided)) = rounds[1];
            let same = results(&all, &tags) == results(&elided, &tags);
            println!(
                "| {label} | {n}^3 | {} | {} ({}) | {} ({}) | {:.3} | {:.3} | {:.2}x | {} |",
                match streams {
                    StreamMode::Synchronous => "sync",
                    _ => "async",
                },
                made.total(),
                made,
                left_out.total(),
                left_out,
                t_all * 1e3,
                t_elided * 1e3,
                t_all / t_elided,
                if same { "yes" } else { "NO" }
            );
            assert!(same, "leaving calls out changed the results");
        }
    }
}

/// Size-class pool vs stream-ordered allocation of the GPU scratch fields,
/// on the ExprLib graph (coupled variant) fused and fine-grained (a node,
/// hence a scratch field, per expression): time per execution with each,
/// measured alternately in two rounds (the faster round of each counts),
/// and the scratch allocations per execution.
fn allocation(gpu: usize) {
    println!(
        "\n## allocation: GPU scratch from the size-class pool vs in stream order (cuMemAllocAsync), coupled ExprLib graph on GPU {gpu} (ms per execution)\n"
    );
    println!(
        "| graph | cells | PDEs | scratch fields per execution | size-class pool | stream-ordered | stream-ordered / pool | identical bits | max rel. diff vs CPU |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let pdes = pdes().min(10);
    let tags: Vec<Tag> = (0..pdes).map(phi_next).collect();
    let ordered = MemoryPool::stream_ordered(gpu).expect("stream-ordered pool");
    for n in sizes() {
        let cpu = graph(n, pdes, "coupled", PlacementPolicy::Cpu);
        cpu.execute(ExecutionMode::Serial)
            .expect("execute on the CPU");
        let on_cpu = results(&cpu, &tags);
        for fusion in [true, false] {
            let pooled = graph_fused(n, pdes, "coupled", PlacementPolicy::Gpu(gpu), fusion);
            let in_order = graph_fused(n, pdes, "coupled", PlacementPolicy::Gpu(gpu), fusion);
            in_order
                .set_gpu_scratch(GpuScratch::StreamOrdered)
                .expect("stream-ordered scratch");
            let runs = if n >= 128 { 7 } else { 21 };
            let mode = ExecutionMode::Serial;
            let (mut t_pool, mut t_ordered) = (f64::INFINITY, f64::INFINITY);
            let mut per_execution = 0.0;
            for _ in 0..2 {
                t_pool = t_pool.min(seconds_per_execution(&pooled, mode, runs));
                let before = ordered.statistics().misses;
                t_ordered = t_ordered.min(seconds_per_execution(&in_order, mode, runs));
                per_execution = (ordered.statistics().misses - before) as f64 / (runs + 2) as f64;
            }
            let with_order = results(&in_order, &tags);
            let same = results(&pooled, &tags) == with_order;
            println!(
                "| {} | {n}^3 | {pdes} | {per_execution:.0} | {:.3} | {:.3} | {:.2}x | {} | {:.1e} |",
                if fusion {
                    "fused"
                } else {
                    "a node per expression"
                },
                t_pool * 1e3,
                t_ordered * 1e3,
                t_ordered / t_pool,
                if same { "yes" } else { "NO" },
                largest_relative_difference(&with_order, &on_cpu)
            );
            assert!(same, "stream-ordered scratch changed the results");
        }
    }
}

fn main() {
    if let Some(reason) = gpu_unavailable_reason(0) {
        println!("skipped: the GPU benchmarks need a CUDA device ({reason})");
        return;
    }
    if watershed_fields::gpu::gpus_are_emulated() {
        if std::env::var("WATERSHED_BENCH_ON_EMULATED").is_ok_and(|v| v == "1") {
            println!(
                "NOTE: the GPUs are emulated on the host: this run checks the benchmark's code and results, its GPU timings are the host's"
            );
        } else {
            println!(
                "skipped: the GPUs are emulated on the host (WATERSHED_EMULATE_GPUS), so GPU timings would be the host's (WATERSHED_BENCH_ON_EMULATED=1 runs it anyway, to check the benchmark itself)"
            );
            return;
        }
    }
    let sections = std::env::var("WATERSHED_SECTIONS").unwrap_or_default();
    let wants = |s: &str| sections.is_empty() || sections.split(',').any(|x| x == s);
    if wants("speedup") {
        speed_up(0);
    }
    if wants("streams") {
        streams(0);
    }
    if wants("heterogeneous") {
        heterogeneous(0);
    }
    if wants("bandwidth") {
        bandwidth(0);
    }
    if wants("flow") {
        flow(0);
    }
    if wants("replay") {
        replay(0);
    }
    if wants("allocation") {
        allocation(0);
    }
    if wants("calls") {
        calls(0);
    }
}
