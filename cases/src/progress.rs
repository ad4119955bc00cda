//! Progress of a run on stderr: an indicatif bar on a terminal, plain
//! periodic lines otherwise (logs, CI), nothing with `--quiet`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, else periodic lines.
    Auto,
    /// Periodic plain lines (every `LINE_PERIOD`).
    Lines,
    /// Nothing.
    Quiet,
}

/// Seconds between plain progress lines.
pub const LINE_PERIOD: Duration = Duration::from_secs(2);

/// What the progress display shows after a step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepInfo {
    /// Steps taken (absolute).
    pub step: u64,
    /// Simulated time.
    pub time: f64,
    /// The last step's dt.
    pub dt: f64,
    /// Fraction of the run done, 0..=1.
    pub fraction: f64,
    /// Cell updates per second since the run (or restart) began.
    pub cells_per_second: f64,
    /// A case-specific figure (e.g. the kinetic energy).
    pub status: String,
}

/// Shows progress in the chosen mode.
pub struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    started: Instant,
    last_line: Instant,
}

const BAR_UNITS: u64 = 1000;

impl Progress {
    /// A progress display for `case`.
    pub fn new(mode: ProgressMode, case: &str) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let (bar, lines) = match mode {
            ProgressMode::Quiet => (None, false),
            ProgressMode::Lines => (None, true),
            ProgressMode::Auto if !terminal => (None, true),
            ProgressMode::Auto => {
                let bar = ProgressBar::with_draw_target(
                    Some(BAR_UNITS),
                    ProgressDrawTarget::stderr_with_hz(5),
                );
                let style = ProgressStyle::with_template(
                    "{prefix} [{elapsed_precise}] {wide_bar} {percent:>3}% ETA {eta} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style);
                bar.set_prefix(case.to_string());
                (Some(bar), false)
            }
        };
        let now = Instant::now();
        Progress {
            bar,
            lines,
            started: now,
            last_line: now,
        }
    }

    fn describe(info: &StepInfo) -> String {
        let mut text = format!(
            "step {} t = {:.5e} dt = {:.3e} {:.3e} cell updates/s",
            info.step, info.time, info.dt, info.cells_per_second
        );
        if !info.status.is_empty() {
            text.push_str("  ");
            text.push_str(&info.status);
        }
        text
    }

    /// Reports a step.
    pub fn update(&mut self, info: &StepInfo) {
        let fraction = info.fraction.clamp(0.0, 1.0);
        if let Some(bar) = &self.bar {
            bar.set_position((fraction * BAR_UNITS as f64) as u64);
            bar.set_message(Self::describe(info));
        } else if self.lines && self.last_line.elapsed() >= LINE_PERIOD {
            self.last_line = Instant::now();
            let elapsed = self.started.elapsed().as_secs_f64();
            let eta = if fraction > 0.0 {
                format!("{:.0} s", elapsed * (1.0 - fraction) / fraction)
            } else {
                "unknown".into()
            };
            let _ = writeln!(
                std::io::stderr(),
                "[{elapsed:>7.1} s] {:>5.1}% ETA {eta}  {}",
                100.0 * fraction,
                Self::describe(info)
            );
        }
    }

    /// Prints a line without breaking the bar.
    pub fn note(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None if self.lines => {
                let _ = writeln!(std::io::stderr(), "{text}");
            }
            None => {}
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
