//! Export failures are not returned to the SDK, which would log every one of them at ERROR;
//! each exporter warns at most once a minute with the number of failures it kept quiet, and
//! says once when export works again.

use std::time::{Duration, Instant};

/// At most one failure warning per this period.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Export outcomes → at most one warning per `WARN_EVERY`, then one "works again" line for
/// a failure streak that was warned about.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    last_warn: Option<Instant>,
    /// Failures not warned about since the last warning.
    suppressed: u64,
    /// Consecutive failures, and whether this streak produced a warning.
    streak: u64,
    streak_warned: bool,
}

impl FailureLog {
    /// `Some(suppressed since the last warning)` when this failure should be logged.
    pub(crate) fn failure(&mut self, now: Instant) -> Option<u64> {
        self.streak += 1;
        if self
            .last_warn
            .is_some_and(|t| now.saturating_duration_since(t) < WARN_EVERY)
        {
            self.suppressed += 1;
            return None;
        }
        self.last_warn = Some(now);
        self.streak_warned = true;
        Some(std::mem::take(&mut self.suppressed))
    }

    /// `Some(failures in the streak)` when a warned-about streak just ended.
    pub(crate) fn success(&mut self) -> Option<u64> {
        let streak = std::mem::take(&mut self.streak);
        std::mem::take(&mut self.streak_warned).then_some(streak)
    }
}
