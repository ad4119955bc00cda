//! The copies between devices one execution needs.
//!
//! Each field has a chain of writers: its producer (or the host, for a
//! placeholder), then its modifiers in order; every reader reads the last
//! writer's version (the graph's edges say the same). A copy is needed
//! exactly where consecutive writers, or the last writer and a reader, sit
//! on different devices: one copy per field and destination device, issued
//! right after the writer and read by every node of that device. A field
//! whose writers and readers share a device never moves.
//!
//! A producer that updates its output in place reads the value the previous
//! execution left; that copy is planned at the start of the execution from
//! the device of the field's last writer. Copies at the start of an
//! execution (placeholders, in-place values) are skipped by the executor
//! when the destination's location is still valid (the location table
//! knows), so a placeholder bound once is copied once.

use crate::node::Target;
use crate::plan::GraphPlan;
use crate::tag::Tag;
use std::fmt;
use watershed_fields::Device;

/// One copy of a field from one device to another.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    /// The field copied.
    pub field: Tag,
    /// Bytes copied (the whole field, ghosts included).
    pub bytes: usize,
    /// Where its current value is.
    pub from: Device,
    /// Where it is needed.
    pub to: Device,
    /// The node whose write it copies (`None`: the value at the start of
    /// the execution, e.g. a placeholder set by the host).
    pub after: Option<String>,
    /// The nodes that read the copy.
    pub before: Vec<String>,
    pub(crate) slot: usize,
    pub(crate) after_node: Option<usize>,
    pub(crate) before_nodes: Vec<usize>,
}

impl fmt::Display for Transfer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} bytes): {} -> {}",
            self.field, self.bytes, self.from, self.to
        )?;
        match &self.after {
            Some(node) => write!(f, " after {node}")?,
            None => write!(f, " at the start")?,
        }
        write!(f, ", read by {}", self.before.join(", "))
    }
}

fn device(target: Target) -> Device {
    match target {
        Target::Cpu => Device::Cpu,
        Target::Gpu(k) => Device::Gpu(k),
    }
}

/// The copies one execution of `graph` makes under `targets`, in the order
/// they are issued (those at the start first, then by writer in plan
/// order).
pub(crate) fn plan(graph: &GraphPlan, targets: &[Target]) -> Vec<Transfer> {
    let mut transfers = Vec::new();
    let nodes = &graph.nodes;
    let position = {
        let mut position = vec![0; nodes.len()];
        for (p, &n) in graph.order.iter().enumerate() {
            position[n] = p;
        }
        position
    };
    for (slot, field) in graph.fields.iter().enumerate() {
        let users = &graph.users[slot];
        let modifiers: Vec<usize> = users
            .iter()
            .copied()
            .filter(|&u| nodes[u].modifier && nodes[u].outputs.contains(&slot))
            .collect();
        let last_writer = modifiers.last().copied().or(graph.producer[slot]);
        let mut make = |after: Option<usize>, from: Device, to: Device, mut readers: Vec<usize>| {
            readers.sort_by_key(|&r| position[r]);
            readers.dedup();
            transfers.push(Transfer {
                field: field.tag.clone(),
                bytes: field.bytes,
                from,
                to,
                after: after.map(|n| nodes[n].name.clone()),
                before: readers.iter().map(|&r| nodes[r].name.clone()).collect(),
                slot,
                after_node: after,
                before_nodes: readers,
            });
        };
        // The holder of the current value: (writer, device).
        let mut holder: (Option<usize>, Device) = match graph.producer[slot] {
            Some(p) => {
                let here = device(targets[p]);
                // An in-place producer reads the previous execution's value.
                if nodes[p].inputs.contains(&slot)
                    && let Some(w) = last_writer
                    && device(targets[w]) != here
                {
                    make(None, device(targets[w]), here, vec![p]);
                }
                (Some(p), here)
            }
            None => (None, Device::Cpu),
        };
        for &m in &modifiers {
            let here = device(targets[m]);
            if here != holder.1 {
                make(holder.0, holder.1, here, vec![m]);
            }
            holder = (Some(m), here);
        }
        let mut destinations: Vec<(Device, Vec<usize>)> = Vec::new();
        for &reader in users {
            if modifiers.contains(&reader) || graph.producer[slot] == Some(reader) {
                continue;
            }
            let here = device(targets[reader]);
            if here == holder.1 {
                continue;
            }
            match destinations.iter_mut().find(|(d, _)| *d == here) {
                Some((_, readers)) => readers.push(reader),
                None => destinations.push((here, vec![reader])),
            }
        }
        destinations.sort_by_key(|(d, _)| *d);
        for (to, readers) in destinations {
            make(holder.0, holder.1, to, readers);
        }
    }
    // In the order they are issued: the start's first, then by writer.
    transfers.sort_by_key(|t| t.after_node.map_or(0, |w| position[w] + 1));
    transfers
}
