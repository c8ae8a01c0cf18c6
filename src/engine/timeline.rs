//! What happened to one traced request inside the engine, and when: the timestamps its
//! intervals come from plus a capped list of scheduling events. Handed back with its
//! `Finished` event so the API builds the request's span from the engine's own clock (the
//! one the histograms use) instead of timing anything again.

use std::time::Instant;

use crate::engine::intervals::RequestTimestamps;

/// At most this many events per request; more are counted in `dropped_events`.
pub const MAX_EVENTS: usize = 32;
/// At most this many prefill chunks per request (one span each with phase spans on); more
/// are counted in `dropped_chunks`.
pub const MAX_PREFILL_CHUNKS: usize = 64;

/// One step's share of a request's prompt: when the step ran and which tokens it computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillChunk {
    /// When the executor started the step (its end minus its measured wall time).
    pub start: Instant,
    /// When the step's output reached the scheduler.
    pub end: Instant,
    /// The prompt position of the chunk's first token.
    pub position: u32,
    pub tokens: u32,
}

/// A scheduling event, named as the span event says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestEventKind {
    /// Admitted into the running batch (again after a recompute preemption).
    Scheduled,
    FirstToken,
    /// Taken out of the running batch to make room (recompute or swap).
    Preempted,
    /// Its KV blocks moved to the host swap pool.
    SwappedOut,
    /// Its KV blocks came back from the host swap pool.
    SwappedIn,
    /// Ended by the client going away.
    Aborted,
}

impl RequestEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::FirstToken => "first_token",
            Self::Preempted => "preempted",
            Self::SwappedOut => "swapped_out",
            Self::SwappedIn => "swapped_in",
            Self::Aborted => "aborted",
        }
    }
}

/// The events and prefill chunks of one request, capped at [`MAX_EVENTS`] and
/// [`MAX_PREFILL_CHUNKS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestEvents {
    pub events: Vec<(RequestEventKind, Instant)>,
    pub dropped_events: u32,
    pub prefill_chunks: Vec<PrefillChunk>,
    pub dropped_chunks: u32,
}

impl RequestEvents {
    pub fn record(&mut self, kind: RequestEventKind, at: Instant) {
        if self.events.len() < MAX_EVENTS {
            self.events.push((kind, at));
        } else {
            self.dropped_events = self.dropped_events.saturating_add(1);
        }
    }

    pub fn record_prefill_chunk(&mut self, chunk: PrefillChunk) {
        if self.prefill_chunks.len() < MAX_PREFILL_CHUNKS {
            self.prefill_chunks.push(chunk);
        } else {
            self.dropped_chunks = self.dropped_chunks.saturating_add(1);
        }
    }
}

/// A finished traced request's timestamps and events.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestTimeline {
    pub timestamps: RequestTimestamps,
    pub events: RequestEvents,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_past_the_cap_are_counted_not_kept() {
        let mut events = RequestEvents::default();
        let now = Instant::now();
        for _ in 0..MAX_EVENTS + 3 {
            events.record(RequestEventKind::Preempted, now);
        }
        assert_eq!(events.events.len(), MAX_EVENTS);
        assert_eq!(events.dropped_events, 3);
        let chunk = PrefillChunk {
            start: now,
            end: now,
            position: 0,
            tokens: 16,
        };
        for _ in 0..MAX_PREFILL_CHUNKS + 2 {
            events.record_prefill_chunk(chunk);
        }
        assert_eq!(events.prefill_chunks.len(), MAX_PREFILL_CHUNKS);
        assert_eq!(events.dropped_chunks, 2);
    }
}
