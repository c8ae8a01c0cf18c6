//! Async scheduling's bookkeeping on the scheduler side (vLLM keeps it in its async
//! scheduler): while the executor runs step N, the scheduler chooses step N+1, so a request
//! can have tokens in a step that has not come back, and samples that are not known yet.
//! The executor side, which fills those samples in, is `executor::previous_samples`.
//!
//! # Invariants
//!
//! - **Two steps at most.** At most [`MAX_STEPS_IN_FLIGHT`] steps are in flight: one running
//!   and one queued behind it ([`StepsInFlight`]). A plain step (`Scheduler::schedule`) is
//!   chosen only with none in flight; a look-ahead one (`Scheduler::schedule_ahead`) only
//!   with one in flight, async scheduling on, and no draining.
//! - **Draining.** A step that fails while another is queued fails every running request;
//!   nothing is scheduled until the queued one is back too, so its failure cannot reach
//!   requests admitted after the first.
//! - **Tokens in order.** A request's in-flight tokens ([`InFlight`]) follow its computed
//!   ones: its next step starts at `num_computed + in_flight.tokens()`, and steps come back
//!   in the order they were sent.
//! - **One placeholder per sequence.** A request has at most one pending sample per step in
//!   flight. A look-ahead step carries at most one placeholder for it, as its last token
//!   (`PENDING_TOKEN`): the token the running step samples. A request whose pending sample
//!   ends it by length is left out of the look-ahead step.
//! - **Nothing in flight moves.** Preemption (swap or recompute) and swap-in touch only
//!   requests with nothing in flight; a look-ahead step that would need either is not chosen,
//!   and the next plain step makes it.
//! - **Aborts do not wait.** A request aborted while in flight leaves the scheduler at once;
//!   when its step comes back, its sequence is skipped.

/// Steps the scheduler actor may have sent and not had answered: one running, one queued.
pub(crate) const MAX_STEPS_IN_FLIGHT: usize = 2;

/// One request's share of the steps in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InFlight {
    /// Tokens in steps sent to the executor that have not come back yet.
    tokens: usize,
    /// Tokens those steps will sample: not known yet, so a step scheduled ahead feeds the
    /// executor a placeholder for them.
    samples: usize,
}

impl InFlight {
    pub fn tokens(self) -> usize {
        self.tokens
    }

    pub fn samples(self) -> usize {
        self.samples
    }

    /// A step was chosen with `num_tokens` more of this request, sampling after them when
    /// `sample`.
    pub fn send(&mut self, num_tokens: usize, sample: bool) {
        self.tokens += num_tokens;
        if sample {
            self.samples += 1;
            debug_assert!(self.samples <= MAX_STEPS_IN_FLIGHT, "one sample per step in flight");
        }
    }

    /// That step came back.
    pub fn receive(&mut self, num_tokens: usize, sample: bool) {
        self.tokens -= num_tokens;
        if sample {
            self.samples -= 1;
        }
    }
}

/// Which step the scheduler actor may send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextStep {
    /// The executor is idle: a plain step (`Scheduler::schedule`).
    Schedule,
    /// The executor runs one step: the one after it (`Scheduler::schedule_ahead`).
    ScheduleAhead,
    /// Wait for a step to come back.
    Wait,
}

/// The steps the scheduler actor has sent to the executor and not had answered.
#[derive(Debug, Default)]
pub(crate) struct StepsInFlight {
    count: usize,
    /// A step failed while another was queued: schedule nothing until that one is back.
    draining: bool,
}

impl StepsInFlight {
    pub fn next(&self, async_scheduling: bool) -> NextStep {
        match self.count {
            0 => NextStep::Schedule,
            1 if async_scheduling && !self.draining => NextStep::ScheduleAhead,
            _ => NextStep::Wait,
        }
    }

    pub fn sent(&mut self) {
        self.count += 1;
        debug_assert!(self.count <= MAX_STEPS_IN_FLIGHT, "at most two steps in flight");
    }

    /// A step came back, `failed` or not.
    pub fn returned(&mut self, failed: bool) {
        self.count -= 1;
        if failed {
            self.draining = self.count > 0;
        }
        if self.count == 0 {
            self.draining = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_counts_its_tokens_and_samples_until_their_steps_return() {
        let mut request = InFlight::default();
        request.send(5, true);
        request.send(1, true);
        assert_eq!((request.tokens(), request.samples()), (6, 2));
        request.receive(5, true);
        assert_eq!((request.tokens(), request.samples()), (1, 1));
        request.send(3, false);
        request.receive(1, true);
        request.receive(3, false);
        assert_eq!(request, InFlight::default());
    }

    #[test]
    fn a_step_ahead_only_while_one_runs_and_async_scheduling_is_on() {
        let mut steps = StepsInFlight::default();
        assert_eq!(steps.next(true), NextStep::Schedule);
        steps.sent();
        assert_eq!(steps.next(true), NextStep::ScheduleAhead);
        assert_eq!(steps.next(false), NextStep::Wait);
        steps.sent();
        assert_eq!(steps.next(true), NextStep::Wait);
        steps.returned(false);
        assert_eq!(steps.next(true), NextStep::ScheduleAhead);
        steps.returned(false);
        assert_eq!(steps.next(false), NextStep::Schedule);
    }

    #[test]
    fn a_failure_with_a_step_queued_drains_until_that_step_is_back() {
        let mut steps = StepsInFlight::default();
        steps.sent();
        steps.sent();
        steps.returned(true);
        assert_eq!(steps.next(true), NextStep::Wait, "no step ahead while draining");
        steps.returned(false);
        assert_eq!(steps.next(true), NextStep::Schedule);
        steps.sent();
        assert_eq!(steps.next(true), NextStep::ScheduleAhead, "draining is over");
    }

    #[test]
    fn a_failure_with_nothing_queued_does_not_drain() {
        let mut steps = StepsInFlight::default();
        steps.sent();
        steps.returned(true);
        steps.sent();
        assert_eq!(steps.next(true), NextStep::ScheduleAhead);
    }
}
