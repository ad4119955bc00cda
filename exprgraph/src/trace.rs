//! The timeline of the last execution in the Chrome trace format (opens in
//! Perfetto or chrome://tracing), and the per-expression timing table.

use crate::graph::ExpressionGraph;
use crate::placement::StreamId;
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
        let stats = self
            .state
            .statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<ExpressionTiming> = self
            .plan
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
        self.state
            .statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .trace
            .clone()
    }

    /// The last execution as Chrome trace JSON: one complete ("X") event per
    /// node, on the thread that ran it, in microseconds; with the GPU
    /// timeline on ([`Self::set_gpu_timeline`]) also each GPU node's
    /// kernels and each copy on its stream, a process per GPU ("GPU k") and
    /// a track per stream, next to the host's process.
    pub fn chrome_trace(&self) -> String {
        let trace = self.last_trace();
        let gpu_trace = self.last_gpu_trace();
        let mut json = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
        let mut first = true;
        let mut separator = |json: &mut String| {
            if !first {
                json.push(',');
            }
            first = false;
        };
        for event in &trace {
            separator(&mut json);
            let node = &self.plan.nodes[event.node];
            let category = match node.target {
                crate::node::Target::Cpu => "cpu",
                crate::node::Target::Gpu(_) => "gpu",
            };
            let _ = write!(
                json,
                "{{\"name\":\"{}\",\"cat\":\"{category}\",\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3}}}",
                escape(&node.name),
                event.thread,
                event.start.as_secs_f64() * 1e6,
                (event.end - event.start).as_secs_f64() * 1e6
            );
        }
        if !gpu_trace.is_empty() {
            separator(&mut json);
            json.push_str(&name_process(1, "host"));
            let mut named: Vec<StreamId> = Vec::new();
            for span in &gpu_trace {
                let pid = GPU_PROCESSES + span.stream.device;
                if !named.iter().any(|s| s.device == span.stream.device) {
                    separator(&mut json);
                    json.push_str(&name_process(pid, &format!("GPU {}", span.stream.device)));
                }
                if !named.contains(&span.stream) {
                    named.push(span.stream);
                    separator(&mut json);
                    json.push_str(&name_thread(
                        pid,
                        span.stream.index,
                        &format!("stream {}", span.stream.index),
                    ));
                }
                separator(&mut json);
                json.push_str(&complete_event(
                    &span.name,
                    gpu_category(span.work),
                    pid,
                    span.stream.index,
                    span.start,
                    span.end,
                ));
            }
        }
        json.push_str("]}");
        json
    }
}

/// The first process id of the GPUs in a trace of one graph (GPU k is
/// process `GPU_PROCESSES + k`; the host is process 1).
const GPU_PROCESSES: usize = 1000;

/// `text` escaped for a JSON string.
fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The trace category of a GPU span.
fn gpu_category(work: crate::GpuWork) -> &'static str {
    match work {
        crate::GpuWork::Kernels => "gpu kernels",
        crate::GpuWork::Copy => "gpu copy",
    }
}

/// A metadata event naming process `pid`.
fn name_process(pid: usize, name: &str) -> String {
    format!(
        "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":\"{}\"}}}}",
        escape(name)
    )
}

/// A metadata event naming thread (track) `tid` of process `pid`.
fn name_thread(pid: usize, tid: usize, name: &str) -> String {
    format!(
        "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"{}\"}}}}",
        escape(name)
    )
}

/// A complete ("X") event, in microseconds.
fn complete_event(
    name: &str,
    category: &str,
    pid: usize,
    tid: usize,
    start: Duration,
    end: Duration,
) -> String {
    format!(
        "{{\"name\":\"{}\",\"cat\":\"{category}\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{:.3},\"dur\":{:.3}}}",
        escape(name),
        start.as_secs_f64() * 1e6,
        end.saturating_sub(start).as_secs_f64() * 1e6
    )
}

/// The most events one recording keeps; later ones are counted, not stored.
pub const MAX_RECORDED_EVENTS: usize = 4_000_000;

/// Events of every execution since recording started (see
/// [`ExpressionGraph::start_recording`]).
#[derive(Debug, Clone)]
pub(crate) struct Recording {
    epoch: Instant,
    events: Vec<TraceEvent>,
    gpu_events: Vec<crate::GpuSpan>,
    dropped: u64,
}

impl Recording {
    /// Adds one execution's GPU spans (timed from `execution_start`).
    pub(crate) fn add_gpu(&mut self, execution_start: Instant, spans: &[crate::GpuSpan]) {
        let offset = execution_start.saturating_duration_since(self.epoch);
        for span in spans {
            if self.events.len() + self.gpu_events.len() >= MAX_RECORDED_EVENTS {
                self.dropped += 1;
                continue;
            }
            self.gpu_events.push(crate::GpuSpan {
                start: span.start + offset,
                end: span.end + offset,
                ..span.clone()
            });
        }
    }

    /// Adds one execution's events (timed from `execution_start`).
    pub(crate) fn add(&mut self, execution_start: Instant, events: &[TraceEvent]) {
        let offset = execution_start.saturating_duration_since(self.epoch);
        for event in events {
            if self.events.len() + self.gpu_events.len() >= MAX_RECORDED_EVENTS {
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
    /// `cpu` or `gpu` for a node's run on the host (a GPU node's is the
    /// enqueueing of its kernels); `gpu kernels` or `gpu copy` for work on
    /// a GPU stream (with the GPU timeline on).
    pub category: &'static str,
    /// The worker thread that ran it (for work on a GPU stream, the
    /// stream's index).
    pub thread: usize,
    /// The GPU stream the work ran on (`None`: a host thread).
    pub stream: Option<StreamId>,
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
        let mut stats = self
            .state
            .statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        stats.recording = Some(Recording {
            epoch,
            events: Vec::new(),
            gpu_events: Vec::new(),
            dropped: 0,
        });
    }

    /// Stops recording; returns the recorded events (named `graph`) and the
    /// number of events that did not fit.
    pub fn take_recording(&self, graph: &str) -> (Vec<RecordedEvent>, u64) {
        let recording = self
            .state
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
                let node = &self.plan.nodes[event.node];
                RecordedEvent {
                    graph: graph.to_string(),
                    name: node.name.clone(),
                    category: match node.target {
                        crate::node::Target::Cpu => "cpu",
                        crate::node::Target::Gpu(_) => "gpu",
                    },
                    thread: event.thread,
                    stream: None,
                    start: event.start,
                    end: event.end,
                }
            })
            .chain(recording.gpu_events.iter().map(|span| RecordedEvent {
                graph: graph.to_string(),
                name: span.name.clone(),
                category: gpu_category(span.work),
                thread: span.stream.index,
                stream: Some(span.stream),
                start: span.start,
                end: span.end,
            }))
            .collect();
        (events, recording.dropped)
    }
}

/// Chrome trace JSON of recorded events: one process per graph (named by a
/// metadata event), one complete ("X") event per node execution; work on
/// GPU streams under one process per GPU ("GPU k"), a track per graph and
/// stream ("graph: stream s").
pub fn chrome_trace_of(events: &[RecordedEvent]) -> String {
    let mut graphs: Vec<&str> = Vec::new();
    let mut gpus: Vec<usize> = Vec::new();
    let mut tracks: Vec<(&str, StreamId)> = Vec::new();
    for event in events {
        if !graphs.contains(&event.graph.as_str()) {
            graphs.push(&event.graph);
        }
        if let Some(stream) = event.stream {
            if !gpus.contains(&stream.device) {
                gpus.push(stream.device);
            }
            if !tracks.contains(&(event.graph.as_str(), stream)) {
                tracks.push((&event.graph, stream));
            }
        }
    }
    let gpu_pid =
        |device: usize| graphs.len() + 1 + gpus.iter().position(|&g| g == device).unwrap_or(0);
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
        json.push_str(&name_process(pid + 1, graph));
    }
    for &gpu in &gpus {
        separator(&mut json);
        json.push_str(&name_process(gpu_pid(gpu), &format!("GPU {gpu}")));
    }
    for (tid, (graph, stream)) in tracks.iter().enumerate() {
        separator(&mut json);
        json.push_str(&name_thread(
            gpu_pid(stream.device),
            tid,
            &format!("{graph}: stream {}", stream.index),
        ));
    }
    for event in events {
        separator(&mut json);
        let (pid, tid) = match event.stream {
            None => (
                graphs.iter().position(|g| *g == event.graph).unwrap_or(0) + 1,
                event.thread,
            ),
            Some(stream) => (
                gpu_pid(stream.device),
                tracks
                    .iter()
                    .position(|&(g, s)| g == event.graph && s == stream)
                    .unwrap_or(0),
            ),
        };
        json.push_str(&complete_event(
            &event.name,
            event.category,
            pid,
            tid,
            event.start,
            event.end,
        ));
    }
    json.push_str("]}");
    json
}
