//! Common-subexpression elimination across the expressions of a graph
//! (`watershed_exprgraph::passes::cse`): what is hoisted (costly subtrees
//! at the nodes' own points, shared by several nodes, the largest first),
//! what is not (cheap ones, stencil arguments, repeats inside one node), and
//! that values are those of the graph without it (to rounding: the sums
//! around a hoisted subtree are grouped differently) and of a hand-written
//! loop.

use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag,
};
use watershed_fields::{CellCentre, Grid, LocationKind, Patch, XFace};
use watershed_operators::{Expr, exp, gradient, interpolate_to_face, vmath};

fn patch() -> Patch {
    Grid::new([6, 5, 4], [1.0, 0.9, 1.1], [0.0; 3])
        .expect("a valid grid")
        .whole_domain(1)
}

fn input(k: usize) -> Tag {
    Tag::none(&format!("phi{k}"))
}

fn output(k: usize) -> Tag {
    Tag::none(&format!("rhs{k}"))
}

fn input_value(k: usize, [x, y, z]: [f64; 3]) -> f64 {
    0.3 * (k as f64 + 1.0) * x.sin() + 0.2 * y * z - 0.1 * k as f64
}

/// `sum_j exp(phi_j)` over `inputs`, built afresh on every call (a
/// separate tree, equal by value).
fn written_out_sum(
    s: &mut watershed_exprgraph::Symbols,
    inputs: usize,
) -> Expr<'static, CellCentre> {
    (0..inputs)
        .map(|j| exp(s.field::<CellCentre>(&input(j))))
        .reduce(|a, b| a + b)
        .expect("at least one input")
}

/// A factory with the inputs as placeholders.
fn factory_with_inputs(inputs: usize) -> Factory {
    let mut factory = Factory::new();
    for k in 0..inputs {
        factory
            .placeholder(input(k), LocationKind::CellCentre)
            .expect("placeholder");
    }
    factory
}

fn build(factory: &Factory, roots: &[Tag], cse: bool) -> ExpressionGraph {
    let options = GraphOptions {
        no_common_subexpressions: !cse,
        ..Default::default()
    };
    let graph = ExpressionGraph::build(factory, roots, &patch(), &options).expect("graph");
    for tag in graph
        .fields()
        .iter()
        .filter(|f| f.placeholder)
        .map(|f| f.tag.clone())
        .collect::<Vec<_>>()
    {
        let k: usize = tag.name[3..].parse().expect("phi<k>");
        graph
            .with_field_mut::<CellCentre, _>(&tag, |f| {
                let layout = f.layout().clone();
                let values = f.values_mut().expect("cpu");
                for index in layout.allocated() {
                    values[layout.linear_index(index)] = input_value(k, layout.coordinate(index));
                }
            })
            .expect("fill");
    }
    graph
}

fn values(graph: &ExpressionGraph, tag: &Tag) -> Vec<f64> {
    graph
        .with_field::<CellCentre, _>(tag, |f| {
            let layout = f.layout();
            let values = f.values().expect("cpu");
            layout
                .interior()
                .into_iter()
                .map(|i| values[layout.linear_index(i)])
                .collect()
        })
        .expect("values")
}

/// Runs `factory`'s graph with and without elimination in every mode;
/// asserts the hoist count, and that every root has the same values in both
/// to 1e-14 relative to the largest magnitude (a few ulps: a hoisted
/// subtree is summed on its own, not folded into its reader's linear form);
/// returns the graph with elimination, executed.
fn check_same_values(factory: &Factory, roots: &[Tag], hoists: usize) -> ExpressionGraph {
    let plain = build(factory, roots, false);
    assert_eq!(plain.common_subexpressions(), 0);
    plain.execute(ExecutionMode::Serial).expect("execute");
    let graph = build(factory, roots, true);
    assert_eq!(
        graph.common_subexpressions(),
        hoists,
        "hoisted subexpressions; execution order {:?}",
        graph.execution_order()
    );
    for mode in [ExecutionMode::Serial, ExecutionMode::Threaded(2)] {
        graph.execute(mode).expect("execute");
        for root in roots {
            let (a, b) = (values(&graph, root), values(&plain, root));
            let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-14 * scale,
                    "{root} at {i} ({mode:?}): {x} vs {y}"
                );
            }
        }
    }
    graph
}

#[test]
fn a_coupled_source_written_out_in_every_equation_is_computed_once() {
    let n = 4;
    let mut factory = factory_with_inputs(n);
    for i in 0..n {
        factory
            .register(LanguageExpression::new::<CellCentre>(output(i), move |s| {
                let own = s.field::<CellCentre>(&input(i));
                own * 0.5 + written_out_sum(s, n)
            }))
            .expect("register");
    }
    let roots: Vec<Tag> = (0..n).map(output).collect();
    let graph = check_same_values(&factory, &roots, 1);
    let hoisted: Vec<_> = graph
        .fields()
        .iter()
        .filter(|f| f.tag.name.starts_with("cse"))
        .collect();
    assert_eq!(hoisted.len(), 1);
    assert_eq!(hoisted[0].location, LocationKind::CellCentre);
    assert!(!hoisted[0].persistent, "the hoisted field is scratch");
    assert_eq!(graph.node_count(), n + 1);

    // Against a hand-written loop.
    let patch = patch();
    let layout = watershed_fields::FieldLayout::new(&patch, LocationKind::CellCentre);
    for i in 0..n {
        let actual = values(&graph, &output(i));
        for (p, index) in layout.interior().into_iter().enumerate() {
            let at = layout.coordinate(index);
            let sum = (1..n).fold(vmath::exp(input_value(0, at)), |acc, j| {
                acc + vmath::exp(input_value(j, at))
            });
            let expected = input_value(i, at) * 0.5 + sum;
            assert!(
                (actual[p] - expected).abs() <= 1e-14 * expected.abs(),
                "rhs{i} at {index:?}: {} vs {expected}",
                actual[p]
            );
        }
    }
}

#[test]
fn cheap_shared_subexpressions_stay_inline() {
    let mut factory = factory_with_inputs(3);
    for i in 0..3 {
        factory
            .register(LanguageExpression::new::<CellCentre>(output(i), move |s| {
                let shared = s.field::<CellCentre>(&input(0)) + s.field::<CellCentre>(&input(1))
                    - s.field::<CellCentre>(&input(2)) * 2.0;
                shared * (i as f64 + 1.0)
            }))
            .expect("register");
    }
    check_same_values(&factory, &(0..3).map(output).collect::<Vec<_>>(), 0);
}

#[test]
fn stencil_arguments_are_not_hoisted() {
    // exp(phi0) is read at shifted points by the face interpolation and at
    // the cell itself by rhs1: not the same points, so nothing is shared.
    let mut factory = factory_with_inputs(1);
    factory
        .register(LanguageExpression::new::<XFace>(output(0), |s| {
            interpolate_to_face::<XFace>(exp(s.field::<CellCentre>(&input(0))))
        }))
        .expect("register");
    factory
        .register(LanguageExpression::new::<CellCentre>(output(1), |s| {
            exp(s.field::<CellCentre>(&input(0))) * 2.0
        }))
        .expect("register");
    let graph = build(&factory, &[output(0), output(1)], true);
    assert_eq!(graph.common_subexpressions(), 0);
}

#[test]
fn a_shared_stencil_node_is_hoisted_at_its_readers_points() {
    // gradient(exp(phi0)) on x faces, in two face expressions.
    let mut factory = factory_with_inputs(2);
    for i in 0..2 {
        factory
            .register(LanguageExpression::new::<XFace>(output(i), move |s| {
                gradient::<XFace>(exp(s.field::<CellCentre>(&input(0))))
                    * interpolate_to_face::<XFace>(s.field::<CellCentre>(&input(1)))
                    * (i as f64 + 1.0)
            }))
            .expect("register");
    }
    let plain = build(&factory, &[output(0), output(1)], false);
    plain.execute(ExecutionMode::Serial).expect("execute");
    let graph = build(&factory, &[output(0), output(1)], true);
    assert_eq!(graph.common_subexpressions(), 1);
    let hoisted = graph
        .fields()
        .iter()
        .find(|f| f.tag.name.starts_with("cse"))
        .expect("a hoisted field");
    assert_eq!(hoisted.location, LocationKind::XFace);
    graph.execute(ExecutionMode::Threaded(2)).expect("execute");
    for i in 0..2 {
        let read = |g: &ExpressionGraph| {
            g.with_field::<XFace, _>(&output(i), |f| {
                let layout = f.layout();
                let values = f.values().expect("cpu");
                layout
                    .interior()
                    .into_iter()
                    .map(|p| values[layout.linear_index(p)].to_bits())
                    .collect::<Vec<_>>()
            })
            .expect("values")
        };
        assert_eq!(read(&graph), read(&plain), "rhs{i}");
    }
}

#[test]
fn the_largest_shared_subexpression_goes_first_and_its_parts_where_shared_elsewhere() {
    // S = exp(phi0) + exp(phi1) in rhs0..rhs2; exp(phi0) alone also in rhs3.
    let mut factory = factory_with_inputs(3);
    let shared = |s: &mut watershed_exprgraph::Symbols| written_out_sum(s, 2);
    factory
        .register(LanguageExpression::new::<CellCentre>(output(0), move |s| {
            shared(s) + exp(s.field::<CellCentre>(&input(2)))
        }))
        .expect("register");
    factory
        .register(LanguageExpression::new::<CellCentre>(output(1), move |s| {
            shared(s) * 2.0
        }))
        .expect("register");
    factory
        .register(LanguageExpression::new::<CellCentre>(output(2), move |s| {
            shared(s) - 1.0
        }))
        .expect("register");
    factory
        .register(LanguageExpression::new::<CellCentre>(output(3), |s| {
            exp(s.field::<CellCentre>(&input(0))) * s.field::<CellCentre>(&input(2))
        }))
        .expect("register");
    let roots: Vec<Tag> = (0..4).map(output).collect();
    // First S (cost 41, three readers), then exp(phi0), now read by S's
    // node and rhs3.
    check_same_values(&factory, &roots, 2);
}

#[test]
fn identical_whole_expressions_share_one_computation() {
    // Two roots with the same right-hand side: each becomes a copy of one
    // hoisted field.
    let mut factory = factory_with_inputs(2);
    for i in 0..2 {
        factory
            .register(LanguageExpression::new::<CellCentre>(output(i), |s| {
                written_out_sum(s, 2)
            }))
            .expect("register");
    }
    check_same_values(&factory, &[output(0), output(1)], 1);
}
