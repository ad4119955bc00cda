//! Choosing and changing where a built graph's nodes run: its device
//! plan, placing it again under another policy, each node's target and
//! GPU capability, and the measured costs a [`CostModel`] learns from.
//! The placement algorithms are [`crate::placement`]'s.

use crate::error::GraphResult;
use crate::graph::ExpressionGraph;
use crate::node::Target;
use crate::placement::{self, DevicePlan, MeasuredCost, PlacementPolicy, StreamMode};
use watershed_fields::Device;

impl ExpressionGraph {
    /// The device plan (placement, copies, stream steps).
    pub fn device_plan(&self) -> &DevicePlan {
        &self.device_plan
    }

    /// Where node `name` runs (`None`: no such node).
    pub fn target_of(&self, name: &str) -> Option<Target> {
        self.plan
            .nodes
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
        let n = self.plan.nodes.iter().position(|m| m.name == name)?;
        Some(self.plan.node_capability(n, gpu))
    }

    /// Places the nodes again under `policy` with `streams`, e.g. with a
    /// [`CostModel`] fed with [`Self::measured_costs`] after some
    /// executions. Nothing is run or allocated; a placement all on the CPU
    /// brings every field whose current values are on a GPU back to the
    /// CPU (a copy).
    pub fn place(&mut self, policy: PlacementPolicy, streams: StreamMode) -> GraphResult<()> {
        let plan = self.device_plan_for(policy, streams)?;
        for (node, target) in self.plan.nodes.iter_mut().zip(&plan.targets) {
            node.target = *target;
        }
        self.device_plan = plan;
        if self.device_plan.gpu_nodes() == 0 {
            // An all-CPU execution writes and reads the CPU locations
            // only: bring back what earlier GPU executions left there.
            for slot in &self.state.store.slots {
                if let Some(field) = slot.write().unwrap_or_else(|p| p.into_inner()).as_mut() {
                    field.make_active_on(Device::Cpu, None)?;
                }
            }
        }
        // Steps captured for the old placement will not recur.
        self.state
            .replay
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
        placement::plan(&self.plan, policy, streams)
    }

    /// Mean measured time of each node on the target it ran on (nodes that
    /// have not run yet are left out), for a [`CostModel`].
    pub fn measured_costs(&self) -> Vec<MeasuredCost> {
        let stats = self
            .state
            .statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut costs = Vec::new();
        for (n, node) in self.plan.nodes.iter().enumerate() {
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
}
