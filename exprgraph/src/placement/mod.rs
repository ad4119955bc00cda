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
pub mod streams;
pub mod transfers;

pub use cost::{CostModel, MeasuredCost, PredictedNode, PredictedSchedule};
pub use streams::{NodeSteps, Step, StreamId, StreamMode, StreamPlan};
pub use transfers::Transfer;

use crate::error::{GraphError, GraphResult};
use crate::expression::ExpressionKind;
use crate::graph::{ExpressionGraph, Target};
use std::fmt::Write;
use watershed_fields::Device;
use watershed_operators::codegen::kernel_source;
use watershed_operators::codegen::nvrtc::cuda_reduction_source;
use watershed_operators::lower_cached;
use watershed_operators::vmath::Dialect;

/// How [`ExpressionGraph::build`] (or [`ExpressionGraph::place`]) assigns
/// nodes to devices.
///
/// ```
/// use watershed_exprgraph::{ExpressionGraph, Factory, GraphOptions, LanguageExpression,
///     NativeExpression, PlacementPolicy, Tag, Target};
/// use watershed_fields::{CellCentre, Grid, LocationKind};
/// let (a, b, c, d) = (Tag::none("a"), Tag::none("b"), Tag::none("c"), Tag::none("d"));
/// let mut factory = Factory::new();
/// factory.placeholder(a.clone(), LocationKind::CellCentre)?;
/// let ta = a.clone();
/// factory.register(LanguageExpression::new::<CellCentre>(b.clone(), move |s| {
///     2.0 * s.field::<CellCentre>(&ta)
/// }))?;
/// let tb = b.clone();
/// factory.register(LanguageExpression::new::<CellCentre>(c.clone(), move |s| {
///     s.field::<CellCentre>(&tb) + 1.0
/// }))?;
/// factory.register(NativeExpression::new("sum", vec![(d.clone(), LocationKind::CellCentre)], vec![c.clone()],
///     |_ctx| Ok(())))?;
/// let patch = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let options = GraphOptions {
///     placement: PlacementPolicy::Heterogeneous(0),
///     no_fusion: true,
///     ..Default::default()
/// };
/// let graph = ExpressionGraph::build(&factory, &[d.clone()], &patch, &options)?;
/// // The chain of language nodes runs on the GPU; the native node stays on
/// // the CPU, so `c` is copied back to the host once per execution.
/// assert_eq!(graph.target_of("b"), Some(Target::Gpu(0)));
/// assert_eq!(graph.target_of("c"), Some(Target::Gpu(0)));
/// assert_eq!(graph.target_of("sum"), Some(Target::Cpu));
/// let copies: Vec<String> = graph.device_plan().transfers().iter().map(|t| t.to_string()).collect();
/// assert_eq!(copies.len(), 2, "{copies:?}"); // `a` to the GPU, `c` back
///
/// // Fused, `b` and `c` are one language node between the host and a native
/// // node: the rule keeps it on the CPU, and nothing is copied.
/// let fused = GraphOptions { placement: PlacementPolicy::Heterogeneous(0), ..Default::default() };
/// let graph = ExpressionGraph::build(&factory, &[d], &patch, &fused)?;
/// assert_eq!(graph.target_of("c"), Some(Target::Cpu));
/// assert!(graph.device_plan().transfers().is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub enum PlacementPolicy {
    /// Every node on CPU threads.
    #[default]
    Cpu,
    /// Every node on GPU `k` (a homogeneous GPU graph). A graph with a
    /// CPU-only node is refused, naming the node and why it cannot run
    /// there.
    Gpu(usize),
    /// The thesis' rule (§3.3.2) with GPU `k`: a GPU-capable node runs on
    /// the GPU unless every field it reads comes from a CPU-only node or
    /// from the host (a placeholder) *and* every node that reads what it
    /// computes is CPU-only (a node whose outputs no node reads counts as
    /// read by the host). Chains of language nodes therefore stay on the
    /// GPU, and a language node between CPU-only neighbours stays on the
    /// CPU, saving two copies.
    Heterogeneous(usize),
    /// Earliest finish time with GPU `device`: nodes in critical-path order,
    /// each put where it would finish first given the model's node costs
    /// and the time to copy the fields that would cross ([`cost`]).
    CostModel {
        /// The GPU the model may use.
        device: usize,
        /// Costs and bandwidths.
        model: CostModel,
    },
}

impl std::fmt::Display for PlacementPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlacementPolicy::Cpu => write!(f, "all on the CPU"),
            PlacementPolicy::Gpu(k) => write!(f, "all on GPU {k}"),
            PlacementPolicy::Heterogeneous(k) => {
                write!(f, "heterogeneous (the thesis' rule, GPU {k})")
            }
            PlacementPolicy::CostModel { device, model } => write!(
                f,
                "cost model (earliest finish, GPU {device}, {} measured node(s))",
                model.measured.len()
            ),
        }
    }
}

impl PlacementPolicy {
    /// The GPU ordinal the policy may use (`None` for [`Self::Cpu`]).
    pub fn gpu(&self) -> Option<usize> {
        match self {
            PlacementPolicy::Cpu => None,
            PlacementPolicy::Gpu(k) | PlacementPolicy::Heterogeneous(k) => Some(*k),
            PlacementPolicy::CostModel { device, .. } => Some(*device),
        }
    }

    /// The GPU a graph (or patch) numbered `index` should use when
    /// `devices` GPUs are shared round-robin, as ExprLib's hybrid scheduler
    /// and Wasatch's GPU load balancer do (thesis §3.4.4, §4.2.2.1).
    /// Refuses `devices == 0`.
    pub fn round_robin(index: usize, devices: usize) -> GraphResult<usize> {
        if devices == 0 {
            return Err(GraphError::PlacementParameter {
                parameter: "devices".into(),
                value: "0".into(),
                reason: "round-robin placement needs at least one GPU; use PlacementPolicy::Cpu on a machine without one".into(),
            });
        }
        Ok(index % devices)
    }
}

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
    /// A plan with no nodes (replaced before `build` returns).
    pub(crate) fn unplanned() -> Self {
        DevicePlan {
            policy: PlacementPolicy::Cpu,
            node_names: Vec::new(),
            targets: Vec::new(),
            gpu_node_count: 0,
            cpu_only: Vec::new(),
            transfers: Vec::new(),
            streams: StreamPlan {
                mode: StreamMode::default(),
                prologue: Vec::new(),
                nodes: Vec::new(),
                epilogue: Vec::new(),
                events: 0,
            },
            predicted: None,
        }
    }

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

impl ExpressionGraph {
    /// The device plan (placement, copies, stream steps).
    pub fn device_plan(&self) -> &DevicePlan {
        &self.device_plan
    }

    /// Where node `name` runs (`None`: no such node).
    pub fn target_of(&self, name: &str) -> Option<Target> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .map(|n| self.device_plan.targets[n])
    }

    /// Whether node `name` can run on GPU `gpu`: `Ok(())`, or why not
    /// (native code, a solve that cannot run there, or a kernel the CUDA
    /// emitter does not support). `None`: no such node.
    pub fn gpu_capability(
        &self,
        name: &str,
        gpu: usize,
    ) -> Option<GraphResult<Result<(), String>>> {
        let n = self.nodes.iter().position(|m| m.name == name)?;
        Some(self.node_capability(n, gpu))
    }

    /// Places the nodes again under `policy` with `streams`, e.g. with a
    /// [`CostModel`] fed with [`Self::measured_costs`] after some
    /// executions. Nothing is run or allocated; a placement all on the CPU
    /// brings every field whose current values are on a GPU back to the
    /// CPU (a copy).
    pub fn place(&mut self, policy: PlacementPolicy, streams: StreamMode) -> GraphResult<()> {
        let plan = self.device_plan_for(policy, streams)?;
        for (node, target) in self.nodes.iter_mut().zip(&plan.targets) {
            node.target = *target;
        }
        self.device_plan = plan;
        if self.device_plan.gpu_nodes() == 0 {
            // An all-CPU execution writes and reads the CPU locations
            // only: bring back what earlier GPU executions left there.
            for slot in &self.store.slots {
                if let Some(field) = slot.write().unwrap_or_else(|p| p.into_inner()).as_mut() {
                    field.make_active_on(Device::Cpu, None)?;
                }
            }
        }
        // Steps captured for the old placement will not recur.
        self.replay
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .forget_steps();
        Ok(())
    }

    /// The plan `policy` and `streams` would give this graph, without
    /// changing it (what `watershed run CASE --plan POLICY` prints).
    pub fn device_plan_for(
        &self,
        policy: PlacementPolicy,
        streams: StreamMode,
    ) -> GraphResult<DevicePlan> {
        plan(self, policy, streams)
    }

    /// Mean measured time of each node on the target it ran on (nodes that
    /// have not run yet are left out), for a [`CostModel`].
    pub fn measured_costs(&self) -> Vec<MeasuredCost> {
        let stats = self.statistics.lock().unwrap_or_else(|p| p.into_inner());
        let mut costs = Vec::new();
        for (n, node) in self.nodes.iter().enumerate() {
            if stats.calls[n] == 0 {
                continue;
            }
            let seconds = stats.total[n].as_secs_f64() / stats.calls[n] as f64;
            let (cpu, gpu) = match self.device_plan.targets[n] {
                Target::Cpu => (Some(seconds), None),
                Target::Gpu(_) => (None, Some(seconds)),
            };
            costs.push(MeasuredCost {
                node: node.name.clone(),
                cpu,
                gpu,
            });
        }
        costs
    }

    /// Whether node `n` can run on a GPU (see [`Self::gpu_capability`]).
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
pub(crate) fn all_cpu(graph: &ExpressionGraph) -> DevicePlan {
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
    graph: &ExpressionGraph,
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
fn capabilities(graph: &ExpressionGraph, gpu: usize) -> GraphResult<Vec<Option<String>>> {
    (0..graph.nodes.len())
        .map(|n| Ok(graph.node_capability(n, gpu)?.err()))
        .collect()
}

/// The thesis' rule (see [`PlacementPolicy::Heterogeneous`]).
fn thesis_rule(graph: &ExpressionGraph, cpu_only: &[Option<String>], gpu: usize) -> Vec<Target> {
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
