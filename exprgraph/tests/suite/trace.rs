//! Timing and tracing: the per-expression timing table across executions,
//! the last execution's trace events, and the Chrome trace JSON (checked by
//! hand, without a JSON library).

use std::collections::BTreeMap;
use std::time::Duration;
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, NativeExpression,
    Tag,
};
use watershed_fields::{CellCentre, Grid, LocationKind, XFace};
use watershed_operators::{divergence, gradient, interpolate_to_face};

/// A small graph with four nodes, one with a name that needs escaping in
/// JSON: phi -> flux (language) -> rhs (language) <- `say "hi"\ now` (native).
fn graph() -> ExpressionGraph {
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
            interpolate_to_face::<XFace>(s.field(&p)) * gradient::<XFace>(s.field(&p))
        }))
        .unwrap();
    let (p, out) = (phi.clone(), src.clone());
    factory
        .register(NativeExpression::new(
            "say \"hi\"\\ now",
            vec![(src.clone(), LocationKind::CellCentre)],
            vec![phi.clone()],
            move |context| {
                let values = context.input::<CellCentre>(&p)?.values()?.to_vec();
                for (o, v) in context
                    .output::<CellCentre>(&out)?
                    .values_mut()?
                    .iter_mut()
                    .zip(values)
                {
                    *o = v.sin();
                }
                Ok(())
            },
        ))
        .unwrap();
    let other = Tag::none("other");
    let p = phi.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            other.clone(),
            move |s| s.field::<CellCentre>(&p) * 3.0,
        ))
        .unwrap();
    let (f, s2) = (flux.clone(), src.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            rhs.clone(),
            move |s| divergence::<XFace>(s.field(&f)) + s.field::<CellCentre>(&s2),
        ))
        .unwrap();
    let patch = Grid::new([6, 5, 4], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let options = GraphOptions {
        no_fusion: true,
        ..Default::default()
    };
    let graph = ExpressionGraph::build(&factory, &[rhs, other], &patch, &options).unwrap();
    graph
        .with_field_mut::<CellCentre, _>(&phi, |f| {
            let layout = f.layout().clone();
            let values = f.values_mut().unwrap();
            for i in layout.allocated() {
                let [x, y, z] = layout.coordinate(i);
                values[layout.linear_index(i)] = x + y * y - z;
            }
        })
        .unwrap();
    graph
}

/// The node names of the graph, as they appear in traces and tables.
const NAMES: [&str; 4] = ["flux", "say \"hi\"\\ now", "other", "rhs"];

/// The same names as they must be spelled inside JSON strings.
fn json_escaped(name: &str) -> String {
    name.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The value of numeric `key` in one flat JSON object `event`.
fn number(event: &str, key: &str) -> f64 {
    let pattern = format!("\"{key}\":");
    let start = event
        .find(&pattern)
        .unwrap_or_else(|| panic!("{key} in {event}"))
        + pattern.len();
    let digits: String = event[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-' || *c == 'e')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{key} of {event} is not a number"))
}

/// Splits the `traceEvents` array of a Chrome trace into its objects, checking
/// the brackets, braces and quotes balance on the way.
fn events(json: &str) -> Vec<String> {
    let array = json
        .strip_prefix("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[")
        .and_then(|rest| rest.strip_suffix("]}"))
        .unwrap_or_else(|| panic!("unexpected framing: {json}"));
    let mut events = Vec::new();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut current = String::new();
    for c in array.chars() {
        if depth > 0 {
            current.push(c);
        }
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => {
                if depth == 0 {
                    current.push(c);
                }
                depth += 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    events.push(std::mem::take(&mut current));
                }
            }
            ',' if depth == 0 => {}
            other if depth == 0 => panic!("unexpected {other:?} between events: {json}"),
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unbalanced braces: {json}");
    assert!(!in_string, "unterminated string: {json}");
    events
}

#[test]
fn the_timing_table_counts_every_execution() {
    let graph = graph();
    let before = graph.timing_table();
    assert_eq!(before.0.len(), graph.node_count());
    assert!(
        before
            .0
            .iter()
            .all(|t| t.calls == 0 && t.total.is_zero() && t.mean.is_zero())
    );

    for mode in [
        ExecutionMode::Serial,
        ExecutionMode::Threaded(2),
        ExecutionMode::Threaded(3),
    ] {
        graph.execute(mode).unwrap();
    }
    let table = graph.timing_table();
    assert_eq!(table.0.len(), graph.node_count());
    let mut names: Vec<&str> = table.0.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    let mut expected = NAMES.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected);
    for timing in &table.0 {
        assert_eq!(timing.calls, 3, "{}", timing.name);
        assert!(timing.total > Duration::ZERO, "{}", timing.name);
        // mean = total / calls, truncated to whole nanoseconds.
        let product = timing.mean * 3;
        assert!(product <= timing.total, "{timing:?}");
        assert!(
            timing.total - product < Duration::from_nanos(3),
            "{timing:?}"
        );
    }
    // Slowest total first.
    for pair in table.0.windows(2) {
        assert!(pair[0].total >= pair[1].total, "{table}");
    }

    // Printed: a header and one row per expression.
    let printed = table.to_string();
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 1 + graph.node_count(), "{printed}");
    for column in ["expression", "calls", "total ms", "mean us"] {
        assert!(lines[0].contains(column), "{printed}");
    }
    for name in NAMES {
        let row = lines
            .iter()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing from:\n{printed}"));
        assert_eq!(row.split_whitespace().nth_back(2), Some("3"), "{row}");
    }
}

#[test]
fn the_last_trace_has_one_event_per_node() {
    let graph = graph();
    assert!(graph.last_trace().is_empty());
    graph.execute(ExecutionMode::Serial).unwrap();
    let trace = graph.last_trace();
    assert_eq!(trace.len(), graph.node_count());
    let mut nodes: Vec<usize> = trace.iter().map(|e| e.node).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, (0..graph.node_count()).collect::<Vec<_>>());
    // Serial: one thread, one node after the other, in plan order.
    for pair in trace.windows(2) {
        assert!(pair[0].end <= pair[1].start, "{trace:?}");
    }
    assert!(trace.iter().all(|e| e.thread == 0 && e.start <= e.end));
    let names: Vec<String> = events(&graph.chrome_trace())
        .iter()
        .map(|e| {
            e.split_once("\"name\":\"")
                .and_then(|(_, rest)| rest.split_once("\",\"cat\""))
                .map(|(name, _)| name.to_string())
                .unwrap()
        })
        .collect();
    let order: Vec<String> = graph
        .execution_order()
        .iter()
        .map(|n| json_escaped(n))
        .collect();
    assert_eq!(names, order);

    // The next execution replaces the trace.
    graph.execute(ExecutionMode::Threaded(3)).unwrap();
    let again = graph.last_trace();
    assert_eq!(again.len(), graph.node_count());
    assert!(again.iter().all(|e| e.start <= e.end));
}

#[test]
fn the_chrome_trace_is_well_formed() {
    let graph = graph();
    let empty = graph.chrome_trace();
    assert_eq!(empty, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[]}");

    for mode in [ExecutionMode::Serial, ExecutionMode::Threaded(2)] {
        let report = graph.execute(mode).unwrap();
        let json = graph.chrome_trace();
        assert!(json.starts_with("{\"displayTimeUnit\""), "{json}");
        assert_eq!(
            json.matches("\"ph\":\"X\"").count(),
            graph.node_count(),
            "{json}"
        );

        let events = events(&json);
        assert_eq!(events.len(), graph.node_count(), "{json}");
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for event in &events {
            for key in [
                "\"name\":",
                "\"cat\":\"cpu\"",
                "\"ph\":\"X\"",
                "\"pid\":1",
                "\"tid\":",
            ] {
                assert!(event.contains(key), "{key} missing from {event}");
            }
            let (ts, dur, tid) = (
                number(event, "ts"),
                number(event, "dur"),
                number(event, "tid"),
            );
            assert!(ts >= 0.0 && dur >= 0.0, "{event}");
            // Microseconds within the execution.
            assert!(
                ts + dur <= report.elapsed.as_secs_f64() * 1e6 + 1.0,
                "{event}"
            );
            if mode == ExecutionMode::Serial {
                assert_eq!(tid, 0.0, "{event}");
            } else {
                assert!(tid < 2.0, "two threads: {event}");
            }
            for name in NAMES {
                if event.contains(&format!("\"name\":\"{}\"", json_escaped(name))) {
                    *seen.entry(name.to_string()).or_default() += 1;
                }
            }
        }
        // Every node by name, once, the awkward one escaped.
        assert_eq!(seen.len(), NAMES.len(), "{json}");
        assert!(seen.values().all(|&n| n == 1), "{json}");
        assert!(json.contains("say \\\"hi\\\"\\\\ now"), "{json}");
    }
}
