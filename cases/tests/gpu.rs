//! Graphs executed on a GPU against the same graphs on the CPU. Each test
//! needs a CUDA device: without one it prints "skipped: ... no CUDA device"
//! and returns (the placement, copies and stream plans these executions
//! follow are tested without a GPU in `exprgraph/tests/placement.rs`, and
//! the launches' arguments and kernels in
//! `operators/tests/suite/gpu_launch_on_host.rs`).

use std::rc::Rc;
use std::sync::{Mutex, MutexGuard};
use watershed_cases::cases::scalability::{
    exprlib_factory, exprlib_heterogeneous_graph, gamma, gamma_value, initial_phi, phi, phi_next,
};
use watershed_exprgraph::GraphError;
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GpuScratch, GraphOptions, LanguageExpression,
    LanguageReduction, NativeExpression, PlacementPolicy, StepReplay, StreamMode, Tag, Target,
};
use watershed_fields::gpu::gpu_for_tests;
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, HostMemory, LocationKind, MemoryPool, Patch, PatchLayout,
};
use watershed_operators::{Parameter, Reduction, abs, laplacian};

/// The GPU and a lock held for the test's duration: the tests of this
/// file share one process-wide GPU pool, and the leak test counts its
/// blocks, so they run one at a time. `None` (after printing why) where no
/// GPU can be used.
fn gpu_alone(test: &str) -> Option<(usize, MutexGuard<'static, ()>)> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let gpu = gpu_for_tests(test)?;
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    Some((gpu, guard))
}

fn patch(n: usize) -> Patch {
    Grid::new([n, n, n], [1.0 / n as f64; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1)
}

fn exprlib(
    patch: &Patch,
    pdes: usize,
    variant: &str,
    placement: PlacementPolicy,
    streams: StreamMode,
) -> ExpressionGraph {
    let options = GraphOptions {
        persistent: (0..pdes).map(phi_next).collect(),
        placement,
        streams,
        ..Default::default()
    };
    let roots: Vec<Tag> = (0..pdes).map(phi_next).collect();
    let factory = exprlib_factory(pdes, variant, 1e-4).unwrap();
    let graph = ExpressionGraph::build(&factory, &roots, patch, &options).unwrap();
    graph
        .set_field::<CellCentre>(&gamma(), gamma_value)
        .unwrap();
    for i in 0..pdes {
        graph
            .set_field::<CellCentre>(&phi(i), initial_phi(i))
            .unwrap();
    }
    graph
}

fn values(graph: &ExpressionGraph, tag: &Tag) -> Vec<f64> {
    graph
        .with_field::<CellCentre, _>(tag, |f| f.values().unwrap().to_vec())
        .unwrap()
}

/// Largest relative difference (to the largest magnitude of `want`) and
/// the number of points that differ at all.
fn difference(got: &[f64], want: &[f64]) -> (f64, usize) {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    let mut worst = 0.0f64;
    let mut differing = 0;
    for (g, w) in got.iter().zip(want) {
        if g.to_bits() != w.to_bits() {
            differing += 1;
            worst = worst.max((g - w).abs() / scale);
        }
    }
    (worst, differing)
}

#[test]
fn exprlib_graphs_on_the_gpu_match_the_cpu() {
    let Some((gpu, _alone)) = gpu_alone("exprlib_graphs_on_the_gpu_match_the_cpu") else {
        return;
    };
    let patch = patch(24);
    let pdes = 4;
    for variant in ["diffusion", "independent", "coupled"] {
        let cpu = exprlib(
            &patch,
            pdes,
            variant,
            PlacementPolicy::Cpu,
            StreamMode::default(),
        );
        cpu.execute(ExecutionMode::Serial).unwrap();
        for streams in [StreamMode::default(), StreamMode::Synchronous] {
            let on_gpu = exprlib(&patch, pdes, variant, PlacementPolicy::Gpu(gpu), streams);
            assert_eq!(on_gpu.device_plan().gpu_nodes(), on_gpu.node_count());
            on_gpu.execute(ExecutionMode::Threaded(2)).unwrap();
            for i in 0..pdes {
                // The GPU wrote the result: its location is the active one.
                let states = on_gpu
                    .with_field::<CellCentre, _>(&phi_next(i), |f| f.location_states())
                    .unwrap();
                let gpu_state = states.iter().find(|s| s.device == Device::Gpu(gpu));
                assert!(
                    gpu_state.is_some_and(|s| s.active),
                    "{variant}: phi_next{i} states {states:?}"
                );
                let (worst, differing) =
                    difference(&values(&on_gpu, &phi_next(i)), &values(&cpu, &phi_next(i)));
                eprintln!(
                    "{variant} {streams:?} phi_next{i}: {differing} points differ, max relative {worst:e}"
                );
                assert!(
                    worst <= 1e-12,
                    "{variant}: phi_next{i} differs by {worst:e}"
                );
            }
        }
    }
}

/// A repeated step makes only the driver calls that order something: the
/// state stays on the GPU (no copy), the waits and records are those of
/// the dependencies inside the step (the coupled source feeds every
/// update), the host waits once per stream at the end; replayed, one
/// graph launch. Before, every launch also waited for the events of the
/// previous step and of copies that did not happen: about 7 calls per
/// node besides its launches, and 120 waits before each replayed graph.
#[test]
fn a_repeated_step_makes_only_the_driver_calls_that_order_something() {
    let Some((gpu, _alone)) =
        gpu_alone("a_repeated_step_makes_only_the_driver_calls_that_order_something")
    else {
        return;
    };
    let patch = patch(12);
    let pdes = 6;
    let cpu = exprlib(
        &patch,
        pdes,
        "coupled",
        PlacementPolicy::Cpu,
        StreamMode::default(),
    );
    cpu.execute(ExecutionMode::Serial).unwrap();
    for streams in [StreamMode::default(), StreamMode::Synchronous] {
        let graph = exprlib(&patch, pdes, "coupled", PlacementPolicy::Gpu(gpu), streams);
        let nodes = graph.node_count() as u64;
        let mut steps = Vec::new();
        for _ in 0..3 {
            let before = watershed_fields::gpu_calls();
            graph.execute(ExecutionMode::Threaded(2)).unwrap();
            steps.push(watershed_fields::gpu_calls().since(&before));
        }
        let (second, third) = (steps[1], steps[2]);
        eprintln!("{streams:?}: first {}; third {third}", steps[0]);
        assert_eq!(second, third, "{streams:?}: repeated steps differ");
        assert!(third.launches >= nodes, "{streams:?}: {third}");
        assert_eq!(third.copies, 0, "{streams:?}: the state crossed: {third}");
        let ordering = third.records + third.waits;
        match streams {
            StreamMode::Synchronous => {
                assert_eq!(
                    ordering, 0,
                    "{streams:?}: one stream needs no event: {third}"
                );
                assert_eq!(third.host_waits, 1, "{streams:?}: {third}");
            }
            _ => {
                // One record after the coupled source, at most one wait per
                // update on another stream.
                assert!(
                    ordering <= nodes,
                    "{streams:?}: {ordering} records and waits for {nodes} nodes: {third}"
                );
                assert!(third.host_waits <= nodes, "{streams:?}: {third}");
            }
        }
        for i in 0..pdes {
            let (worst, _) = difference(&values(&graph, &phi_next(i)), &values(&cpu, &phi_next(i)));
            assert!(
                worst <= 1e-12,
                "{streams:?}: phi_next{i} differs by {worst:e}"
            );
        }
    }
    // Replayed, a step is one graph launch, the event after it and the
    // host's wait: its fields' events, those of the previous replay, are
    // known finished, so none is waited for before the graph.
    let graph = exprlib(
        &patch,
        pdes,
        "coupled",
        PlacementPolicy::Gpu(gpu),
        StreamMode::default(),
    );
    graph.set_step_replay(StepReplay::CudaGraph).unwrap();
    for _ in 0..4 {
        graph.execute(ExecutionMode::Serial).unwrap();
    }
    let replays = graph.replay_statistics().replays;
    let before = watershed_fields::gpu_calls();
    graph.execute(ExecutionMode::Serial).unwrap();
    let replayed = watershed_fields::gpu_calls().since(&before);
    assert_eq!(graph.replay_statistics().replays, replays + 1);
    assert_eq!(
        (
            replayed.graph_launches,
            replayed.launches,
            replayed.waits,
            replayed.host_waits
        ),
        (1, 0, 0, 1),
        "{replayed}"
    );
    assert!(replayed.total() <= 3, "{replayed}");
    for i in 0..pdes {
        let (worst, _) = difference(&values(&graph, &phi_next(i)), &values(&cpu, &phi_next(i)));
        assert!(worst <= 1e-12, "replayed: phi_next{i} differs by {worst:e}");
    }
}

/// A native (CPU-only) node named `name` writing `f` of `input` into `output`.
fn pointwise_native(
    name: &str,
    input: &Tag,
    output: &Tag,
    f: impl Fn(f64) -> f64 + Send + Sync + 'static,
) -> NativeExpression {
    let (r, out) = (input.clone(), output.clone());
    NativeExpression::new(
        name,
        vec![(output.clone(), LocationKind::CellCentre)],
        vec![input.clone()],
        move |context| {
            let values = context.input::<CellCentre>(&r)?.values()?.to_vec();
            let written = context.output::<CellCentre>(&out)?.values_mut()?;
            for (o, v) in written.iter_mut().zip(values) {
                *o = f(v);
            }
            Ok(())
        },
    )
}

/// A graph whose fields cross between the CPU and the GPU both ways: a
/// native node (CPU only) between language nodes.
fn crossing(placement: PlacementPolicy) -> ExpressionGraph {
    let (u, lap, squared, sum, native, last) = (
        Tag::none("u"),
        Tag::none("lap"),
        Tag::none("squared"),
        Tag::none("sum"),
        Tag::none("native"),
        Tag::none("last"),
    );
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let r = u.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            lap.clone(),
            move |s| laplacian(s.field::<CellCentre>(&r)),
        ))
        .unwrap();
    factory
        .register(pointwise_native("squared", &u, &squared, |v| v * v))
        .unwrap();
    let (a, b) = (lap.clone(), squared.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            sum.clone(),
            move |s| s.field::<CellCentre>(&a) + s.field::<CellCentre>(&b) * 0.5,
        ))
        .unwrap();
    factory
        .register(pointwise_native("native", &sum, &native, |v| 3.0 * v - 1.0))
        .unwrap();
    let (a, b) = (native.clone(), lap.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            last.clone(),
            move |s| s.field::<CellCentre>(&a) - s.field::<CellCentre>(&b),
        ))
        .unwrap();
    let options = GraphOptions {
        no_fusion: true,
        persistent: vec![last.clone(), lap.clone()],
        placement,
        ..Default::default()
    };
    let graph = ExpressionGraph::build(&factory, &[last], &patch(12), &options).unwrap();
    graph
        .set_field::<CellCentre>(&u, |[x, y, z]| (x * 6.0).sin() + y * z)
        .unwrap();
    graph
}

#[test]
fn fields_crossing_devices_both_ways_match_the_cpu() {
    let Some((gpu, _alone)) = gpu_alone("fields_crossing_devices_both_ways_match_the_cpu") else {
        return;
    };
    let cpu = crossing(PlacementPolicy::Cpu);
    let mixed = crossing(PlacementPolicy::CostModel {
        device: gpu,
        model: Default::default(),
    });
    let forced = crossing(PlacementPolicy::Heterogeneous(gpu));
    assert_eq!(forced.target_of("squared"), Some(Target::Cpu));
    assert_eq!(forced.target_of("lap"), Some(Target::Gpu(gpu)));
    assert!(
        forced.device_plan().transfers().len() >= 2,
        "{}",
        forced.device_plan().summary()
    );
    for execution in 0..3 {
        cpu.execute(ExecutionMode::Serial).unwrap();
        forced.execute(ExecutionMode::Threaded(2)).unwrap();
        mixed.execute(ExecutionMode::Serial).unwrap();
        for tag in [Tag::none("last"), Tag::none("lap")] {
            let want = values(&cpu, &tag);
            for graph in [&forced, &mixed] {
                let (worst, differing) = difference(&values(graph, &tag), &want);
                assert!(
                    worst <= 1e-12,
                    "execution {execution}: {tag} differs by {worst:e} at {differing} points"
                );
            }
        }
    }
    // The host reads the GPU's result through a copy that stays valid;
    // the GPU location remains the active one.
    let states = forced
        .with_field::<CellCentre, _>(&Tag::none("lap"), |f| f.location_states())
        .unwrap();
    assert!(states.iter().all(|s| s.valid), "{states:?}");
    assert!(
        states
            .iter()
            .any(|s| s.device == Device::Gpu(gpu) && s.active),
        "{states:?}"
    );
}

#[test]
fn a_thousand_executions_leak_no_gpu_memory() {
    let Some((gpu, _alone)) = gpu_alone("a_thousand_executions_leak_no_gpu_memory") else {
        return;
    };
    let pool = MemoryPool::global(Device::Gpu(gpu)).unwrap();
    let before = pool.statistics();
    let patch = patch(16);
    // The coupled variant: its hoisted source is a scratch field, taken
    // from the GPU's pool and given back in every execution.
    let graph = exprlib(
        &patch,
        2,
        "coupled",
        PlacementPolicy::Gpu(gpu),
        StreamMode::default(),
    );
    for _ in 0..3 {
        graph.execute(ExecutionMode::Serial).unwrap();
    }
    let warm = pool.statistics();
    for _ in 0..1000 {
        graph.execute(ExecutionMode::Serial).unwrap();
    }
    let after = pool.statistics();
    eprintln!("before {before:?}\nwarm {warm:?}\nafter {after:?}");
    assert_eq!(after.blocks_active, warm.blocks_active, "{after:?}");
    assert_eq!(after.bytes_total, warm.bytes_total, "{after:?}");
    assert_eq!(
        after.misses, warm.misses,
        "every scratch field came from the pool: {after:?}"
    );
    assert!(
        after.hits >= warm.hits + 1000,
        "each execution takes its scratch field from the pool: {after:?}"
    );
    drop(graph);
    let dropped = pool.statistics();
    assert_eq!(
        dropped.blocks_active,
        before.blocks_active,
        "the graph's GPU blocks go back when it is dropped: {:?}",
        pool.outstanding()
    );
}

/// A graph whose reduction (max |lap u|) scales a later node, placed on
/// the GPU and on the CPU: the same parameter bits and the same field.
fn reduction_graph(
    patch: &Patch,
    placement: PlacementPolicy,
    largest: &Parameter,
) -> ExpressionGraph {
    let (u, lap, scaled, max) = (
        Tag::none("u"),
        Tag::none("lap u"),
        Tag::none("scaled"),
        Tag::none("max|lap u|"),
    );
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let t = u.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            lap.clone(),
            move |s| laplacian(s.field::<CellCentre>(&t)),
        ))
        .unwrap();
    let l = lap.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            max,
            largest,
            Reduction::Max,
            move |s| abs(s.field(&l)),
        ))
        .unwrap();
    let (l, m) = (lap.clone(), largest.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            scaled.clone(),
            move |s| s.field::<CellCentre>(&l) / m.expr(),
        ))
        .unwrap();
    let options = GraphOptions {
        persistent: vec![lap, scaled.clone()],
        placement,
        ..Default::default()
    };
    let graph = ExpressionGraph::build(&factory, &[scaled], patch, &options).unwrap();
    graph
        .set_field::<CellCentre>(&u, |[x, y, z]| (3.0 * x).sin() * (2.0 * y).cos() + z * z)
        .unwrap();
    graph
}

#[test]
fn a_reduction_on_the_gpu_gives_the_cpus_bits_and_feeds_later_nodes() {
    let Some((gpu, _alone)) =
        gpu_alone("a_reduction_on_the_gpu_gives_the_cpus_bits_and_feeds_later_nodes")
    else {
        return;
    };
    // 600 cells along x: two of the CPU's blocks per row.
    let patch = Grid::new([600, 6, 5], [1.0 / 600.0, 0.2, 0.2], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let on_cpu = Parameter::new("max_cpu", -1.0);
    let on_gpu = Parameter::new("max_gpu", -1.0);
    let cpu = reduction_graph(&patch, PlacementPolicy::Cpu, &on_cpu);
    let gpu_graph = reduction_graph(&patch, PlacementPolicy::Gpu(gpu), &on_gpu);
    assert_eq!(gpu_graph.device_plan().gpu_nodes(), gpu_graph.node_count());
    cpu.execute(ExecutionMode::Serial).unwrap();
    gpu_graph.execute(ExecutionMode::Serial).unwrap();
    assert!(on_cpu.get() > 0.0);
    assert_eq!(
        on_gpu.get().to_bits(),
        on_cpu.get().to_bits(),
        "{} vs {}",
        on_gpu.get(),
        on_cpu.get()
    );
    let scaled = Tag::none("scaled");
    let (worst, differing) = difference(&values(&gpu_graph, &scaled), &values(&cpu, &scaled));
    assert_eq!(differing, 0, "scaled differs by up to {worst:e}");
}

/// Three explicit steps of `next = phi + 0.1 lap(phi)` on 2 x 2 x 1
/// patches of a periodic box, `phi`'s seams exchanged before each, with
/// two reductions (the sum of `next`, the largest `|lap phi|`) combined
/// over the patches: the last step's parameters, the whole `phi`, the
/// sum of its interior, and how many nodes of a patch's graph run on a
/// GPU.
fn patched_steps(placement: PlacementPolicy) -> (f64, f64, Vec<f64>, f64, usize) {
    // Unit spacing: 0.1 lap is well inside the explicit limit (1/6).
    let grid = Grid::new([16, 12, 6], [16.0, 12.0, 6.0], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let layout = PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(1)).unwrap();
    let (sum, largest) = (
        Parameter::new("sum of next", f64::NAN),
        Parameter::new("max |lap phi|", f64::NAN),
    );
    let (u, next) = (Tag::none("phi"), Tag::none("next"));
    let graphs = PatchedGraphs::build(layout, Rc::new(SingleProcess), |patch| {
        let mut factory = Factory::new();
        factory.placeholder(u.clone(), LocationKind::CellCentre)?;
        let t = u.clone();
        factory.register(LanguageExpression::new::<CellCentre>(
            next.clone(),
            move |s| {
                let phi = s.field::<CellCentre>(&t);
                phi.clone() + 0.1 * laplacian(phi)
            },
        ))?;
        let n = next.clone();
        factory.register_reduction(LanguageReduction::new::<CellCentre>(
            Tag::none("sum of next"),
            &sum,
            Reduction::Sum,
            move |s| s.field::<CellCentre>(&n),
        ))?;
        let t = u.clone();
        factory.register_reduction(LanguageReduction::new::<CellCentre>(
            Tag::none("max |lap phi|"),
            &largest,
            Reduction::Max,
            move |s| abs(laplacian(s.field::<CellCentre>(&t))),
        ))?;
        let options = GraphOptions {
            persistent: vec![next.clone()],
            placement: placement.clone(),
            ..Default::default()
        };
        let roots = [
            next.clone(),
            Tag::none("sum of next"),
            Tag::none("max |lap phi|"),
        ];
        let graph = ExpressionGraph::build(&factory, &roots, patch, &options)?;
        graph.fill_placeholder(&u)?;
        Ok::<_, GraphError>(graph)
    })
    .unwrap();
    graphs
        .set_field::<CellCentre>(&u, |[x, y, z]| {
            (0.4 * x).sin() * (0.5 * y).cos() + 0.01 * z * x
        })
        .unwrap();
    for _ in 0..3 {
        graphs.exchange(std::slice::from_ref(&u)).unwrap();
        graphs.execute(ExecutionMode::Serial).unwrap();
        graphs.rotate_fields(&[u.clone(), next.clone()]).unwrap();
    }
    let whole = graphs.whole_field::<CellCentre>(&u).unwrap();
    let layout = whole.layout().clone();
    let values = whole.values().unwrap().to_vec();
    let interior_sum = layout
        .interior()
        .iter()
        .map(|p| values[layout.linear_index(p)])
        .sum();
    let on_gpu = graphs.graphs()[0].device_plan().gpu_nodes();
    (sum.get(), largest.get(), values, interior_sum, on_gpu)
}

#[test]
fn graphs_on_patches_on_the_gpu_exchange_and_reduce_with_the_cpus_bits() {
    let Some((gpu, _alone)) =
        gpu_alone("graphs_on_patches_on_the_gpu_exchange_and_reduce_with_the_cpus_bits")
    else {
        return;
    };
    let (cpu_sum, cpu_largest, cpu_phi, whole_sum, none) = patched_steps(PlacementPolicy::Cpu);
    let (gpu_sum, gpu_largest, gpu_phi, _, on_gpu) = patched_steps(PlacementPolicy::Gpu(gpu));
    assert_eq!(none, 0);
    assert!(on_gpu >= 3, "{on_gpu} nodes on the GPU");
    // The last step's sum of `next` is the sum of the final `phi` over
    // the whole domain (added in another order).
    assert!(cpu_largest > 0.0);
    assert!(
        (cpu_sum - whole_sum).abs() <= 1e-12 * whole_sum.abs().max(1.0),
        "{cpu_sum} vs {whole_sum}"
    );
    assert_eq!(
        gpu_sum.to_bits(),
        cpu_sum.to_bits(),
        "{gpu_sum} vs {cpu_sum}"
    );
    assert_eq!(
        gpu_largest.to_bits(),
        cpu_largest.to_bits(),
        "{gpu_largest} vs {cpu_largest}"
    );
    let (worst, differing) = difference(&gpu_phi, &cpu_phi);
    assert_eq!(differing, 0, "phi differs by up to {worst:e}");
}

#[test]
fn a_checked_node_on_the_gpu_fails_with_the_cpus_error() {
    let patch = patch(12);
    let (u, logged, after) = (Tag::none("u"), Tag::none("log u"), Tag::none("after"));
    let build = |placement: PlacementPolicy| {
        let mut factory = Factory::new();
        factory
            .placeholder(u.clone(), LocationKind::CellCentre)
            .unwrap();
        let t = u.clone();
        factory
            .register(
                LanguageExpression::new::<CellCentre>(logged.clone(), move |s| {
                    watershed_operators::log(s.field::<CellCentre>(&t))
                })
                .checking_finite(),
            )
            .unwrap();
        let l = logged.clone();
        factory
            .register(LanguageExpression::new::<CellCentre>(
                after.clone(),
                move |s| s.field::<CellCentre>(&l) * 2.0,
            ))
            .unwrap();
        let options = GraphOptions {
            persistent: vec![after.clone()],
            placement,
            ..Default::default()
        };
        let graph =
            ExpressionGraph::build(&factory, std::slice::from_ref(&after), &patch, &options)
                .unwrap();
        // Positive except two cells; (2, 7, 3) comes first in storage order.
        graph
            .set_field::<CellCentre>(&u, |[x, y, z]| {
                // 12 cells over a side of 1/12.
                let cell = |c: f64| (c * 144.0).floor() as i64;
                match (cell(x), cell(y), cell(z)) {
                    (9, 1, 5) => -1.0,
                    (2, 7, 3) => -3.0,
                    _ => 1.0 + x + y + z,
                }
            })
            .unwrap();
        graph
    };
    // The CPU's error, checked here with or without a GPU.
    let cpu = build(PlacementPolicy::Cpu);
    let want = cpu.execute(ExecutionMode::Serial).unwrap_err().to_string();
    assert!(
        want.contains("'log u' is not finite at point [2, 7, 3]"),
        "{want}"
    );
    let Some((gpu, _alone)) = gpu_alone("a_checked_node_on_the_gpu_fails_with_the_cpus_error")
    else {
        return;
    };
    let on_gpu = build(PlacementPolicy::Gpu(gpu));
    assert_eq!(on_gpu.device_plan().gpu_nodes(), on_gpu.node_count());
    let got = on_gpu
        .execute(ExecutionMode::Serial)
        .unwrap_err()
        .to_string();
    assert_eq!(got, want);
    // With its check word and scratch allocated in stream order: the same
    // error, and every block freed after the failed execution.
    let ordered = MemoryPool::stream_ordered(gpu).unwrap();
    let ordered_before = ordered.statistics();
    on_gpu.set_gpu_scratch(GpuScratch::StreamOrdered).unwrap();
    for _ in 0..2 {
        let again = on_gpu
            .execute(ExecutionMode::Serial)
            .unwrap_err()
            .to_string();
        assert_eq!(again, want);
    }
    let ordered_after = ordered.statistics();
    assert!(
        ordered_after.misses >= ordered_before.misses + 2,
        "{ordered_after:?}"
    );
    assert_eq!(
        ordered_after.blocks_active, ordered_before.blocks_active,
        "{ordered_after:?}"
    );
    on_gpu.set_gpu_scratch(GpuScratch::SizeClassPool).unwrap();
    // Replayed as a CUDA graph, the check still reads its own step's words:
    // the same error each time, from the captured step on too.
    on_gpu.set_step_replay(StepReplay::CudaGraph).unwrap();
    for _ in 0..4 {
        let again = on_gpu
            .execute(ExecutionMode::Serial)
            .unwrap_err()
            .to_string();
        assert_eq!(again, want);
    }
    let statistics = on_gpu.replay_statistics();
    assert!(statistics.replays >= 1, "{statistics:?}");
    // With every value finite both succeed and agree to the bit.
    for graph in [&cpu, &on_gpu] {
        graph
            .set_field::<CellCentre>(&u, |[x, y, z]| 1.0 + x + y + z)
            .unwrap();
        graph.execute(ExecutionMode::Serial).unwrap();
    }
    let (worst, differing) = difference(&values(&on_gpu, &after), &values(&cpu, &after));
    assert_eq!(differing, 0, "after differs by up to {worst:e}");
}

/// The heterogeneous ExprLib graph (CPU-only sources copied to the GPU
/// each execution) gives the all-CPU graph's bits, with pinned and with
/// pageable host memory, over several executions.
#[test]
fn the_heterogeneous_exprlib_graph_gives_the_cpus_bits_pinned_and_pageable() {
    let Some((gpu, _alone)) =
        gpu_alone("the_heterogeneous_exprlib_graph_gives_the_cpus_bits_pinned_and_pageable")
    else {
        return;
    };
    let patch = Grid::new([20, 20, 20], [0.05; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3])
        .whole_domain(1);
    let pdes = 3;
    let graph = |placement, memory| {
        exprlib_heterogeneous_graph(&patch, pdes, "independent", 1e-4, false, placement, memory)
            .unwrap()
    };
    let cpu = graph(PlacementPolicy::Cpu, None);
    cpu.execute(ExecutionMode::Serial).unwrap();
    for memory in [HostMemory::Pinned, HostMemory::Pageable] {
        let mixed = graph(PlacementPolicy::Heterogeneous(gpu), Some(memory));
        assert!(mixed.device_plan().is_heterogeneous());
        for _ in 0..3 {
            mixed.execute(ExecutionMode::Threaded(2)).unwrap();
        }
        for i in 0..pdes {
            let states = mixed
                .with_field::<CellCentre, _>(&phi_next(i), |f| f.location_states())
                .unwrap();
            assert!(
                states
                    .iter()
                    .any(|s| s.device == Device::Gpu(gpu) && s.active),
                "{memory:?}: phi_next{i} {states:?}"
            );
            let (worst, differing) =
                difference(&values(&mixed, &phi_next(i)), &values(&cpu, &phi_next(i)));
            assert_eq!(
                differing, 0,
                "{memory:?}: phi_next{i} differs at {differing} points (max relative {worst:e})"
            );
        }
    }
}

/// Several GPUs (the thesis' round-robin assignment of graphs to devices):
/// four ExprLib graphs placed on GPU `round_robin(k, gpus)`, executed at
/// once from four threads, each give the CPU's bits, and each GPU's own
/// pool holds the fields of the graphs placed on it. Needs two GPUs.
#[test]
fn graphs_assigned_round_robin_to_two_gpus_run_at_once_and_give_the_cpus_bits() {
    let test = "graphs_assigned_round_robin_to_two_gpus_run_at_once_and_give_the_cpus_bits";
    let Some((_, _alone)) = gpu_alone(test) else {
        return;
    };
    let gpus = watershed_fields::gpu::gpu_count();
    if gpus < 2 {
        eprintln!("skipped {test}: {gpus} GPU(s), two needed");
        return;
    }
    let patch = patch(12);
    let pdes = 3;
    let cpu = exprlib(
        &patch,
        pdes,
        "coupled",
        PlacementPolicy::Cpu,
        StreamMode::default(),
    );
    for _ in 0..3 {
        cpu.execute(ExecutionMode::Serial).unwrap();
    }
    let before: Vec<usize> = (0..2)
        .map(|k| {
            MemoryPool::global(Device::Gpu(k))
                .unwrap()
                .statistics()
                .blocks_active
        })
        .collect();
    let graphs: Vec<(usize, ExpressionGraph)> = (0..4)
        .map(|k| {
            let gpu = PlacementPolicy::round_robin(k, 2).unwrap();
            let graph = exprlib(
                &patch,
                pdes,
                "coupled",
                PlacementPolicy::Gpu(gpu),
                StreamMode::default(),
            );
            (gpu, graph)
        })
        .collect();
    assert_eq!(
        graphs.iter().map(|(gpu, _)| *gpu).collect::<Vec<_>>(),
        [0, 1, 0, 1]
    );
    std::thread::scope(|scope| {
        for (_, graph) in &graphs {
            scope.spawn(move || {
                for _ in 0..3 {
                    graph.execute(ExecutionMode::Serial).unwrap();
                }
            });
        }
    });
    for (k, (gpu, graph)) in graphs.iter().enumerate() {
        for i in 0..pdes {
            let states = graph
                .with_field::<CellCentre, _>(&phi_next(i), |f| f.location_states())
                .unwrap();
            assert!(
                states
                    .iter()
                    .any(|s| s.device == Device::Gpu(*gpu) && s.active),
                "graph {k}: phi_next{i} states {states:?}"
            );
            let (worst, differing) =
                difference(&values(graph, &phi_next(i)), &values(&cpu, &phi_next(i)));
            assert_eq!(
                differing, 0,
                "graph {k} on GPU {gpu}: phi_next{i} differs by {worst:e}"
            );
        }
    }
    for (k, before) in before.iter().enumerate() {
        let held = MemoryPool::global(Device::Gpu(k))
            .unwrap()
            .statistics()
            .blocks_active;
        assert!(
            held > *before,
            "GPU {k}'s pool holds no block of the graphs placed there ({before} -> {held})"
        );
    }
}

/// `scaled = lap(u) * p` on `patch`, placed by `placement`.
fn scaled_graph(patch: &Patch, placement: PlacementPolicy, p: &Parameter) -> ExpressionGraph {
    let (u, scaled) = (Tag::none("u"), Tag::none("scaled"));
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let (t, q) = (u.clone(), p.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            scaled.clone(),
            move |s| laplacian(s.field::<CellCentre>(&t)) * q.expr(),
        ))
        .unwrap();
    let options = GraphOptions {
        persistent: vec![scaled.clone()],
        placement,
        ..Default::default()
    };
    let graph = ExpressionGraph::build(&factory, &[scaled], patch, &options).unwrap();
    graph
        .set_field::<CellCentre>(&u, |[x, y, z]| (3.0 * x).sin() * (2.0 * y).cos() + z * z)
        .unwrap();
    graph
}

#[test]
fn steps_replayed_as_cuda_graphs_give_the_cpus_bits_and_follow_parameters() {
    let Some((gpu, _alone)) =
        gpu_alone("steps_replayed_as_cuda_graphs_give_the_cpus_bits_and_follow_parameters")
    else {
        return;
    };
    let patch = patch(12);
    let (on_cpu, on_gpu) = (Parameter::new("p_cpu", 1.0), Parameter::new("p_gpu", 1.0));
    let cpu = scaled_graph(&patch, PlacementPolicy::Cpu, &on_cpu);
    let replayed = scaled_graph(&patch, PlacementPolicy::Gpu(gpu), &on_gpu);
    replayed.set_step_replay(StepReplay::CudaGraph).unwrap();
    let scaled = Tag::none("scaled");
    // The parameter is a kernel argument: each value is its own step. A
    // replay that ignored the arguments would give 1 or 2 where 3 is asked.
    let values_of_p = [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 3.0, 1.0];
    for (execution, &p) in values_of_p.iter().enumerate() {
        on_cpu.set(p);
        on_gpu.set(p);
        cpu.execute(ExecutionMode::Serial).unwrap();
        replayed.execute(ExecutionMode::Serial).unwrap();
        let (worst, differing) = difference(&values(&replayed, &scaled), &values(&cpu, &scaled));
        assert_eq!(
            differing, 0,
            "execution {execution} (p = {p}): scaled differs by up to {worst:e}"
        );
    }
    let statistics = replayed.replay_statistics();
    eprintln!("{statistics:?}");
    assert_eq!(statistics.recorded, values_of_p.len() as u64);
    assert_eq!(statistics.failed_captures, 0, "{statistics:?}");
    // The first execution also copies u in: its own step, of its own
    // shape. Then: p = 2 runs directly (the shape's first sight); p = 1 is
    // captured as the shape's graph to update; p = 2 is captured at its
    // key's second sight; p = 1 and p = 2 are replayed; p = 3 updates the
    // shape's graph (one kernel) and replays it; p = 1, whose graph was
    // updated away, is captured at its key's second sight.
    assert_eq!(statistics.direct, 2, "{statistics:?}");
    assert_eq!(statistics.captures, 3, "{statistics:?}");
    assert_eq!(statistics.replays, 2, "{statistics:?}");
    assert_eq!(statistics.updated_replays, 1, "{statistics:?}");
    assert_eq!(statistics.kernels_updated, 1, "{statistics:?}");
    assert_eq!(statistics.failed_updates, 0, "{statistics:?}");
}

#[test]
fn a_parameter_that_changes_every_step_is_replayed_by_updating_the_graphs_arguments() {
    let Some((gpu, _alone)) = gpu_alone(
        "a_parameter_that_changes_every_step_is_replayed_by_updating_the_graphs_arguments",
    ) else {
        return;
    };
    let patch = patch(10);
    let (on_cpu, on_gpu) = (Parameter::new("t_cpu", 0.0), Parameter::new("t_gpu", 0.0));
    let cpu = scaled_graph(&patch, PlacementPolicy::Cpu, &on_cpu);
    let replayed = scaled_graph(&patch, PlacementPolicy::Gpu(gpu), &on_gpu);
    replayed.set_step_replay(StepReplay::CudaGraph).unwrap();
    let scaled = Tag::none("scaled");
    let graph_launches = watershed_fields::gpu::emulated_graph_launches();
    let executions = 12;
    for execution in 0..executions {
        // A time: never the same value twice, as in a source term.
        let t = 0.25 + 0.1 * execution as f64;
        on_cpu.set(t);
        on_gpu.set(t);
        cpu.execute(ExecutionMode::Serial).unwrap();
        replayed.execute(ExecutionMode::Serial).unwrap();
        let (worst, differing) = difference(&values(&replayed, &scaled), &values(&cpu, &scaled));
        assert_eq!(
            differing, 0,
            "execution {execution} (t = {t}): scaled differs by up to {worst:e}"
        );
    }
    let statistics = replayed.replay_statistics();
    eprintln!("{statistics:?}");
    assert_eq!(statistics.failed_captures, 0, "{statistics:?}");
    assert_eq!(statistics.failed_updates, 0, "{statistics:?}");
    // The first execution copies u in; the second is the shape's first
    // sight; the third is captured; every later one updates the one
    // kernel's argument block and replays.
    assert_eq!(statistics.direct, 2, "{statistics:?}");
    assert_eq!(statistics.captures, 1, "{statistics:?}");
    assert_eq!(statistics.replays, 0, "{statistics:?}");
    assert_eq!(statistics.updated_replays, executions - 3, "{statistics:?}");
    assert_eq!(statistics.kernels_updated, executions - 3, "{statistics:?}");
    if watershed_fields::gpu::gpus_are_emulated() {
        assert_eq!(
            watershed_fields::gpu::emulated_graph_launches() - graph_launches,
            executions - 2,
            "the captured step and every updated one are graph launches"
        );
    }
}

#[test]
fn exprlib_graphs_replayed_as_cuda_graphs_give_the_cpus_bits() {
    let Some((gpu, _alone)) =
        gpu_alone("exprlib_graphs_replayed_as_cuda_graphs_give_the_cpus_bits")
    else {
        return;
    };
    let patch = patch(16);
    let pdes = 3;
    for variant in ["diffusion", "coupled"] {
        for streams in [StreamMode::default(), StreamMode::Synchronous] {
            let cpu = exprlib(&patch, pdes, variant, PlacementPolicy::Cpu, streams);
            let replayed = exprlib(&patch, pdes, variant, PlacementPolicy::Gpu(gpu), streams);
            replayed.set_step_replay(StepReplay::CudaGraph).unwrap();
            let graph_launches = watershed_fields::gpu::emulated_graph_launches();
            for execution in 0..6 {
                // From the fourth execution on, the host writes phi0 before
                // each: the step then copies it in, and the replay reads
                // the new values.
                if execution >= 3 {
                    for graph in [&cpu, &replayed] {
                        graph
                            .set_field::<CellCentre>(&phi(0), |[x, y, z]| {
                                initial_phi(0)([x, y, z]) * (1.0 + execution as f64)
                            })
                            .unwrap();
                    }
                }
                cpu.execute(ExecutionMode::Serial).unwrap();
                replayed.execute(ExecutionMode::Serial).unwrap();
                for i in 0..pdes {
                    let (worst, differing) = difference(
                        &values(&replayed, &phi_next(i)),
                        &values(&cpu, &phi_next(i)),
                    );
                    assert!(
                        worst <= 1e-12,
                        "{variant} {streams:?} execution {execution}: phi_next{i} differs by {worst:e} in {differing} points"
                    );
                }
            }
            let statistics = replayed.replay_statistics();
            eprintln!("{variant} {streams:?}: {statistics:?}");
            assert_eq!(statistics.failed_captures, 0, "{statistics:?}");
            // Steps without a copy: 2nd (direct), 3rd (captured); with the
            // copy of phi0: 4th (direct), 5th (captured), 6th (replayed).
            assert_eq!(
                statistics.captures, 2,
                "{variant} {streams:?}: {statistics:?}"
            );
            assert_eq!(
                statistics.replays, 1,
                "{variant} {streams:?}: {statistics:?}"
            );
            assert!(statistics.launches_per_step >= pdes, "{statistics:?}");
            if watershed_fields::gpu::gpus_are_emulated() {
                assert_eq!(
                    watershed_fields::gpu::emulated_graph_launches() - graph_launches,
                    3,
                    "two captured steps and one replayed step are graph launches"
                );
            }
        }
    }
}

#[test]
fn replay_is_refused_naming_the_node_that_prevents_it() {
    // Without a GPU: a graph on the CPU cannot be replayed.
    let patch = patch(8);
    let p = Parameter::new("p", 1.0);
    let cpu = scaled_graph(&patch, PlacementPolicy::Cpu, &p);
    let error = cpu.set_step_replay(StepReplay::CudaGraph).unwrap_err();
    assert!(
        matches!(&error, GraphError::NotPlaceable { node, device: Device::Cpu, reason } if node.contains("scaled") && reason.contains("runs on the CPU")),
        "{error}"
    );
    assert_eq!(cpu.step_replay(), StepReplay::Off);
    let Some((gpu, _alone)) = gpu_alone("replay_is_refused_naming_the_node_that_prevents_it")
    else {
        return;
    };
    // A reduction's value is waited for by the host.
    let largest = Parameter::new("largest", -1.0);
    let graph = reduction_graph(&patch, PlacementPolicy::Gpu(gpu), &largest);
    let error = graph.set_step_replay(StepReplay::CudaGraph).unwrap_err();
    assert!(
        matches!(&error, GraphError::NotPlaceable { node, reason, .. } if node.contains("max|lap u|") && reason.contains("reduction")),
        "{error}"
    );
    // A replayed graph placed back on the CPU runs there (no device work,
    // nothing to replay) and gives the CPU's bits.
    let mut replayed = scaled_graph(&patch, PlacementPolicy::Gpu(gpu), &p);
    replayed.set_step_replay(StepReplay::CudaGraph).unwrap();
    replayed.execute(ExecutionMode::Serial).unwrap();
    replayed
        .place(PlacementPolicy::Cpu, StreamMode::default())
        .unwrap();
    p.set(2.5);
    replayed.execute(ExecutionMode::Serial).unwrap();
    let reference = scaled_graph(&patch, PlacementPolicy::Cpu, &p);
    reference.execute(ExecutionMode::Serial).unwrap();
    let scaled = Tag::none("scaled");
    let (worst, differing) = difference(&values(&replayed, &scaled), &values(&reference, &scaled));
    assert_eq!(differing, 0, "scaled differs by up to {worst:e}");
    // Placed on the GPU again, with replay still on, it replays.
    replayed
        .place(PlacementPolicy::Gpu(gpu), StreamMode::default())
        .unwrap();
    // The first step copies `scaled` in (the CPU wrote it last), the
    // second runs directly, the third is captured, the fourth replayed.
    for _ in 0..4 {
        replayed.execute(ExecutionMode::Serial).unwrap();
    }
    assert!(
        replayed.replay_statistics().replays >= 1,
        "{:?}",
        replayed.replay_statistics()
    );
    let (worst, differing) = difference(&values(&replayed, &scaled), &values(&reference, &scaled));
    assert_eq!(differing, 0, "scaled differs by up to {worst:e}");
}

#[test]
fn replayed_executions_leak_no_gpu_memory_and_keep_one_graph() {
    let Some((gpu, _alone)) =
        gpu_alone("replayed_executions_leak_no_gpu_memory_and_keep_one_graph")
    else {
        return;
    };
    let pool = MemoryPool::global(Device::Gpu(gpu)).unwrap();
    // The coupled variant takes a scratch field from the pool each
    // execution: replay only works if it gets the same block back.
    let graph = exprlib(
        &patch(12),
        2,
        "coupled",
        PlacementPolicy::Gpu(gpu),
        StreamMode::default(),
    );
    graph.set_step_replay(StepReplay::CudaGraph).unwrap();
    for _ in 0..4 {
        graph.execute(ExecutionMode::Serial).unwrap();
    }
    let warm = pool.statistics();
    let executions = 300;
    for _ in 0..executions {
        graph.execute(ExecutionMode::Serial).unwrap();
    }
    let after = pool.statistics();
    assert_eq!(after.blocks_active, warm.blocks_active, "{after:?}");
    assert_eq!(after.bytes_total, warm.bytes_total, "{after:?}");
    assert_eq!(after.misses, warm.misses, "{after:?}");
    let statistics = graph.replay_statistics();
    // Executions 1 (inputs copied in) and 2 ran directly, 3 was captured:
    // every one after is a replay of that one graph.
    assert_eq!(statistics.captures, 1, "{statistics:?}");
    assert_eq!(statistics.replays, executions + 1, "{statistics:?}");
}

#[test]
fn scratch_allocated_in_stream_order_gives_the_pools_bits_and_frees_every_block() {
    let Some((gpu, _alone)) =
        gpu_alone("scratch_allocated_in_stream_order_gives_the_pools_bits_and_frees_every_block")
    else {
        return;
    };
    let patch = patch(16);
    let pdes = 2;
    let cpu = exprlib(
        &patch,
        pdes,
        "coupled",
        PlacementPolicy::Cpu,
        StreamMode::default(),
    );
    cpu.execute(ExecutionMode::Serial).unwrap();
    let ordered = MemoryPool::stream_ordered(gpu).unwrap();
    let sized = MemoryPool::global(Device::Gpu(gpu)).unwrap();
    for streams in [StreamMode::default(), StreamMode::Synchronous] {
        let graph = exprlib(&patch, pdes, "coupled", PlacementPolicy::Gpu(gpu), streams);
        graph.set_gpu_scratch(GpuScratch::StreamOrdered).unwrap();
        assert_eq!(graph.gpu_scratch(), GpuScratch::StreamOrdered);
        // The first execution copies the persistent fields over.
        graph.execute(ExecutionMode::Threaded(2)).unwrap();
        let (before, sized_before) = (ordered.statistics(), sized.statistics());
        let executions = 5;
        for _ in 0..executions {
            graph.execute(ExecutionMode::Threaded(2)).unwrap();
        }
        let (after, sized_after) = (ordered.statistics(), sized.statistics());
        eprintln!(
            "{streams:?}: stream-ordered {before:?} -> {after:?}\nsize-class {sized_before:?} -> {sized_after:?}"
        );
        // The coupled variant's hoisted source is a scratch field: each
        // execution allocates it in stream order and frees it at its end.
        assert!(
            after.misses >= before.misses + executions,
            "each execution allocates its scratch in stream order: {after:?}"
        );
        assert_eq!(after.blocks_active, before.blocks_active, "{after:?}");
        assert_eq!(after.bytes_total, before.bytes_total, "{after:?}");
        assert_eq!(
            (sized_after.hits, sized_after.misses),
            (sized_before.hits, sized_before.misses),
            "no scratch field came from the size-class pool"
        );
        for i in 0..pdes {
            let (worst, differing) =
                difference(&values(&graph, &phi_next(i)), &values(&cpu, &phi_next(i)));
            assert!(
                worst <= 1e-12,
                "{streams:?}: phi_next{i} differs by {worst:e} at {differing} points"
            );
        }
        // The size-class pool gives the same bits.
        let pooled = exprlib(&patch, pdes, "coupled", PlacementPolicy::Gpu(gpu), streams);
        pooled.execute(ExecutionMode::Threaded(2)).unwrap();
        for i in 0..pdes {
            let (worst, differing) = difference(
                &values(&graph, &phi_next(i)),
                &values(&pooled, &phi_next(i)),
            );
            assert_eq!(differing, 0, "phi_next{i} differs by up to {worst:e}");
        }
    }
}

#[test]
fn stream_ordered_scratch_and_step_replay_refuse_each_other() {
    let Some((gpu, _alone)) = gpu_alone("stream_ordered_scratch_and_step_replay_refuse_each_other")
    else {
        return;
    };
    let p = Parameter::new("p", 1.0);
    let graph = scaled_graph(&patch(8), PlacementPolicy::Gpu(gpu), &p);
    let names_both = |error: &GraphError| {
        matches!(error, GraphError::Usage(message)
            if message.contains("GpuScratch::StreamOrdered") && message.contains("StepReplay::CudaGraph"))
    };
    graph.set_step_replay(StepReplay::CudaGraph).unwrap();
    let error = graph
        .set_gpu_scratch(GpuScratch::StreamOrdered)
        .unwrap_err();
    assert!(names_both(&error), "{error}");
    assert_eq!(graph.gpu_scratch(), GpuScratch::SizeClassPool);
    graph.set_step_replay(StepReplay::Off).unwrap();
    graph.set_gpu_scratch(GpuScratch::StreamOrdered).unwrap();
    let error = graph.set_step_replay(StepReplay::CudaGraph).unwrap_err();
    assert!(names_both(&error), "{error}");
    assert_eq!(graph.step_replay(), StepReplay::Off);
    // Back to the pool, replay is accepted again.
    graph.set_gpu_scratch(GpuScratch::SizeClassPool).unwrap();
    graph.set_step_replay(StepReplay::CudaGraph).unwrap();
}

/// CPU nodes that must run at the same time: each arrival waits (up to
/// `patience`) until all `expected` nodes of its round have arrived. Run
/// one after another, the first one's wait ends in an error naming it.
struct Meeting {
    arrived: Mutex<usize>,
    everyone: std::sync::Condvar,
    expected: usize,
    patience: std::time::Duration,
}

impl Meeting {
    fn new(expected: usize) -> std::sync::Arc<Meeting> {
        std::sync::Arc::new(Meeting {
            arrived: Mutex::new(0),
            everyone: std::sync::Condvar::new(),
            expected,
            patience: std::time::Duration::from_secs(20),
        })
    }

    fn attend(&self, who: &str) -> Result<(), GraphError> {
        let mut arrived = self.arrived.lock().unwrap();
        *arrived += 1;
        let round_complete = arrived.div_ceil(self.expected) * self.expected;
        self.everyone.notify_all();
        let (arrived, waited) = self
            .everyone
            .wait_timeout_while(arrived, self.patience, |n| *n < round_complete)
            .unwrap();
        if waited.timed_out() {
            return Err(GraphError::Native(format!(
                "{who} waited {:?} for the other CPU nodes of its round ({} of {round_complete} arrived): they did not run beside it",
                self.patience, *arrived
            )));
        }
        Ok(())
    }
}

/// A native node like [`pointwise_native`] that first attends `meeting`
/// (when given) and fails while `fail` is set.
fn meeting_native(
    name: &'static str,
    input: &Tag,
    output: &Tag,
    meeting: Option<std::sync::Arc<Meeting>>,
    fail: std::sync::Arc<std::sync::atomic::AtomicBool>,
    f: impl Fn(f64) -> f64 + Send + Sync + 'static,
) -> NativeExpression {
    let (r, out) = (input.clone(), output.clone());
    NativeExpression::new(
        name,
        vec![(output.clone(), LocationKind::CellCentre)],
        vec![input.clone()],
        move |context| {
            if let Some(meeting) = &meeting {
                meeting.attend(name)?;
            }
            if fail.load(std::sync::atomic::Ordering::Acquire) {
                return Err(GraphError::Native(format!("{name} failed on purpose")));
            }
            let values = context.input::<CellCentre>(&r)?.values()?.to_vec();
            let written = context.output::<CellCentre>(&out)?.values_mut()?;
            for (o, v) in written.iter_mut().zip(values) {
                *o = f(v);
            }
            Ok(())
        },
    )
}

/// u -> {lap (GPU), twice (CPU), shifted (CPU)} -> mid = lap/2 + twice
/// (GPU) -> squared (CPU) -> out = squared + shifted - lap (GPU): fields
/// cross both ways, two CPU nodes can run at once, and two GPU scratch
/// fields live through the execution. `meeting` makes the two CPU nodes
/// wait for each other; `fail` makes "squared" fail, `panic` panic.
fn beside(
    placement: PlacementPolicy,
    meeting: Option<std::sync::Arc<Meeting>>,
    fail: std::sync::Arc<std::sync::atomic::AtomicBool>,
    panic: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> ExpressionGraph {
    let tags = ["u", "lap", "twice", "shifted", "mid", "squared", "out"].map(Tag::none);
    let [u, lap, twice, shifted, mid, squared, out] = tags;
    let never = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let r = u.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            lap.clone(),
            move |s| laplacian(s.field::<CellCentre>(&r)),
        ))
        .unwrap();
    factory
        .register(meeting_native(
            "twice",
            &u,
            &twice,
            meeting.clone(),
            never.clone(),
            |v| 2.0 * v,
        ))
        .unwrap();
    factory
        .register(meeting_native(
            "shifted",
            &u,
            &shifted,
            meeting,
            never,
            |v| v + 1.0,
        ))
        .unwrap();
    let (a, b) = (lap.clone(), twice.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            mid.clone(),
            move |s| s.field::<CellCentre>(&a) * 0.5 + s.field::<CellCentre>(&b),
        ))
        .unwrap();
    factory
        .register(meeting_native(
            "squared",
            &mid,
            &squared,
            None,
            fail,
            move |v| {
                if panic.load(std::sync::atomic::Ordering::Acquire) {
                    panic!("squared saw {v}");
                }
                v * v
            },
        ))
        .unwrap();
    let (a, b, c) = (squared.clone(), shifted.clone(), lap.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            out.clone(),
            move |s| {
                s.field::<CellCentre>(&a) + s.field::<CellCentre>(&b) - s.field::<CellCentre>(&c)
            },
        ))
        .unwrap();
    let options = GraphOptions {
        no_fusion: true,
        persistent: vec![out.clone()],
        placement,
        ..Default::default()
    };
    let graph = ExpressionGraph::build(&factory, &[out], &patch(12), &options).unwrap();
    graph
        .set_field::<CellCentre>(&u, |[x, y, z]| (x * 5.0).cos() + y - z * z)
        .unwrap();
    graph
}

/// With more than one thread, the CPU nodes of a plan with GPU nodes run
/// as tasks beside each other and beside the enqueueing of GPU nodes (the
/// thesis' hybrid scheduler), not one after another on the thread that
/// walks the plan: two CPU nodes that wait for each other both finish,
/// the result is the CPU's to the bit, and a failing CPU node stops the
/// execution with its own error, every GPU scratch block back in the pool.
#[test]
fn cpu_nodes_of_a_gpu_plan_run_beside_each_other_and_give_the_cpus_bits() {
    let Some((gpu, _alone)) =
        gpu_alone("cpu_nodes_of_a_gpu_plan_run_beside_each_other_and_give_the_cpus_bits")
    else {
        return;
    };
    let out = Tag::none("out");
    let ok = || std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cpu = beside(PlacementPolicy::Cpu, None, ok(), ok());
    cpu.execute(ExecutionMode::Serial).unwrap();
    let want = values(&cpu, &out);
    let (fail, panic) = (ok(), ok());
    let mixed = beside(
        PlacementPolicy::Heterogeneous(gpu),
        Some(Meeting::new(2)),
        fail.clone(),
        panic.clone(),
    );
    for (name, target) in [
        ("lap", Target::Gpu(gpu)),
        ("twice", Target::Cpu),
        ("shifted", Target::Cpu),
        ("mid", Target::Gpu(gpu)),
        ("squared", Target::Cpu),
        ("out", Target::Gpu(gpu)),
    ] {
        assert_eq!(mixed.target_of(name), Some(target), "{name}");
    }
    let pool = MemoryPool::global(Device::Gpu(gpu)).unwrap();
    for threads in [2, 3] {
        for execution in 0..3 {
            mixed.execute(ExecutionMode::Threaded(threads)).unwrap();
            let (worst, differing) = difference(&values(&mixed, &out), &want);
            assert_eq!(
                differing, 0,
                "{threads} threads, execution {execution}: out differs at {differing} points (max relative {worst:e})"
            );
        }
        let threads_used: std::collections::BTreeSet<usize> =
            mixed.last_trace().iter().map(|e| e.thread).collect();
        assert!(threads_used.len() >= 2, "{:?}", mixed.last_trace());
    }
    // A failing CPU node: its error, and no GPU block kept.
    let warm = pool.statistics();
    fail.store(true, std::sync::atomic::Ordering::Release);
    let error = mixed.execute(ExecutionMode::Threaded(2)).unwrap_err();
    assert!(
        matches!(&error, GraphError::Expression { expression, .. } if expression == "squared"),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("squared failed on purpose"),
        "{error}"
    );
    let failed = pool.statistics();
    assert_eq!(failed.blocks_active, warm.blocks_active, "{failed:?}");
    fail.store(false, std::sync::atomic::Ordering::Release);
    // A panicking CPU node, while GPU work is in flight: its error, every
    // stream drained and every GPU scratch block back, on the concurrent
    // and on the plan-order walk.
    panic.store(true, std::sync::atomic::Ordering::Release);
    let walked = beside(
        PlacementPolicy::Heterogeneous(gpu),
        None,
        ok(),
        panic.clone(),
    );
    for (graph, mode) in [
        (&mixed, ExecutionMode::Threaded(2)),
        (&walked, ExecutionMode::Serial),
    ] {
        let error = graph.execute(mode).unwrap_err();
        assert!(
            matches!(&error, GraphError::Expression { expression, source }
                if expression == "squared" && matches!(**source, GraphError::Panicked { .. })),
            "{mode:?}: {error:?}"
        );
        assert!(
            error.to_string().contains("it panicked: squared saw"),
            "{error}"
        );
    }
    drop(walked);
    let panicked = pool.statistics();
    assert_eq!(panicked.blocks_active, warm.blocks_active, "{panicked:?}");
    panic.store(false, std::sync::atomic::Ordering::Release);
    mixed.execute(ExecutionMode::Threaded(2)).unwrap();
    let (worst, differing) = difference(&values(&mixed, &out), &want);
    assert_eq!(
        differing, 0,
        "after the failure: out differs at {differing} points (max relative {worst:e})"
    );
}

/// When two checked GPU nodes both write values that are not finite, a
/// concurrent walk (which may enqueue them in another order than the
/// plan's) reports the first in plan order, as the walk in plan order and
/// the CPU do.
#[test]
fn a_concurrent_walk_reports_the_first_bad_check_in_plan_order() {
    let (u, slow, early, late, out) = (
        Tag::none("u"),
        Tag::none("slow copy"),
        Tag::none("log of slow copy"),
        Tag::none("log u"),
        Tag::none("out"),
    );
    let build = |placement: PlacementPolicy| {
        let mut factory = Factory::new();
        factory
            .placeholder(u.clone(), LocationKind::CellCentre)
            .unwrap();
        // CPU only, and slow: the checked node after it is enqueued last by
        // a concurrent walk, though it may come first in the plan.
        factory
            .register(pointwise_native("slow copy", &u, &slow, |v| {
                std::thread::sleep(std::time::Duration::from_micros(100));
                v
            }))
            .unwrap();
        for (target, input) in [(&early, &slow), (&late, &u)] {
            let input = input.clone();
            factory
                .register(
                    LanguageExpression::new::<CellCentre>(target.clone(), move |s| {
                        watershed_operators::log(s.field::<CellCentre>(&input))
                    })
                    .checking_finite(),
                )
                .unwrap();
        }
        let (a, b) = (early.clone(), late.clone());
        factory
            .register(LanguageExpression::new::<CellCentre>(
                out.clone(),
                move |s| s.field::<CellCentre>(&a) + s.field::<CellCentre>(&b),
            ))
            .unwrap();
        let options = GraphOptions {
            no_fusion: true,
            persistent: vec![out.clone()],
            placement,
            ..Default::default()
        };
        let graph =
            ExpressionGraph::build(&factory, std::slice::from_ref(&out), &patch(8), &options)
                .unwrap();
        graph
            .set_field::<CellCentre>(&u, |[x, _, _]| x - 0.5)
            .unwrap();
        graph
    };
    let cpu = build(PlacementPolicy::Cpu);
    let order = cpu.execution_order();
    let position = |name: &str| order.iter().position(|n| n == name).unwrap();
    assert!(
        position("log of slow copy") < position("log u"),
        "the plan must put the slow branch's check first for this test to mean anything: {order:?}"
    );
    let want = cpu.execute(ExecutionMode::Serial).unwrap_err().to_string();
    assert!(want.contains("'log of slow copy' is not finite"), "{want}");
    let Some((gpu, _alone)) =
        gpu_alone("a_concurrent_walk_reports_the_first_bad_check_in_plan_order")
    else {
        return;
    };
    let mixed = build(PlacementPolicy::Heterogeneous(gpu));
    assert_eq!(mixed.target_of("slow copy"), Some(Target::Cpu));
    assert_eq!(mixed.target_of("log u"), Some(Target::Gpu(gpu)));
    assert_eq!(mixed.execution_order(), order);
    for mode in [ExecutionMode::Serial, ExecutionMode::Threaded(2)] {
        let got = mixed.execute(mode).unwrap_err().to_string();
        assert_eq!(got, want, "{mode:?}");
    }
}

/// The GPU timeline: with it on, an execution of a graph whose fields
/// cross both ways times each GPU node's kernels and each copy on its
/// stream. Every GPU node appears once, every copy after a writer once; a
/// stream's spans never overlap (a stream runs in order); a copy to the GPU
/// ends before the kernels that read it start; and the Chrome trace puts
/// them on a track per stream under a "GPU k" process. Off, or replayed as
/// a CUDA graph, there are no spans.
#[test]
fn the_gpu_timeline_shows_each_streams_kernels_and_copies_in_order() {
    let Some((gpu, _alone)) =
        gpu_alone("the_gpu_timeline_shows_each_streams_kernels_and_copies_in_order")
    else {
        return;
    };
    use watershed_exprgraph::{GpuSpan, GpuWork};
    let graph = crossing(PlacementPolicy::Heterogeneous(gpu));
    graph.execute(ExecutionMode::Threaded(2)).unwrap();
    assert!(graph.last_gpu_trace().is_empty(), "off by default");
    graph.set_gpu_timeline(true);
    let gpu_nodes: Vec<String> = graph
        .execution_order()
        .into_iter()
        .filter(|name| graph.target_of(name) == Some(Target::Gpu(gpu)))
        .collect();
    assert_eq!(gpu_nodes.len(), 3, "{gpu_nodes:?}");
    let copies_after_writers: Vec<String> = graph
        .device_plan()
        .transfers()
        .iter()
        .filter(|t| t.after.is_some())
        .map(|t| format!("copy {} {} -> {}", t.field, t.from, t.to))
        .collect();
    assert!(copies_after_writers.len() >= 2, "{copies_after_writers:?}");
    for mode in [ExecutionMode::Serial, ExecutionMode::Threaded(2)] {
        let report = graph.execute(mode).unwrap();
        let spans = graph.last_gpu_trace();
        let named = |work: GpuWork, name: &str| -> Vec<&GpuSpan> {
            spans
                .iter()
                .filter(|s| s.work == work && s.name == name)
                .collect()
        };
        for node in &gpu_nodes {
            assert_eq!(
                named(GpuWork::Kernels, node).len(),
                1,
                "{mode:?} {node}: {spans:#?}"
            );
        }
        for copy in &copies_after_writers {
            assert_eq!(
                named(GpuWork::Copy, copy).len(),
                1,
                "{mode:?} {copy}: {spans:#?}"
            );
        }
        assert_eq!(
            spans.iter().filter(|s| s.work == GpuWork::Kernels).count(),
            gpu_nodes.len(),
            "{spans:#?}"
        );
        for span in &spans {
            assert_eq!(span.stream.device, gpu, "{span:?}");
            assert!(
                span.start <= span.end && span.end <= report.elapsed,
                "{span:?} {report:?}"
            );
        }
        let mut by_stream = spans.clone();
        by_stream.sort_by_key(|s| (s.stream.index, s.start));
        for pair in by_stream.windows(2) {
            if pair[0].stream == pair[1].stream {
                assert!(
                    pair[0].end <= pair[1].start,
                    "{mode:?}: overlap on one stream {pair:#?}"
                );
            }
        }
        // "sum" reads "squared", written on the CPU and copied over.
        let copy = named(GpuWork::Copy, "copy squared (STATE_NONE) CPU -> GPU 0");
        let sum = named(GpuWork::Kernels, "sum");
        assert_eq!((copy.len(), sum.len()), (1, 1), "{spans:#?}");
        assert!(copy[0].end <= sum[0].start, "{mode:?}: {copy:?} {sum:?}");
        let json = graph.chrome_trace();
        for needle in [
            "\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1000,\"args\":{\"name\":\"GPU 0\"}",
            "\"cat\":\"gpu kernels\"",
            "\"cat\":\"gpu copy\"",
            "\"name\":\"thread_name\"",
        ] {
            assert!(json.contains(needle), "{needle} missing from {json}");
        }
    }
    // Recorded runs keep the GPU spans, on a track per graph and stream.
    let epoch = std::time::Instant::now();
    graph.start_recording(epoch);
    for _ in 0..2 {
        graph.execute(ExecutionMode::Serial).unwrap();
    }
    let (events, dropped) = graph.take_recording("crossing");
    assert_eq!(dropped, 0);
    let on_streams = events.iter().filter(|e| e.stream.is_some()).count();
    assert_eq!(
        on_streams,
        2 * (gpu_nodes.len() + copies_after_writers.len()),
        "{events:#?}"
    );
    let json = watershed_exprgraph::chrome_trace_of(&events);
    assert!(
        json.contains("\"args\":{\"name\":\"crossing: stream "),
        "{json}"
    );
    graph.set_gpu_timeline(false);
    graph.execute(ExecutionMode::Serial).unwrap();
    assert!(graph.last_gpu_trace().is_empty());
    // A step replayed as one CUDA graph is not timed kernel by kernel.
    let replayed = exprlib(
        &patch(8),
        2,
        "diffusion",
        PlacementPolicy::Gpu(gpu),
        StreamMode::default(),
    );
    replayed.set_step_replay(StepReplay::CudaGraph).unwrap();
    replayed.set_gpu_timeline(true);
    for _ in 0..3 {
        replayed.execute(ExecutionMode::Serial).unwrap();
        assert!(replayed.last_gpu_trace().is_empty());
    }
}

/// `phi`'s seams and periodic images exchanged between 2 x 2 x 1
/// patches whose graphs run on one GPU, after a step left `phi` there:
/// the fields stay on the GPU, the points are copied there (nothing
/// crosses to the host once the point lists are on the GPU; a whole
/// patch field per patch went to the host and back before) with one
/// host wait, and every point of every patch, ghosts included, equals
/// the same exchange on the CPU.
#[test]
fn an_exchange_of_fields_on_the_gpu_moves_only_their_rims() {
    let Some((gpu, _alone)) = gpu_alone("an_exchange_of_fields_on_the_gpu_moves_only_their_rims")
    else {
        return;
    };
    let grid = Grid::new([32, 24, 8], [32.0, 24.0, 8.0], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let layout = PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(1)).unwrap();
    let (u, next) = (Tag::none("phi"), Tag::none("next"));
    let exchanged = |placement: PlacementPolicy| {
        let graphs = PatchedGraphs::build(layout.clone(), Rc::new(SingleProcess), |patch| {
            let mut factory = Factory::new();
            factory.placeholder(u.clone(), LocationKind::CellCentre)?;
            let t = u.clone();
            factory.register(LanguageExpression::new::<CellCentre>(
                next.clone(),
                move |s| {
                    let phi = s.field::<CellCentre>(&t);
                    phi.clone() + 0.1 * laplacian(phi)
                },
            ))?;
            let options = GraphOptions {
                persistent: vec![next.clone()],
                placement: placement.clone(),
                ..Default::default()
            };
            let graph =
                ExpressionGraph::build(&factory, std::slice::from_ref(&next), patch, &options)?;
            graph.fill_placeholder(&u)?;
            Ok::<_, GraphError>(graph)
        })
        .unwrap();
        graphs
            .set_field::<CellCentre>(&u, |[x, y, z]| (0.3 * x).sin() + (0.2 * y).cos() * z)
            .unwrap();
        graphs.exchange(std::slice::from_ref(&u)).unwrap();
        graphs.execute(ExecutionMode::Serial).unwrap();
        graphs.rotate_fields(&[u.clone(), next.clone()]).unwrap();
        // Two more steps put the point lists, and the tables of both
        // time levels' addresses (they swap at each rotation), on the GPU.
        for _ in 0..2 {
            graphs.exchange(std::slice::from_ref(&u)).unwrap();
            graphs.execute(ExecutionMode::Serial).unwrap();
            graphs.rotate_fields(&[u.clone(), next.clone()]).unwrap();
        }
        let on_gpu = graphs.graphs()[0].field_lives_on_gpu(&u).unwrap();
        let before = watershed_fields::gpu_calls();
        let written = graphs.exchange(std::slice::from_ref(&u)).unwrap();
        let moved = watershed_fields::gpu_calls().since(&before);
        let still_on_gpu = graphs
            .graphs()
            .iter()
            .all(|g| g.field_lives_on_gpu(&u).unwrap());
        let fields: Vec<Vec<f64>> = graphs.graphs().iter().map(|g| values(g, &u)).collect();
        (on_gpu && still_on_gpu, written, moved, fields)
    };
    let (_, cpu_written, cpu_moved, cpu_fields) = exchanged(PlacementPolicy::Cpu);
    let (on_gpu, written, moved, fields) = exchanged(PlacementPolicy::Gpu(gpu));
    assert!(on_gpu, "phi left the GPU");
    assert_eq!(cpu_moved.copied_bytes, 0);
    assert_eq!(written, cpu_written);
    // Every patch is on the one GPU: each point written was copied there
    // from its owner, nothing crossed to the host, and the exchange
    // waited for its copies once.
    assert!(written > 0);
    assert_eq!(moved.copied_bytes, 0, "{moved}");
    assert_eq!(moved.host_waits, 1, "{moved}");
    assert!(moved.launches >= 4, "{moved}");
    for (k, (got, want)) in fields.iter().zip(&cpu_fields).enumerate() {
        let (worst, differing) = difference(got, want);
        assert_eq!(differing, 0, "patch {k}: phi differs by up to {worst:e}");
    }
}

/// A field handed from one graph on a GPU to another on the same GPU
/// (as a decomposed flow hands `u*` from its momentum graph to its
/// divergence graph) is copied on the GPU: nothing crosses to the host,
/// the receiving graph runs without copying it in, and its result has
/// the CPU's bits.
#[test]
fn a_field_handed_between_graphs_on_one_gpu_stays_there() {
    let Some((gpu, _alone)) = gpu_alone("a_field_handed_between_graphs_on_one_gpu_stays_there")
    else {
        return;
    };
    let (u, next, twice) = (Tag::none("phi"), Tag::none("next"), Tag::none("twice"));
    let handed = |placement: PlacementPolicy| {
        let patch = patch(24);
        let options = |persistent: Vec<Tag>| GraphOptions {
            persistent,
            placement: placement.clone(),
            ..Default::default()
        };
        let mut first = Factory::new();
        first
            .placeholder(u.clone(), LocationKind::CellCentre)
            .unwrap();
        let t = u.clone();
        first
            .register(LanguageExpression::new::<CellCentre>(
                next.clone(),
                move |s| {
                    let phi = s.field::<CellCentre>(&t);
                    phi.clone() + 0.1 * laplacian(phi)
                },
            ))
            .unwrap();
        let producer = ExpressionGraph::build(
            &first,
            std::slice::from_ref(&next),
            &patch,
            &options(vec![next.clone()]),
        )
        .unwrap();
        let mut second = Factory::new();
        second
            .placeholder(next.clone(), LocationKind::CellCentre)
            .unwrap();
        let n = next.clone();
        second
            .register(LanguageExpression::new::<CellCentre>(
                twice.clone(),
                move |s| 2.0 * s.field::<CellCentre>(&n),
            ))
            .unwrap();
        let consumer = ExpressionGraph::build(
            &second,
            std::slice::from_ref(&twice),
            &patch,
            &options(vec![twice.clone()]),
        )
        .unwrap();
        producer
            .with_field_mut::<CellCentre, _>(&u, |f| {
                let layout = f.layout().clone();
                let values = f.values_mut().unwrap();
                for p in layout.allocated().iter() {
                    let [x, y, z] = layout.coordinate(p);
                    values[layout.linear_index(p)] = (0.3 * x).sin() * (0.2 * y).cos() + z;
                }
            })
            .unwrap();
        // A first round puts every field where its graph runs (the
        // consumer's result is moved to its GPU once, at its first run).
        producer.execute(ExecutionMode::Serial).unwrap();
        consumer
            .copy_field_from::<CellCentre>(&next, &producer, &next)
            .unwrap();
        consumer.execute(ExecutionMode::Serial).unwrap();
        producer.execute(ExecutionMode::Serial).unwrap();
        let before = watershed_fields::gpu_calls();
        consumer
            .copy_field_from::<CellCentre>(&next, &producer, &next)
            .unwrap();
        let stays = consumer.field_lives_on_gpu(&next).unwrap();
        consumer.execute(ExecutionMode::Serial).unwrap();
        let moved = watershed_fields::gpu_calls().since(&before);
        (stays, moved, values(&consumer, &twice))
    };
    let (_, _, cpu) = handed(PlacementPolicy::Cpu);
    let (stays, moved, on_gpu) = handed(PlacementPolicy::Gpu(gpu));
    assert!(stays, "the handed field left the GPU");
    // The copy and the consumer's run moved nothing between devices.
    assert_eq!(moved.copied_bytes, 0, "{moved}");
    assert!(moved.copies >= 1, "{moved}");
    let (worst, differing) = difference(&on_gpu, &cpu);
    assert_eq!(differing, 0, "twice differs by up to {worst:e}");
}
