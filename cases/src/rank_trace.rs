//! The trace of a run on several ranks: every rank's recorded events
//! gathered onto rank 0, each graph's and track's name prefixed with its
//! rank (`rank 1: momentum patch 2`), so that one Chrome trace shows every
//! rank on one timeline (the driver starts every rank's clock after a
//! collective call: the ranks' timelines agree to a message's latency).

use crate::error::{CaseError, CaseResult};
use std::time::Duration;
use watershed_exprgraph::RecordedEvent;
use watershed_exprgraph::placement::StreamId;
use watershed_fields::ranks::RankLink;

/// The categories an event can have (`RecordedEvent::category`), by their
/// code in a message.
const CATEGORIES: [&str; 4] = ["cpu", "gpu", "gpu kernels", "gpu copy"];

/// Every rank's `events` (collective): on rank 0 all of them, rank by
/// rank, each graph's name prefixed with its rank; `None` on the others.
pub fn gather_trace(
    link: &dyn RankLink,
    events: &[RecordedEvent],
) -> CaseResult<Option<Vec<RecordedEvent>>> {
    let mine = encode(events)?;
    let ranks = link.ranks();
    let lengths = link.gather_in_rank_order(&[mine.len() as f64], &vec![1; ranks])?;
    let counts: Vec<usize> = lengths.iter().map(|&n| n as usize).collect();
    let Some(all) = link.gather_to_root(&mine, &counts)? else {
        return Ok(None);
    };
    let mut merged = Vec::new();
    let mut at = 0;
    for (rank, &count) in counts.iter().enumerate() {
        let part = all.get(at..at + count).ok_or_else(|| malformed(rank))?;
        for mut event in decode(part).ok_or_else(|| malformed(rank))? {
            event.graph = format!("rank {rank}: {}", event.graph);
            merged.push(event);
        }
        at += count;
    }
    Ok(Some(merged))
}

fn malformed(rank: usize) -> CaseError {
    CaseError::Usage(format!(
        "the trace events rank {rank} sent cannot be read; run the same watershed program on every rank"
    ))
}

/// `events` as numbers: their count, then per event its graph's and
/// name's lengths and UTF-8 bytes, its category's code, thread, stream
/// (device and index, -1 for none) and start and end in nanoseconds.
fn encode(events: &[RecordedEvent]) -> CaseResult<Vec<f64>> {
    let mut out = vec![events.len() as f64];
    for event in events {
        for text in [&event.graph, &event.name] {
            out.push(text.len() as f64);
            out.extend(text.bytes().map(f64::from));
        }
        let category = CATEGORIES
            .iter()
            .position(|&c| c == event.category)
            .ok_or_else(|| {
                CaseError::Usage(format!(
                    "trace event {} has the unknown category {}",
                    event.name, event.category
                ))
            })?;
        out.push(category as f64);
        out.push(event.thread as f64);
        match event.stream {
            Some(stream) => out.extend([stream.device as f64, stream.index as f64]),
            None => out.extend([-1.0, -1.0]),
        }
        out.push(event.start.as_nanos() as f64);
        out.push(event.end.as_nanos() as f64);
    }
    Ok(out)
}

/// What [`encode`] wrote, or `None` when it is not such a sequence.
fn decode(values: &[f64]) -> Option<Vec<RecordedEvent>> {
    let mut at = 0;
    let mut next = || {
        let value = *values.get(at)?;
        at += 1;
        (value >= 0.0 || value == -1.0).then_some(value)
    };
    let count = next()? as usize;
    let mut events = Vec::with_capacity(count.min(values.len()));
    for _ in 0..count {
        let mut text = || -> Option<String> {
            let len = next()? as usize;
            let bytes = (0..len)
                .map(|_| next().map(|b| b as u8))
                .collect::<Option<Vec<u8>>>()?;
            String::from_utf8(bytes).ok()
        };
        let (graph, name) = (text()?, text()?);
        let category = *CATEGORIES.get(next()? as usize)?;
        let thread = next()? as usize;
        let (device, index) = (next()?, next()?);
        let stream = (device >= 0.0).then_some(StreamId {
            device: device as usize,
            index: index as usize,
        });
        let start = Duration::from_nanos(next()? as u64);
        let end = Duration::from_nanos(next()? as u64);
        events.push(RecordedEvent {
            graph,
            name,
            category,
            thread,
            stream,
            start,
            end,
        });
    }
    (at == values.len()).then_some(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use watershed_fields::ranks::SingleProcess;

    fn event(
        graph: &str,
        name: &str,
        category: &'static str,
        stream: Option<StreamId>,
    ) -> RecordedEvent {
        RecordedEvent {
            graph: graph.into(),
            name: name.into(),
            category,
            thread: 3,
            stream,
            start: Duration::from_nanos(1_234_567_891),
            end: Duration::from_nanos(98_765_432_123),
        }
    }

    #[test]
    fn events_survive_the_message_with_their_rank_in_front() {
        let events = vec![
            event(
                "exchanges across patches",
                "seams of the velocity",
                "cpu",
                None,
            ),
            event(
                "momentum patch 3",
                "u* — ω²",
                "gpu kernels",
                Some(StreamId {
                    device: 1,
                    index: 2,
                }),
            ),
        ];
        let encoded = encode(&events).unwrap();
        assert_eq!(decode(&encoded).unwrap(), events);
        let gathered = gather_trace(&SingleProcess, &events).unwrap().unwrap();
        assert_eq!(gathered.len(), 2);
        assert_eq!(gathered[0].graph, "rank 0: exchanges across patches");
        assert_eq!(gathered[1].graph, "rank 0: momentum patch 3");
        assert_eq!(gathered[1].name, "u* — ω²");
        assert_eq!(gathered[1].stream, events[1].stream);
        assert_eq!(gathered[1].end, events[1].end);
    }

    #[test]
    fn a_cut_or_padded_message_is_not_read() {
        let encoded = encode(&[event("g", "n", "cpu", None)]).unwrap();
        assert!(decode(&encoded[..encoded.len() - 1]).is_none());
        let mut padded = encoded.clone();
        padded.push(0.0);
        assert!(decode(&padded).is_none());
        let mut bad_category = encoded;
        let category_at = 1 + 2 + 1 + 1;
        bad_category[category_at] = 9.0;
        assert!(decode(&bad_category).is_none());
    }
}
