//! The device plan of a graph: which device runs each node, which fields
//! cross devices, and how the GPU work of one execution is ordered
//! (DESIGN.md §2, steps 3 and 6; the thesis' §3.1.4, §3.3.2 and §3.4.3).
//!
//! * [`PlacementPolicy`] decides a [`Target`] per node: all on the CPU
//!   (the default), all on one GPU, the thesis' rule for heterogeneous
//!   graphs, or earliest finish time over a [`CostModel`] ([`cost`]).
//!   A node can run on a GPU only if it is written in the expression
//!   language and the CUDA emitter supports every kernel it runs, or if
//!   it is a native node or iterative solve that says it can
//!   ([`crate::Expression::gpu_support`]; see
//!   [`ExpressionGraph::gpu_capability`]); other native nodes are CPU-only.
//! * [`transfers`] lists the copies one execution needs: one per field and
//!   destination device, and only for fields whose writer and reader sit on
//!   different devices.
//! * [`streams`] turns placement and transfers into the steps of the
//!   stream protocol, as data: a stream per GPU node from a bounded pool,
//!   copies enqueued right after the producer, CUDA events recorded on the
//!   producer's stream and waited on by consumers on other streams, and
//!   host waits only before CPU nodes that read GPU data and at the end.
//!
//! Everything here is decided without a GPU; `design.md` beside this file
//! states the protocol's invariants.

pub mod cost;
pub mod policy;
pub mod streams;
pub mod transfers;

pub use cost::{PredictedNode, PredictedSchedule};
pub use policy::{CostModel, MeasuredCost, PlacementPolicy, StreamMode};
pub use streams::{NodeSteps, Step, StreamId, StreamPlan};
pub use transfers::Transfer;

use crate::error::{GraphError, GraphResult};
use crate::expression::ExpressionKind;
use crate::node::Target;
use crate::plan::GraphPlan;
use std::fmt::Write;
use watershed_fields::Device;
use watershed_operators::codegen::kernel_source;
use watershed_operators::codegen::nvrtc::cuda_reduction_source;
use watershed_operators::lower_cached;
use watershed_operators::vmath::Dialect;

/// A graph's placement and the plan that follows from it.
#[derive(Debug, Clone)]
pub struct DevicePlan {
    policy: PlacementPolicy,
    node_names: Vec<String>,
    pub(crate) targets: Vec<Target>,
    /// Nodes in `targets` placed on a GPU (asked per node at execution).
    gpu_node_count: usize,
    /// Why each node cannot run on a GPU (`None`: it can). Empty under
    /// [`PlacementPolicy::Cpu`], which does not ask.
    cpu_only: Vec<Option<String>>,
    transfers: Vec<Transfer>,
    streams: StreamPlan,
    predicted: Option<PredictedSchedule>,
}

impl DevicePlan {
    /// The policy that made this plan.
    pub fn policy(&self) -> &PlacementPolicy {
        &self.policy
    }

    /// Each node's name and target, by node index.
    pub fn targets(&self) -> impl Iterator<Item = (&str, Target)> + '_ {
        self.node_names
            .iter()
            .map(String::as_str)
            .zip(self.targets.iter().copied())
    }

    /// Nodes placed on a GPU.
    pub fn gpu_nodes(&self) -> usize {
        self.gpu_node_count
    }

    /// True when some nodes run on the CPU and others on a GPU.
    pub fn is_heterogeneous(&self) -> bool {
        let gpu = self.gpu_nodes();
        gpu > 0 && gpu < self.targets.len()
    }

    /// The copies one execution makes, in the order they are issued.
    pub fn transfers(&self) -> &[Transfer] {
        &self.transfers
    }

    /// Bytes copied between devices per execution.
    pub fn transfer_bytes(&self) -> usize {
        self.transfers.iter().map(|t| t.bytes).sum()
    }

    /// The stream protocol's steps.
    pub fn streams(&self) -> &StreamPlan {
        &self.streams
    }

    /// The schedule the cost model predicted (only under
    /// [`PlacementPolicy::CostModel`]).
    pub fn predicted(&self) -> Option<&PredictedSchedule> {
        self.predicted.as_ref()
    }

    /// Why node `name` cannot run on a GPU, as the placement saw it
    /// (`None` when it can, or when the policy did not ask).
    pub fn cpu_only_reason(&self, name: &str) -> Option<&str> {
        let n = self.node_names.iter().position(|m| m == name)?;
        self.cpu_only.get(n)?.as_deref()
    }

    /// A few lines for people: policy, nodes per device, copies per
    /// execution, streams and events.
    pub fn summary(&self) -> String {
        let mut text = String::new();
        let gpu = self.gpu_nodes();
        let _ = writeln!(
            text,
            "placement {}: {} node(s) on the CPU, {gpu} on a GPU",
            self.policy,
            self.targets.len() - gpu
        );
        let _ = writeln!(
            text,
            "{} copy(ies) per execution, {} bytes",
            self.transfers.len(),
            self.transfer_bytes()
        );
        for transfer in &self.transfers {
            let _ = writeln!(text, "  {transfer}");
        }
        let _ = writeln!(
            text,
            "{} stream(s), {} event(s), {} host wait(s) before CPU nodes",
            self.streams.streams_used().len(),
            self.streams.events,
            self.streams.host_waits()
        );
        if let Some(predicted) = &self.predicted {
            let _ = writeln!(
                text,
                "predicted time per execution: {:.3e} s",
                predicted.makespan
            );
        }
        text
    }
}

impl GraphPlan {
    /// Whether node `n` can run on GPU `gpu`: `Ok(())`, or why not
    /// (see [`ExpressionGraph::gpu_capability`](crate::ExpressionGraph::gpu_capability)).
    pub(crate) fn node_capability(&self, n: usize, gpu: usize) -> GraphResult<Result<(), String>> {
        let node = &self.nodes[n];
        match node.form.expression().kind() {
            ExpressionKind::Native | ExpressionKind::IterativeSolve => {
                return Ok(node.form.expression().gpu_support(gpu));
            }
            ExpressionKind::Reduction => {
                let Some(reduction) = node.form.reduction() else {
                    return Ok(Err(
                        "it is a reduction not written in the expression language; it runs on the CPU".into(),
                    ));
                };
                let lowered = lower_cached(reduction.root(), &self.patch, false)?;
                return Ok(
                    cuda_reduction_source(&lowered.kernel, reduction.reduction()).map_or_else(
                        |why| {
                            Err(format!(
                                "the CUDA code generator does not support its reduction kernel: {}",
                                why.0
                            ))
                        },
                        |_| Ok(()),
                    ),
                );
            }
            ExpressionKind::Language => {}
        }
        let Some(kernels) = self.node_kernels(n)? else {
            return Ok(Err("it runs no kernel of the expression language".into()));
        };
        for (heading, root) in kernels {
            if let Err(why) = kernel_source(&root, &self.patch, Dialect::Cuda, "placement_probe") {
                return Ok(Err(format!(
                    "the CUDA code generator does not support its kernel ({heading}): {why}"
                )));
            }
        }
        Ok(Ok(()))
    }
}

/// The plan of a graph with every node on the CPU (what `build` starts
/// from).
pub(crate) fn all_cpu(graph: &GraphPlan) -> DevicePlan {
    let targets = vec![Target::Cpu; graph.nodes.len()];
    let transfers = Vec::new();
    let streams = streams::plan(graph, &targets, &transfers, StreamMode::default());
    DevicePlan {
        policy: PlacementPolicy::Cpu,
        node_names: graph.nodes.iter().map(|n| n.name.clone()).collect(),
        targets,
        gpu_node_count: 0,
        cpu_only: Vec::new(),
        transfers,
        streams,
        predicted: None,
    }
}

/// Places `graph`'s nodes under `policy` and plans copies and streams.
pub(crate) fn plan(
    graph: &GraphPlan,
    policy: PlacementPolicy,
    mode: StreamMode,
) -> GraphResult<DevicePlan> {
    mode.check()?;
    let count = graph.nodes.len();
    let (targets, cpu_only, predicted) = match &policy {
        PlacementPolicy::Cpu => (vec![Target::Cpu; count], Vec::new(), None),
        PlacementPolicy::Gpu(k) => {
            let cpu_only = capabilities(graph, *k)?;
            if let Some(n) = graph.order.iter().copied().find(|&n| cpu_only[n].is_some()) {
                return Err(GraphError::NotPlaceable {
                    node: graph.nodes[n].name.clone(),
                    device: Device::Gpu(*k),
                    reason: format!(
                        "{}; PlacementPolicy::Gpu puts every node on the GPU, so use PlacementPolicy::Heterogeneous({k}) or CostModel to keep such nodes on the CPU",
                        cpu_only[n].as_deref().unwrap_or("it is CPU-only")
                    ),
                });
            }
            (vec![Target::Gpu(*k); count], cpu_only, None)
        }
        PlacementPolicy::Heterogeneous(k) => {
            let cpu_only = capabilities(graph, *k)?;
            let targets = thesis_rule(graph, &cpu_only, *k);
            (targets, cpu_only, None)
        }
        PlacementPolicy::CostModel { device, model } => {
            model.check()?;
            let cpu_only = capabilities(graph, *device)?;
            let predicted = cost::earliest_finish(graph, &cpu_only, *device, model)?;
            let targets = predicted.targets.clone();
            (targets, cpu_only, Some(predicted))
        }
    };
    let transfers = transfers::plan(graph, &targets);
    let streams = streams::plan(graph, &targets, &transfers, mode);
    Ok(DevicePlan {
        policy,
        node_names: graph.nodes.iter().map(|n| n.name.clone()).collect(),
        gpu_node_count: targets
            .iter()
            .filter(|t| matches!(t, Target::Gpu(_)))
            .count(),
        targets,
        cpu_only,
        transfers,
        streams,
        predicted,
    })
}

/// Why each node cannot run on a GPU (`None`: it can).
fn capabilities(graph: &GraphPlan, gpu: usize) -> GraphResult<Vec<Option<String>>> {
    (0..graph.nodes.len())
        .map(|n| Ok(graph.node_capability(n, gpu)?.err()))
        .collect()
}

/// The thesis' rule (see [`PlacementPolicy::Heterogeneous`]).
fn thesis_rule(graph: &GraphPlan, cpu_only: &[Option<String>], gpu: usize) -> Vec<Target> {
    (0..graph.nodes.len())
        .map(|n| {
            if cpu_only[n].is_some() {
                return Target::Cpu;
            }
            let inputs_from_cpu = graph.parents[n].iter().all(|&p| cpu_only[p].is_some());
            let outputs_to_cpu = graph.children[n].iter().all(|&c| cpu_only[c].is_some());
            if inputs_from_cpu && outputs_to_cpu {
                Target::Cpu
            } else {
                Target::Gpu(gpu)
            }
        })
        .collect()
}
