//! The stream protocol of one execution, as data: which stream each GPU
//! node launches on, where copies are enqueued, which CUDA events are
//! recorded and who waits on them (thesis §3.4.3; `design.md` beside this
//! file states the invariants).
//!
//! * **Streams.** Asynchronous mode gives each GPU node a stream from a
//!   bounded pool per device, reused across executions: a node continues
//!   the stream of its most critical GPU parent on the same device when no
//!   other child took it yet (a chain needs no event), and otherwise takes
//!   the least recently used stream. Synchronous mode puts every GPU node
//!   of a device on one stream, which reproduces the thesis' comparison.
//! * **Copies.** A field a GPU node writes and another device reads is
//!   copied on the writer's stream right after its kernel. A field a CPU
//!   node (or the host, before the execution) writes and a GPU reads is
//!   copied when the writer has finished, on the stream of its first GPU
//!   reader.
//! * **Events.** A GPU node records an event after its kernel and copies
//!   when some node outside its stream depends on it; a GPU consumer on
//!   another stream waits on it *on its stream* (the host does not block);
//!   a CPU consumer blocks the host on it. The host also blocks at the end
//!   of the execution, once per stream used.

use crate::node::Target;
pub use crate::placement::policy::{DEFAULT_STREAMS, MAX_STREAMS, StreamMode};
use crate::placement::transfers::Transfer;
use crate::plan::GraphPlan;
use std::fmt;
use watershed_fields::Device;

/// A stream of a device's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId {
    /// The GPU's ordinal.
    pub device: usize,
    /// The stream's index in that device's pool.
    pub index: usize,
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GPU {} stream {}", self.device, self.index)
    }
}

/// One action of the protocol. Events are numbered from 0 per execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Enqueue copy number `transfer` (an index into
    /// [`crate::placement::DevicePlan::transfers`]) on `stream`.
    Copy {
        /// The copy.
        transfer: usize,
        /// The stream it is enqueued on.
        stream: StreamId,
    },
    /// Record `event` on `stream`: it completes when everything enqueued
    /// on the stream before it has.
    Record {
        /// The event.
        event: usize,
        /// The stream.
        stream: StreamId,
    },
    /// Make `stream` wait for `event` before its next work; the host does
    /// not block.
    Wait {
        /// The waiting stream.
        stream: StreamId,
        /// The event.
        event: usize,
    },
    /// The host blocks until `event` completes.
    HostWait {
        /// The event.
        event: usize,
    },
    /// The host blocks until `stream` has finished everything (the end of
    /// an execution).
    Synchronize {
        /// The stream.
        stream: StreamId,
    },
}

/// What happens around one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSteps {
    /// The node's name.
    pub node: String,
    /// Where it runs.
    pub target: Target,
    /// The stream its kernels are launched on (GPU nodes).
    pub stream: Option<StreamId>,
    /// Steps before its launch (waits).
    pub before: Vec<Step>,
    /// Steps right after its launch (copies of what it wrote, the event
    /// that marks its completion).
    pub after: Vec<Step>,
}

/// The protocol of one execution.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamPlan {
    /// The mode it was planned for.
    pub mode: StreamMode,
    /// Steps before any node starts (copies of values the host holds).
    pub prologue: Vec<Step>,
    /// Per node, by node index.
    pub nodes: Vec<NodeSteps>,
    /// Steps after every node has been launched.
    pub epilogue: Vec<Step>,
    /// Events used per execution.
    pub events: usize,
}

impl StreamPlan {
    /// The streams the plan uses, sorted.
    pub fn streams_used(&self) -> Vec<StreamId> {
        let mut streams: Vec<StreamId> = self.nodes.iter().filter_map(|n| n.stream).collect();
        for step in self.all_steps() {
            match step {
                Step::Copy { stream, .. }
                | Step::Record { stream, .. }
                | Step::Wait { stream, .. }
                | Step::Synchronize { stream } => streams.push(*stream),
                Step::HostWait { .. } => {}
            }
        }
        streams.sort_unstable();
        streams.dedup();
        streams
    }

    /// Host waits before nodes (the blocking points inside an execution).
    pub fn host_waits(&self) -> usize {
        self.nodes
            .iter()
            .flat_map(|n| &n.before)
            .filter(|s| matches!(s, Step::HostWait { .. }))
            .count()
    }

    fn all_steps(&self) -> impl Iterator<Item = &Step> {
        self.prologue
            .iter()
            .chain(
                self.nodes
                    .iter()
                    .flat_map(|n| n.before.iter().chain(&n.after)),
            )
            .chain(&self.epilogue)
    }
}

fn push_once(steps: &mut Vec<Step>, step: Step) {
    if !steps.contains(&step) {
        steps.push(step);
    }
}

/// The protocol for `graph` under `targets` and `transfers`.
pub(crate) fn plan(
    graph: &GraphPlan,
    targets: &[Target],
    transfers: &[Transfer],
    mode: StreamMode,
) -> StreamPlan {
    let count = graph.nodes.len();
    let stream = assign_streams(graph, targets, mode);
    let mut nodes: Vec<NodeSteps> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| NodeSteps {
            node: node.name.clone(),
            target: targets[n],
            stream: stream[n],
            before: Vec::new(),
            after: Vec::new(),
        })
        .collect();
    let mut prologue = Vec::new();
    let mut events = 0;

    // The event each GPU node records when something off its stream
    // depends on it.
    let mut event_of: Vec<Option<usize>> = vec![None; count];
    for n in 0..count {
        if stream[n].is_some() && graph.children[n].iter().any(|&c| stream[c] != stream[n]) {
            event_of[n] = Some(events);
            events += 1;
        }
    }

    // Copies.
    for (t, transfer) in transfers.iter().enumerate() {
        let writer_on_gpu = transfer.after_node.and_then(|w| stream[w].map(|s| (w, s)));
        if let Some((w, s)) = writer_on_gpu {
            // On the writer's stream; readers wait on the writer's event.
            nodes[w].after.push(Step::Copy {
                transfer: t,
                stream: s,
            });
            continue;
        }
        // The host issues it: after a CPU writer, or before the execution.
        let copy_stream = match transfer.to {
            Device::Gpu(_) => transfer.before_nodes.iter().find_map(|&r| stream[r]),
            Device::Cpu => None,
        }
        .or(match transfer.from {
            Device::Gpu(k) => Some(StreamId {
                device: k,
                index: 0,
            }),
            Device::Cpu => None,
        });
        let Some(copy_stream) = copy_stream else {
            continue;
        };
        let waiting: Vec<usize> = transfer
            .before_nodes
            .iter()
            .copied()
            .filter(|&r| stream[r] != Some(copy_stream))
            .collect();
        let issue = match transfer.after_node {
            Some(w) => &mut nodes[w].after,
            None => &mut prologue,
        };
        issue.push(Step::Copy {
            transfer: t,
            stream: copy_stream,
        });
        if !waiting.is_empty() {
            let event = events;
            events += 1;
            issue.push(Step::Record {
                event,
                stream: copy_stream,
            });
            for r in waiting {
                let step = match stream[r] {
                    Some(s) => Step::Wait { stream: s, event },
                    None => Step::HostWait { event },
                };
                push_once(&mut nodes[r].before, step);
            }
        }
    }

    // Dependencies: events recorded after each GPU node's kernel and copies.
    for n in 0..count {
        if let (Some(event), Some(s)) = (event_of[n], stream[n]) {
            nodes[n].after.push(Step::Record { event, stream: s });
        }
    }
    for c in 0..count {
        for &p in &graph.parents[c] {
            let Some(event) = event_of[p] else { continue };
            if stream[p] == stream[c] {
                continue;
            }
            let step = match stream[c] {
                Some(s) => Step::Wait { stream: s, event },
                None => Step::HostWait { event },
            };
            push_once(&mut nodes[c].before, step);
        }
    }

    let mut plan = StreamPlan {
        mode,
        prologue,
        nodes,
        epilogue: Vec::new(),
        events,
    };
    plan.epilogue = plan
        .streams_used()
        .into_iter()
        .map(|stream| Step::Synchronize { stream })
        .collect();
    plan
}

/// The stream of each GPU node (`None` for CPU nodes).
fn assign_streams(
    graph: &GraphPlan,
    targets: &[Target],
    mode: StreamMode,
) -> Vec<Option<StreamId>> {
    let count = graph.nodes.len();
    let mut stream: Vec<Option<StreamId>> = vec![None; count];
    let mut continued = vec![false; count];
    // Per device, when each stream of its pool was last given out.
    let mut last_use: Vec<(usize, Vec<u64>)> = Vec::new();
    let mut clock = 0u64;
    for &n in &graph.order {
        let Target::Gpu(device) = targets[n] else {
            continue;
        };
        let chosen = match mode {
            StreamMode::Synchronous => StreamId { device, index: 0 },
            StreamMode::Asynchronous { streams_per_device } => {
                let mut parents: Vec<usize> = graph.parents[n]
                    .iter()
                    .copied()
                    .filter(|&p| targets[p] == Target::Gpu(device) && !continued[p])
                    .collect();
                parents.sort_by(|&a, &b| {
                    graph.priority[b]
                        .total_cmp(&graph.priority[a])
                        .then(a.cmp(&b))
                });
                match parents.first().and_then(|&p| stream[p].map(|s| (p, s))) {
                    Some((p, s)) => {
                        continued[p] = true;
                        s
                    }
                    None => {
                        let uses = match last_use.iter().position(|(d, _)| *d == device) {
                            Some(i) => &mut last_use[i].1,
                            None => {
                                last_use.push((device, vec![0; streams_per_device.max(1)]));
                                let last = last_use.len() - 1;
                                &mut last_use[last].1
                            }
                        };
                        let index = uses
                            .iter()
                            .enumerate()
                            .min_by_key(|(i, t)| (**t, *i))
                            .map_or(0, |(i, _)| i);
                        StreamId { device, index }
                    }
                }
            }
        };
        clock += 1;
        if let Some((_, uses)) = last_use.iter_mut().find(|(d, _)| *d == device)
            && let Some(t) = uses.get_mut(chosen.index)
        {
            *t = clock;
        }
        stream[n] = Some(chosen);
    }
    stream
}
