//! Engine instants as wall-clock span times.

use std::time::{Instant, SystemTime};

/// Instants to wall-clock times, from one anchor taken once: every span time goes through
/// here, so spans agree with each other and with the histograms' intervals.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    instant: Instant,
    system: SystemTime,
}

impl WallClock {
    pub fn now() -> Self {
        Self {
            instant: Instant::now(),
            system: SystemTime::now(),
        }
    }

    pub fn at(&self, instant: Instant) -> SystemTime {
        match instant.checked_duration_since(self.instant) {
            Some(after) => self.system + after,
            None => self.system - self.instant.duration_since(instant),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_wall_clock_maps_instants_before_and_after_its_anchor() {
        let clock = WallClock::now();
        let later = clock.instant + Duration::from_secs(2);
        assert_eq!(clock.at(later), clock.system + Duration::from_secs(2));
        if let Some(earlier) = clock.instant.checked_sub(Duration::from_secs(1)) {
            assert_eq!(clock.at(earlier), clock.system - Duration::from_secs(1));
        }
    }
}
