//! [`ExecutionMode::Adaptive`]: a graph that may use up to `n` threads
//! times its first executions on one thread and on `n`, alternately, and
//! keeps whichever was faster.
//!
//! Why: more threads are not always faster. On the 2-core development
//! machine the lid-driven cavity at 64^2 and 128^2 runs 20-25 % slower on
//! two threads than on one (its multigrid levels are below the size at
//! which kernels split across threads, so the second thread only adds
//! hand-offs and moves the levels between the cores' caches), while the
//! same cavity at 256^2 runs 1.5x faster on two. Which side of that line
//! a case falls on depends on the machine, so it is measured, not guessed.
//!
//! Results do not depend on the choice: executions are bitwise the same on
//! any number of threads (the scheduler's property tests), so switching
//! between the trial modes changes no value.
//!
//! The schedule: the first [`WARM_UP`] executions run on one thread and
//! are not timed (they prepare kernels and fill the pools); then
//! [`TRIALS`] executions with each mode alternate, threaded first; then
//! the mode with the smaller median time is kept for good.

use crate::scheduler::ExecutionMode;
use std::time::Duration;

/// Timed executions per mode before the choice. Eight: with four, a
/// 128^2 cavity (one thread 20 % faster) chose two threads in one run of
/// six on the development VM, whose timings scatter.
pub const TRIALS: usize = 8;

/// Untimed executions before the trials (kernels are prepared and pools
/// filled by the first).
pub const WARM_UP: usize = 2;

/// Where an adaptive graph stands.
#[derive(Debug, Clone, Default)]
pub(crate) struct AdaptiveState {
    /// Executions started so far.
    executions: usize,
    /// Times of the one-thread trials.
    serial: Vec<Duration>,
    /// Times of the threaded trials.
    threaded: Vec<Duration>,
    /// The mode kept, once chosen.
    choice: Option<ExecutionMode>,
}

impl AdaptiveState {
    /// The mode the next execution of an `Adaptive(threads)` graph runs in,
    /// and whether its time is a trial to record.
    pub(crate) fn next_mode(&self, threads: usize) -> (ExecutionMode, bool) {
        if threads <= 1 {
            return (ExecutionMode::Serial, false);
        }
        if let Some(choice) = self.choice {
            return (choice, false);
        }
        match self.executions {
            n if n < WARM_UP => (ExecutionMode::Serial, false),
            // Threaded first, then one thread, and so on.
            n if (n - WARM_UP).is_multiple_of(2) => (ExecutionMode::Threaded(threads), true),
            _ => (ExecutionMode::Serial, true),
        }
    }

    /// Records an execution of an `Adaptive(threads)` graph that ran in
    /// `mode` and took `elapsed` (a trial when `timed`); chooses once both
    /// modes have [`TRIALS`] times.
    pub(crate) fn record(
        &mut self,
        threads: usize,
        mode: ExecutionMode,
        timed: bool,
        elapsed: Duration,
    ) {
        self.executions += 1;
        if !timed || self.choice.is_some() {
            return;
        }
        match mode {
            ExecutionMode::Serial => self.serial.push(elapsed),
            _ => self.threaded.push(elapsed),
        }
        if self.serial.len() >= TRIALS && self.threaded.len() >= TRIALS {
            self.choice = Some(choose(&self.serial, &self.threaded, threads));
        }
    }

    /// The mode kept, once chosen.
    pub(crate) fn choice(&self) -> Option<ExecutionMode> {
        self.choice
    }
}

/// The median of `times` (the upper one of an even count).
fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    sorted
        .get(sorted.len() / 2)
        .copied()
        .unwrap_or(Duration::MAX)
}

/// One thread when its median time is no slower than the threaded one's
/// (a tie keeps the mode that occupies fewer cores), else `threads`
/// threads. Medians, so that one trial disturbed by another process does
/// not decide.
pub(crate) fn choose(serial: &[Duration], threaded: &[Duration], threads: usize) -> ExecutionMode {
    if median(serial) <= median(threaded) || threads <= 1 {
        ExecutionMode::Serial
    } else {
        ExecutionMode::Threaded(threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|&v| Duration::from_millis(v)).collect()
    }

    #[test]
    fn the_trials_alternate_after_untimed_warm_ups_then_the_choice_stays() {
        let mut state = AdaptiveState::default();
        let mut seen = Vec::new();
        // One thread takes 10 ms, two take 6 ms: two threads win.
        for _ in 0..(WARM_UP + 2 * TRIALS + 3) {
            let (mode, timed) = state.next_mode(2);
            seen.push((mode, timed));
            let elapsed = match mode {
                ExecutionMode::Serial => Duration::from_millis(10),
                _ => Duration::from_millis(6),
            };
            state.record(2, mode, timed, elapsed);
        }
        for &first in &seen[..WARM_UP] {
            assert_eq!(first, (ExecutionMode::Serial, false));
        }
        for (i, &(mode, timed)) in seen
            .iter()
            .enumerate()
            .take(WARM_UP + 2 * TRIALS)
            .skip(WARM_UP)
        {
            let expected = if (i - WARM_UP).is_multiple_of(2) {
                ExecutionMode::Threaded(2)
            } else {
                ExecutionMode::Serial
            };
            assert_eq!((mode, timed), (expected, true), "execution {i}");
        }
        for &(mode, timed) in &seen[WARM_UP + 2 * TRIALS..] {
            assert_eq!((mode, timed), (ExecutionMode::Threaded(2), false));
        }
        assert_eq!(state.choice(), Some(ExecutionMode::Threaded(2)));
    }

    #[test]
    fn the_faster_median_wins_and_one_slow_trial_does_not_decide() {
        // Two threads are faster except for one outlier.
        assert_eq!(
            choose(&ms(&[10, 10, 11, 10]), &ms(&[6, 40, 6, 7]), 2),
            ExecutionMode::Threaded(2)
        );
        // One thread is faster except for one outlier.
        assert_eq!(
            choose(&ms(&[5, 5, 50, 6]), &ms(&[7, 7, 8, 7]), 2),
            ExecutionMode::Serial
        );
        // A tie keeps one thread.
        assert_eq!(
            choose(&ms(&[5, 5, 5, 5]), &ms(&[5, 5, 5, 5]), 4),
            ExecutionMode::Serial
        );
    }

    #[test]
    fn one_thread_needs_no_trials() {
        let mut state = AdaptiveState::default();
        for _ in 0..3 {
            assert_eq!(state.next_mode(1), (ExecutionMode::Serial, false));
            state.record(1, ExecutionMode::Serial, false, Duration::from_millis(1));
        }
        assert_eq!(state.choice(), None);
    }
}
