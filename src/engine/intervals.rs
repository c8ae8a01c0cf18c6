//! One monotonic clock per request: its timestamps, and every interval derived from them in
//! one function (METRICS.md's definitions, one comment per interval).

use std::time::Instant;

/// Monotonic timestamps of one request, all from `Instant` (one clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestTimestamps {
    /// The API parsed the request.
    pub arrival: Instant,
    /// The scheduler accepted it.
    pub queued: Option<Instant>,
    /// First included in a batch.
    pub scheduled: Option<Instant>,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub finished: Option<Instant>,
}

/// Request intervals in seconds; `None` when an endpoint of the interval never happened.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestIntervals {
    pub e2e_s: f64,
    pub queue_s: Option<f64>,
    pub time_to_first_token_s: Option<f64>,
    pub prefill_s: Option<f64>,
    pub decode_s: Option<f64>,
    pub inference_s: Option<f64>,
    pub time_per_output_token_s: Option<f64>,
}

fn secs(later: Instant, earlier: Instant) -> f64 {
    later.saturating_duration_since(earlier).as_secs_f64()
}

impl RequestTimestamps {
    pub fn new(arrival: Instant) -> Self {
        Self {
            arrival,
            queued: None,
            scheduled: None,
            first_token: None,
            last_token: None,
            finished: None,
        }
    }

    /// Every interval of a finished request, from its timestamps and generated-token count.
    /// Preemption time stays inside whichever interval it happened in.
    pub fn intervals(&self, generated_tokens: usize) -> RequestIntervals {
        let finished = self.finished.unwrap_or(self.arrival);
        RequestIntervals {
            // end-to-end = finished − arrival
            e2e_s: secs(finished, self.arrival),
            // queue = scheduled − queued
            queue_s: self.scheduled.zip(self.queued).map(|(s, q)| secs(s, q)),
            // time to first token = first_token − arrival
            time_to_first_token_s: self.first_token.map(|f| secs(f, self.arrival)),
            // prefill = first_token − scheduled
            prefill_s: self.first_token.zip(self.scheduled).map(|(f, s)| secs(f, s)),
            // decode = last_token − first_token
            decode_s: self.last_token.zip(self.first_token).map(|(l, f)| secs(l, f)),
            // inference = last_token − scheduled
            inference_s: self.last_token.zip(self.scheduled).map(|(l, s)| secs(l, s)),
            // time per output token = (last_token − first_token) / (generated − 1)
            time_per_output_token_s: match (self.last_token, self.first_token) {
                (Some(l), Some(f)) if generated_tokens > 1 => Some(secs(l, f) / (generated_tokens - 1) as f64),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn intervals_follow_the_contract() {
        let t0 = Instant::now();
        let at = |ms: u64| Some(t0 + Duration::from_millis(ms));
        let ts = RequestTimestamps {
            arrival: t0,
            queued: at(10),
            scheduled: at(30),
            first_token: at(100),
            last_token: at(400),
            finished: at(410),
        };
        let i = ts.intervals(4);
        let close = |a: Option<f64>, b: f64| (a.expect("set") - b).abs() < 1e-9;
        assert!((i.e2e_s - 0.41).abs() < 1e-9);
        assert!(close(i.queue_s, 0.02));
        assert!(close(i.time_to_first_token_s, 0.1));
        assert!(close(i.prefill_s, 0.07));
        assert!(close(i.decode_s, 0.3));
        assert!(close(i.inference_s, 0.37));
        assert!(close(i.time_per_output_token_s, 0.1));
    }

    #[test]
    fn a_request_without_tokens_has_no_token_intervals() {
        let t0 = Instant::now();
        let mut ts = RequestTimestamps::new(t0);
        ts.finished = Some(t0 + Duration::from_millis(5));
        let i = ts.intervals(0);
        assert!(i.time_to_first_token_s.is_none());
        assert!(i.time_per_output_token_s.is_none());
        assert!((i.e2e_s - 0.005).abs() < 1e-9);
    }
}
