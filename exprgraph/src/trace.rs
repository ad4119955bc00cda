//! The timeline of the last execution in the Chrome trace format (opens in
//! Perfetto or chrome://tracing), and the per-expression timing table.

use crate::graph::ExpressionGraph;
use std::fmt;
use std::fmt::Write;
use std::time::Duration;

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
