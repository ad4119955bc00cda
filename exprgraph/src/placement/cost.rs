//! Cost-model placement: earliest finish time (list scheduling in the
//! style of HEFT) over node costs and copy times.
//!
//! Nodes are taken in decreasing *upward rank* (the critical path to a
//! sink, with each node's mean cost over the devices it can use and each
//! edge's copy time). Each goes to the device where it would finish first:
//! it starts when the device is free and every field it reads is there
//! (its writer finished, plus the copy when the writer sits elsewhere;
//! a placeholder is on the host at time 0). The CPU and the GPU are one
//! resource each: a node runs on all CPU threads (nested parallelism), and
//! a kernel fills the GPU. Copies do not contend with each other.
//!
//! Costs: a measured time when given ([`MeasuredCost`], e.g. from
//! [`ExpressionGraph::measured_costs`] after a few executions), otherwise
//! the bytes the node streams (every field it reads or writes, once) over
//! the device's bandwidth, plus a launch latency per GPU kernel (and, for
//! a reduction, one copy latency: its partials come back to the host,
//! which waits). A copy costs a latency plus its bytes over the
//! host-device link.

use crate::error::{GraphError, GraphResult};
use crate::node::Target;
use crate::placement::policy::CostModel;
use crate::plan::GraphPlan;

/// One node in the predicted schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictedNode {
    /// The node's name.
    pub node: String,
    /// Where it runs.
    pub target: Target,
    /// Predicted start (seconds from the execution's start).
    pub start: f64,
    /// Predicted end.
    pub finish: f64,
}

/// What the cost model predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictedSchedule {
    /// Per node, by node index.
    pub nodes: Vec<PredictedNode>,
    /// Predicted time of one execution.
    pub makespan: f64,
    pub(crate) targets: Vec<Target>,
}

/// Smallest cost a node is given, so that ranks strictly decrease along
/// every edge (the rank order is then a topological order).
const TINY: f64 = 1e-12;

/// Places `graph`'s nodes by earliest finish time (see the module docs).
pub(crate) fn earliest_finish(
    graph: &GraphPlan,
    cpu_only: &[Option<String>],
    gpu: usize,
    model: &CostModel,
) -> GraphResult<PredictedSchedule> {
    let count = graph.nodes.len();
    // Bytes each node streams, and bytes each edge would carry.
    let streamed: Vec<usize> = graph
        .nodes
        .iter()
        .map(|node| {
            let mut slots: Vec<usize> = node.inputs.iter().chain(&node.outputs).copied().collect();
            slots.sort_unstable();
            slots.dedup();
            slots.iter().map(|&s| graph.fields[s].bytes).sum()
        })
        .collect();
    let edge_bytes = |p: usize, c: usize| -> usize {
        let node = &graph.nodes[c];
        graph.nodes[p]
            .outputs
            .iter()
            .filter(|s| node.inputs.contains(s) || node.outputs.contains(s))
            .map(|&s| graph.fields[s].bytes)
            .sum()
    };
    let host_bytes: Vec<usize> = graph
        .nodes
        .iter()
        .map(|node| {
            node.inputs
                .iter()
                .filter(|&&s| graph.producer[s].is_none())
                .map(|&s| graph.fields[s].bytes)
                .sum()
        })
        .collect();
    let mut cost = vec![[f64::INFINITY; 2]; count];
    for (n, node) in graph.nodes.iter().enumerate() {
        let measured = model.measured.iter().find(|m| m.node == node.name);
        let kernels = node
            .form
            .expression()
            .kernels(&watershed_fields::FieldLayout::new(
                &graph.patch,
                node.outputs
                    .first()
                    .map_or(watershed_fields::LocationKind::CellCentre, |&s| {
                        graph.fields[s].location
                    }),
            ))
            .max(1);
        let cpu = measured
            .and_then(|m| m.cpu)
            .unwrap_or(streamed[n] as f64 / model.cpu_bandwidth);
        cost[n][0] = cpu.max(TINY);
        if cpu_only[n].is_none() {
            // A reduction on a GPU also copies its row partials back and
            // waits for them: one copy's latency more.
            let wait =
                if node.form.expression().kind() == crate::expression::ExpressionKind::Reduction {
                    model.link_latency
                } else {
                    0.0
                };
            let gpu = measured.and_then(|m| m.gpu).unwrap_or(
                kernels as f64 * model.launch_latency
                    + wait
                    + streamed[n] as f64 / model.gpu_bandwidth,
            );
            cost[n][1] = gpu.max(TINY);
        }
    }
    // Upward ranks with mean costs and copy times.
    let mean: Vec<f64> = cost
        .iter()
        .map(|c| {
            let usable: Vec<f64> = c.iter().copied().filter(|v| v.is_finite()).collect();
            usable.iter().sum::<f64>() / usable.len().max(1) as f64
        })
        .collect();
    let mut rank = vec![0.0_f64; count];
    for &n in graph.order.iter().rev() {
        let below = graph.children[n]
            .iter()
            .map(|&c| rank[c] + 0.5 * model.copy_time(edge_bytes(n, c)))
            .fold(0.0, f64::max);
        rank[n] = mean[n] + below;
    }
    let mut by_rank: Vec<usize> = (0..count).collect();
    let position = {
        let mut position = vec![0; count];
        for (p, &n) in graph.order.iter().enumerate() {
            position[n] = p;
        }
        position
    };
    by_rank.sort_by(|&a, &b| {
        rank[b]
            .total_cmp(&rank[a])
            .then(position[a].cmp(&position[b]))
    });

    let devices = [Target::Cpu, Target::Gpu(gpu)];
    let mut free = [0.0_f64; 2];
    let mut placed: Vec<Option<(usize, f64, f64)>> = vec![None; count];
    for &n in &by_rank {
        let mut best: Option<(usize, f64, f64)> = None;
        for d in 0..2 {
            if !cost[n][d].is_finite() {
                continue;
            }
            let mut ready = if d == 1 {
                let bytes = host_bytes[n];
                if bytes > 0 {
                    model.copy_time(bytes)
                } else {
                    0.0
                }
            } else {
                0.0
            };
            for &p in &graph.parents[n] {
                let Some((pd, _, finish)) = placed[p] else {
                    return Err(GraphError::Native(format!(
                        "cost-model placement reached {} before its producer {}; this is a bug in the rank order",
                        graph.nodes[n].name, graph.nodes[p].name
                    )));
                };
                let arrival = if pd == d {
                    finish
                } else {
                    finish + model.copy_time(edge_bytes(p, n))
                };
                ready = ready.max(arrival);
            }
            let start = ready.max(free[d]);
            let finish = start + cost[n][d];
            if best.is_none_or(|(_, _, f)| finish < f) {
                best = Some((d, start, finish));
            }
        }
        let Some((d, start, finish)) = best else {
            return Err(GraphError::Native(format!(
                "node {} has no device to run on",
                graph.nodes[n].name
            )));
        };
        free[d] = finish;
        placed[n] = Some((d, start, finish));
    }
    let mut nodes = Vec::with_capacity(count);
    let mut targets = Vec::with_capacity(count);
    let mut makespan = 0.0_f64;
    for (n, slot) in placed.iter().enumerate() {
        let (d, start, finish) = slot.unwrap_or((0, 0.0, 0.0));
        makespan = makespan.max(finish);
        targets.push(devices[d]);
        nodes.push(PredictedNode {
            node: graph.nodes[n].name.clone(),
            target: devices[d],
            start,
            finish,
        });
    }
    Ok(PredictedSchedule {
        nodes,
        makespan,
        targets,
    })
}
