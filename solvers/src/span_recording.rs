//! Timed spans of a solver's work outside its graphs (exchanges across
//! patches, gathers, a Poisson solve on patches) kept for a run's Chrome
//! trace, beside the graphs' own events and on one timeline with them.

use std::cell::RefCell;
use std::time::Instant;
use watershed_exprgraph::RecordedEvent;
use watershed_exprgraph::trace::MAX_RECORDED_EVENTS;

/// The spans recorded since [`SpanRecording::start`], each on a named
/// track of the trace; nothing while not recording.
#[derive(Debug, Default)]
pub(crate) struct SpanRecording {
    /// The epoch of the run's timeline and the spans since.
    recording: RefCell<Option<(Instant, Vec<RecordedEvent>)>>,
}

impl SpanRecording {
    /// Records every following span, timed from `epoch` (the graphs'
    /// epoch), until [`Self::take`].
    pub(crate) fn start(&self, epoch: Instant) {
        *self.recording.borrow_mut() = Some((epoch, Vec::new()));
    }

    /// The spans recorded since [`Self::start`]; recording stops.
    pub(crate) fn take(&self) -> Vec<RecordedEvent> {
        self.recording
            .borrow_mut()
            .take()
            .map(|(_, events)| events)
            .unwrap_or_default()
    }

    /// Records `what` on `track`, from `started` to `ended`, while
    /// recording (at most [`MAX_RECORDED_EVENTS`] spans are kept).
    pub(crate) fn record(&self, track: &str, what: &str, started: Instant, ended: Instant) {
        if let Some((epoch, events)) = self.recording.borrow_mut().as_mut()
            && events.len() < MAX_RECORDED_EVENTS
        {
            events.push(RecordedEvent {
                graph: track.to_string(),
                name: what.to_string(),
                category: "cpu",
                thread: 0,
                stream: None,
                start: started.saturating_duration_since(*epoch),
                end: ended.saturating_duration_since(*epoch),
            });
        }
    }
}
