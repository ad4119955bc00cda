//! Reductions as graph nodes ([`LanguageReduction`]): results against
//! hand-written loops over the interior, nodes and boundary values that
//! read the result in the same execution, chains of reductions, fusion of a
//! producer into its reduction, and every error (the exact variant and the
//! names in it).

use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, ExpressionKind, Factory, GraphError, GraphOptions,
    LanguageExpression, LanguageModifier, LanguageReduction, NativeExpression, Tag,
};
use watershed_fields::{CellCentre, Grid, LocationKind, Patch};
use watershed_operators::{Expr, Parameter, Reduction, abs, laplacian};

const MODES: [ExecutionMode; 3] = [
    ExecutionMode::Serial,
    ExecutionMode::Threaded(2),
    ExecutionMode::Threaded(3),
];

fn patch(ghosts: usize) -> Patch {
    Grid::new([7, 5, 3], [1.4, 0.5, 0.9], [0.0; 3])
        .expect("a valid grid")
        .whole_domain(ghosts)
}

/// A value per cell with both signs and no symmetry.
fn value(i: isize, j: isize, k: isize) -> f64 {
    ((i * 7 + j * 3 + k * 11) as f64 * 0.37).sin() * (1.0 + 0.1 * i as f64) - 0.05 * j as f64
}

/// Sets `tag` to [`value`] on the interior and to `ghost` elsewhere.
fn set_field(graph: &ExpressionGraph, tag: &Tag, ghost: f64) {
    graph
        .with_field_mut::<CellCentre, _>(tag, |f| {
            let layout = f.layout().clone();
            let interior = layout.interior();
            let values = f.values_mut().expect("CPU values");
            values.fill(ghost);
            for k in interior.lo[2]..interior.hi[2] {
                for j in interior.lo[1]..interior.hi[1] {
                    for i in interior.lo[0]..interior.hi[0] {
                        values[layout.linear_index([i, j, k])] = value(i, j, k);
                    }
                }
            }
        })
        .expect("the field is in the graph");
}

/// Every interior index of `patch`'s cells.
fn interior(patch: &Patch) -> Vec<[isize; 3]> {
    let layout = watershed_fields::FieldLayout::new(patch, LocationKind::CellCentre);
    let b = layout.interior();
    let mut all = Vec::new();
    for k in b.lo[2]..b.hi[2] {
        for j in b.lo[1]..b.hi[1] {
            for i in b.lo[0]..b.hi[0] {
                all.push([i, j, k]);
            }
        }
    }
    all
}

fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-300)
}

#[test]
fn max_abs_feeds_a_later_node_in_the_same_execution() {
    let (u, scaled, largest) = (Tag::none("u"), Tag::none("scaled"), Tag::none("max|u|"));
    let max_u = Parameter::new("max_u", -1.0);
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let t = u.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            largest.clone(),
            &max_u,
            Reduction::Max,
            move |s| abs(s.field(&t)),
        ))
        .unwrap();
    let (t, m) = (u.clone(), max_u.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            scaled.clone(),
            move |s| s.field::<CellCentre>(&t) / m.expr(),
        ))
        .unwrap();
    let patch = patch(1);
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&scaled),
        &patch,
        &GraphOptions::default(),
    )
    .unwrap();
    assert_eq!(graph.nodes_of_kind(ExpressionKind::Reduction), 1);
    assert_eq!(graph.native_node_count(), 0);
    let order = graph.execution_order();
    let at = |name: &str| order.iter().position(|n| n == name).unwrap();
    assert!(at("max|u|") < at("scaled"), "order {order:?}");
    let expected = interior(&patch)
        .iter()
        .map(|&[i, j, k]| value(i, j, k).abs())
        .fold(0.0, f64::max);
    for mode in MODES {
        max_u.set(-1.0);
        // Ghosts far larger than any interior value: only the interior counts.
        set_field(&graph, &u, 1e6);
        graph.execute(mode).unwrap();
        assert_eq!(max_u.get(), expected, "{mode:?}");
        graph
            .with_field::<CellCentre, _>(&scaled, |f| {
                let values = f.values().unwrap();
                for [i, j, k] in interior(&patch) {
                    let got = values[f.layout().linear_index([i, j, k])];
                    let want = value(i, j, k) / expected;
                    assert!(
                        relative(got, want) < 1e-15,
                        "{mode:?} ({i},{j},{k}): {got} vs {want}"
                    );
                }
            })
            .unwrap();
    }
    // New data, same graph: the prepared reduction sees it.
    graph
        .with_field_mut::<CellCentre, _>(&u, |f| f.fill(-3.0))
        .unwrap()
        .unwrap();
    graph.execute(ExecutionMode::Serial).unwrap();
    assert_eq!(max_u.get(), 3.0);
    let dot = graph.to_dot();
    assert!(dot.contains("shape=hexagon"), "{dot}");
    assert!(dot.contains("Max into parameter max_u"), "{dot}");
    // The CUDA back end generates its reduction kernel, so placement may
    // put it on a GPU.
    assert_eq!(graph.gpu_capability("max|u|", 0).unwrap().unwrap(), Ok(()));
}

#[test]
fn the_norm_of_a_stencil_fuses_into_one_node_and_matches_a_hand_loop() {
    let (u, lap, norm) = (Tag::none("u"), Tag::none("lap u"), Tag::none("|lap u|"));
    let norm_value = Parameter::new("norm", 0.0);
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
        .register_reduction(
            LanguageReduction::new::<CellCentre>(
                norm.clone(),
                &norm_value,
                Reduction::SumOfSquares,
                move |s| s.field(&l),
            )
            .finishing_with(f64::sqrt),
        )
        .unwrap();
    let patch = patch(1);
    let h = patch.grid().spacing();
    let mut sum = 0.0;
    for [i, j, k] in interior(&patch) {
        // Ghost values of 0.25 enter the stencil at the boundary.
        let at = |a: isize, b: isize, c: isize| {
            let inside = (0..7).contains(&a) && (0..5).contains(&b) && (0..3).contains(&c);
            if inside { value(a, b, c) } else { 0.25 }
        };
        let centre = at(i, j, k);
        let lap = (at(i + 1, j, k) - 2.0 * centre + at(i - 1, j, k)) / (h[0] * h[0])
            + (at(i, j + 1, k) - 2.0 * centre + at(i, j - 1, k)) / (h[1] * h[1])
            + (at(i, j, k + 1) - 2.0 * centre + at(i, j, k - 1)) / (h[2] * h[2]);
        sum += lap * lap;
    }
    let expected = sum.sqrt();
    for (no_fusion, nodes) in [(false, 1), (true, 2)] {
        let options = GraphOptions {
            no_fusion,
            ..Default::default()
        };
        // The reduction's tag alone is the root.
        let graph = ExpressionGraph::build(&factory, std::slice::from_ref(&norm), &patch, &options)
            .unwrap();
        assert_eq!(graph.node_count(), nodes, "no_fusion {no_fusion}");
        assert_eq!(graph.fusions(), usize::from(!no_fusion));
        set_field(&graph, &u, 0.25);
        for mode in MODES {
            norm_value.set(0.0);
            graph.execute(mode).unwrap();
            assert!(
                relative(norm_value.get(), expected) < 1e-13,
                "no_fusion {no_fusion} {mode:?}: {} vs {expected}",
                norm_value.get()
            );
        }
    }
}

#[test]
fn a_chain_of_reductions_and_a_boundary_value_read_each_result() {
    // mean = sum(u) / N, variance = sum((u - mean)^2) / N, and a ghost layer
    // of v = 2u holding the variance: the roots name only v.
    let (u, v) = (Tag::none("u"), Tag::none("v"));
    let (mean_tag, variance_tag) = (Tag::none("mean"), Tag::none("variance"));
    let (mean, variance) = (Parameter::new("mean", 0.0), Parameter::new("variance", 0.0));
    let patch = patch(1);
    let count = interior(&patch).len() as f64;
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let t = u.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            mean_tag.clone(),
            &mean,
            Reduction::Sum,
            move |s| s.field::<CellCentre>(&t) / count,
        ))
        .unwrap();
    let (t, m) = (u.clone(), mean.clone());
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            variance_tag.clone(),
            &variance,
            Reduction::Sum,
            move |s| {
                let d = s.field::<CellCentre>(&t) - m.expr();
                d.clone() * d / count
            },
        ))
        .unwrap();
    let t = u.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(v.clone(), move |s| {
            2.0 * s.field::<CellCentre>(&t)
        }))
        .unwrap();
    let var = variance.clone();
    factory
        .attach_modifier(
            v.clone(),
            LanguageModifier::new(
                "ghost -x of v",
                v.clone(),
                LocationKind::CellCentre,
                move |layout| {
                    let mut ghost = layout.allocated();
                    ghost.lo[0] = -1;
                    ghost.hi[0] = 0;
                    Ok(vec![(ghost, var.expr::<CellCentre>().node().clone())])
                },
            ),
        )
        .unwrap();
    let values: Vec<f64> = interior(&patch)
        .iter()
        .map(|&[i, j, k]| value(i, j, k))
        .collect();
    let expected_mean = values.iter().map(|v| v / count).sum::<f64>();
    let expected_variance = values
        .iter()
        .map(|v| (v - expected_mean) * (v - expected_mean) / count)
        .sum::<f64>();
    for no_fusion in [false, true] {
        let options = GraphOptions {
            no_fusion,
            ..Default::default()
        };
        let graph =
            ExpressionGraph::build(&factory, std::slice::from_ref(&v), &patch, &options).unwrap();
        assert_eq!(graph.nodes_of_kind(ExpressionKind::Reduction), 2);
        let order = graph.execution_order();
        let at = |name: &str| order.iter().position(|n| n == name).unwrap();
        assert!(at("mean") < at("variance"), "{order:?}");
        // The boundary value reads the variance: fused into v's producer
        // (a row epilogue) or a modifier node of its own.
        let reader = if no_fusion { "ghost -x of v" } else { "v" };
        assert!(at("variance") < at(reader), "{order:?}");
        set_field(&graph, &u, 0.0);
        for mode in MODES {
            graph.execute(mode).unwrap();
            assert!(relative(mean.get(), expected_mean) < 1e-14);
            assert!(relative(variance.get(), expected_variance) < 1e-13);
            graph
                .with_field::<CellCentre, _>(&v, |f| {
                    let values = f.values().unwrap();
                    for j in 0..5 {
                        for k in 0..3 {
                            let got = values[f.layout().linear_index([-1, j, k])];
                            assert_eq!(got, variance.get(), "ghost (-1,{j},{k})");
                        }
                    }
                })
                .unwrap();
        }
    }
}

#[test]
fn refuses_two_writers_of_one_parameter_and_a_taken_tag() {
    let (u, a, b) = (Tag::none("u"), Tag::none("a"), Tag::none("b"));
    let shared = Parameter::new("shared", 0.0);
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let reduction = |tag: &Tag| {
        let t = u.clone();
        LanguageReduction::new::<CellCentre>(tag.clone(), &shared, Reduction::Max, move |s| {
            s.field(&t)
        })
    };
    factory.register_reduction(reduction(&a)).unwrap();
    match factory.register_reduction(reduction(&b)) {
        Err(GraphError::DuplicateParameterWriter {
            parameter,
            first,
            second,
        }) => {
            assert_eq!(
                (parameter.as_str(), first.as_str(), second.as_str()),
                ("shared", "a", "b")
            );
        }
        other => panic!("expected DuplicateParameterWriter, got {other:?}"),
    }
    // The placeholder's tag is taken.
    let other = Parameter::new("other", 0.0);
    let t = u.clone();
    let clash = LanguageReduction::new::<CellCentre>(u.clone(), &other, Reduction::Min, move |s| {
        s.field(&t)
    });
    match factory.register_reduction(clash) {
        Err(GraphError::DuplicateProducer { tag, first, .. }) => {
            assert_eq!(tag, u);
            assert_eq!(first, "a placeholder");
        }
        other => panic!("expected DuplicateProducer, got {other:?}"),
    }
    // An expression computing a reduction's tag is refused too.
    let t = u.clone();
    match factory.register(LanguageExpression::new::<CellCentre>(a.clone(), move |s| {
        s.field::<CellCentre>(&t)
    })) {
        Err(GraphError::DuplicateProducer { tag, first, .. }) => {
            assert_eq!(tag, a);
            assert_eq!(first, "a");
        }
        other => panic!("expected DuplicateProducer, got {other:?}"),
    }
    // A reduction of no field has no grid.
    let constant = Parameter::new("constant", 0.0);
    match factory.register_reduction(LanguageReduction::new::<CellCentre>(
        Tag::none("constant"),
        &constant,
        Reduction::Sum,
        |_| Expr::<CellCentre>::constant(1.0),
    )) {
        Err(GraphError::Usage(message)) => {
            assert!(
                message.contains("reduction constant reads no field"),
                "{message}"
            )
        }
        other => panic!("expected Usage, got {other:?}"),
    }
}

#[test]
fn a_value_depending_on_itself_is_a_cycle() {
    // w = u / max(w): the reduction reads w, whose producer reads its result.
    let (u, w, m) = (Tag::none("u"), Tag::none("w"), Tag::none("max w"));
    let largest = Parameter::new("largest", 1.0);
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let (t, p) = (u.clone(), largest.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(w.clone(), move |s| {
            s.field::<CellCentre>(&t) / p.expr()
        }))
        .unwrap();
    let t = w.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            m.clone(),
            &largest,
            Reduction::Max,
            move |s| s.field(&t),
        ))
        .unwrap();
    match ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&w),
        &patch(1),
        &GraphOptions::default(),
    ) {
        Err(GraphError::Cycle { cycle }) => {
            assert!(cycle.contains(&w) && cycle.contains(&m), "{cycle:?}");
            assert_eq!(cycle.first(), cycle.last());
        }
        other => panic!("expected Cycle, got {other:?}"),
    }
}

#[test]
fn a_missing_input_and_missing_ghosts_name_the_reduction() {
    let (u, missing, r) = (Tag::none("u"), Tag::none("nowhere"), Tag::none("sum lap u"));
    let p = Parameter::new("p", 0.0);
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let t = missing.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            Tag::none("sum nowhere"),
            &Parameter::new("q", 0.0),
            Reduction::Sum,
            move |s| s.field(&t),
        ))
        .unwrap();
    match ExpressionGraph::build(
        &factory,
        &[Tag::none("sum nowhere")],
        &patch(1),
        &GraphOptions::default(),
    ) {
        Err(GraphError::MissingProducer { tag, required_by }) => {
            assert_eq!(tag, missing);
            assert_eq!(required_by, "sum nowhere");
        }
        other => panic!("expected MissingProducer, got {other:?}"),
    }
    let t = u.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            r.clone(),
            &p,
            Reduction::Sum,
            move |s| laplacian(s.field::<CellCentre>(&t)),
        ))
        .unwrap();
    match ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&r),
        &patch(0),
        &GraphOptions::default(),
    ) {
        Err(GraphError::MissingGhosts {
            tag,
            needed,
            available,
            reader,
            ..
        }) => {
            assert_eq!(tag, u);
            assert_eq!((needed, available), (1, 0));
            assert_eq!(reader, "sum lap u");
        }
        other => panic!("expected MissingGhosts, got {other:?}"),
    }
}

#[test]
fn a_checked_reduction_refuses_a_nan_in_the_interior_only() {
    let (u, r) = (Tag::none("u"), Tag::none("sum u"));
    let total = Parameter::new("total", 7.0);
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let t = u.clone();
    factory
        .register_reduction(
            LanguageReduction::new::<CellCentre>(r.clone(), &total, Reduction::Sum, move |s| {
                s.field(&t)
            })
            .checking_finite(),
        )
        .unwrap();
    let patch = patch(1);
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&r),
        &patch,
        &GraphOptions::default(),
    )
    .unwrap();
    // A NaN in a ghost cell is outside the reduction.
    set_field(&graph, &u, f64::NAN);
    graph.execute(ExecutionMode::Serial).unwrap();
    let expected: f64 = interior(&patch)
        .iter()
        .map(|&[i, j, k]| value(i, j, k))
        .sum();
    assert!(relative(total.get(), expected) < 1e-14);
    let before = total.get();
    graph
        .with_field_mut::<CellCentre, _>(&u, |f| {
            let index = f.layout().linear_index([3, 2, 1]);
            f.values_mut().unwrap()[index] = f64::NAN;
        })
        .unwrap();
    let error = graph.execute(ExecutionMode::Threaded(2)).unwrap_err();
    let GraphError::Expression { expression, source } = &error else {
        panic!("expected Expression, got {error:?}");
    };
    assert_eq!(expression, "sum u");
    match source.as_ref() {
        GraphError::ReductionNotFinite {
            reduction,
            parameter,
            value,
        } => {
            assert_eq!((reduction.as_str(), parameter.as_str()), ("sum u", "total"));
            assert!(value.is_nan());
        }
        other => panic!("expected ReductionNotFinite, got {other:?}"),
    }
    // The parameter keeps its last good value.
    assert_eq!(total.get(), before);
    // Unchecked, the NaN is the result (never a silent number).
    let unchecked = Parameter::new("unchecked", 0.0);
    let t = u.clone();
    let mut factory = factory.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            Tag::none("unchecked sum"),
            &unchecked,
            Reduction::Sum,
            move |s| s.field(&t),
        ))
        .unwrap();
    let graph = ExpressionGraph::build(
        &factory,
        &[Tag::none("unchecked sum")],
        &patch,
        &GraphOptions::default(),
    )
    .unwrap();
    set_field(&graph, &u, 0.0);
    graph
        .with_field_mut::<CellCentre, _>(&u, |f| {
            let index = f.layout().linear_index([0, 0, 0]);
            f.values_mut().unwrap()[index] = f64::NAN;
        })
        .unwrap();
    graph.execute(ExecutionMode::Serial).unwrap();
    assert!(unchecked.get().is_nan());
}

#[test]
fn a_boundary_value_built_only_on_the_grown_patch_still_follows_its_reduction() {
    // The modifier's builder refuses a layout without ghost layers (as a
    // boundary condition does), so its reads are known only once
    // `GhostPolicy::Grow` has widened the patch.
    let (u, v, w, m) = (
        Tag::none("u"),
        Tag::none("v"),
        Tag::none("w"),
        Tag::none("max u"),
    );
    let largest = Parameter::new("largest", 0.0);
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let t = u.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            m.clone(),
            &largest,
            Reduction::Max,
            move |s| s.field(&t),
        ))
        .unwrap();
    let t = u.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(v.clone(), move |s| {
            s.field::<CellCentre>(&t) * 1.0
        }))
        .unwrap();
    let l = largest.clone();
    factory
        .attach_modifier(
            v.clone(),
            LanguageModifier::new(
                "ghost -x of v",
                v.clone(),
                LocationKind::CellCentre,
                move |layout| {
                    if layout.ghosts().minus[0] == 0 {
                        return Err(GraphError::Usage("no ghost layer to fill".into()));
                    }
                    let mut ghost = layout.allocated();
                    ghost.hi[0] = 0;
                    Ok(vec![(ghost, l.expr::<CellCentre>().node().clone())])
                },
            ),
        )
        .unwrap();
    let t = v.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(w.clone(), move |s| {
            laplacian(s.field::<CellCentre>(&t))
        }))
        .unwrap();
    let options = GraphOptions {
        ghosts: watershed_exprgraph::GhostPolicy::Grow,
        persistent: vec![v.clone()],
        ..Default::default()
    };
    let bare = patch(0);
    // Not a root and not found before the patch grew: an error naming it.
    match ExpressionGraph::build(&factory, std::slice::from_ref(&w), &bare, &options) {
        Err(GraphError::Usage(message)) => {
            assert!(message.contains("reduction max u"), "{message}");
            assert!(message.contains("to the roots"), "{message}");
        }
        other => panic!("expected Usage, got {other:?}"),
    }
    // As a root it runs first, and the ghosts hold its result.
    let graph = ExpressionGraph::build(&factory, &[w.clone(), m.clone()], &bare, &options).unwrap();
    let order = graph.execution_order();
    let at = |name: &str| order.iter().position(|n| n == name).unwrap();
    let reader = order
        .iter()
        .position(|n| n == "ghost -x of v" || n == "v")
        .unwrap();
    assert!(at("max u") < reader, "{order:?}");
    set_field(&graph, &u, 0.0);
    graph.execute(ExecutionMode::Serial).unwrap();
    let expected = interior(graph.patch())
        .iter()
        .map(|&[i, j, k]| value(i, j, k))
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(largest.get(), expected);
    graph
        .with_field::<CellCentre, _>(&v, |f| {
            let got = f.values().unwrap()[f.layout().linear_index([-1, 2, 1])];
            assert_eq!(got, expected);
        })
        .unwrap();
}

#[test]
fn a_native_node_that_declares_the_parameter_runs_after_the_reduction() {
    let (u, seen, m) = (Tag::none("u"), Tag::none("seen"), Tag::none("min u"));
    let smallest = Parameter::new("smallest", 0.0);
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let t = u.clone();
    factory
        .register_reduction(LanguageReduction::new::<CellCentre>(
            m.clone(),
            &smallest,
            Reduction::Min,
            move |s| s.field(&t),
        ))
        .unwrap();
    let (out, p) = (seen.clone(), smallest.clone());
    factory
        .register(
            NativeExpression::new(
                "copy the minimum",
                vec![(seen.clone(), LocationKind::CellCentre)],
                Vec::new(),
                move |context| {
                    let value = p.get();
                    context.output::<CellCentre>(&out)?.fill(value)?;
                    Ok(())
                },
            )
            .reading(&[&smallest]),
        )
        .unwrap();
    // The native node names only `seen` as root; its declared read pulls
    // the reduction in and orders it first.
    let patch = patch(1);
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&seen),
        &patch,
        &GraphOptions::default(),
    )
    .unwrap();
    assert_eq!(graph.execution_order(), vec!["min u", "copy the minimum"]);
    set_field(&graph, &u, -1e6);
    let expected = interior(&patch)
        .iter()
        .map(|&[i, j, k]| value(i, j, k))
        .fold(f64::INFINITY, f64::min);
    for mode in MODES {
        smallest.set(0.0);
        graph.execute(mode).unwrap();
        let got = graph
            .with_field::<CellCentre, _>(&seen, |f| f.values().unwrap()[0])
            .unwrap();
        assert_eq!(got, expected, "{mode:?}");
    }
}
