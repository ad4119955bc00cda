//! Horizontal fusion (`watershed_exprgraph::passes::horizontal`, opt-in
//! with `GraphOptions::horizontal_fusion`): independent language nodes over
//! the same box run as one node, with the bits of the ungrouped graph;
//! dependent nodes are never grouped; a value that is not finite names the
//! member that wrote it.

use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphError, GraphOptions, LanguageExpression, Tag,
};
use watershed_fields::{CellCentre, Grid, LocationKind, Patch, XFace, YFace, ZFace};
use watershed_operators::{OperatorError, divergence, exp, gradient, interpolate_to_face};

fn patch() -> Patch {
    Grid::new([7, 6, 5], [1.0, 0.9, 1.1], [0.0; 3])
        .expect("a valid grid")
        .with_periodic([true; 3])
        .whole_domain(1)
}

fn phi(k: usize) -> Tag {
    Tag::none(&format!("phi{k}"))
}

fn next(k: usize) -> Tag {
    Tag::none(&format!("next{k}"))
}

fn gamma() -> Tag {
    Tag::none("gamma")
}

/// `next_k = phi_k + 0.01 (div(gamma grad phi_k) + exp(phi_k))` for
/// `equations` equations sharing `gamma`.
fn factory(equations: usize) -> Factory {
    let mut factory = Factory::new();
    factory
        .placeholder(gamma(), LocationKind::CellCentre)
        .expect("placeholder");
    for k in 0..equations {
        factory
            .placeholder(phi(k), LocationKind::CellCentre)
            .expect("placeholder");
        factory
            .register(
                LanguageExpression::new::<CellCentre>(next(k), move |s| {
                    let p = s.field::<CellCentre>(&phi(k));
                    let g = s.field::<CellCentre>(&gamma());
                    let fx = interpolate_to_face::<XFace>(g.clone()) * gradient::<XFace>(p.clone());
                    let fy = interpolate_to_face::<YFace>(g.clone()) * gradient::<YFace>(p.clone());
                    let fz = interpolate_to_face::<ZFace>(g) * gradient::<ZFace>(p.clone());
                    p.clone()
                        + 0.01
                            * (divergence::<XFace>(fx)
                                + divergence::<YFace>(fy)
                                + divergence::<ZFace>(fz)
                                + exp(p))
                })
                .checking_finite(),
            )
            .expect("register");
    }
    factory
}

fn build(factory: &Factory, roots: &[Tag], horizontal: bool) -> ExpressionGraph {
    let options = GraphOptions {
        horizontal_fusion: horizontal,
        persistent: roots.to_vec(),
        ..Default::default()
    };
    let graph = ExpressionGraph::build(factory, roots, &patch(), &options).expect("graph");
    for info in graph.fields().iter().filter(|f| f.placeholder) {
        let tag = info.tag.clone();
        let seed = tag.name.len() as f64 + tag.name.bytes().map(f64::from).sum::<f64>() * 1e-3;
        graph
            .with_field_mut::<CellCentre, _>(&tag, |f| {
                let layout = f.layout().clone();
                let values = f.values_mut().expect("cpu");
                for index in layout.allocated() {
                    let [x, y, z] = layout.coordinate(index);
                    values[layout.linear_index(index)] =
                        0.5 + 0.3 * (seed * x).sin() * (y - 0.2 * z).cos();
                }
            })
            .expect("fill");
        graph.fill_placeholder(&tag).expect("filled");
    }
    graph
}

fn values(graph: &ExpressionGraph, tag: &Tag) -> Vec<f64> {
    graph
        .with_field::<CellCentre, _>(tag, |f| f.values().expect("cpu").to_vec())
        .expect("field")
}

#[test]
fn independent_equations_run_as_one_node_with_the_same_bits() {
    let equations = 5;
    let factory = factory(equations);
    let roots: Vec<Tag> = (0..equations).map(next).collect();
    let separate = build(&factory, &roots, false);
    let grouped = build(&factory, &roots, true);
    assert_eq!(separate.horizontal_groups(), 0);
    assert_eq!(grouped.horizontal_groups(), 1);
    assert_eq!(
        grouped.node_count(),
        separate.node_count() - (equations - 1)
    );
    assert_eq!(grouped.kernel_count(), separate.kernel_count());
    assert_eq!(
        grouped.finite_checked_nodes().len(),
        equations,
        "every member still checks what it writes"
    );
    let listing = grouped
        .generated_source(watershed_operators::vmath::Dialect::C)
        .expect("source");
    assert_eq!(listing.matches(", member ").count(), equations, "{listing}");
    for mode in [ExecutionMode::Serial, ExecutionMode::Threaded(2)] {
        separate.execute(mode).expect("separate");
        grouped.execute(mode).expect("grouped");
        for tag in &roots {
            let (a, b) = (values(&separate, tag), values(&grouped, tag));
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{tag} differs ({mode:?})"
            );
            assert!(a.iter().any(|v| *v != 0.0), "{tag} was computed");
        }
    }
}

#[test]
fn dependent_nodes_are_not_grouped() {
    // next1 reads next0 (directly); next2 reads mid, which reads next0.
    let mut factory = factory(1);
    factory
        .register(LanguageExpression::new::<CellCentre>(next(1), |s| {
            s.field::<CellCentre>(&next(0)) * 2.0
        }))
        .expect("register");
    factory
        .register(LanguageExpression::new::<CellCentre>(
            Tag::none("mid"),
            |s| exp(s.field::<CellCentre>(&next(0))),
        ))
        .expect("register");
    factory
        .register(LanguageExpression::new::<CellCentre>(next(2), |s| {
            s.field::<CellCentre>(&Tag::none("mid")) + 1.0
        }))
        .expect("register");
    let roots = [next(0), next(1), next(2)];
    let graph = build(&factory, &roots, true);
    assert_eq!(graph.horizontal_groups(), 1);
    let order = graph.execution_order();
    assert!(
        order.contains(&"next0".to_string())
            && order.contains(&"side by side: next1, next2".to_string()),
        "only next1 and next2 are independent: {order:?}"
    );
    let separate = build(&factory, &roots, false);
    graph.execute(ExecutionMode::Serial).expect("grouped");
    separate.execute(ExecutionMode::Serial).expect("separate");
    for tag in &roots {
        assert_eq!(values(&graph, tag), values(&separate, tag), "{tag}");
    }
}

#[test]
fn a_value_that_is_not_finite_names_the_member_that_wrote_it() {
    let equations = 4;
    let factory = factory(equations);
    let roots: Vec<Tag> = (0..equations).map(next).collect();
    let graph = build(&factory, &roots, true);
    assert_eq!(graph.horizontal_groups(), 1);
    graph
        .with_field_mut::<CellCentre, _>(&phi(2), |f| {
            let at = f.layout().linear_index([3, 2, 1]);
            f.values_mut().expect("cpu")[at] = 1e300;
        })
        .expect("poke");
    match graph.execute(ExecutionMode::Threaded(2)) {
        Err(GraphError::Expression { source, .. }) => match *source {
            GraphError::Expression { expression, source } => {
                assert_eq!(expression, "next2");
                match *source {
                    GraphError::Operator(OperatorError::NotFinite { target, .. }) => {
                        assert_eq!(target, "next2")
                    }
                    other => panic!("expected NotFinite, got {other:?}"),
                }
            }
            other => panic!("expected the member's name, got {other:?}"),
        },
        other => panic!("expected an error, got {other:?}"),
    }
}
