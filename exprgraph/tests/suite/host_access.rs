//! Host access and execution: `with_field_mut` from another thread waits
//! for a running CPU execution (it changed an input between two nodes of
//! one execution: 7-20 torn results in about 17,000), and a nested access
//! on one thread does not wait for itself.

use std::sync::atomic::{AtomicBool, Ordering};
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag,
};
use watershed_fields::{CellCentre, Grid, LocationKind};

fn tag(name: &str) -> Tag {
    Tag::none(name)
}

/// `b = a`, then `c = b + a` in a second node (no fusion): within one
/// execution `c = 2 b` exactly, unless `a` changed between the two nodes.
fn two_node_graph() -> ExpressionGraph {
    let mut factory = Factory::new();
    factory
        .placeholder(tag("a"), LocationKind::CellCentre)
        .unwrap();
    factory
        .register(LanguageExpression::new::<CellCentre>(tag("b"), |s| {
            s.field::<CellCentre>(&tag("a")) * 1.0
        }))
        .unwrap();
    factory
        .register(LanguageExpression::new::<CellCentre>(tag("c"), |s| {
            s.field::<CellCentre>(&tag("b")) + s.field::<CellCentre>(&tag("a"))
        }))
        .unwrap();
    let patch = Grid::new([16, 16, 16], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let options = GraphOptions {
        no_fusion: true,
        persistent: vec![tag("b"), tag("c")],
        ..Default::default()
    };
    ExpressionGraph::build(&factory, &[tag("c")], &patch, &options).unwrap()
}

fn interior(graph: &ExpressionGraph, name: &str) -> Vec<f64> {
    graph
        .with_field::<CellCentre, _>(&tag(name), |f| {
            let layout = f.layout();
            let values = f.values().unwrap();
            layout
                .interior()
                .into_iter()
                .map(|i| values[layout.linear_index(i)])
                .collect()
        })
        .unwrap()
}

#[test]
fn a_write_from_another_thread_waits_for_the_running_execution() {
    let graph = two_node_graph();
    assert!(graph.node_count() >= 2, "the two nodes stay apart");
    graph
        .with_field_mut::<CellCentre, _>(&tag("a"), |f| f.fill(1.0).unwrap())
        .unwrap();
    let done = AtomicBool::new(false);
    let torn = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut value = 1.0;
            while !done.load(Ordering::Relaxed) {
                value = if value == 1.0 { 2.0 } else { 1.0 };
                graph
                    .with_field_mut::<CellCentre, _>(&tag("a"), |f| f.fill(value).unwrap())
                    .unwrap();
            }
        });
        let mut torn = 0;
        for _ in 0..400 {
            graph.execute(ExecutionMode::Serial).unwrap();
            let (b, c) = (interior(&graph, "b"), interior(&graph, "c"));
            torn += b.iter().zip(&c).filter(|(b, c)| **c != 2.0 * **b).count();
        }
        done.store(true, Ordering::Relaxed);
        torn
    });
    assert_eq!(torn, 0, "values of c computed from another a than b's");
}

#[test]
fn a_nested_access_on_one_thread_does_not_wait_for_itself() {
    let graph = two_node_graph();
    let inner = graph
        .with_field_mut::<CellCentre, _>(&tag("a"), |a| {
            a.fill(3.0).unwrap();
            graph
                .with_field::<CellCentre, _>(&tag("b"), |b| b.layout().interior_len())
                .unwrap()
        })
        .unwrap();
    assert_eq!(inner, 16 * 16 * 16);
    graph.execute(ExecutionMode::Serial).unwrap();
    assert!(interior(&graph, "c").iter().all(|&v| v == 6.0));
}
