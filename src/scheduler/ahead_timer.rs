//! The scheduler actor's one timer for a step ahead that is chosen late
//! (`StepLoop::ahead_delay`): armed when such a step is due, and re-armed when a later step's
//! due time comes earlier than the armed one. A timer left armed for a long step that came
//! back early would otherwise hold the next step's choice until its own, later time.

use std::time::Instant;

/// The armed timer, if any: its handle (an actix `SpawnHandle` in the actor) and when it fires.
#[derive(Debug)]
pub struct AheadTimer<H> {
    armed: Option<(H, Instant)>,
}

impl<H> Default for AheadTimer<H> {
    fn default() -> Self {
        Self { armed: None }
    }
}

/// What the actor does for a step ahead due at a given time.
#[derive(Debug, PartialEq, Eq)]
pub enum Rearm<H> {
    /// The armed timer fires by then: nothing.
    Keep,
    /// Arm a timer for the due time, cancelling this one first when there is one (armed for
    /// later).
    Arm { cancel: Option<H> },
}

impl<H> AheadTimer<H> {
    /// What to do for a step ahead due at `due`; after an `Arm`, call [`Self::armed`].
    pub fn due(&mut self, due: Instant) -> Rearm<H> {
        match self.armed.take() {
            Some((handle, fires)) if fires <= due => {
                self.armed = Some((handle, fires));
                Rearm::Keep
            }
            stale => Rearm::Arm {
                cancel: stale.map(|(handle, _)| handle),
            },
        }
    }

    /// A timer is armed to fire at `fires`.
    pub fn armed(&mut self, handle: H, fires: Instant) {
        self.armed = Some((handle, fires));
    }

    /// The timer fired: none is armed.
    pub fn fired(&mut self) {
        self.armed = None;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn arms_once_keeps_an_earlier_timer_and_replaces_a_later_one() {
        let now = Instant::now();
        let at = |ms| now + Duration::from_millis(ms);
        let mut timer = AheadTimer::default();
        assert_eq!(timer.due(at(400)), Rearm::Arm { cancel: None });
        timer.armed(1, at(400));
        // The same step asks again (the actor steps on every event): one timer.
        assert_eq!(timer.due(at(400)), Rearm::Keep);
        // A later due time: the armed timer fires first, and the actor steps then.
        assert_eq!(timer.due(at(900)), Rearm::Keep);
        // The long step came back early and a shorter one is due before the armed timer:
        // that timer is cancelled and a new one armed.
        assert_eq!(timer.due(at(120)), Rearm::Arm { cancel: Some(1) });
        timer.armed(2, at(120));
        assert_eq!(timer.due(at(120)), Rearm::Keep);
        timer.fired();
        assert_eq!(timer.due(at(500)), Rearm::Arm { cancel: None });
    }
}
