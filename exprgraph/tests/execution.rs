//! Executing graphs: a Wasatch-style diffusion right-hand side checked
//! against a hand-written loop (fused and unfused, serial and threaded),
//! modifiers, repeated execution and the pool, error propagation, field
//! access rules and placeholders bound to caller-owned memory.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use watershed_exprgraph::{
    AnyField, ExecutionMode, ExpressionGraph, Factory, GraphError, GraphOptions,
    LanguageExpression, NativeExpression, Tag, TraceEvent,
};
use watershed_fields::pool::size_class;
use watershed_fields::{
    CellCentre, ExternalBuffer, FieldError, FieldLayout, Grid, LocationKind, Patch, SpatialField,
    XFace, YFace, ZFace,
};
use watershed_operators::{divergence, exp, gradient, interpolate_to_face};

/// Every execution mode the tests compare.
const MODES: [ExecutionMode; 3] = [
    ExecutionMode::Serial,
    ExecutionMode::Threaded(2),
    ExecutionMode::Threaded(3),
];

/// A small non-cubic patch with one ghost layer and unequal spacings.
fn patch() -> Patch {
    Grid::new([6, 5, 4], [1.2, 1.0, 0.8], [0.1, -0.2, 0.3])
        .expect("a valid grid")
        .whole_domain(1)
}

/// The tags of the diffusion right-hand side.
struct Tags {
    phi: Tag,
    gamma: Tag,
    flux: [Tag; 3],
    src: Tag,
    rhs: Tag,
}

/// The tags of the diffusion graph.
fn tags() -> Tags {
    Tags {
        phi: Tag::none("phi"),
        gamma: Tag::none("gamma"),
        flux: [
            Tag::none("flux_x"),
            Tag::none("flux_y"),
            Tag::none("flux_z"),
        ],
        src: Tag::none("s"),
        rhs: Tag::none("rhs"),
    }
}

/// The flux `interpolate_to_face(gamma) * gradient(phi)` on faces `F`.
fn flux<F: watershed_operators::FaceLocation>(t: &Tags, axis: usize) -> LanguageExpression {
    let (p, g) = (t.phi.clone(), t.gamma.clone());
    LanguageExpression::new::<F>(t.flux[axis].clone(), move |s| {
        interpolate_to_face::<F>(s.field(&g)) * gradient::<F>(s.field(&p))
    })
}

/// The Wasatch-style factory: placeholders phi and gamma, three face fluxes,
/// a source `s = exp(phi)` (native Rust, or written in the language) and
/// `rhs = -(div flux_x + div flux_y + div flux_z) + s`.
fn diffusion_factory(language_source: bool) -> Factory {
    let t = tags();
    let mut factory = Factory::new();
    factory
        .placeholder(t.phi.clone(), LocationKind::CellCentre)
        .unwrap();
    factory
        .placeholder(t.gamma.clone(), LocationKind::CellCentre)
        .unwrap();
    factory.register(flux::<XFace>(&t, 0)).unwrap();
    factory.register(flux::<YFace>(&t, 1)).unwrap();
    factory.register(flux::<ZFace>(&t, 2)).unwrap();
    let (phi, src) = (t.phi.clone(), t.src.clone());
    if language_source {
        factory
            .register(LanguageExpression::new::<CellCentre>(
                src.clone(),
                move |s| exp(s.field(&phi)),
            ))
            .unwrap();
    } else {
        let out = src.clone();
        factory
            .register(NativeExpression::new(
                "source",
                vec![(src.clone(), LocationKind::CellCentre)],
                vec![phi.clone()],
                move |context| {
                    let input = context.input::<CellCentre>(&phi)?.values()?.to_vec();
                    let output = context.output::<CellCentre>(&out)?.values_mut()?;
                    for (o, v) in output.iter_mut().zip(input) {
                        *o = v.exp();
                    }
                    Ok(())
                },
            ))
            .unwrap();
    }
    let [fx, fy, fz] = t.flux.clone();
    let s_tag = t.src.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            t.rhs.clone(),
            move |s| {
                -(divergence::<XFace>(s.field(&fx))
                    + divergence::<YFace>(s.field(&fy))
                    + divergence::<ZFace>(s.field(&fz)))
                    + s.field::<CellCentre>(&s_tag)
            },
        ))
        .unwrap();
    factory
}

/// Builds the right-hand side graph from `factory`, fused or not.
fn build(factory: &Factory, fusion: bool) -> ExpressionGraph {
    let options = GraphOptions {
        no_fusion: !fusion,
        ..Default::default()
    };
    ExpressionGraph::build(factory, &[tags().rhs], &patch(), &options).unwrap()
}

/// The smooth initial phi at a point.
fn phi_at([x, y, z]: [f64; 3]) -> f64 {
    (2.0 * x).sin() + (3.0 * y).cos() * (1.0 + 0.5 * z)
}

/// The smooth diffusivity at a point (positive).
fn gamma_at([x, y, z]: [f64; 3]) -> f64 {
    1.0 + 0.25 * x * x + 0.5 * y * z + 0.1 * z
}

/// `f` sampled at every allocated point (ghosts included) of a cell field.
fn sampled(layout: &FieldLayout, f: impl Fn([f64; 3]) -> f64) -> Vec<f64> {
    let mut values = vec![0.0; layout.allocated_len()];
    for index in layout.allocated() {
        values[layout.linear_index(index)] = f(layout.coordinate(index));
    }
    values
}

/// Fills the placeholder `tag` of `graph` (ghosts included) with `f`.
fn fill(graph: &ExpressionGraph, tag: &Tag, f: impl Fn([f64; 3]) -> f64) {
    graph
        .with_field_mut::<CellCentre, _>(tag, |field| {
            let values = sampled(&field.layout().clone(), f);
            field.values_mut().unwrap().copy_from_slice(&values);
        })
        .unwrap();
}

/// Fills phi and gamma with the smooth functions.
fn fill_inputs(graph: &ExpressionGraph) {
    let t = tags();
    fill(graph, &t.phi, phi_at);
    fill(graph, &t.gamma, gamma_at);
}

/// All values (ghosts included) of the persistent cell field `tag`.
fn values_of(graph: &ExpressionGraph, tag: &Tag) -> Vec<f64> {
    graph
        .with_field::<CellCentre, _>(tag, |f| f.values().unwrap().to_vec())
        .unwrap()
}

/// The interior values of the persistent cell field `tag`, x fastest.
fn interior_of(graph: &ExpressionGraph, tag: &Tag) -> Vec<f64> {
    graph
        .with_field::<CellCentre, _>(tag, |f| {
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

/// The right-hand side written out by hand, at the interior cells (x
/// fastest), from the cell values `phi` and `gamma` (ghosts included);
/// `flux_scale[a]` multiplies the flux on faces normal to axis `a` (what a
/// modifier may do).
fn reference_rhs(patch: &Patch, phi: &[f64], gamma: &[f64], flux_scale: [f64; 3]) -> Vec<f64> {
    let layout = FieldLayout::new(patch, LocationKind::CellCentre);
    let h = patch.grid().spacing();
    let at = |index: [isize; 3]| layout.linear_index(index);
    // Flux on the face normal to `axis` at the lower side of cell `c`.
    let face_flux = |c: [isize; 3], axis: usize| {
        let mut below = c;
        below[axis] -= 1;
        let g = 0.5 * (gamma[at(below)] + gamma[at(c)]);
        let grad = (phi[at(c)] - phi[at(below)]) / h[axis];
        flux_scale[axis] * g * grad
    };
    let mut rhs = Vec::with_capacity(layout.interior_len());
    for c in layout.interior() {
        let mut divergence = 0.0;
        for axis in 0..3 {
            let mut above = c;
            above[axis] += 1;
            divergence += (face_flux(above, axis) - face_flux(c, axis)) / h[axis];
        }
        rhs.push(-divergence + phi[at(c)].exp());
    }
    rhs
}

/// The largest magnitude in `values`.
fn max_abs(values: &[f64]) -> f64 {
    values.iter().fold(0.0, |m, v| m.max(v.abs()))
}

/// Asserts `actual` matches `expected` within `relative` times the largest
/// magnitude of `expected`.
fn assert_close(actual: &[f64], expected: &[f64], relative: f64, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths");
    let tolerance = relative * max_abs(expected);
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= tolerance,
            "{what}: point {i}: {a} vs {e} (difference {}, tolerance {tolerance})",
            (a - e).abs()
        );
    }
}

/// Asserts two vectors hold the same bits.
fn assert_bitwise(actual: &[f64], expected: &[f64], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert_eq!(a.to_bits(), e.to_bits(), "{what}: point {i}: {a} vs {e}");
    }
}

/// The last trace of `graph` with each event's node name (the Chrome trace
/// lists the same events in the same order).
fn named_trace(graph: &ExpressionGraph) -> Vec<(String, TraceEvent)> {
    let trace = graph.last_trace();
    let json = graph.chrome_trace();
    let names: Vec<String> = json
        .split("{\"name\":\"")
        .skip(1)
        .map(|rest| rest.split("\",\"cat\"").next().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), trace.len(), "{json}");
    names.into_iter().zip(trace).collect()
}

/// The trace event of the node named `name`.
fn event<'t>(trace: &'t [(String, TraceEvent)], name: &str) -> &'t TraceEvent {
    &trace
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{name} is not in the trace {trace:?}"))
        .1
}

#[test]
fn diffusion_matches_the_hand_written_loop_fused_and_unfused() {
    for language_source in [false, true] {
        let factory = diffusion_factory(language_source);
        let t = tags();
        let unfused = build(&factory, false);
        let fused = build(&factory, true);
        assert_eq!(unfused.node_count(), 5);
        assert_eq!(unfused.edge_count(), 4);
        assert_eq!(unfused.fusions(), 0);
        assert!(
            fused.node_count() < unfused.node_count(),
            "fusion removes nodes: {} vs {}",
            fused.node_count(),
            unfused.node_count()
        );
        // The three fluxes always fuse into rhs; a language source too.
        let (nodes, fusions) = if language_source { (1, 4) } else { (2, 3) };
        assert_eq!(fused.node_count(), nodes);
        assert_eq!(fused.fusions(), fusions);
        for f in &t.flux {
            assert!(fused.field_info(f).is_none(), "{f} was fused away");
        }

        let mut results = Vec::new();
        for graph in [&unfused, &fused] {
            fill_inputs(graph);
            let report = graph.execute(ExecutionMode::Serial).unwrap();
            assert_eq!(report.nodes_run, graph.node_count());
            let expected = reference_rhs(
                graph.patch(),
                &values_of(graph, &t.phi),
                &values_of(graph, &t.gamma),
                [1.0; 3],
            );
            let actual = interior_of(graph, &t.rhs);
            assert!(max_abs(&expected) > 1.0, "a non-trivial right-hand side");
            // The reference groups the arithmetic its own way.
            assert_close(&actual, &expected, 1e-13, "graph vs hand-written loop");
            results.push(actual);
        }
        // Not bitwise: the fused kernel folds stencil weights into products
        // and groups the arithmetic differently from separate passes.
        assert_close(&results[1], &results[0], 1e-14, "fused vs unfused");
    }
}

#[test]
fn every_mode_computes_the_same_bits() {
    let factory = diffusion_factory(false);
    let t = tags();
    for fusion in [false, true] {
        let graph = build(&factory, fusion);
        fill_inputs(&graph);
        let mut first: Option<Vec<f64>> = None;
        for mode in MODES {
            // Twice per mode: the second run uses measured priorities.
            for _ in 0..2 {
                graph
                    .with_field_mut::<CellCentre, _>(&t.rhs, |f| f.fill(f64::NAN).unwrap())
                    .unwrap();
                let report = graph.execute(mode).unwrap();
                assert_eq!(report.nodes_run, graph.node_count(), "{mode:?}");
                let values = values_of(&graph, &t.rhs);
                match &first {
                    None => first = Some(values),
                    Some(expected) => {
                        assert_bitwise(&values, expected, &format!("{mode:?}, fusion {fusion}"))
                    }
                }
            }
        }
    }
}

/// A factory of the diffusion graph with a modifier of `flux_x` that
/// doubles it.
fn factory_with_flux_modifier() -> Factory {
    let t = tags();
    let mut factory = diffusion_factory(false);
    let fx = t.flux[0].clone();
    factory
        .attach_modifier(
            t.flux[0].clone(),
            NativeExpression::new(
                "double_flux_x",
                vec![(fx.clone(), LocationKind::XFace)],
                vec![],
                move |context| {
                    for v in context.output::<XFace>(&fx)?.values_mut()? {
                        *v *= 2.0;
                    }
                    Ok(())
                },
            ),
        )
        .unwrap();
    factory
}

#[test]
fn a_modifier_runs_between_producer_and_consumer() {
    let t = tags();
    let factory = factory_with_flux_modifier();
    for fusion in [false, true] {
        let graph = build(&factory, fusion);
        // The modified flux cannot be fused away; the other two can.
        assert!(graph.field_info(&t.flux[0]).is_some());
        let expected_nodes = if fusion { 4 } else { 6 };
        assert_eq!(graph.node_count(), expected_nodes, "fusion {fusion}");

        let order = graph.execution_order();
        let at = |name: &str| order.iter().position(|n| n == name).unwrap();
        assert!(at("flux_x") < at("double_flux_x"), "{order:?}");
        assert!(at("double_flux_x") < at("rhs"), "{order:?}");

        fill_inputs(&graph);
        let expected = reference_rhs(
            graph.patch(),
            &values_of(&graph, &t.phi),
            &values_of(&graph, &t.gamma),
            [2.0, 1.0, 1.0],
        );
        let unmodified = reference_rhs(
            graph.patch(),
            &values_of(&graph, &t.phi),
            &values_of(&graph, &t.gamma),
            [1.0; 3],
        );
        assert!(
            expected
                .iter()
                .zip(&unmodified)
                .any(|(a, b)| (a - b).abs() > 1e-3),
            "the modifier changes the result"
        );
        for mode in MODES {
            for _ in 0..2 {
                graph.execute(mode).unwrap();
                let what = format!("{mode:?}, fusion {fusion}");
                assert_close(&interior_of(&graph, &t.rhs), &expected, 1e-13, &what);
                let trace = named_trace(&graph);
                assert_eq!(trace.len(), graph.node_count(), "{what}");
                let (producer, modifier, consumer) = (
                    event(&trace, "flux_x"),
                    event(&trace, "double_flux_x"),
                    event(&trace, "rhs"),
                );
                assert!(modifier.start >= producer.end, "{what}: {trace:?}");
                assert!(consumer.start >= modifier.end, "{what}: {trace:?}");
            }
        }
    }
}

#[test]
fn a_modifier_of_a_placeholder_runs_before_its_readers() {
    let t = tags();
    let mut factory = diffusion_factory(true);
    let g = t.gamma.clone();
    factory
        .attach_modifier(
            t.gamma.clone(),
            NativeExpression::new(
                "unit_gamma",
                vec![(g.clone(), LocationKind::CellCentre)],
                vec![],
                move |context| Ok(context.output::<CellCentre>(&g)?.fill(1.0)?),
            ),
        )
        .unwrap();
    for fusion in [false, true] {
        let graph = build(&factory, fusion);
        for mode in MODES {
            // Refill gamma each time: the modifier must overwrite it again.
            fill_inputs(&graph);
            graph.execute(mode).unwrap();
            let phi = values_of(&graph, &t.phi);
            let ones = vec![1.0; phi.len()];
            assert_eq!(values_of(&graph, &t.gamma), ones, "the modifier ran");
            let expected = reference_rhs(graph.patch(), &phi, &ones, [1.0; 3]);
            let what = format!("{mode:?}, fusion {fusion}");
            assert_close(&interior_of(&graph, &t.rhs), &expected, 1e-13, &what);
            let trace = named_trace(&graph);
            let modifier = event(&trace, "unit_gamma");
            for (name, e) in &trace {
                if name != "unit_gamma" && name != "s" {
                    assert!(
                        e.start >= modifier.end,
                        "{what}: {name} before the modifier"
                    );
                }
            }
        }
    }
}

/// The labels of the blocks `graph`'s pool has handed out and not got back.
fn outstanding_labels(graph: &ExpressionGraph) -> BTreeSet<String> {
    graph
        .pool()
        .outstanding()
        .iter()
        .map(|b| b.label.to_string())
        .collect()
}

/// The names of the persistent fields of `graph`.
fn persistent_names(graph: &ExpressionGraph) -> BTreeSet<String> {
    graph
        .fields()
        .iter()
        .filter(|f| f.persistent)
        .map(|f| f.tag.name.to_string())
        .collect()
}

/// Asserts that only persistent fields hold memory of `graph`'s pool.
fn assert_only_persistent_blocks(graph: &ExpressionGraph, what: &str) {
    let persistent: Vec<_> = graph.fields().iter().filter(|f| f.persistent).collect();
    assert_eq!(
        graph.pool().outstanding().len(),
        persistent.len(),
        "{what}: outstanding blocks"
    );
    assert_eq!(
        outstanding_labels(graph),
        persistent_names(graph),
        "{what}: who holds memory"
    );
    let statistics = graph.pool().statistics();
    assert_eq!(statistics.blocks_active, persistent.len(), "{what}");
    assert_eq!(
        statistics.bytes_active,
        persistent
            .iter()
            .map(|f| size_class(f.bytes))
            .sum::<usize>(),
        "{what}"
    );
    match graph.pool().check_no_leaks() {
        Err(FieldError::Leak { blocks, report, .. }) => {
            assert_eq!(blocks, persistent.len(), "{what}");
            for f in &persistent {
                assert!(report.contains(&*f.tag.name), "{what}: {report}");
            }
        }
        other => panic!("{what}: persistent fields are outstanding, got {other:?}"),
    }
}

#[test]
fn repeated_execution_reuses_pool_memory() {
    let factory = diffusion_factory(false);
    for mode in MODES {
        let graph = build(&factory, false);
        fill_inputs(&graph);
        let scratch = graph.fields().iter().filter(|f| !f.persistent).count();
        assert_eq!(scratch, 4, "three fluxes and the source");
        assert_only_persistent_blocks(&graph, "after build");

        // The four scratch fields are all alive while rhs runs.
        let first = graph.execute(mode).unwrap();
        assert_eq!(first.pool_misses, scratch as u64, "{mode:?}");
        assert_eq!(first.pool_hits, 0, "{mode:?}");
        assert_eq!(
            first.peak_scratch_bytes,
            graph.memory_plan().peak_with_reuse
        );
        assert_only_persistent_blocks(&graph, "after the first execution");
        let rhs = values_of(&graph, &tags().rhs);

        for run in 2..=4 {
            let report = graph.execute(mode).unwrap();
            let what = format!("{mode:?}, run {run}");
            assert_eq!(report.pool_misses, 0, "{what}: nothing new allocated");
            assert!(report.pool_hits > 0, "{what}");
            assert_eq!(report.pool_hits, scratch as u64, "{what}");
            assert_eq!(report.nodes_run, graph.node_count(), "{what}");
            assert_eq!(
                report.peak_scratch_bytes,
                graph.memory_plan().peak_with_reuse,
                "{what}"
            );
            assert_only_persistent_blocks(&graph, &what);
            assert_bitwise(&values_of(&graph, &tags().rhs), &rhs, &what);
        }
    }
}

/// A graph `r = 2 * e` where the native `exploder` computes `e = p + 1` and
/// fails with "boom" while `fail` is set.
/// p -> exploder (native: e = p + 1; fails with "boom" while `fail` is
/// set, panics while `panic` is set) -> r = 2 e.
fn exploding_graph(fail: Arc<AtomicBool>, panic: Arc<AtomicBool>) -> (ExpressionGraph, Tag, Tag) {
    let (p, e, r) = (Tag::none("p"), Tag::none("e"), Tag::none("r"));
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    let (input, output) = (p.clone(), e.clone());
    factory
        .register(NativeExpression::new(
            "exploder",
            vec![(e.clone(), LocationKind::CellCentre)],
            vec![p.clone()],
            move |context| {
                if fail.load(Ordering::SeqCst) {
                    return Err(GraphError::Native("boom".into()));
                }
                if panic.load(Ordering::SeqCst) {
                    let code = 7;
                    panic!("exploded with code {code}");
                }
                let values = context.input::<CellCentre>(&input)?.values()?.to_vec();
                for (o, v) in context
                    .output::<CellCentre>(&output)?
                    .values_mut()?
                    .iter_mut()
                    .zip(values)
                {
                    *o = v + 1.0;
                }
                Ok(())
            },
        ))
        .unwrap();
    let e2 = e.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(r.clone(), move |s| {
            s.field::<CellCentre>(&e2) * 2.0
        }))
        .unwrap();
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&r),
        &patch(),
        &GraphOptions::default(),
    )
    .unwrap();
    (graph, p, r)
}

/// A panic in a native expression's code is that expression's error, in
/// every mode: the caller gets `GraphError::Expression` around
/// `GraphError::Panicked` with the panic's message, the scratch memory is
/// back, and the graph runs again (its thread pool survived).
#[test]
fn a_panicking_expression_is_an_error_naming_it_and_the_graph_runs_again() {
    let panic = Arc::new(AtomicBool::new(true));
    let (graph, p, r) = exploding_graph(Arc::new(AtomicBool::new(false)), panic.clone());
    fill(&graph, &p, |[x, _, _]| x);
    for mode in MODES {
        panic.store(true, Ordering::SeqCst);
        let error = graph.execute(mode).unwrap_err();
        match &error {
            GraphError::Expression { expression, source } => {
                assert_eq!(expression, "exploder");
                assert!(
                    matches!(**source, GraphError::Panicked { ref message } if message == "exploded with code 7"),
                    "{source:?}"
                );
            }
            other => panic!("expected an Expression error, got {other:?}"),
        }
        assert!(
            error
                .to_string()
                .starts_with("expression exploder failed: it panicked: exploded with code 7;"),
            "{error}"
        );
        assert_only_persistent_blocks(&graph, &format!("{mode:?} after the panic"));
        panic.store(false, Ordering::SeqCst);
        graph.execute(mode).unwrap();
        let layout = FieldLayout::new(graph.patch(), LocationKind::CellCentre);
        let (input, result) = (values_of(&graph, &p), values_of(&graph, &r));
        for i in layout.interior() {
            let at = layout.linear_index(i);
            assert_eq!(result[at], 2.0 * (input[at] + 1.0), "{mode:?} at {i:?}");
        }
    }
}

#[test]
fn native_errors_name_the_expression() {
    let fail = Arc::new(AtomicBool::new(true));
    let (graph, p, r) = exploding_graph(fail.clone(), Arc::new(AtomicBool::new(false)));
    assert!(!graph.field_info(&Tag::none("e")).unwrap().persistent);
    fill(&graph, &p, |[x, _, _]| x);
    for mode in MODES {
        fail.store(true, Ordering::SeqCst);
        let error = graph.execute(mode).unwrap_err();
        match &error {
            GraphError::Expression { expression, source } => {
                assert_eq!(expression, "exploder");
                assert!(
                    matches!(**source, GraphError::Native(ref m) if m == "boom"),
                    "{source:?}"
                );
            }
            other => panic!("expected an Expression error, got {other:?}"),
        }
        assert_eq!(error.to_string(), "expression exploder failed: boom");
        // The failed run gave its scratch memory back.
        assert_only_persistent_blocks(&graph, &format!("{mode:?} after the failure"));

        // And the graph still works once the expression does.
        fail.store(false, Ordering::SeqCst);
        graph.execute(mode).unwrap();
        let expected: Vec<f64> = values_of(&graph, &p)
            .iter()
            .map(|x| 2.0 * (x + 1.0))
            .collect();
        let layout = FieldLayout::new(graph.patch(), LocationKind::CellCentre);
        let actual = values_of(&graph, &r);
        for i in layout.interior() {
            let at = layout.linear_index(i);
            assert_eq!(actual[at], expected[at], "{mode:?} at {i:?}");
        }
        assert_only_persistent_blocks(&graph, &format!("{mode:?} after recovery"));
    }
}

#[test]
fn undeclared_or_mistyped_access_inside_an_expression_fails() {
    let (p, q, out) = (Tag::none("p"), Tag::none("q"), Tag::none("out"));
    let mut factory = Factory::new();
    for tag in [&p, &q] {
        factory
            .placeholder(tag.clone(), LocationKind::CellCentre)
            .unwrap();
    }
    // Reads q without declaring it.
    let (q2, o2) = (q.clone(), out.clone());
    factory
        .register(NativeExpression::new(
            "sneaky",
            vec![(out.clone(), LocationKind::CellCentre)],
            vec![p.clone()],
            move |context| {
                let _ = context.input::<CellCentre>(&q2)?;
                context.output::<CellCentre>(&o2)?.fill(0.0)?;
                Ok(())
            },
        ))
        .unwrap();
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&out),
        &patch(),
        &GraphOptions::default(),
    )
    .unwrap();
    graph.fill_placeholder(&p).unwrap();
    let error = graph.execute(ExecutionMode::Serial).unwrap_err();
    let GraphError::Expression { expression, source } = &error else {
        panic!("expected an Expression error, got {error:?}");
    };
    assert_eq!(expression, "sneaky");
    assert!(
        matches!(&**source, GraphError::FieldUnavailable { tag, expression, .. }
            if tag == &q && expression == "sneaky"),
        "{source:?}"
    );
    let message = error.to_string();
    assert!(message.contains("q (STATE_NONE)"), "{message}");
    assert!(message.contains("requires"), "{message}");

    // Reads p as faces.
    let (p2, o2) = (p.clone(), out.clone());
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    factory
        .register(NativeExpression::new(
            "confused",
            vec![(out.clone(), LocationKind::CellCentre)],
            vec![p.clone()],
            move |context| {
                let _ = context.input::<XFace>(&p2)?;
                context.output::<CellCentre>(&o2)?.fill(0.0)?;
                Ok(())
            },
        ))
        .unwrap();
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&out),
        &patch(),
        &GraphOptions::default(),
    )
    .unwrap();
    graph.fill_placeholder(&p).unwrap();
    for mode in MODES {
        let error = graph.execute(mode).unwrap_err();
        let GraphError::Expression { expression, source } = &error else {
            panic!("expected an Expression error, got {error:?}");
        };
        assert_eq!(expression, "confused");
        assert!(
            matches!(&**source, GraphError::WrongLocation { tag, actual, requested }
                if tag == &p && *actual == LocationKind::CellCentre && *requested == LocationKind::XFace),
            "{source:?}"
        );
    }
}

#[test]
fn scratch_and_mistyped_fields_are_refused_to_callers() {
    let t = tags();
    let factory = diffusion_factory(false);
    let graph = build(&factory, false);
    fill_inputs(&graph);
    graph.execute(ExecutionMode::Serial).unwrap();

    // flux_x is scratch: gone once the graph has run.
    assert!(!graph.field_info(&t.flux[0]).unwrap().persistent);
    let error = graph
        .with_field::<XFace, _>(&t.flux[0], |_| ())
        .unwrap_err();
    match &error {
        GraphError::FieldUnavailable {
            tag,
            expression,
            reason,
        } => {
            assert_eq!(tag, &t.flux[0]);
            assert_eq!(expression, "the caller");
            assert!(reason.contains("scratch"), "{reason}");
        }
        other => panic!("expected FieldUnavailable, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains("flux_x (STATE_NONE)"), "{message}");
    assert!(
        message.contains("persistent"),
        "the message suggests a fix: {message}"
    );
    assert!(matches!(
        graph.with_field_mut::<XFace, _>(&t.flux[0], |_| ()),
        Err(GraphError::FieldUnavailable { .. })
    ));

    // rhs is a cell field.
    let error = graph.with_field::<XFace, _>(&t.rhs, |_| ()).unwrap_err();
    assert!(
        matches!(&error, GraphError::WrongLocation { tag, actual, requested }
            if tag == &t.rhs && *actual == LocationKind::CellCentre && *requested == LocationKind::XFace),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("rhs (STATE_NONE)"), "{message}");
    let error = graph
        .with_field_mut::<ZFace, _>(&t.phi, |_| ())
        .unwrap_err();
    assert!(
        matches!(&error, GraphError::WrongLocation { requested, .. } if *requested == LocationKind::ZFace),
        "{error:?}"
    );

    // A tag the graph does not hold (fused away, or never there).
    let fused = build(&factory, true);
    for tag in [&t.flux[0], &Tag::none("nowhere")] {
        let error = fused.with_field::<XFace, _>(tag, |_| ()).unwrap_err();
        assert!(
            matches!(&error, GraphError::UnknownTag { tag: unknown, .. } if unknown == tag),
            "{error:?}"
        );
        assert!(error.to_string().contains(&tag.to_string()), "{error}");
    }

    // Flagged persistent, flux_x can be read after execution.
    let options = GraphOptions {
        no_fusion: true,
        persistent: vec![t.flux[0].clone()],
        ..Default::default()
    };
    let kept =
        ExpressionGraph::build(&factory, std::slice::from_ref(&t.rhs), &patch(), &options).unwrap();
    fill_inputs(&kept);
    kept.execute(ExecutionMode::Threaded(2)).unwrap();
    let phi = values_of(&kept, &t.phi);
    let gamma = values_of(&kept, &t.gamma);
    let cells = FieldLayout::new(&patch(), LocationKind::CellCentre);
    let h = patch().grid().spacing()[0];
    kept.with_field::<XFace, _>(&t.flux[0], |f| {
        let layout = f.layout();
        let values = f.values().unwrap();
        for i in layout.interior() {
            let below = [i[0] - 1, i[1], i[2]];
            let (c, b) = (cells.linear_index(i), cells.linear_index(below));
            let expected = 0.5 * (gamma[b] + gamma[c]) * (phi[c] - phi[b]) / h;
            let actual = values[layout.linear_index(i)];
            assert!(
                (actual - expected).abs() <= 1e-12,
                "{i:?}: {actual} vs {expected}"
            );
        }
    })
    .unwrap();
}

#[test]
fn a_bound_external_placeholder_is_used() {
    let t = tags();
    let factory = diffusion_factory(false);
    for fusion in [false, true] {
        let graph = build(&factory, fusion);
        fill_inputs(&graph);
        let persistent = graph.fields().iter().filter(|f| f.persistent).count();

        // Caller-owned phi, from another function than fill_inputs uses.
        let layout = FieldLayout::new(graph.patch(), LocationKind::CellCentre);
        let external = sampled(&layout, |[x, y, z]| 0.3 * x - (y * z).sin() + 0.5);
        let field = SpatialField::<CellCentre>::from_external(
            "phi_external",
            graph.patch(),
            ExternalBuffer::from_vec(external.clone()),
        )
        .unwrap();
        let pool_backed = graph.field_version(&t.phi).unwrap();
        assert!(pool_backed.is_some());
        let previous = graph.bind_placeholder(&t.phi, field).unwrap();
        // Its owner may write it behind the graph's back: no version.
        assert_eq!(graph.field_version(&t.phi).unwrap(), None);
        match previous {
            Some(AnyField::Cell(old)) => assert_eq!(old.name(), "phi"),
            other => panic!("the pool-backed phi comes back, got {other:?}"),
        }
        // The old field went back to the pool; the external one is not the pool's.
        assert_eq!(graph.pool().outstanding().len(), persistent - 1);
        assert!(!outstanding_labels(&graph).contains("phi"));
        assert!(
            graph
                .with_field::<CellCentre, _>(&t.phi, |f| f.is_external())
                .unwrap()
        );

        let expected = reference_rhs(
            graph.patch(),
            &external,
            &values_of(&graph, &t.gamma),
            [1.0; 3],
        );
        for mode in MODES {
            graph.execute(mode).unwrap();
            let what = format!("{mode:?}, fusion {fusion}");
            assert_close(&interior_of(&graph, &t.rhs), &expected, 1e-13, &what);
            assert_eq!(values_of(&graph, &t.phi), external, "{what}: phi untouched");
            assert_eq!(graph.pool().outstanding().len(), persistent - 1, "{what}");
        }

        // Changing the bound field through the graph is seen next time.
        graph
            .with_field_mut::<CellCentre, _>(&t.phi, |f| f.fill(0.0).unwrap())
            .unwrap();
        graph.execute(ExecutionMode::Threaded(2)).unwrap();
        let zeros = vec![0.0; external.len()];
        let expected = reference_rhs(
            graph.patch(),
            &zeros,
            &values_of(&graph, &t.gamma),
            [1.0; 3],
        );
        assert_close(&interior_of(&graph, &t.rhs), &expected, 1e-13, "phi = 0");
    }
}

#[test]
fn binding_checks_tag_location_and_patch() {
    let t = tags();
    let graph = build(&diffusion_factory(false), false);
    let p = patch();
    let cell = |name: &str, patch: &Patch| {
        let len = FieldLayout::new(patch, LocationKind::CellCentre).allocated_len();
        SpatialField::<CellCentre>::from_external(
            name,
            patch,
            ExternalBuffer::from_vec(vec![1.0; len]),
        )
        .unwrap()
    };

    // rhs is computed, not a placeholder.
    let error = graph.bind_placeholder(&t.rhs, cell("x", &p)).unwrap_err();
    assert!(
        matches!(&error, GraphError::UnknownTag { tag, .. } if tag == &t.rhs),
        "{error:?}"
    );
    assert!(error.to_string().contains("not a placeholder"), "{error}");

    // Not in the graph.
    let error = graph
        .bind_placeholder(&Tag::none("elsewhere"), cell("x", &p))
        .unwrap_err();
    assert!(matches!(error, GraphError::UnknownTag { .. }), "{error:?}");

    // Faces for a cell placeholder.
    let len = FieldLayout::new(&p, LocationKind::XFace).allocated_len();
    let faces =
        SpatialField::<XFace>::from_external("faces", &p, ExternalBuffer::from_vec(vec![0.0; len]))
            .unwrap();
    let error = graph.bind_placeholder(&t.phi, faces).unwrap_err();
    assert!(
        matches!(&error, GraphError::WrongLocation { tag, actual, requested }
            if tag == &t.phi && *actual == LocationKind::CellCentre && *requested == LocationKind::XFace),
        "{error:?}"
    );

    // Another patch.
    let other = Grid::new([4, 4, 4], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let error = graph
        .bind_placeholder(&t.phi, cell("foreign", &other))
        .unwrap_err();
    assert!(matches!(error, GraphError::Native(_)), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("foreign"), "{message}");
    assert!(message.contains("another patch"), "{message}");

    // Nothing was replaced by the refused bindings.
    assert!(
        !graph
            .with_field::<CellCentre, _>(&t.phi, |f| f.is_external())
            .unwrap()
    );
}

#[test]
fn an_unread_output_of_a_multi_output_expression_goes_back_to_the_pool() {
    // `pair` computes a and b from p; only a is read (by r = a + 1, read by
    // the root t = 3 r). b is scratch (its producer has inputs and
    // children), so it must not outlive the run, nor count against a budget
    // after its producer.
    let [p, a, b, r, t] = ["p", "a", "b", "r", "t"].map(Tag::none);
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    let (pp, aa, bb) = (p.clone(), a.clone(), b.clone());
    factory
        .register(NativeExpression::new(
            "pair",
            vec![
                (a.clone(), LocationKind::CellCentre),
                (b.clone(), LocationKind::CellCentre),
            ],
            vec![p.clone()],
            move |context| {
                let values = context.input::<CellCentre>(&pp)?.values()?.to_vec();
                context
                    .output::<CellCentre>(&aa)?
                    .values_mut()?
                    .copy_from_slice(&values);
                context.output::<CellCentre>(&bb)?.fill(-1.0)?;
                Ok(())
            },
        ))
        .unwrap();
    let a2 = a.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(r.clone(), move |s| {
            s.field::<CellCentre>(&a2) + 1.0
        }))
        .unwrap();
    let (rr, tt) = (r.clone(), t.clone());
    factory
        .register(NativeExpression::new(
            "triple",
            vec![(t.clone(), LocationKind::CellCentre)],
            vec![r.clone()],
            move |context| {
                let values = context.input::<CellCentre>(&rr)?.values()?.to_vec();
                for (o, v) in context
                    .output::<CellCentre>(&tt)?
                    .values_mut()?
                    .iter_mut()
                    .zip(values)
                {
                    *o = 3.0 * v;
                }
                Ok(())
            },
        ))
        .unwrap();
    let unlimited = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&t),
        &patch(),
        &GraphOptions::default(),
    )
    .unwrap();
    let plan = unlimited.memory_plan().clone();
    let cell_bytes = unlimited.field_info(&a).unwrap().bytes;
    assert_eq!(plan.peak_with_reuse, 2 * cell_bytes, "{plan:?}");
    let budgeted = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&t),
        &patch(),
        &GraphOptions {
            memory_budget: Some(plan.peak_with_reuse),
            ..Default::default()
        },
    )
    .unwrap();
    for graph in [&unlimited, &budgeted] {
        for tag in [&a, &b, &r] {
            assert!(!graph.field_info(tag).unwrap().persistent, "{tag}");
        }
        fill(graph, &p, |[x, y, z]| x + y * z);
        for mode in MODES {
            for run in 0..2 {
                let report = graph.execute(mode).unwrap();
                let what = format!("{mode:?}, run {run}");
                assert_only_persistent_blocks(graph, &what);
                assert!(report.peak_scratch_bytes <= plan.peak_with_reuse, "{what}");
                if mode == ExecutionMode::Serial {
                    assert_eq!(report.peak_scratch_bytes, plan.peak_with_reuse, "{what}");
                }
                let expected: Vec<f64> = values_of(graph, &p)
                    .iter()
                    .map(|v| 3.0 * (v + 1.0))
                    .collect();
                let layout = FieldLayout::new(graph.patch(), LocationKind::CellCentre);
                let actual = values_of(graph, &t);
                for i in layout.interior() {
                    let at = layout.linear_index(i);
                    assert_eq!(actual[at], expected[at], "{what} at {i:?}");
                }
            }
        }
    }
}

/// Every way a field may change moves its version on (an execution for
/// what it computes, a mutable access, a binding, a rotation); reading,
/// and executing for a field nobody writes, does not.
#[test]
fn field_versions_follow_every_write() {
    let t = tags();
    let graph = build(&diffusion_factory(false), true);
    fill_inputs(&graph);
    let version = |tag: &Tag| graph.field_version(tag).unwrap().unwrap();
    let (gamma, rhs) = (version(&t.gamma), version(&t.rhs));
    graph.execute(ExecutionMode::Serial).unwrap();
    assert_eq!(version(&t.gamma), gamma, "an input the graph only reads");
    assert_ne!(version(&t.rhs), rhs, "a root the execution computed");
    let rhs = version(&t.rhs);
    graph.with_field::<CellCentre, _>(&t.rhs, |_| ()).unwrap();
    assert_eq!(version(&t.rhs), rhs, "a read");
    graph
        .with_field_mut::<CellCentre, _>(&t.gamma, |_| ())
        .unwrap();
    assert_ne!(version(&t.gamma), gamma, "a mutable access");
    let (gamma, phi) = (version(&t.gamma), version(&t.phi));
    graph
        .rotate_fields(&[t.gamma.clone(), t.phi.clone()])
        .unwrap();
    assert!(
        version(&t.gamma) != gamma && version(&t.phi) != phi,
        "a rotation"
    );
    assert!(matches!(
        graph.field_version(&Tag::none("nowhere")),
        Err(GraphError::UnknownTag { .. })
    ));
}
