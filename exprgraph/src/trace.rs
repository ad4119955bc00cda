//! The timeline of the last execution in the Chrome trace format (opens in
//! Perfetto or chrome://tracing), and the per-expression timing table.

use crate::graph::ExpressionGraph;
use crate::scheduler::TraceEvent;
use std::fmt;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// Calls and time of one expression across executions.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpressionTiming {
    /// Expression name.
    pub name: String,
    /// Executions.
    pub calls: u64,
    /// Total time.
    pub total: Duration,
    /// Mean time per call.
    pub mean: Duration,
}

/// Timings of every expression, slowest total first.
#[derive(Debug, Clone, PartialEq)]
pub struct TimingTable(pub Vec<ExpressionTiming>);

impl fmt::Display for TimingTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<32} {:>8} {:>14} {:>14}",
            "expression", "calls", "total ms", "mean us"
        )?;
        for t in &self.0 {
            writeln!(
                f,
                "{:<32} {:>8} {:>14.3} {:>14.2}",
                t.name,
                t.calls,
                t.total.as_secs_f64() * 1e3,
                t.mean.as_secs_f64() * 1e6
            )?;
        }
        Ok(())
    }
}

impl ExpressionGraph {
    /// Per-expression calls, total and mean time over all executions.
    pub fn timing_table(&self) -> TimingTable {
        let stats = self.statistics.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<ExpressionTiming> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| ExpressionTiming {
                name: node.name.clone(),
                calls: stats.calls[n],
                total: stats.total[n],
                mean: if stats.calls[n] == 0 {
                    Duration::ZERO
                } else {
                    stats.total[n] / stats.calls[n] as u32
                },
            })
            .collect();
        rows.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
        TimingTable(rows)
    }

    /// Start and end of every node of the last execution.
    pub fn last_trace(&self) -> Vec<crate::scheduler::TraceEvent> {
        self.statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .trace
            .clone()
    }

    /// The last execution as Chrome trace JSON: one complete ("X") event per
    /// node, on the thread that ran it, in microseconds.
    pub fn chrome_trace(&self) -> String {
        let trace = self.last_trace();
        let mut json = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
        for (i, event) in trace.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            let node = &self.nodes[event.node];
            let name = node.name.replace('\\', "\\\\").replace('"', "\\\"");
            let category = match node.target {
                crate::graph::Target::Cpu => "cpu",
                crate::graph::Target::Gpu(_) => "gpu",
            };
            let _ = write!(
                json,
                "{{\"name\":\"{name}\",\"cat\":\"{category}\",\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3}}}",
                event.thread,
                event.start.as_secs_f64() * 1e6,
                (event.end - event.start).as_secs_f64() * 1e6
            );
        }
        json.push_str("]}");
        json
    }
}

/// The most events one recording keeps; later ones are counted, not stored.
pub const MAX_RECORDED_EVENTS: usize = 4_000_000;

/// Events of every execution since recording started (see
/// [`ExpressionGraph::start_recording`]).
#[derive(Debug, Clone)]
pub(crate) struct Recording {
    epoch: Instant,
    events: Vec<TraceEvent>,
    dropped: u64,
}

impl Recording {
    /// Adds one execution's events (timed from `execution_start`).
    pub(crate) fn add(&mut self, execution_start: Instant, events: &[TraceEvent]) {
        let offset = execution_start.saturating_duration_since(self.epoch);
        for event in events {
            if self.events.len() >= MAX_RECORDED_EVENTS {
                self.dropped += 1;
                continue;
            }
            self.events.push(TraceEvent {
                start: event.start + offset,
                end: event.end + offset,
                ..*event
            });
        }
    }
}

/// One node execution of a recorded run, named, timed from the recording's
/// epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// The graph the node belongs to (as the caller named it).
    pub graph: String,
    /// The node's name.
    pub name: String,
    /// `cpu` or `gpu`.
    pub category: &'static str,
    /// The worker thread that ran it.
    pub thread: usize,
    /// Start, from the epoch given to `start_recording`.
    pub start: Duration,
    /// End, from the same epoch.
    pub end: Duration,
}

impl ExpressionGraph {
    /// Keeps the events of every following execution (not only the last),
    /// timed from `epoch`, until [`Self::take_recording`]. Graphs of one run
    /// share an epoch so that their events line up on one timeline. At most
    /// [`MAX_RECORDED_EVENTS`] events are kept; the rest are counted.
    pub fn start_recording(&self, epoch: Instant) {
        let mut stats = self.statistics.lock().unwrap_or_else(|p| p.into_inner());
        stats.recording = Some(Recording {
            epoch,
            events: Vec::new(),
            dropped: 0,
        });
    }

    /// Stops recording; returns the recorded events (named `graph`) and the
    /// number of events that did not fit.
    pub fn take_recording(&self, graph: &str) -> (Vec<RecordedEvent>, u64) {
        let recording = self
            .statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .recording
            .take();
        let Some(recording) = recording else {
            return (Vec::new(), 0);
        };
        let events = recording
            .events
            .iter()
            .map(|event| {
                let node = &self.nodes[event.node];
                RecordedEvent {
                    graph: graph.to_string(),
                    name: node.name.clone(),
                    category: match node.target {
                        crate::graph::Target::Cpu => "cpu",
                        crate::graph::Target::Gpu(_) => "gpu",
                    },
                    thread: event.thread,
                    start: event.start,
                    end: event.end,
                }
            })
            .collect();
        (events, recording.dropped)
    }
}

/// Chrome trace JSON of recorded events: one process per graph (named by a
/// metadata event), one complete ("X") event per node execution.
pub fn chrome_trace_of(events: &[RecordedEvent]) -> String {
    let escape = |text: &str| text.replace('\\', "\\\\").replace('"', "\\\"");
    let mut graphs: Vec<&str> = Vec::new();
    for event in events {
        if !graphs.contains(&event.graph.as_str()) {
            graphs.push(&event.graph);
        }
    }
    let mut json = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    let mut first = true;
    let mut separator = |json: &mut String| {
        if !first {
            json.push(',');
        }
        first = false;
    };
    for (pid, graph) in graphs.iter().enumerate() {
        separator(&mut json);
        let _ = write!(
            json,
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"{}\"}}}}",
            pid + 1,
            escape(graph)
        );
    }
    for event in events {
        separator(&mut json);
        let pid = graphs.iter().position(|g| *g == event.graph).unwrap_or(0) + 1;
        let _ = write!(
            json,
            "{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{},\"ts\":{:.3},\"dur\":{:.3}}}",
            escape(&event.name),
            event.category,
            event.thread,
            event.start.as_secs_f64() * 1e6,
            (event.end - event.start).as_secs_f64() * 1e6
        );
    }
    json.push_str("]}");
    json
}
