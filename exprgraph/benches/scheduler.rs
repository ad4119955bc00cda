//! Scheduler overhead per node (target: < 2 us): graphs of 10,000 trivial
//! native nodes, as a chain (each node requires the previous one) and wide
//! (every node requires one placeholder), against calling the same
//! closures in a plain loop. Run: `cargo bench -p watershed-exprgraph --bench scheduler`.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphOptions, NativeExpression, Tag,
};
use watershed_fields::{Grid, LocationKind};

const NODES: usize = 10_000;

fn tag(i: usize) -> Tag {
    Tag::none(&format!("n{i}"))
}

/// The trivial work every node does: bump a shared counter.
fn trivial(
    counter: &Arc<AtomicU64>,
) -> impl Fn(&mut watershed_exprgraph::EvaluationContext<'_>) -> watershed_exprgraph::GraphResult<()>
+ Send
+ Sync
+ 'static {
    let counter = counter.clone();
    move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn build(chain: bool, counter: &Arc<AtomicU64>) -> (ExpressionGraph, Vec<Tag>) {
    let mut factory = Factory::new();
    let source = Tag::none("source");
    factory
        .placeholder(source.clone(), LocationKind::CellCentre)
        .expect("placeholder");
    for i in 0..NODES {
        let requires = if chain && i > 0 {
            vec![tag(i - 1)]
        } else {
            vec![source.clone()]
        };
        factory
            .register(NativeExpression::new(
                &format!("n{i}"),
                vec![(tag(i), LocationKind::CellCentre)],
                requires,
                trivial(counter),
            ))
            .expect("register");
    }
    let roots: Vec<Tag> = if chain {
        vec![tag(NODES - 1)]
    } else {
        (0..NODES).map(tag).collect()
    };
    let patch = Grid::new([1, 1, 1], [1.0; 3], [0.0; 3])
        .expect("grid")
        .whole_domain(0);
    let graph =
        ExpressionGraph::build(&factory, &roots, &patch, &GraphOptions::default()).expect("build");
    // The trivial nodes ignore the source's values: zeros are intended.
    graph.fill_placeholder(&source).expect("fill");
    (graph, roots)
}

fn median(samples: usize, mut f: impl FnMut() -> f64) -> f64 {
    f();
    let mut v: Vec<f64> = (0..samples).map(|_| f()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v[samples / 2]
}

fn main() {
    println!(
        "{:<6} {:<12} {:>12} {:>14}",
        "shape", "mode", "us / node", "plain loop us"
    );
    let counter = Arc::new(AtomicU64::new(0));
    // The same work in a plain loop: what the closures do, without any
    // scheduling, field access or bookkeeping.
    let plain = median(11, || {
        let start = Instant::now();
        for _ in 0..NODES {
            black_box(counter.fetch_add(1, Ordering::Relaxed));
        }
        start.elapsed().as_secs_f64() / NODES as f64
    });
    for chain in [true, false] {
        let (graph, _) = build(chain, &counter);
        for mode in [
            ExecutionMode::Serial,
            ExecutionMode::Threaded(1),
            ExecutionMode::Threaded(2),
        ] {
            let per_node = median(11, || {
                let report = graph.execute(mode).expect("execute");
                report.elapsed.as_secs_f64() / NODES as f64
            });
            println!(
                "{:<6} {:<12} {:>12.3} {:>14.4}",
                if chain { "chain" } else { "wide" },
                format!("{mode:?}"),
                per_node * 1e6,
                plain * 1e6
            );
        }
    }
}
