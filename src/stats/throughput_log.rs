//! The periodic engine log line and the `avg_*_throughput_toks_per_s` gauges, as a pure
//! struct: it accumulates tokens between ticks and turns them into rates. Time is passed
//! in, so tests drive it without sleeping; the stats actor calls `tick` from
//! `ctx.run_interval`.

use std::fmt;
use std::time::{Duration, Instant};

use crate::stats::data::{IterationStats, SchedulerStats};

/// Default interval between two log lines (and gauge updates).
pub const DEFAULT_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Tokens since the last tick plus the latest scheduler snapshot.
#[derive(Debug, Clone)]
pub struct ThroughputLog {
    last_tick: Instant,
    prompt_tokens: u64,
    generation_tokens: u64,
    latest: SchedulerStats,
}

/// One interval's rates and the engine state at its end.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputReport {
    pub prompt_toks_per_s: f64,
    pub generation_toks_per_s: f64,
    pub running: usize,
    pub waiting: usize,
    pub swapped: usize,
    /// Device KV-cache usage, 0..1.
    pub kv_cache_usage: f64,
    /// Host swap-pool usage, 0..1.
    pub cpu_cache_usage: f64,
    /// No tokens in the interval and nothing running or waiting: no log line.
    pub idle: bool,
}

impl ThroughputLog {
    pub fn new(now: Instant) -> Self {
        Self {
            last_tick: now,
            prompt_tokens: 0,
            generation_tokens: 0,
            latest: SchedulerStats::default(),
        }
    }

    /// Adds one engine step. Prompt throughput counts tokens actually computed (prefix-cache
    /// hits excluded), since that is the work the engine did.
    pub fn observe(&mut self, scheduler: &SchedulerStats, iteration: &IterationStats) {
        self.prompt_tokens += iteration.num_prefill_tokens_computed;
        self.generation_tokens += iteration.num_generation_tokens;
        self.latest = scheduler.clone();
    }

    /// Closes the interval ending at `now`: rates over the time actually elapsed (ticks
    /// can be late), then starts a new interval.
    pub fn tick(&mut self, now: Instant) -> ThroughputReport {
        let elapsed = now.saturating_duration_since(self.last_tick).as_secs_f64();
        let rate = |tokens: u64| {
            if elapsed > 0.0 { tokens as f64 / elapsed } else { 0.0 }
        };
        let s = &self.latest;
        let report = ThroughputReport {
            prompt_toks_per_s: rate(self.prompt_tokens),
            generation_toks_per_s: rate(self.generation_tokens),
            running: s.num_running,
            waiting: s.num_waiting,
            swapped: s.num_swapped,
            kv_cache_usage: s.kv_cache_usage,
            cpu_cache_usage: s.cpu_cache_usage,
            idle: self.prompt_tokens == 0 && self.generation_tokens == 0 && s.num_running == 0 && s.num_waiting == 0,
        };
        self.last_tick = now;
        self.prompt_tokens = 0;
        self.generation_tokens = 0;
        report
    }
}

impl fmt::Display for ThroughputReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "prompt {:.1} tok/s, generation {:.1} tok/s, running {}, waiting {}, swapped {}, \
             KV cache {:.1}%, host cache {:.1}%",
            self.prompt_toks_per_s,
            self.generation_toks_per_s,
            self.running,
            self.waiting,
            self.swapped,
            self.kv_cache_usage * 100.0,
            self.cpu_cache_usage * 100.0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(prefill: u64, generated: u64, running: usize, waiting: usize) -> (SchedulerStats, IterationStats) {
        (
            SchedulerStats {
                num_running: running,
                num_waiting: waiting,
                kv_cache_usage: 0.412,
                ..Default::default()
            },
            IterationStats {
                num_prefill_tokens_computed: prefill,
                num_generation_tokens: generated,
                num_prompt_tokens: prefill + 7, // cache hits are not throughput
                ..Default::default()
            },
        )
    }

    #[test]
    fn rates_over_the_interval_and_the_line() {
        let t0 = Instant::now();
        let mut log = ThroughputLog::new(t0);
        let (s, i) = step(2000, 500, 12, 3);
        log.observe(&s, &i);
        let (s, i) = step(2061, 1055, 12, 3);
        log.observe(&s, &i);
        let r = log.tick(t0 + Duration::from_secs(5));
        assert!(!r.idle);
        assert!((r.prompt_toks_per_s - 812.2).abs() < 1e-9);
        assert!((r.generation_toks_per_s - 311.0).abs() < 1e-9);
        assert_eq!(
            r.to_string(),
            "prompt 812.2 tok/s, generation 311.0 tok/s, running 12, waiting 3, swapped 0, \
             KV cache 41.2%, host cache 0.0%"
        );
        // The next interval starts empty; still running keeps it loud.
        let r = log.tick(t0 + Duration::from_secs(10));
        assert_eq!(r.generation_toks_per_s, 0.0);
        assert!(!r.idle);
    }

    #[test]
    fn quiet_when_idle_and_late_ticks_use_real_elapsed_time() {
        let t0 = Instant::now();
        let mut log = ThroughputLog::new(t0);
        assert!(log.tick(t0 + Duration::from_secs(5)).idle);
        let (s, i) = step(0, 100, 0, 0);
        log.observe(&s, &i);
        let r = log.tick(t0 + Duration::from_secs(15));
        assert!(!r.idle, "tokens in the interval make it loud even with nothing running");
        assert!((r.generation_toks_per_s - 10.0).abs() < 1e-9);
        assert!(log.tick(t0 + Duration::from_secs(20)).idle);
        // A tick at the same instant divides by nothing.
        assert_eq!(log.tick(t0 + Duration::from_secs(20)).prompt_toks_per_s, 0.0);
    }
}
