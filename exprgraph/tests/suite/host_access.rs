//! Host access and execution: `with_field_mut` from another thread waits
//! for a running CPU execution (it changed an input between two nodes of
//! one execution: 7-20 torn results in about 17,000), and a nested access
//! on one thread does not wait for itself.

use std::sync::atomic::{AtomicBool, Ordering};
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag,
};
use watershed_fields::{CellCentre, Grid, LocationKind};
use watershed_operators::gpu_points::PointBatch;

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

/// Point reads and writes on the host: the values written are where
/// `with_field` finds them, field after field; a tag given twice, a
/// point outside the field and values of another length are refused
/// with `FieldUnavailable` naming the tag.
#[test]
fn points_are_read_and_written_field_after_field_and_misuse_is_refused() {
    let graph = two_node_graph();
    let a = tag("a");
    let len = graph
        .with_field::<CellCentre, _>(&a, |f| f.values().map(|v| v.len()))
        .unwrap()
        .unwrap();
    let points = [0, 5, len - 1];
    let mut batch = PointBatch::new();
    graph
        .write_points::<CellCentre>(
            &mut batch,
            std::slice::from_ref(&a),
            &points,
            &[1.5, -2.0, 7.25],
        )
        .unwrap();
    let seen = graph
        .with_field::<CellCentre, _>(&a, |f| {
            f.values()
                .map(|v| points.iter().map(|&p| v[p]).collect::<Vec<_>>())
        })
        .unwrap()
        .unwrap();
    assert_eq!(seen, [1.5, -2.0, 7.25]);
    let mut out = [0.0; 3];
    graph
        .read_points::<CellCentre>(
            &mut batch,
            std::slice::from_ref(&a),
            &[len - 1, 0, 5],
            &mut out,
        )
        .unwrap();
    assert_eq!(out, [7.25, 1.5, -2.0]);

    let refused = |error: watershed_exprgraph::GraphError, needle: &str| match error {
        watershed_exprgraph::GraphError::FieldUnavailable { tag, reason, .. } => {
            assert_eq!(tag, a);
            assert!(reason.contains(needle), "{reason}");
        }
        other => panic!("expected FieldUnavailable, got {other:?}"),
    };
    let twice = [a.clone(), a.clone()];
    refused(
        graph
            .read_points::<CellCentre>(&mut batch, &twice, &[0], &mut [0.0; 2])
            .unwrap_err(),
        "given twice",
    );
    refused(
        graph
            .write_points::<CellCentre>(&mut batch, std::slice::from_ref(&a), &[len], &[0.0])
            .unwrap_err(),
        &format!("linear index {len} lies outside"),
    );
    refused(
        graph
            .read_points::<CellCentre>(&mut batch, std::slice::from_ref(&a), &[0, 1], &mut [0.0; 3])
            .unwrap_err(),
        "2 point(s) of 1 field(s) given with 3 value(s)",
    );
    // A tag the graph does not know is named.
    match graph
        .read_points::<CellCentre>(&mut batch, &[tag("nowhere")], &[0], &mut [0.0])
        .unwrap_err()
    {
        watershed_exprgraph::GraphError::UnknownTag { tag: unknown, .. } => {
            assert_eq!(unknown, tag("nowhere"))
        }
        other => panic!("expected UnknownTag, got {other:?}"),
    }
}

/// A field handed from one graph to another on the host: the values
/// arrive; a field onto itself and fields on different layouts are
/// refused, naming the tag or both fields.
#[test]
fn a_field_copied_from_another_graph_arrives_and_misuse_is_refused() {
    let (from, to) = (two_node_graph(), two_node_graph());
    let a = tag("a");
    from.with_field_mut::<CellCentre, _>(&a, |f| f.fill(3.25))
        .unwrap()
        .unwrap();
    to.copy_field_from::<CellCentre>(&a, &from, &a).unwrap();
    assert_eq!(interior(&to, "a"), interior(&from, "a"));
    assert!(interior(&to, "a").iter().all(|&v| v == 3.25));
    match from
        .copy_field_from::<CellCentre>(&a, &from, &a)
        .unwrap_err()
    {
        watershed_exprgraph::GraphError::FieldUnavailable { tag, reason, .. } => {
            assert_eq!(tag, a);
            assert!(reason.contains("onto itself"), "{reason}");
        }
        other => panic!("expected FieldUnavailable, got {other:?}"),
    }
    let mut factory = Factory::new();
    factory
        .placeholder(a.clone(), LocationKind::CellCentre)
        .unwrap();
    let patch = Grid::new([6, 4, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let elsewhere = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&a),
        &patch,
        &GraphOptions::default(),
    )
    .unwrap();
    match elsewhere
        .copy_field_from::<CellCentre>(&a, &from, &a)
        .unwrap_err()
    {
        watershed_exprgraph::GraphError::Field(watershed_fields::FieldError::InvalidLayout {
            reason,
        }) => assert!(
            reason.contains("field 'a' cannot take the values of field 'a'")
                && reason.contains("different layouts"),
            "{reason}"
        ),
        other => panic!("expected a layout error, got {other:?}"),
    }
}
