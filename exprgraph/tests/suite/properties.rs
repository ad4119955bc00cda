//! Property tests over random DAGs of native and language expressions fed by
//! a few placeholders: every mode runs nodes after their dependencies,
//! computes what a serial reference computes (with and without fusion),
//! gives back all scratch memory, stays within the memory plan, and honours
//! (or refuses up front) a memory budget.

use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphError, GraphOptions, LanguageExpression,
    NativeExpression, Tag,
};
use watershed_fields::pool::size_class;
use watershed_fields::{CellCentre, FieldLayout, Grid, LocationKind, Patch};
use watershed_operators::Expr;

/// Every execution mode the properties cover.
const MODES: [ExecutionMode; 3] = [
    ExecutionMode::Serial,
    ExecutionMode::Threaded(2),
    ExecutionMode::Threaded(3),
];

/// Rounding allowed, relative to the sum of the magnitudes of the terms.
const TOLERANCE: f64 = 1e-13;

/// One generated expression: `constant + sum(coefficient * input)`.
#[derive(Debug, Clone)]
struct NodeSpec {
    /// Native (reads the first interior value of each input, fills its
    /// output with one number, constant 1) or language (pointwise).
    native: bool,
    /// Inputs as source indices (placeholders first, then earlier nodes),
    /// with their coefficients.
    inputs: Vec<(usize, f64)>,
    /// The constant term of a language node.
    constant: f64,
}

/// A random DAG: `placeholders` sources, then `nodes` in topological order.
#[derive(Debug, Clone)]
struct Dag {
    placeholders: usize,
    nodes: Vec<NodeSpec>,
    /// Nodes made roots although something reads them.
    extra_roots: Vec<bool>,
    /// Nodes flagged persistent through the options.
    flagged: Vec<bool>,
}

impl Dag {
    /// The tag of source `index` (placeholder or node).
    fn tag(&self, index: usize) -> Tag {
        if index < self.placeholders {
            Tag::none(&format!("p{index}"))
        } else {
            Tag::none(&format!("n{}", index - self.placeholders))
        }
    }

    /// The roots: nodes nobody reads, and the extra ones.
    fn roots(&self) -> Vec<Tag> {
        let read: BTreeSet<usize> = self
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().map(|(i, _)| *i))
            .collect();
        (0..self.nodes.len())
            .filter(|&i| !read.contains(&(self.placeholders + i)) || self.extra_roots[i])
            .map(|i| self.tag(self.placeholders + i))
            .collect()
    }

    /// The nodes each node depends on, directly or not.
    fn ancestors(&self) -> Vec<BTreeSet<usize>> {
        let mut ancestors: Vec<BTreeSet<usize>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let mut set = BTreeSet::new();
            for &(source, _) in &node.inputs {
                if let Some(parent) = source.checked_sub(self.placeholders) {
                    set.insert(parent);
                    set.extend(ancestors[parent].iter().copied());
                }
            }
            ancestors.push(set);
        }
        ancestors
    }
}

/// A nonzero coefficient, a multiple of 1/8 in [-1, 1].
fn coefficient() -> impl Strategy<Value = f64> {
    (1u8..=8, any::<bool>()).prop_map(|(k, negative)| {
        let c = f64::from(k) / 8.0;
        if negative { -c } else { c }
    })
}

/// A node reading up to three of the `available` earlier sources.
fn node_spec(available: usize) -> impl Strategy<Value = NodeSpec> {
    (
        any::<bool>(),
        prop::collection::vec((0..available, coefficient()), 0..=3),
        coefficient(),
    )
        .prop_map(|(native, mut inputs, constant)| {
            let mut seen = BTreeSet::new();
            inputs.retain(|(i, _)| seen.insert(*i));
            NodeSpec {
                native,
                inputs,
                constant,
            }
        })
}

/// Random DAGs of 2 to 24 nodes over 1 to 3 placeholders.
fn dag() -> impl Strategy<Value = Dag> {
    (1usize..=3, 2usize..25).prop_flat_map(|(placeholders, n)| {
        let nodes: Vec<_> = (0..n).map(|i| node_spec(placeholders + i)).collect();
        (
            Just(placeholders),
            nodes,
            prop::collection::vec(prop::bool::weighted(0.15), n),
            prop::collection::vec(prop::bool::weighted(0.15), n),
        )
            .prop_map(|(placeholders, nodes, extra_roots, flagged)| Dag {
                placeholders,
                nodes,
                extra_roots,
                flagged,
            })
    })
}

/// The test patch.
fn patch() -> Patch {
    Grid::new([6, 5, 4], [1.0, 0.9, 0.8], [0.0; 3])
        .expect("a valid grid")
        .whole_domain(1)
}

/// The factory of `dag`.
fn factory(dag: &Dag) -> Factory {
    let mut factory = Factory::new();
    for p in 0..dag.placeholders {
        factory
            .placeholder(dag.tag(p), LocationKind::CellCentre)
            .unwrap();
    }
    for (i, spec) in dag.nodes.iter().enumerate() {
        let target = dag.tag(dag.placeholders + i);
        let inputs: Vec<(Tag, f64)> = spec
            .inputs
            .iter()
            .map(|&(source, c)| (dag.tag(source), c))
            .collect();
        if spec.native {
            let requires = inputs.iter().map(|(t, _)| t.clone()).collect();
            let out = target.clone();
            factory
                .register(NativeExpression::new(
                    &target.name,
                    vec![(target.clone(), LocationKind::CellCentre)],
                    requires,
                    move |context| {
                        let mut value = 1.0;
                        for (tag, c) in &inputs {
                            let field = context.input::<CellCentre>(tag)?;
                            let first = field.layout().linear_index([0; 3]);
                            value += c * field.values()?[first];
                        }
                        context.output::<CellCentre>(&out)?.fill(value)?;
                        Ok(())
                    },
                ))
                .unwrap();
        } else {
            let constant = spec.constant;
            factory
                .register(LanguageExpression::new::<CellCentre>(target, move |s| {
                    let mut e = Expr::constant(constant);
                    for (tag, c) in &inputs {
                        e = e + s.field::<CellCentre>(tag) * *c;
                    }
                    e
                }))
                .unwrap();
        }
    }
    factory
}

/// Builds `dag` with or without fusion and with an optional budget.
fn build(dag: &Dag, fusion: bool, budget: Option<usize>) -> Result<ExpressionGraph, GraphError> {
    let persistent = (0..dag.nodes.len())
        .filter(|&i| dag.flagged[i])
        .map(|i| dag.tag(dag.placeholders + i))
        .collect();
    let options = GraphOptions {
        no_fusion: !fusion,
        persistent,
        memory_budget: budget,
        ..Default::default()
    };
    ExpressionGraph::build(&factory(dag), &dag.roots(), &patch(), &options)
}

/// The value of placeholder `p` at storage position `at` in run `run`.
fn placeholder_value(p: usize, at: usize, run: usize) -> f64 {
    0.5 * (p + 1) as f64 + 0.001 * at as f64 - 0.25 * run as f64
}

/// Fills the placeholders of `graph` for run `run`.
fn fill_placeholders(dag: &Dag, graph: &ExpressionGraph, run: usize) {
    for p in 0..dag.placeholders {
        let tag = dag.tag(p);
        if graph.field_info(&tag).is_some() {
            graph
                .with_field_mut::<CellCentre, _>(&tag, |f| {
                    for (at, v) in f.values_mut().unwrap().iter_mut().enumerate() {
                        *v = placeholder_value(p, at, run);
                    }
                })
                .unwrap();
        }
    }
}

/// Every source's values at every allocated point in run `run`, computed
/// serially from the definition, with the sum of the magnitudes of the
/// terms (the scale of rounding errors).
fn reference(dag: &Dag, run: usize) -> Vec<(Vec<f64>, Vec<f64>)> {
    let layout = FieldLayout::new(&patch(), LocationKind::CellCentre);
    let len = layout.allocated_len();
    let first = layout.linear_index([0; 3]);
    let mut sources: Vec<(Vec<f64>, Vec<f64>)> = (0..dag.placeholders)
        .map(|p| {
            let values: Vec<f64> = (0..len).map(|at| placeholder_value(p, at, run)).collect();
            let magnitudes = values.iter().map(|v| v.abs()).collect();
            (values, magnitudes)
        })
        .collect();
    for spec in &dag.nodes {
        let computed = if spec.native {
            let (mut value, mut magnitude) = (1.0, 1.0);
            for &(source, c) in &spec.inputs {
                value += c * sources[source].0[first];
                magnitude += c.abs() * sources[source].1[first];
            }
            (vec![value; len], vec![magnitude; len])
        } else {
            let mut values = vec![spec.constant; len];
            let mut magnitudes = vec![spec.constant.abs(); len];
            for &(source, c) in &spec.inputs {
                for at in 0..len {
                    values[at] += c * sources[source].0[at];
                    magnitudes[at] += c.abs() * sources[source].1[at];
                }
            }
            (values, magnitudes)
        };
        sources.push(computed);
    }
    sources
}

/// The interior values of every persistent node field of `graph`, by node.
fn persistent_results(dag: &Dag, graph: &ExpressionGraph) -> Vec<(usize, Vec<f64>)> {
    (0..dag.nodes.len())
        .filter_map(|i| {
            let tag = dag.tag(dag.placeholders + i);
            let info = graph.field_info(&tag)?;
            if !info.persistent {
                return None;
            }
            let values = graph
                .with_field::<CellCentre, _>(&tag, |f| {
                    let layout = f.layout();
                    let values = f.values().unwrap();
                    layout
                        .interior()
                        .into_iter()
                        .map(|i| values[layout.linear_index(i)])
                        .collect()
                })
                .unwrap();
            Some((i, values))
        })
        .collect()
}

/// Checks the persistent results of `graph` against the reference.
fn check_results(
    dag: &Dag,
    graph: &ExpressionGraph,
    run: usize,
    what: &str,
) -> Result<(), TestCaseError> {
    let expected = reference(dag, run);
    let layout = FieldLayout::new(&patch(), LocationKind::CellCentre);
    let results = persistent_results(dag, graph);
    // Every root is among them.
    let have: BTreeSet<Tag> = results
        .iter()
        .map(|(i, _)| dag.tag(dag.placeholders + i))
        .collect();
    for root in dag.roots() {
        prop_assert!(have.contains(&root), "{what}: root {root} missing");
    }
    for (node, values) in results {
        let (reference, magnitude) = &expected[dag.placeholders + node];
        for (index, actual) in layout.interior().into_iter().zip(values) {
            let at = layout.linear_index(index);
            let tolerance = TOLERANCE * magnitude[at];
            prop_assert!(
                (actual - reference[at]).abs() <= tolerance,
                "{what}: n{node} at {index:?}: {actual} vs {} (tolerance {tolerance})",
                reference[at]
            );
        }
    }
    Ok(())
}

/// The trace of the last execution as (node name, start, end), from the
/// Chrome trace (names) and `last_trace` (times), which list the same events.
fn named_trace(graph: &ExpressionGraph) -> Vec<(String, std::time::Duration, std::time::Duration)> {
    let json = graph.chrome_trace();
    let names = json
        .split("{\"name\":\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_string());
    names
        .zip(graph.last_trace())
        .map(|(name, e)| (name, e.start, e.end))
        .collect()
}

/// Checks that every node of the last execution of `graph` started after
/// every node it depends on (directly or through fused nodes) had ended.
fn check_order(dag: &Dag, graph: &ExpressionGraph, what: &str) -> Result<(), TestCaseError> {
    let trace = named_trace(graph);
    prop_assert_eq!(
        trace.len(),
        graph.node_count(),
        "{}: one event per node",
        what
    );
    let by_name: HashMap<&str, (std::time::Duration, std::time::Duration)> = trace
        .iter()
        .map(|(n, s, e)| (n.as_str(), (*s, *e)))
        .collect();
    prop_assert_eq!(by_name.len(), trace.len(), "{}: each node once", what);
    let ancestors = dag.ancestors();
    for (name, start, end) in &trace {
        prop_assert!(start <= end, "{}: {} ends before it starts", what, name);
        let node: usize = name[1..].parse().expect("node names are n<index>");
        for parent in &ancestors[node] {
            if let Some((_, parent_end)) = by_name.get(format!("n{parent}").as_str()) {
                prop_assert!(
                    start >= parent_end,
                    "{}: {} started at {:?}, before its dependency n{} ended at {:?}",
                    what,
                    name,
                    start,
                    parent,
                    parent_end
                );
            }
        }
    }
    Ok(())
}

/// Checks that after an execution only persistent fields hold pool memory.
fn check_pool(graph: &ExpressionGraph, what: &str) -> Result<(), TestCaseError> {
    let persistent: Vec<_> = graph.fields().iter().filter(|f| f.persistent).collect();
    let statistics = graph.pool().statistics();
    prop_assert_eq!(
        statistics.bytes_active,
        persistent
            .iter()
            .map(|f| size_class(f.bytes))
            .sum::<usize>(),
        "{}: bytes still taken from the pool",
        what
    );
    prop_assert_eq!(statistics.blocks_active, persistent.len(), "{}", what);
    prop_assert_eq!(
        graph.pool().outstanding().len(),
        persistent.len(),
        "{}",
        what
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Order, results, memory and the plan's peak, in every mode, with and
    /// without fusion; results bitwise equal across modes.
    #[test]
    fn random_dags_execute_correctly(dag in dag()) {
        for fusion in [false, true] {
            let graph = build(&dag, fusion, None).unwrap();
            let plan = graph.memory_plan().clone();
            prop_assert!(plan.peak_with_reuse <= plan.peak_without_reuse, "{:?}", plan);
            prop_assert!(plan.minimum_budget <= plan.peak_with_reuse, "{:?}", plan);
            if fusion {
                let unfused = build(&dag, false, None).unwrap();
                prop_assert_eq!(
                    graph.node_count() + graph.fusions(),
                    unfused.node_count()
                );
            }
            let mut first_results: Option<Vec<(usize, Vec<f64>)>> = None;
            for (run, mode) in MODES.into_iter().enumerate() {
                let what = format!("fusion {fusion}, {mode:?}");
                fill_placeholders(&dag, &graph, run);
                let report = graph.execute(mode).unwrap();
                prop_assert_eq!(report.nodes_run, graph.node_count(), "{}", &what);
                check_order(&dag, &graph, &what)?;
                check_results(&dag, &graph, run, &what)?;
                check_pool(&graph, &what)?;
                prop_assert!(report.peak_scratch_bytes <= plan.peak_without_reuse, "{}", &what);
                if mode == ExecutionMode::Serial {
                    prop_assert_eq!(report.peak_scratch_bytes, plan.peak_with_reuse, "{}", &what);
                }

                // The same inputs again give the same bits in every mode.
                fill_placeholders(&dag, &graph, 0);
                graph.execute(mode).unwrap();
                check_pool(&graph, &what)?;
                let results = persistent_results(&dag, &graph);
                match &first_results {
                    None => first_results = Some(results),
                    Some(first) => {
                        prop_assert_eq!(first.len(), results.len());
                        for ((node, a), (_, b)) in first.iter().zip(&results) {
                            for (x, y) in a.iter().zip(b) {
                                prop_assert_eq!(x.to_bits(), y.to_bits(), "{}: n{}", &what, node);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A budget equal to the planned peak always completes within it; a
    /// budget below it (or below the largest single node) is refused at
    /// build, never found short at execute.
    #[test]
    fn memory_budgets_are_honoured_or_refused(dag in dag()) {
        for fusion in [false, true] {
            let plan = build(&dag, fusion, None).unwrap().memory_plan().clone();
            let budget = plan.peak_with_reuse;
            let graph = build(&dag, fusion, Some(budget)).unwrap();
            prop_assert_eq!(graph.memory_plan(), &plan);
            for (run, mode) in [ExecutionMode::Threaded(2), ExecutionMode::Threaded(3)]
                .into_iter()
                .enumerate()
            {
                let what = format!("fusion {fusion}, {mode:?}, budget {budget}");
                fill_placeholders(&dag, &graph, run);
                let report = graph.execute(mode).unwrap();
                prop_assert_eq!(report.nodes_run, graph.node_count(), "{}", &what);
                prop_assert!(report.peak_scratch_bytes <= budget, "{}: {:?}", &what, report);
                check_order(&dag, &graph, &what)?;
                check_results(&dag, &graph, run, &what)?;
                check_pool(&graph, &what)?;
            }

            let needed_budget = plan.minimum_budget.max(plan.peak_with_reuse);
            if needed_budget > 0 {
                let too_small = needed_budget - 1;
                match build(&dag, fusion, Some(too_small)) {
                    Err(error @ GraphError::BudgetTooSmall { .. }) => {
                        let message = error.to_string();
                        let GraphError::BudgetTooSmall { budget, needed, expression } = error else {
                            unreachable!()
                        };
                        prop_assert_eq!(budget, too_small);
                        prop_assert_eq!(needed, needed_budget);
                        if plan.minimum_budget >= plan.peak_with_reuse {
                            prop_assert_eq!(&expression, &plan.minimum_budget_expression);
                        }
                        prop_assert!(message.contains(&needed.to_string()), "{}", message);
                        prop_assert!(message.contains(&expression), "{}", message);
                    }
                    Err(other) => prop_assert!(false, "expected BudgetTooSmall, got {other:?}"),
                    Ok(_) => prop_assert!(false, "a budget of {too_small} bytes was accepted"),
                }
            } else {
                prop_assert_eq!(plan.scratch_fields, 0, "{:?}", plan);
            }
        }
    }
}
