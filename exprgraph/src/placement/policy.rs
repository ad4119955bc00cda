//! What a user asks placement for: the policy ([`PlacementPolicy`]), how
//! GPU nodes share streams ([`StreamMode`]) and the costs a cost model
//! places by ([`CostModel`]). Data only: the algorithms that read a plan
//! and these choices are in the sibling modules.

use crate::error::{GraphError, GraphResult};

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
    /// and the time to copy the fields that would cross ([`super::cost`]).
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

/// Streams per device in [`StreamMode::default`].
pub const DEFAULT_STREAMS: usize = 16;

/// Most streams per device a plan may use.
pub const MAX_STREAMS: usize = 256;

/// How GPU nodes share streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamMode {
    /// A stream per expression, from a pool of this many per device; event
    /// dependencies between streams (the thesis' asynchronous mode).
    Asynchronous {
        /// Streams in each device's pool (1 to [`MAX_STREAMS`]).
        streams_per_device: usize,
    },
    /// One stream per device (the thesis' synchronous mode).
    Synchronous,
}

impl Default for StreamMode {
    fn default() -> Self {
        StreamMode::Asynchronous {
            streams_per_device: DEFAULT_STREAMS,
        }
    }
}

impl StreamMode {
    /// Refuses a pool of 0 streams or more than [`MAX_STREAMS`].
    pub fn check(self) -> GraphResult<()> {
        match self {
            StreamMode::Asynchronous { streams_per_device }
                if streams_per_device == 0 || streams_per_device > MAX_STREAMS =>
            {
                Err(GraphError::PlacementParameter {
                    parameter: "streams_per_device".into(),
                    value: streams_per_device.to_string(),
                    reason: format!(
                        "a stream pool holds 1 to {MAX_STREAMS} streams per device; use StreamMode::Synchronous for one"
                    ),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Costs and bandwidths for [`crate::PlacementPolicy::CostModel`]. The
/// defaults describe a 2020s server with one PCIe GPU.
///
/// ```
/// use watershed_exprgraph::CostModel;
/// let model = CostModel { link_bandwidth: 25e9, ..CostModel::default() };
/// assert!(model.check().is_ok());
/// assert!(CostModel { gpu_bandwidth: 0.0, ..CostModel::default() }.check().is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    /// Bytes per second a CPU node streams (default 10 GB/s).
    pub cpu_bandwidth: f64,
    /// Bytes per second a GPU kernel streams (default 2 TB/s).
    pub gpu_bandwidth: f64,
    /// Bytes per second of a host-device copy (default 12 GB/s, pinned).
    pub link_bandwidth: f64,
    /// Seconds of overhead per copy (default 10 us).
    pub link_latency: f64,
    /// Seconds of overhead per GPU kernel launch (default 5 us).
    pub launch_latency: f64,
    /// Measured node times that replace the estimates.
    pub measured: Vec<MeasuredCost>,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            cpu_bandwidth: 10e9,
            gpu_bandwidth: 2e12,
            link_bandwidth: 12e9,
            link_latency: 10e-6,
            launch_latency: 5e-6,
            measured: Vec::new(),
        }
    }
}

/// A node's measured time per execution on each device (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredCost {
    /// The node's name.
    pub node: String,
    /// On the CPU, if measured there.
    pub cpu: Option<f64>,
    /// On the GPU, if measured there.
    pub gpu: Option<f64>,
}

impl CostModel {
    /// Refuses a bandwidth that is not a positive finite number, a latency
    /// that is negative or not finite, and a measured time that is not a
    /// finite number >= 0; each error names the parameter.
    pub fn check(&self) -> GraphResult<()> {
        let bad = |parameter: &str, value: f64, reason: &str| GraphError::PlacementParameter {
            parameter: parameter.into(),
            value: value.to_string(),
            reason: reason.into(),
        };
        for (name, value) in [
            ("cpu_bandwidth", self.cpu_bandwidth),
            ("gpu_bandwidth", self.gpu_bandwidth),
            ("link_bandwidth", self.link_bandwidth),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(bad(
                    name,
                    value,
                    "a bandwidth is a finite number of bytes per second above 0",
                ));
            }
        }
        for (name, value) in [
            ("link_latency", self.link_latency),
            ("launch_latency", self.launch_latency),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(bad(
                    name,
                    value,
                    "a latency is a finite number of seconds >= 0",
                ));
            }
        }
        for cost in &self.measured {
            for (device, value) in [("cpu", cost.cpu), ("gpu", cost.gpu)] {
                if let Some(v) = value
                    && !(v.is_finite() && v >= 0.0)
                {
                    return Err(bad(
                        &format!("measured[{}].{device}", cost.node),
                        v,
                        "a measured time is a finite number of seconds >= 0",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Seconds to copy `bytes` between host and device.
    pub fn copy_time(&self, bytes: usize) -> f64 {
        self.link_latency + bytes as f64 / self.link_bandwidth
    }
}
