//! Building graphs: the errors a wrong set of expressions produces (each with
//! its message checked), the persistence rules, and the introspection
//! (`node_count`, `edge_count`, `to_dot`, tag display).

use std::collections::BTreeSet;
use watershed_exprgraph::{
    Context, ExpressionGraph, Factory, GraphError, GraphOptions, LanguageExpression,
    NativeExpression, Tag,
};
use watershed_fields::{CellCentre, Grid, LocationKind, Patch, XFace};
use watershed_operators::{divergence, gradient};

/// A small 3-D patch with one ghost layer.
fn patch() -> Patch {
    Grid::new([6, 5, 4], [1.0; 3], [0.0; 3])
        .expect("a valid grid")
        .whole_domain(1)
}

/// A native expression named `name` computing the cell field `output` (set
/// to 1 everywhere) from `inputs` (which it does not read).
fn native(name: &str, output: &Tag, inputs: &[&Tag]) -> NativeExpression {
    let out = output.clone();
    NativeExpression::new(
        name,
        vec![(output.clone(), LocationKind::CellCentre)],
        inputs.iter().map(|t| (*t).clone()).collect(),
        move |context| {
            context.output::<CellCentre>(&out)?.fill(1.0)?;
            Ok(())
        },
    )
}

/// A native modifier named `name` of the cell field `target` that also
/// reads `inputs`; it leaves the field as it is.
fn modifier(name: &str, target: &Tag, inputs: &[&Tag]) -> NativeExpression {
    NativeExpression::new(
        name,
        vec![(target.clone(), LocationKind::CellCentre)],
        inputs.iter().map(|t| (*t).clone()).collect(),
        |_| Ok(()),
    )
}

/// Builds `roots` from `factory` on the test patch with default options.
fn build(factory: &Factory, roots: &[Tag]) -> Result<ExpressionGraph, GraphError> {
    ExpressionGraph::build(factory, roots, &patch(), &GraphOptions::default())
}

/// The error of a build that must fail.
fn build_error(factory: &Factory, roots: &[Tag], options: &GraphOptions) -> GraphError {
    match ExpressionGraph::build(factory, roots, &patch(), options) {
        Ok(graph) => panic!("the build should fail, but made {graph:?}"),
        Err(error) => error,
    }
}

#[test]
fn missing_producer_names_the_tag_and_who_required_it() {
    let (phi, rhs) = (Tag::none("phi"), Tag::none("rhs"));
    let mut factory = Factory::new();
    factory.register(native("rhs_eval", &rhs, &[&phi])).unwrap();
    let error = build_error(
        &factory,
        std::slice::from_ref(&rhs),
        &GraphOptions::default(),
    );
    match &error {
        GraphError::MissingProducer { tag, required_by } => {
            assert_eq!(tag, &phi);
            assert_eq!(required_by, "rhs_eval");
        }
        other => panic!("expected MissingProducer, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains("phi (STATE_NONE)"), "{message}");
    assert!(message.contains("rhs_eval"), "{message}");
    assert!(
        message.contains("placeholder"),
        "the message suggests a fix: {message}"
    );

    // A root nobody computes is blamed on the root list.
    let ghost = Tag::new("ghost", Context::StateN);
    let error = build_error(&factory, &[ghost], &GraphOptions::default());
    let message = error.to_string();
    assert!(
        matches!(&error, GraphError::MissingProducer { required_by, .. } if required_by == "the root list"),
        "{error:?}"
    );
    assert!(message.contains("ghost (STATE_N)"), "{message}");
    assert!(message.contains("the root list"), "{message}");
}

#[test]
fn a_second_producer_is_refused_naming_both() {
    let t = Tag::none("t");
    let mut factory = Factory::new();
    factory.register(native("first_eval", &t, &[])).unwrap();
    let error = factory
        .register(native("second_eval", &t, &[]))
        .unwrap_err();
    match &error {
        GraphError::DuplicateProducer { tag, first, second } => {
            assert_eq!(tag, &t);
            assert_eq!(first, "first_eval");
            assert_eq!(second, "second_eval");
        }
        other => panic!("expected DuplicateProducer, got {other:?}"),
    }
    let message = error.to_string();
    for needle in ["t (STATE_NONE)", "first_eval", "second_eval"] {
        assert!(message.contains(needle), "{needle} missing from: {message}");
    }

    // One output of a multi-output expression colliding is enough.
    let u = Tag::none("u");
    let both = NativeExpression::new(
        "both_eval",
        vec![
            (u.clone(), LocationKind::CellCentre),
            (t.clone(), LocationKind::CellCentre),
        ],
        vec![],
        |_| Ok(()),
    );
    let error = factory.register(both).unwrap_err();
    assert!(
        matches!(&error, GraphError::DuplicateProducer { tag, first, second }
            if tag == &t && first == "first_eval" && second == "both_eval"),
        "{error:?}"
    );
    // The refused registration left nothing behind: `u` is still free.
    factory.register(native("u_eval", &u, &[])).unwrap();

    // The first producer is still the one used.
    let graph = build(&factory, std::slice::from_ref(&t)).unwrap();
    assert!(graph.to_dot().contains("first_eval"));
    assert!(!graph.to_dot().contains("second_eval"));
}

#[test]
fn placeholders_and_producers_exclude_each_other() {
    let (p, q) = (Tag::none("p"), Tag::none("q"));
    let mut factory = Factory::new();

    // Placeholder first, then a producer.
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    let error = factory.register(native("p_eval", &p, &[])).unwrap_err();
    assert!(
        matches!(&error, GraphError::DuplicateProducer { tag, first, second }
            if tag == &p && first == "a placeholder" && second == "p_eval"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("p (STATE_NONE)"), "{message}");
    assert!(message.contains("a placeholder"), "{message}");
    assert!(message.contains("p_eval"), "{message}");

    // Producer first, then a placeholder.
    factory.register(native("q_eval", &q, &[])).unwrap();
    let error = factory
        .placeholder(q.clone(), LocationKind::CellCentre)
        .unwrap_err();
    assert!(
        matches!(&error, GraphError::DuplicateProducer { tag, first, second }
            if tag == &q && first == "q_eval" && second == "a placeholder"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("q (STATE_NONE)"), "{message}");
    assert!(message.contains("q_eval"), "{message}");
}

#[test]
fn a_cycle_is_printed_tag_by_tag() {
    let (a, b, c) = (Tag::none("a"), Tag::none("b"), Tag::none("c"));
    let mut factory = Factory::new();
    factory.register(native("a_eval", &a, &[&b])).unwrap();
    factory.register(native("b_eval", &b, &[&c])).unwrap();
    factory.register(native("c_eval", &c, &[&a])).unwrap();

    // Whichever tag the search starts from, the whole cycle is reported.
    for root in [&a, &b, &c] {
        let error = build_error(
            &factory,
            std::slice::from_ref(root),
            &GraphOptions::default(),
        );
        let GraphError::Cycle { cycle } = &error else {
            panic!("expected a cycle, got {error:?}");
        };
        assert_eq!(cycle.len(), 4, "{cycle:?}");
        assert_eq!(cycle.first(), cycle.last(), "{cycle:?}");
        assert_eq!(cycle.first(), Some(root), "{cycle:?}");
        let distinct: BTreeSet<&Tag> = cycle.iter().collect();
        assert_eq!(distinct, BTreeSet::from([&a, &b, &c]));

        let message = error.to_string();
        assert!(message.contains("cycle"), "{message}");
        let printed = message
            .split_once(": ")
            .map(|(_, cycle)| cycle)
            .expect("the message lists the cycle after a colon");
        let steps: Vec<&str> = printed.split(" -> ").collect();
        assert_eq!(steps.len(), 4, "{message}");
        assert_eq!(steps.first(), steps.last(), "{message}");
        for tag in ["a (STATE_NONE)", "b (STATE_NONE)", "c (STATE_NONE)"] {
            assert!(steps.contains(&tag), "{tag} missing from: {message}");
        }
        // Each step requires the next one: a -> b -> c -> a.
        for pair in steps.windows(2) {
            let expected_next = match pair[0] {
                "a (STATE_NONE)" => "b (STATE_NONE)",
                "b (STATE_NONE)" => "c (STATE_NONE)",
                _ => "a (STATE_NONE)",
            };
            assert_eq!(pair[1], expected_next, "{message}");
        }
    }
    assert_eq!(
        build_error(&factory, std::slice::from_ref(&a), &GraphOptions::default()).to_string(),
        "the expressions form a cycle: a (STATE_NONE) -> b (STATE_NONE) -> c (STATE_NONE) -> a (STATE_NONE)"
    );
}

#[test]
fn an_expression_requiring_its_own_output_is_a_cycle() {
    let a = Tag::none("a");
    let mut factory = Factory::new();
    factory.register(native("a_eval", &a, &[&a])).unwrap();
    let error = build_error(&factory, std::slice::from_ref(&a), &GraphOptions::default());
    let GraphError::Cycle { cycle } = &error else {
        panic!("expected a cycle, got {error:?}");
    };
    assert_eq!(cycle, &vec![a.clone(), a.clone()]);
    assert!(
        error
            .to_string()
            .ends_with("a (STATE_NONE) -> a (STATE_NONE)"),
        "{error}"
    );
}

#[test]
fn a_modifier_whose_requirement_closes_a_loop_is_a_cycle() {
    // b reads the placeholder p; a modifier of p needs b. p's modifier must
    // run before b (b reads the modified p), and after b (it reads b).
    let (p, b) = (Tag::none("p"), Tag::none("b"));
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    factory.register(native("b_eval", &b, &[&p])).unwrap();
    factory
        .attach_modifier(p.clone(), modifier("p_fixup", &p, &[&b]))
        .unwrap();
    let error = build_error(&factory, std::slice::from_ref(&b), &GraphOptions::default());
    let GraphError::Cycle { cycle } = &error else {
        panic!("expected a cycle, got {error:?}");
    };
    assert_eq!(cycle.first(), cycle.last(), "{cycle:?}");
    assert!(cycle.contains(&b), "{cycle:?}");
    assert!(
        cycle.contains(&p),
        "the modified tag closes the loop: {cycle:?}"
    );
    let message = error.to_string();
    assert!(message.contains("p (STATE_NONE)"), "{message}");
    assert!(message.contains("b (STATE_NONE)"), "{message}");

    // The same through a computed field: c <- b <- a, and a's modifier
    // needs d, which reads b.
    let (a, c, d) = (Tag::none("a"), Tag::none("c"), Tag::none("d"));
    let mut factory = Factory::new();
    factory.register(native("a_eval", &a, &[])).unwrap();
    factory.register(native("b_eval", &b, &[&a])).unwrap();
    factory.register(native("c_eval", &c, &[&b])).unwrap();
    factory.register(native("d_eval", &d, &[&b])).unwrap();
    factory
        .attach_modifier(a.clone(), modifier("a_fixup", &a, &[&d]))
        .unwrap();
    let error = build_error(&factory, std::slice::from_ref(&c), &GraphOptions::default());
    let GraphError::Cycle { cycle } = &error else {
        panic!("expected a cycle, got {error:?}");
    };
    assert_eq!(cycle.first(), cycle.last(), "{cycle:?}");
    for tag in [&a, &b, &d] {
        assert!(cycle.contains(tag), "{tag} missing from {cycle:?}");
    }
    assert!(!cycle.contains(&c), "c is not on the loop: {cycle:?}");

    // A modifier that needs a reader of its own target.
    let mut factory = Factory::new();
    factory.register(native("a_eval", &a, &[])).unwrap();
    factory.register(native("b_eval", &b, &[&a])).unwrap();
    factory
        .attach_modifier(a.clone(), modifier("a_fixup", &a, &[&b]))
        .unwrap();
    let error = build_error(&factory, std::slice::from_ref(&b), &GraphOptions::default());
    let GraphError::Cycle { cycle } = &error else {
        panic!("expected a cycle, got {error:?}");
    };
    assert_eq!(cycle.first(), cycle.last(), "{cycle:?}");
    assert!(cycle.contains(&a) && cycle.contains(&b), "{cycle:?}");
}

#[test]
fn modifiers_are_checked_when_attached_and_when_built() {
    let (p, q) = (Tag::none("p"), Tag::none("q"));
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();

    // A modifier must list its target among its outputs.
    let error = factory
        .attach_modifier(p.clone(), modifier("q_fixup", &q, &[]))
        .unwrap_err();
    assert!(
        matches!(&error, GraphError::UnknownTag { tag, .. } if tag == &p),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("p (STATE_NONE)"), "{message}");
    assert!(message.contains("q_fixup"), "{message}");

    // A modifier declaring another location than the placeholder.
    let wrong = NativeExpression::new(
        "p_as_faces",
        vec![(p.clone(), LocationKind::XFace)],
        vec![],
        |_| Ok(()),
    );
    factory.attach_modifier(p.clone(), wrong).unwrap();
    factory.register(native("q_eval", &q, &[&p])).unwrap();
    let error = build_error(&factory, std::slice::from_ref(&q), &GraphOptions::default());
    match &error {
        GraphError::LocationConflict {
            tag,
            first,
            second,
            second_by,
            ..
        } => {
            assert_eq!(tag, &p);
            assert_eq!(*first, LocationKind::CellCentre);
            assert_eq!(*second, LocationKind::XFace);
            assert_eq!(second_by, "p_as_faces");
        }
        other => panic!("expected LocationConflict, got {other:?}"),
    }
    assert!(error.to_string().contains("p_as_faces"), "{error}");
}

#[test]
fn flagging_an_unknown_tag_persistent_is_refused() {
    let t = Tag::none("t");
    let mut factory = Factory::new();
    factory.register(native("t_eval", &t, &[])).unwrap();
    let stranger = Tag::none("stranger");
    let options = GraphOptions {
        persistent: vec![stranger.clone()],
        ..Default::default()
    };
    let error = build_error(&factory, &[t], &options);
    assert!(
        matches!(&error, GraphError::UnknownTag { tag, .. } if tag == &stranger),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("stranger (STATE_NONE)"), "{message}");
    assert!(message.contains("persistent"), "{message}");
}

#[test]
fn persistence_follows_the_rules() {
    // p: placeholder          -> persistent
    // a: no inputs            -> persistent (graph edge node)
    // b = f(p)                -> scratch (placeholders count as parents)
    // c = f(a, b)             -> scratch (intermediate)
    // e = f(b), flagged       -> persistent
    // d = f(c, e), root       -> persistent
    // m = f(b), only read by a modifier of e -> persistent (no children)
    let tags: Vec<Tag> = ["p", "a", "b", "c", "d", "e", "m"]
        .into_iter()
        .map(Tag::none)
        .collect();
    let [p, a, b, c, d, e, m] = <[Tag; 7]>::try_from(tags).unwrap();
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    factory.register(native("a_eval", &a, &[])).unwrap();
    factory.register(native("b_eval", &b, &[&p])).unwrap();
    factory.register(native("c_eval", &c, &[&a, &b])).unwrap();
    factory.register(native("d_eval", &d, &[&c, &e])).unwrap();
    factory.register(native("e_eval", &e, &[&b])).unwrap();
    factory.register(native("m_eval", &m, &[&b])).unwrap();
    factory
        .attach_modifier(e.clone(), modifier("e_fixup", &e, &[&m]))
        .unwrap();
    let options = GraphOptions {
        persistent: vec![e.clone()],
        ..Default::default()
    };
    let graph =
        ExpressionGraph::build(&factory, std::slice::from_ref(&d), &patch(), &options).unwrap();

    let expected = [
        (&p, true, true),
        (&a, true, false),
        (&b, false, false),
        (&c, false, false),
        (&d, true, false),
        (&e, true, false),
        (&m, true, false),
    ];
    assert_eq!(graph.fields().len(), expected.len());
    let cell_bytes = 8 * 7 * 6 * std::mem::size_of::<f64>();
    for (tag, persistent, placeholder) in expected {
        let info = graph.field_info(tag).expect("every tag is in the graph");
        assert_eq!(&info.tag, tag);
        assert_eq!(info.persistent, persistent, "persistence of {tag}");
        assert_eq!(info.placeholder, placeholder, "placeholder flag of {tag}");
        assert_eq!(info.location, LocationKind::CellCentre);
        assert_eq!(info.bytes, cell_bytes, "bytes of {tag}");
    }
    assert!(graph.field_info(&Tag::none("nothing")).is_none());

    // Without the flag, e is scratch (it has inputs and a reader).
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&d),
        &patch(),
        &GraphOptions::default(),
    )
    .unwrap();
    assert!(!graph.field_info(&e).unwrap().persistent);

    // The memory plan agrees with the flags.
    let plan = graph.memory_plan();
    let scratch: Vec<_> = graph.fields().iter().filter(|f| !f.persistent).collect();
    assert_eq!(plan.scratch_fields, scratch.len());
    assert_eq!(
        plan.peak_without_reuse,
        scratch.iter().map(|f| f.bytes).sum::<usize>()
    );
    assert_eq!(
        plan.persistent_bytes,
        graph
            .fields()
            .iter()
            .filter(|f| f.persistent)
            .map(|f| f.bytes)
            .sum::<usize>()
    );
}

#[test]
fn a_root_that_is_also_read_stays_persistent() {
    // r1 is a root and also read by r2: persistent because it is a root.
    let (p, r1, r2) = (Tag::none("p"), Tag::none("r1"), Tag::none("r2"));
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    factory.register(native("r1_eval", &r1, &[&p])).unwrap();
    factory.register(native("r2_eval", &r2, &[&r1])).unwrap();
    let graph = build(&factory, &[r1.clone(), r2.clone()]).unwrap();
    assert!(graph.field_info(&r1).unwrap().persistent);
    assert!(graph.field_info(&r2).unwrap().persistent);
    let graph = build(&factory, std::slice::from_ref(&r2)).unwrap();
    assert!(!graph.field_info(&r1).unwrap().persistent);
}

/// The nodes of a DOT text by index (`n3` -> label), and its node-to-node
/// and placeholder-to-node edges as pairs of labels' first lines.
struct Dot {
    node_names: Vec<(String, String)>,
    edges: BTreeSet<(String, String)>,
    placeholder_edges: BTreeSet<(String, String)>,
}

/// Reads the node labels and the edges of `dot` (as written by `to_dot`).
fn parse_dot(dot: &str) -> Dot {
    let mut labels = std::collections::HashMap::new();
    for line in dot.lines().map(str::trim) {
        if let Some((id, rest)) = line.split_once(" [label=\"") {
            let label = rest.split('"').next().unwrap_or_default();
            let first = label.split("\\n").next().unwrap_or_default().to_string();
            labels.insert(id.to_string(), first);
        }
    }
    let mut node_names: Vec<(String, String)> = labels
        .iter()
        .filter(|(id, _)| id.starts_with('n'))
        .map(|(id, name)| (id.clone(), name.clone()))
        .collect();
    node_names.sort();
    let (mut edges, mut placeholder_edges) = (BTreeSet::new(), BTreeSet::new());
    for line in dot.lines().map(str::trim) {
        if let Some((from, to)) = line.trim_end_matches(';').split_once(" -> ") {
            // Attributes (copies between devices, the legend) are dropped.
            let to = to.split_once(" [").map_or(to, |(to, _)| to);
            if from.starts_with("legend_") {
                continue;
            }
            let pair = (labels[from].clone(), labels[to].clone());
            if from.starts_with('f') {
                placeholder_edges.insert(pair);
            } else {
                edges.insert(pair);
            }
        }
    }
    Dot {
        node_names,
        edges,
        placeholder_edges,
    }
}

#[test]
fn introspection_counts_nodes_edges_and_draws_them() {
    // phi (placeholder) -> flux (language, XFace) -> rhs (language)
    //                   -> src (native)            -> rhs
    // plus a modifier of src.
    let (phi, flux, src, rhs) = (
        Tag::none("phi"),
        Tag::none("flux"),
        Tag::none("src"),
        Tag::none("rhs"),
    );
    let mut factory = Factory::new();
    factory
        .placeholder(phi.clone(), LocationKind::CellCentre)
        .unwrap();
    let p = phi.clone();
    factory
        .register(LanguageExpression::new::<XFace>(flux.clone(), move |s| {
            gradient::<XFace>(s.field(&p))
        }))
        .unwrap();
    factory.register(native("src_eval", &src, &[&phi])).unwrap();
    let (f, s2) = (flux.clone(), src.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            rhs.clone(),
            move |s| divergence::<XFace>(s.field(&f)) + s.field::<CellCentre>(&s2),
        ))
        .unwrap();
    factory
        .attach_modifier(src.clone(), modifier("src_fixup", &src, &[]))
        .unwrap();

    let options = GraphOptions {
        no_fusion: true,
        ..Default::default()
    };
    let graph =
        ExpressionGraph::build(&factory, std::slice::from_ref(&rhs), &patch(), &options).unwrap();
    // Nodes: flux, src_eval, src_fixup, rhs. Edges: flux -> rhs,
    // src_eval -> src_fixup, src_fixup -> rhs.
    assert_eq!(graph.node_count(), 4);
    assert_eq!(graph.edge_count(), 3);
    assert_eq!(graph.fusions(), 0);
    assert_eq!(graph.fields().len(), 4);
    assert!(format!("{graph:?}").contains("nodes: 4"));

    let dot = graph.to_dot();
    assert!(dot.starts_with("digraph watershed {"), "{dot}");
    assert!(dot.trim_end().ends_with('}'), "{dot}");
    for tag in [&phi, &flux, &src, &rhs] {
        assert!(dot.contains(&tag.to_string()), "{tag} missing from:\n{dot}");
    }
    assert!(dot.contains("fillcolor=lightblue"), "{dot}");
    assert!(dot.contains("fillcolor=grey85"), "{dot}");
    assert!(dot.contains("shape=note"), "placeholders are notes:\n{dot}");
    assert!(
        dot.contains("shape=box"),
        "language nodes are boxes:\n{dot}"
    );
    assert!(
        dot.contains("shape=ellipse"),
        "native nodes are ellipses:\n{dot}"
    );
    assert!(
        dot.contains("shape=diamond"),
        "modifiers are diamonds:\n{dot}"
    );

    let parsed = parse_dot(&dot);
    let names: BTreeSet<&str> = parsed.node_names.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["flux", "src_eval", "src_fixup", "rhs"])
    );
    let expected_edges: BTreeSet<(String, String)> = [
        ("flux", "rhs"),
        ("src_eval", "src_fixup"),
        ("src_fixup", "rhs"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(parsed.edges, expected_edges);
    let dependency_lines = dot
        .lines()
        .filter(|l| l.trim_start().starts_with('n') && l.contains(" -> "))
        .count();
    assert_eq!(dependency_lines, graph.edge_count());
    let expected_placeholder_edges: BTreeSet<(String, String)> = [
        ("phi (STATE_NONE)", "flux"),
        ("phi (STATE_NONE)", "src_eval"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(parsed.placeholder_edges, expected_placeholder_edges);

    // Fused: flux disappears into rhs.
    let fused = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&rhs),
        &patch(),
        &GraphOptions::default(),
    )
    .unwrap();
    assert_eq!(fused.fusions(), 1);
    assert_eq!(fused.node_count(), 3);
    assert_eq!(fused.edge_count(), 2);
    assert!(fused.field_info(&flux).is_none());
    let parsed = parse_dot(&fused.to_dot());
    assert!(parsed.edges.contains(&("src_fixup".into(), "rhs".into())));
    assert!(
        parsed
            .placeholder_edges
            .contains(&("phi (STATE_NONE)".into(), "rhs".into())),
        "the fused node reads phi directly: {:?}",
        parsed.placeholder_edges
    );
}

#[test]
fn dot_labels_are_escaped() {
    let t = Tag::none("quote\"d");
    let mut factory = Factory::new();
    factory.register(native("say \"hi\"", &t, &[])).unwrap();
    let dot = build(&factory, &[t]).unwrap().to_dot();
    assert!(dot.contains("say \\\"hi\\\""), "{dot}");
    assert!(dot.contains("quote\\\"d (STATE_NONE)"), "{dot}");
}

#[test]
fn execution_order_respects_dependencies() {
    // A chain and a side branch; the plan order must list producers first.
    let tags: Vec<Tag> = (0..6).map(|i| Tag::none(&format!("t{i}"))).collect();
    let mut factory = Factory::new();
    factory.register(native("t0", &tags[0], &[])).unwrap();
    factory
        .register(native("t1", &tags[1], &[&tags[0]]))
        .unwrap();
    factory
        .register(native("t2", &tags[2], &[&tags[1]]))
        .unwrap();
    factory
        .register(native("t3", &tags[3], &[&tags[0]]))
        .unwrap();
    factory
        .register(native("t4", &tags[4], &[&tags[2], &tags[3]]))
        .unwrap();
    factory
        .register(native("t5", &tags[5], &[&tags[4]]))
        .unwrap();
    let graph = build(&factory, std::slice::from_ref(&tags[5])).unwrap();
    let order = graph.execution_order();
    assert_eq!(order.len(), 6);
    let at = |name: &str| order.iter().position(|n| n == name).unwrap();
    for (before, after) in [
        ("t0", "t1"),
        ("t1", "t2"),
        ("t0", "t3"),
        ("t2", "t4"),
        ("t3", "t4"),
        ("t4", "t5"),
    ] {
        assert!(at(before) < at(after), "{before} after {after}: {order:?}");
    }
    // The longer branch (t1, t2) starts first: it is on the critical path.
    assert_eq!(order[1], "t1", "{order:?}");
    assert_eq!(graph.edge_count(), 6);
}

#[test]
fn tags_and_contexts_display_like_exprlib() {
    assert_eq!(Context::StateN.to_string(), "STATE_N");
    assert_eq!(Context::StateNp1.to_string(), "STATE_NP1");
    assert_eq!(Context::StateNone.to_string(), "STATE_NONE");
    assert_eq!(
        Context::Other("RK_STAGE_2".into()).to_string(),
        "RK_STAGE_2"
    );

    let phi_n = Tag::new("phi", Context::StateN);
    let phi_np1 = Tag::new("phi", Context::StateNp1);
    assert_eq!(phi_n.to_string(), "phi (STATE_N)");
    assert_eq!(phi_np1.to_string(), "phi (STATE_NP1)");
    assert_eq!(Tag::none("rhs").to_string(), "rhs (STATE_NONE)");
    assert_eq!(Tag::none("rhs"), Tag::new("rhs", Context::StateNone));
    assert_eq!(
        Tag::new("u", Context::Other("stage".into())).to_string(),
        "u (stage)"
    );

    // Same name, other context: another tag, with another leaf id.
    assert_ne!(phi_n, phi_np1);
    assert_ne!(phi_n.id(), phi_np1.id());
    assert_eq!(phi_n.id(), Tag::new("phi", Context::StateN).id());
    for tag in [&phi_n, &phi_np1] {
        assert_ne!(tag.id() & (1 << 63), 0, "tag ids have the top bit set");
    }
}

#[test]
fn builders_are_called_once_per_graph_that_needs_them() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (a, b) = (Tag::none("a"), Tag::none("b"));
    let calls = Arc::new(AtomicUsize::new(0));
    let mut factory = Factory::new();
    factory.register(native("a_eval", &a, &[])).unwrap();
    let (counter, target) = (calls.clone(), b.clone());
    factory
        .register_builder(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            native("b_eval", &target, &[])
        })
        .unwrap();
    // Once at registration, to learn what it computes.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    build(&factory, std::slice::from_ref(&a)).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a graph without b");
    let first = build(&factory, std::slice::from_ref(&b)).unwrap();
    let second = build(&factory, &[a.clone(), b.clone()]).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3, "once per graph needing b");
    assert_eq!(first.node_count(), 1);
    assert_eq!(second.node_count(), 2);

    // A second producer through a builder is refused like any other.
    let target = b.clone();
    let error = factory
        .register_builder(move || native("b_again", &target, &[]))
        .unwrap_err();
    assert!(
        matches!(&error, GraphError::DuplicateProducer { first, second, .. }
            if first == "b_eval" && second == "b_again"),
        "{error:?}"
    );
}

/// A builder's language expression is known as one (its node fuses and has
/// generated source), and a builder's native expression stays native: the
/// form is named from the expression's type, whatever registers it.
#[test]
fn a_builders_expression_keeps_its_form() {
    let (a, b, c) = (Tag::none("a"), Tag::none("b"), Tag::none("c"));
    let mut factory = Factory::new();
    factory
        .placeholder(a.clone(), LocationKind::CellCentre)
        .unwrap();
    let (ta, tb) = (a.clone(), b.clone());
    factory
        .register_builder(move || {
            let ta = ta.clone();
            LanguageExpression::new::<CellCentre>(tb.clone(), move |s| {
                s.field::<CellCentre>(&ta) * 2.0
            })
        })
        .unwrap();
    let (tb, tc) = (b.clone(), c.clone());
    factory
        .register_builder(move || native("c_native", &tc, &[&tb]))
        .unwrap();
    let graph = build(&factory, std::slice::from_ref(&c)).unwrap();
    assert_eq!(graph.native_node_count(), 1, "only c is native");
    let source = graph
        .generated_source(watershed_operators::vmath::Dialect::C)
        .unwrap();
    assert!(source.contains("node `b`"), "{source}");
    assert!(
        source.contains("node `c_native`: native Rust code"),
        "{source}"
    );
}
