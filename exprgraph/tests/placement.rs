//! Placement, copies between devices and the stream protocol
//! (`watershed_exprgraph::placement`), all decided without a GPU.
//!
//! The protocol is checked by simulating CUDA's ordering rules, written
//! here from the CUDA programming guide rather than from the planner: work
//! on one stream runs in issue order; `cuStreamWaitEvent` orders a stream's
//! later work after the event's last record (and waiting on an event not
//! yet recorded orders nothing); the host only waits where it synchronises
//! on an event or a stream. Every dependency of the test's own DAG must
//! then be ordered, and every field a node reads on another device must be
//! copied after its writer and before the reader.

use proptest::prelude::*;
use std::collections::HashMap;
use watershed_exprgraph::placement::{Step, StreamId};
use watershed_exprgraph::{
    CostModel, ExecutionMode, ExpressionGraph, Factory, GraphError, GraphOptions,
    LanguageExpression, MeasuredCost, NativeExpression, PlacementPolicy, StreamMode, Tag, Target,
};
use watershed_fields::{CellCentre, Device, Grid, LocationKind, Patch};

fn patch() -> Patch {
    Grid::new([6, 5, 4], [1.0; 3], [0.0; 3])
        .expect("a valid grid")
        .whole_domain(1)
}

const PLACEHOLDERS: usize = 3;

/// A node of a test DAG: it computes the tag of its name from `reads`.
#[derive(Debug, Clone)]
struct Node {
    name: String,
    reads: Vec<String>,
    native: bool,
}

fn node(name: &str, reads: &[&str], native: bool) -> Node {
    Node {
        name: name.into(),
        reads: reads.iter().map(|r| r.to_string()).collect(),
        native,
    }
}

fn factory(nodes: &[Node]) -> Factory {
    let mut factory = Factory::new();
    for k in 0..PLACEHOLDERS {
        factory
            .placeholder(Tag::none(&format!("p{k}")), LocationKind::CellCentre)
            .expect("placeholder");
    }
    for node in nodes {
        let reads: Vec<Tag> = node.reads.iter().map(|r| Tag::none(r)).collect();
        let target = Tag::none(&node.name);
        if node.native {
            factory
                .register(NativeExpression::new(
                    &node.name,
                    vec![(target, LocationKind::CellCentre)],
                    reads,
                    |_| Ok(()),
                ))
                .expect("register");
        } else {
            factory
                .register(LanguageExpression::new::<CellCentre>(target, move |s| {
                    let mut sum = s.field::<CellCentre>(&reads[0]) + 1.0;
                    for read in &reads[1..] {
                        sum = sum + s.field::<CellCentre>(read);
                    }
                    sum
                }))
                .expect("register");
        }
    }
    factory
}

/// Tags no node reads.
fn roots(nodes: &[Node]) -> Vec<Tag> {
    nodes
        .iter()
        .filter(|n| !nodes.iter().any(|m| m.reads.contains(&n.name)))
        .map(|n| Tag::none(&n.name))
        .collect()
}

/// Builds without fusion or CSE, so that the graph's nodes are the test's.
fn build(
    nodes: &[Node],
    placement: PlacementPolicy,
    streams: StreamMode,
) -> Result<ExpressionGraph, GraphError> {
    let options = GraphOptions {
        no_fusion: true,
        no_common_subexpressions: true,
        placement,
        streams,
        ..Default::default()
    };
    ExpressionGraph::build(&factory(nodes), &roots(nodes), &patch(), &options)
}

fn device(target: Target) -> Device {
    match target {
        Target::Cpu => Device::Cpu,
        Target::Gpu(k) => Device::Gpu(k),
    }
}

/// A happens-before graph of the operations one execution issues.
#[derive(Default)]
struct Simulation {
    preds: Vec<Vec<usize>>,
    last_host: Option<usize>,
    last_on: HashMap<StreamId, usize>,
    waits: HashMap<StreamId, Vec<usize>>,
    recorded: HashMap<usize, usize>,
    enqueued: Vec<usize>,
    /// (transfer index, op).
    copies: Vec<(usize, usize)>,
}

impl Simulation {
    fn op(&mut self, preds: Vec<usize>) -> usize {
        self.preds.push(preds);
        self.preds.len() - 1
    }

    /// Something the host does and then goes on.
    fn host(&mut self, mut extra: Vec<usize>) -> usize {
        extra.extend(self.last_host);
        let id = self.op(extra);
        self.last_host = Some(id);
        id
    }

    /// Work enqueued on `stream`: after its issue point, the stream's
    /// previous work and the events the stream was told to wait for.
    fn enqueue(&mut self, stream: StreamId) -> usize {
        let mut preds: Vec<usize> = self.last_host.into_iter().collect();
        preds.extend(self.last_on.get(&stream).copied());
        preds.extend(self.waits.remove(&stream).unwrap_or_default());
        let id = self.op(preds);
        self.last_on.insert(stream, id);
        self.enqueued.push(id);
        id
    }

    fn step(&mut self, step: Step) -> Result<(), String> {
        match step {
            Step::Copy { transfer, stream } => {
                let id = self.enqueue(stream);
                self.copies.push((transfer, id));
            }
            Step::Record { event, stream } => {
                let id = self.enqueue(stream);
                self.recorded.insert(event, id);
            }
            Step::Wait { stream, event } => {
                let record = *self.recorded.get(&event).ok_or(format!(
                    "{stream} waits on event {event} before it is recorded"
                ))?;
                self.waits.entry(stream).or_default().push(record);
            }
            Step::HostWait { event } => {
                let record = *self.recorded.get(&event).ok_or(format!(
                    "the host waits on event {event} before it is recorded"
                ))?;
                self.host(vec![record]);
            }
            Step::Synchronize { stream } => {
                let last: Vec<usize> = self.last_on.get(&stream).copied().into_iter().collect();
                self.host(last);
            }
        }
        Ok(())
    }

    /// Whether `a` happens before `b` (or is `b`).
    fn before(&self, a: usize, b: usize) -> bool {
        let mut seen = vec![false; self.preds.len()];
        let mut stack = vec![b];
        while let Some(x) = stack.pop() {
            if x == a {
                return true;
            }
            if !std::mem::replace(&mut seen[x], true) {
                stack.extend(&self.preds[x]);
            }
        }
        false
    }
}

/// Topological orders of the test DAG: the graph's plan order, and Kahn's
/// algorithm taking the most recently readied node first.
fn orders(graph: &ExpressionGraph, nodes: &[Node]) -> Vec<Vec<String>> {
    let mut pending: HashMap<&str, usize> = nodes
        .iter()
        .map(|n| {
            let deps = n
                .reads
                .iter()
                .filter(|r| nodes.iter().any(|m| &m.name == *r))
                .count();
            (n.name.as_str(), deps)
        })
        .collect();
    let mut ready: Vec<&str> = nodes
        .iter()
        .filter(|n| pending[n.name.as_str()] == 0)
        .map(|n| n.name.as_str())
        .collect();
    let mut lifo = Vec::new();
    while let Some(n) = ready.pop() {
        lifo.push(n.to_string());
        for m in nodes.iter().filter(|m| m.reads.iter().any(|r| r == n)) {
            let left = pending.get_mut(m.name.as_str()).expect("a node");
            *left -= 1;
            if *left == 0 {
                ready.push(&m.name);
            }
        }
    }
    vec![graph.execution_order(), lifo]
}

/// Simulates one execution in `order` and checks every dependency and
/// every cross-device read.
fn check_protocol(graph: &ExpressionGraph, nodes: &[Node], order: &[String]) -> Result<(), String> {
    let plan = graph.device_plan();
    let streams = plan.streams();
    let steps_of = |name: &str| {
        streams
            .nodes
            .iter()
            .find(|s| s.node == name)
            .ok_or(format!("no steps for {name}"))
    };
    let mut sim = Simulation::default();
    for &step in &streams.prologue {
        sim.step(step)?;
    }
    let mut work: HashMap<String, usize> = HashMap::new();
    for name in order {
        let steps = steps_of(name)?;
        for &step in &steps.before {
            if steps.stream.is_some() && matches!(step, Step::HostWait { .. }) {
                return Err(format!("the host blocks before GPU node {name}"));
            }
            sim.step(step)?;
        }
        let id = match (steps.target, steps.stream) {
            (Target::Cpu, None) => sim.host(Vec::new()),
            (Target::Gpu(k), Some(stream)) if stream.device == k => sim.enqueue(stream),
            other => return Err(format!("{name}: target and stream disagree: {other:?}")),
        };
        work.insert(name.clone(), id);
        for &step in &steps.after {
            sim.step(step)?;
        }
    }
    for &step in &streams.epilogue {
        sim.step(step)?;
    }
    let end = sim.host(Vec::new());
    for &op in &sim.enqueued {
        if !sim.before(op, end) {
            return Err(format!(
                "enqueued work {op} may still run after the execution returns"
            ));
        }
    }
    let target = |name: &str| graph.target_of(name).ok_or(format!("no node {name}"));
    for reader in nodes {
        let here = device(target(&reader.name)?);
        for read in &reader.reads {
            let writer = nodes.iter().find(|n| &n.name == read);
            if let Some(writer) = writer
                && !sim.before(work[&writer.name], work[&reader.name])
            {
                return Err(format!(
                    "{} may run before {} finishes",
                    reader.name, writer.name
                ));
            }
            let from = match writer {
                Some(w) => device(target(&w.name)?),
                None => Device::Cpu,
            };
            if from == here {
                continue;
            }
            let copied = sim.copies.iter().any(|&(t, op)| {
                let transfer = &plan.transfers()[t];
                transfer.field == Tag::none(read)
                    && transfer.to == here
                    && transfer.from == from
                    && writer.is_none_or(|w| sim.before(work[&w.name], op))
                    && sim.before(op, work[&reader.name])
            });
            if !copied {
                return Err(format!(
                    "{} reads {read} on {here}, written on {from}, without an ordered copy",
                    reader.name
                ));
            }
        }
    }
    Ok(())
}

/// Exactly one copy per field and destination device that some reader
/// needs, and none anywhere else.
fn check_transfers(graph: &ExpressionGraph, nodes: &[Node]) -> Result<(), String> {
    let mut needed: Vec<(String, Device, Device)> = Vec::new();
    for reader in nodes {
        let here = device(graph.target_of(&reader.name).ok_or("node")?);
        for read in &reader.reads {
            let from = match nodes.iter().find(|n| &n.name == read) {
                Some(w) => device(graph.target_of(&w.name).ok_or("node")?),
                None => Device::Cpu,
            };
            if from != here && !needed.contains(&(read.clone(), from, here)) {
                needed.push((read.clone(), from, here));
            }
        }
    }
    let mut planned: Vec<(String, Device, Device)> = graph
        .device_plan()
        .transfers()
        .iter()
        .map(|t| (t.field.name.to_string(), t.from, t.to))
        .collect();
    needed.sort();
    planned.sort();
    if needed == planned {
        Ok(())
    } else {
        Err(format!("needed {needed:?}, planned {planned:?}"))
    }
}

#[test]
fn native_nodes_are_cpu_only_and_language_nodes_can_run_on_a_gpu() {
    let nodes = [node("a", &["p0"], false), node("b", &["a"], true)];
    let graph = build(&nodes, PlacementPolicy::Cpu, StreamMode::default()).unwrap();
    assert_eq!(graph.gpu_capability("a", 0).unwrap().unwrap(), Ok(()));
    let why = graph.gpu_capability("b", 0).unwrap().unwrap().unwrap_err();
    assert!(why.contains("native Rust code"), "{why}");
    assert!(graph.gpu_capability("nothing", 0).is_none());
    // The default policy places everything on the CPU and plans nothing.
    assert_eq!(graph.device_plan().gpu_nodes(), 0);
    assert!(graph.device_plan().transfers().is_empty());
    assert_eq!(graph.device_plan().streams().events, 0);
}

#[test]
fn gpu_placement_refuses_a_graph_with_a_native_node_and_names_it() {
    let nodes = [node("a", &["p0"], false), node("tally", &["a"], true)];
    let error = build(&nodes, PlacementPolicy::Gpu(1), StreamMode::default()).unwrap_err();
    let GraphError::NotPlaceable {
        node,
        device,
        reason,
    } = &error
    else {
        panic!("expected NotPlaceable, got {error:?}");
    };
    assert_eq!(node, "tally");
    assert_eq!(*device, Device::Gpu(1));
    assert!(reason.contains("Heterogeneous(1)"), "{reason}");
    assert!(error.to_string().contains("tally"), "{error}");
}

#[test]
fn an_all_gpu_graph_copies_only_the_placeholders_in() {
    // Two equations: rhs_k from p_k and p2, then next_k from rhs_k and p_k.
    let nodes = [
        node("rhs0", &["p0", "p2"], false),
        node("rhs1", &["p1", "p2"], false),
        node("next0", &["rhs0", "p0"], false),
        node("next1", &["rhs1", "p1"], false),
    ];
    let graph = build(&nodes, PlacementPolicy::Gpu(0), StreamMode::default()).unwrap();
    let plan = graph.device_plan();
    assert_eq!(plan.gpu_nodes(), 4);
    assert!(!plan.is_heterogeneous());
    let bytes = graph.field_info(&Tag::none("p0")).unwrap().bytes;
    let mut copied: Vec<String> = plan
        .transfers()
        .iter()
        .map(|t| {
            assert_eq!(
                (t.from, t.to, t.after.as_deref()),
                (Device::Cpu, Device::Gpu(0), None)
            );
            assert_eq!(t.bytes, bytes);
            t.field.name.to_string()
        })
        .collect();
    copied.sort();
    assert_eq!(copied, ["p0", "p1", "p2"]);
    assert_eq!(plan.transfer_bytes(), 3 * bytes);
    // p2 is read by both rhs nodes: one copy, read by both.
    let p2 = plan
        .transfers()
        .iter()
        .find(|t| t.field.name.as_ref() == "p2")
        .unwrap();
    assert_eq!(p2.before.len(), 2);
    // The two equations run on two streams, each chain on one stream: no
    // event between a rhs and its update, and the host never waits inside.
    let streams = plan.streams();
    let stream_of = |n: &str| {
        streams
            .nodes
            .iter()
            .find(|s| s.node == n)
            .unwrap()
            .stream
            .unwrap()
    };
    assert_eq!(stream_of("rhs0"), stream_of("next0"));
    assert_eq!(stream_of("rhs1"), stream_of("next1"));
    assert_ne!(stream_of("rhs0"), stream_of("rhs1"));
    assert_eq!(streams.host_waits(), 0);
    for order in orders(&graph, &nodes) {
        check_protocol(&graph, &nodes, &order).unwrap();
    }
}

#[test]
fn the_thesis_rule_keeps_a_language_node_between_cpu_only_neighbours_on_the_cpu() {
    // source (native) -> lone (language) -> sink (native): no GPU.
    let nodes = [
        node("source", &["p0"], true),
        node("lone", &["source"], false),
        node("sink", &["lone"], true),
    ];
    let graph = build(
        &nodes,
        PlacementPolicy::Heterogeneous(0),
        StreamMode::default(),
    )
    .unwrap();
    assert_eq!(graph.target_of("lone"), Some(Target::Cpu));
    assert!(graph.device_plan().transfers().is_empty());

    // source -> first -> second -> sink: the chain goes to the GPU, one
    // copy in after `source`, one copy out before `sink`.
    let nodes = [
        node("source", &["p0"], true),
        node("first", &["source"], false),
        node("second", &["first"], false),
        node("sink", &["second"], true),
    ];
    let graph = build(
        &nodes,
        PlacementPolicy::Heterogeneous(0),
        StreamMode::default(),
    )
    .unwrap();
    for (name, target) in [
        ("source", Target::Cpu),
        ("first", Target::Gpu(0)),
        ("second", Target::Gpu(0)),
        ("sink", Target::Cpu),
    ] {
        assert_eq!(graph.target_of(name), Some(target), "{name}");
    }
    let plan = graph.device_plan();
    assert!(plan.is_heterogeneous());
    let copies: Vec<String> = plan.transfers().iter().map(|t| t.to_string()).collect();
    assert_eq!(copies.len(), 2, "{copies:?}");
    assert!(
        copies[0].starts_with("source (STATE_NONE)")
            && copies[0].contains("CPU -> GPU 0 after source"),
        "{copies:?}"
    );
    assert!(
        copies[1].starts_with("second (STATE_NONE)")
            && copies[1].contains("GPU 0 -> CPU after second"),
        "{copies:?}"
    );
    // The host blocks once, before `sink`; the summary says so.
    assert_eq!(plan.streams().host_waits(), 1);
    assert!(
        plan.summary().contains("2 copy(ies) per execution"),
        "{}",
        plan.summary()
    );
    check_transfers(&graph, &nodes).unwrap();
    for order in orders(&graph, &nodes) {
        check_protocol(&graph, &nodes, &order).unwrap();
    }
}

#[test]
fn synchronous_mode_uses_one_stream_and_no_event_between_gpu_nodes() {
    let nodes = [
        node("a", &["p0"], false),
        node("b", &["p1"], false),
        node("c", &["a", "b"], false),
        node("d", &["c"], false),
    ];
    let graph = build(&nodes, PlacementPolicy::Gpu(0), StreamMode::Synchronous).unwrap();
    let streams = graph.device_plan().streams();
    assert_eq!(
        streams.streams_used(),
        [StreamId {
            device: 0,
            index: 0
        }]
    );
    assert_eq!(streams.events, 0);
    for order in orders(&graph, &nodes) {
        check_protocol(&graph, &nodes, &order).unwrap();
    }
    // Asynchronously, `a` and `b` get streams of their own and `c` waits
    // for the one it does not continue.
    let graph = build(&nodes, PlacementPolicy::Gpu(0), StreamMode::default()).unwrap();
    let streams = graph.device_plan().streams();
    assert_eq!(streams.streams_used().len(), 2);
    assert_eq!(streams.events, 1);
    let c = streams.nodes.iter().find(|s| s.node == "c").unwrap();
    assert!(matches!(c.before.as_slice(), [Step::Wait { .. }]), "{c:?}");
    for order in orders(&graph, &nodes) {
        check_protocol(&graph, &nodes, &order).unwrap();
    }
}

#[test]
fn the_stream_pool_is_bounded() {
    let nodes: Vec<Node> = (0..6)
        .map(|k| {
            node(
                &format!("n{k}"),
                &[&format!("p{}", k % PLACEHOLDERS)],
                false,
            )
        })
        .collect();
    let mode = StreamMode::Asynchronous {
        streams_per_device: 2,
    };
    let graph = build(&nodes, PlacementPolicy::Gpu(0), mode).unwrap();
    assert_eq!(graph.device_plan().streams().streams_used().len(), 2);
    for order in orders(&graph, &nodes) {
        check_protocol(&graph, &nodes, &order).unwrap();
    }
    let error = build(
        &nodes,
        PlacementPolicy::Gpu(0),
        StreamMode::Asynchronous {
            streams_per_device: 0,
        },
    )
    .unwrap_err();
    let GraphError::PlacementParameter { parameter, .. } = &error else {
        panic!("expected PlacementParameter, got {error:?}");
    };
    assert_eq!(parameter, "streams_per_device");
}

#[test]
fn a_cpu_modifier_between_gpu_nodes_moves_the_field_out_and_back() {
    // a (GPU) is modified on the CPU by `fix`, then read by b (GPU).
    let mut factory = factory(&[node("a", &["p0"], false), node("b", &["a"], false)]);
    factory
        .attach_modifier(
            Tag::none("a"),
            NativeExpression::new(
                "fix",
                vec![(Tag::none("a"), LocationKind::CellCentre)],
                Vec::new(),
                |_| Ok(()),
            ),
        )
        .unwrap();
    let heavy = |node: &str| MeasuredCost {
        node: node.into(),
        cpu: Some(1.0),
        gpu: Some(1e-3),
    };
    let options = GraphOptions {
        no_fusion: true,
        no_common_subexpressions: true,
        placement: PlacementPolicy::CostModel {
            device: 0,
            model: CostModel {
                measured: vec![heavy("a"), heavy("b")],
                ..CostModel::default()
            },
        },
        ..Default::default()
    };
    let graph = ExpressionGraph::build(&factory, &[Tag::none("b")], &patch(), &options).unwrap();
    assert_eq!(graph.target_of("a"), Some(Target::Gpu(0)));
    assert_eq!(graph.target_of("fix"), Some(Target::Cpu));
    assert_eq!(graph.target_of("b"), Some(Target::Gpu(0)));
    let copies: Vec<(Device, Device, Option<&str>, Vec<&str>)> = graph
        .device_plan()
        .transfers()
        .iter()
        .filter(|t| t.field.name.as_ref() == "a")
        .map(|t| {
            (
                t.from,
                t.to,
                t.after.as_deref(),
                t.before.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        copies,
        [
            (Device::Gpu(0), Device::Cpu, Some("a"), vec!["fix"]),
            (Device::Cpu, Device::Gpu(0), Some("fix"), vec!["b"]),
        ]
    );
    let dot = graph.to_dot();
    assert!(dot.contains("style=dashed, color=red"), "{dot}");
    assert!(dot.contains("GPU 0 -> CPU"), "{dot}");
    assert!(dot.contains("fillcolor=palegreen"), "{dot}");
}

#[test]
fn the_cost_model_weighs_node_costs_against_copies() {
    let nodes = [
        node("work", &["p0"], false),
        node("report", &["work"], true),
    ];
    let measured = vec![MeasuredCost {
        node: "work".into(),
        cpu: Some(1e-2),
        gpu: Some(1e-4),
    }];
    // A fast link: the GPU saves more than the two copies cost.
    let fast = CostModel {
        measured: measured.clone(),
        ..CostModel::default()
    };
    let policy = PlacementPolicy::CostModel {
        device: 0,
        model: fast.clone(),
    };
    let graph = build(&nodes, policy, StreamMode::default()).unwrap();
    assert_eq!(graph.target_of("work"), Some(Target::Gpu(0)));
    let predicted = graph.device_plan().predicted().unwrap();
    let bytes = graph.field_info(&Tag::none("p0")).unwrap().bytes;
    let work = predicted.nodes.iter().find(|n| n.node == "work").unwrap();
    // Starts when p0 has arrived, runs its measured time.
    assert!(
        (work.start - fast.copy_time(bytes)).abs() < 1e-15,
        "{work:?}"
    );
    assert!((work.finish - work.start - 1e-4).abs() < 1e-15, "{work:?}");
    let report = predicted.nodes.iter().find(|n| n.node == "report").unwrap();
    assert!(
        report.start >= work.finish + fast.copy_time(bytes) - 1e-15,
        "{report:?}"
    );
    assert!(predicted.makespan >= report.finish);

    // A slow link (1 kB/s): the copies cost more than the node; it stays.
    let slow = PlacementPolicy::CostModel {
        device: 0,
        model: CostModel {
            link_bandwidth: 1e3,
            measured,
            ..CostModel::default()
        },
    };
    let graph = build(&nodes, slow, StreamMode::default()).unwrap();
    assert_eq!(graph.target_of("work"), Some(Target::Cpu));
    assert!(graph.device_plan().transfers().is_empty());
}

#[test]
fn unusable_cost_model_parameters_are_refused_by_name() {
    let nodes = [node("a", &["p0"], false)];
    for (model, name) in [
        (
            CostModel {
                link_bandwidth: 0.0,
                ..CostModel::default()
            },
            "link_bandwidth",
        ),
        (
            CostModel {
                launch_latency: f64::NAN,
                ..CostModel::default()
            },
            "launch_latency",
        ),
        (
            CostModel {
                measured: vec![MeasuredCost {
                    node: "a".into(),
                    cpu: Some(-1.0),
                    gpu: None,
                }],
                ..CostModel::default()
            },
            "measured[a].cpu",
        ),
    ] {
        let error = build(
            &nodes,
            PlacementPolicy::CostModel { device: 0, model },
            StreamMode::default(),
        )
        .unwrap_err();
        let GraphError::PlacementParameter { parameter, .. } = &error else {
            panic!("expected PlacementParameter, got {error:?}");
        };
        assert_eq!(parameter, name);
    }
    assert_eq!(PlacementPolicy::round_robin(5, 2).unwrap(), 1);
    assert!(matches!(
        PlacementPolicy::round_robin(5, 0),
        Err(GraphError::PlacementParameter { .. })
    ));
}

#[test]
fn executing_nodes_placed_on_an_unusable_gpu_names_the_node_and_the_device() {
    let nodes = [
        node("first", &["p0"], false),
        node("second", &["first"], false),
    ];
    // One past the last GPU: unusable on every machine (GPU 0 where there
    // is none).
    let absent = watershed_fields::gpu::gpu_count();
    let graph = build(&nodes, PlacementPolicy::Gpu(absent), StreamMode::default()).unwrap();
    graph
        .with_field_mut::<CellCentre, _>(&Tag::none("p0"), |f| f.fill(1.0))
        .unwrap()
        .unwrap();
    let error = graph.execute(ExecutionMode::Serial).unwrap_err();
    let GraphError::DeviceUnavailable {
        node,
        device,
        reason,
    } = &error
    else {
        panic!("expected DeviceUnavailable, got {error:?}");
    };
    assert_eq!(node, "first");
    assert_eq!(*device, Device::Gpu(absent));
    assert!(reason.contains("PlacementPolicy::Cpu"), "{reason}");
    // Placed back on the CPU, the same graph runs.
    let mut graph = graph;
    graph
        .place(PlacementPolicy::Cpu, StreamMode::default())
        .unwrap();
    graph.execute(ExecutionMode::Serial).unwrap();
    let costs = graph.measured_costs();
    assert_eq!(costs.len(), 2);
    assert!(costs.iter().all(|c| c.cpu.is_some() && c.gpu.is_none()));
}

/// Random DAGs: nodes read 1 to 3 earlier tags or placeholders; some are
/// native.
fn dag() -> impl Strategy<Value = Vec<Node>> {
    (2usize..10)
        .prop_flat_map(|n| {
            prop::collection::vec(
                (
                    prop::collection::vec(any::<prop::sample::Index>(), 1..=3),
                    prop::bool::weighted(0.3),
                ),
                n,
            )
        })
        .prop_map(|specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (picks, native))| {
                    let mut reads: Vec<String> = picks
                        .iter()
                        .map(|pick| match pick.index(PLACEHOLDERS + i) {
                            k if k < PLACEHOLDERS => format!("p{k}"),
                            k => format!("n{}", k - PLACEHOLDERS),
                        })
                        .collect();
                    reads.sort();
                    reads.dedup();
                    Node {
                        name: format!("n{i}"),
                        reads,
                        native,
                    }
                })
                .collect()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Under every policy and stream mode: the copies are exactly those
    /// the placement needs, and the protocol orders every dependency and
    /// every copy (checked in two execution orders).
    #[test]
    fn random_placements_copy_what_crosses_and_order_every_dependency(
        nodes in dag(),
        costs in prop::collection::vec((1e-6f64..1e-2, 1e-7f64..1e-2), 10),
        streams in 1usize..4,
    ) {
        let measured: Vec<MeasuredCost> = nodes
            .iter()
            .zip(&costs)
            .map(|(n, &(cpu, gpu))| MeasuredCost { node: n.name.clone(), cpu: Some(cpu), gpu: Some(gpu) })
            .collect();
        let mut policies = vec![
            PlacementPolicy::Heterogeneous(0),
            PlacementPolicy::CostModel { device: 0, model: CostModel { measured, ..CostModel::default() } },
        ];
        if nodes.iter().all(|n| !n.native) {
            policies.push(PlacementPolicy::Gpu(0));
        }
        for policy in policies {
            for mode in [StreamMode::Synchronous, StreamMode::Asynchronous { streams_per_device: streams }] {
                let graph = build(&nodes, policy.clone(), mode).unwrap();
                for n in nodes.iter().filter(|n| n.native) {
                    prop_assert_eq!(graph.target_of(&n.name), Some(Target::Cpu));
                }
                prop_assert!(graph.device_plan().streams().streams_used().len() <= streams.max(1),
                    "{:?}", graph.device_plan().streams().streams_used());
                check_transfers(&graph, &nodes).map_err(TestCaseError::fail)?;
                for order in orders(&graph, &nodes) {
                    check_protocol(&graph, &nodes, &order).map_err(TestCaseError::fail)?;
                }
                if let Some(predicted) = graph.device_plan().predicted() {
                    for reader in &nodes {
                        let r = predicted.nodes.iter().find(|p| p.node == reader.name).unwrap();
                        prop_assert!(r.finish <= predicted.makespan);
                        for read in &reader.reads {
                            if let Some(w) = predicted.nodes.iter().find(|p| &p.node == read) {
                                prop_assert!(r.start >= w.finish, "{} starts before {} ends", reader.name, read);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn graphs_placed_on_a_gpu_ask_for_pinned_host_memory() {
    let nodes = [node("a", &["p0"], false), node("b", &["a", "p1"], false)];
    let cpu = build(&nodes, PlacementPolicy::Cpu, StreamMode::default()).unwrap();
    assert_eq!(cpu.pool().statistics().pinned_fallbacks, 0);
    let gpu = build(&nodes, PlacementPolicy::Gpu(0), StreamMode::default()).unwrap();
    let statistics = gpu.pool().statistics();
    if watershed_fields::gpu::gpu_count() == 0 {
        // No GPU to pin through: every host block of the placeholders
        // fell back to pageable memory, and the pool says so.
        assert!(statistics.pinned_fallbacks >= 2, "{statistics:?}");
    } else {
        assert_eq!(statistics.pinned_fallbacks, 0, "{statistics:?}");
    }
    // Asking for pageable memory explicitly never tries to pin.
    let options = GraphOptions {
        no_fusion: true,
        no_common_subexpressions: true,
        placement: PlacementPolicy::Gpu(0),
        host_memory: Some(watershed_fields::HostMemory::Pageable),
        ..Default::default()
    };
    let pageable =
        ExpressionGraph::build(&factory(&nodes), &roots(&nodes), &patch(), &options).unwrap();
    assert_eq!(pageable.pool().statistics().pinned_fallbacks, 0);
}
