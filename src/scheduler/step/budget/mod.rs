//! How one step is shared between decodes, short prompts and long ones (issue 31).
//!
//! - **A time budget.** Besides `max_num_batched_tokens`, a step's predicted time
//!   ([`StepTimeModel`]) stays under `max_step`; prefill chunks are sized to fit it.
//! - **Decodes and short prompts first.** Before any long prompt gets a chunk, room is
//!   reserved for every running decode and for the short prompts (at most
//!   `long_prefill_token_threshold` tokens from the first; the tail of a long prompt stays
//!   long, for each of its tokens attends to the whole context) that this step can start, so
//!   a chat request that arrives during long prefills gets its first token a step or two
//!   later. A short prompt keeps room for the decodes only: short prompts share what is left
//!   in arrival order, so a burst of them fills the budget instead of each waiting for all
//!   the others.
//! - **Long prompts one at a time** (`max_long_partial_prefills`, as vLLM): a long prompt
//!   gets what the others leave, and [`MIN_PREFILL_CHUNK`] tokens when they leave nothing,
//!   so it progresses whatever the load.
//! - **A prompt is not cut when no one waits on the step**, if the step finishes it within
//!   [`LONE_PROMPT_BUDGETS`] budgets: a prompt alone in the scheduler, and short prompts
//!   while nothing decodes (a burst of requests on an idle engine is prefilled together, as
//!   without the budget). Chunks cost more per token than one step.
//! - **A burst of short prompts that outnumbers the decoding streams is not cut** either, if
//!   the step stays within [`BURST_BUDGETS`] budgets. Cutting it spares the streams no time
//!   (they wait for all of its chunks either way, in more and shorter gaps), while the
//!   burst's own requests wait longer for their first tokens and, once started, stall behind
//!   the chunks of the rest.

use std::time::Duration;

use super::time::{StepShape, StepTimeCoefficients};

/// A prompt's chunk when decodes and short prompts leave it no room (it still progresses).
pub const MIN_PREFILL_CHUNK: usize = 32;
/// The largest chunk while the step-time model has not measured a prefill step yet.
pub const COLD_PREFILL_CHUNK: usize = 128;
/// A prompt is not cut when the step that finishes it is predicted at most this many budgets
/// long and no one waits on it: a prompt alone in the scheduler (no other request running,
/// waiting or swapped), or a short prompt while no request decodes (all are on their
/// prompts, none swapped out). Such prefills run as fast as without the budget (chunks cost
/// more per token: see docs/08-performance.md), and a request that arrives meanwhile waits a
/// bounded time. A long prompt with others in the scheduler is always chunked to the budget,
/// so a chat request that arrives during it is served. Short prompts taken whole may exceed
/// `max_num_partial_prefills` (none stays partial); a prompt after them is not cut to fit.
pub const LONE_PROMPT_BUDGETS: f64 = 12.0;
/// Short prompts are not cut when at least as many wait as streams decode, and the step that
/// takes them is predicted at most this many budgets long: the decoding streams see one gap
/// of at most this many budgets instead of as many budget-long gaps. (A burst of eight
/// 128-token prompts beside one stream is about four budgets of the default model on a
/// 2-vCPU Zen 5, docs/08-performance.md.)
pub const BURST_BUDGETS: f64 = 6.0;

/// The scheduler's fairness settings. `Default` is off: the token budget alone, FCFS.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepSharing {
    /// Predicted wall time one step may take (`--max-step-ms`); `None`: no time budget.
    pub max_step: Option<Duration>,
    /// Prefill sequences one step may carry (`--max-num-partial-prefills`).
    pub max_num_partial_prefills: usize,
    /// Of those, long ones (`--max-long-partial-prefills`); a long waiting request is not
    /// admitted while this many long prompts are prefilling.
    pub max_long_partial_prefills: usize,
    /// A prompt of more tokens than this is long (`--long-prefill-token-threshold`), from its
    /// first token to its last whatever is left of it: the tail of a long prompt attends to
    /// the whole context before it, and a cached prefix is context too.
    pub long_prefill_token_threshold: usize,
    /// The step-time model's starting coefficients.
    pub step_time_prior: StepTimeCoefficients,
    /// Refit the model on measured steps (tests turn it off to stay deterministic).
    pub learn_step_time: bool,
}

impl Default for StepSharing {
    fn default() -> Self {
        Self {
            max_step: None,
            max_num_partial_prefills: usize::MAX,
            max_long_partial_prefills: usize::MAX,
            long_prefill_token_threshold: usize::MAX,
            step_time_prior: StepTimeCoefficients::default(),
            learn_step_time: true,
        }
    }
}

impl StepSharing {
    /// Whether anything but the token budget is on (off keeps plain FCFS chunking).
    pub fn is_on(&self) -> bool {
        self.max_step.is_some() || self.long_prefill_token_threshold < usize::MAX
    }

    /// Whether a prompt of `len` tokens (from its first) is long.
    pub fn is_long(&self, len: usize) -> bool {
        len > self.long_prefill_token_threshold
    }
}

/// One step's budget while the scheduler fills it.
#[derive(Debug)]
pub(crate) struct StepBudget {
    sharing: StepSharing,
    /// The step-time model as it stands when the step is chosen.
    model: StepTimeCoefficients,
    tokens_left: usize,
    used: StepShape,
    /// Decodes not scheduled yet that this step keeps room for.
    reserved_decodes: StepShape,
    /// Short prefills not scheduled yet that this step keeps room for (from long prompts).
    reserved_prompts: StepShape,
    prefills: usize,
    long_prefills: usize,
    /// The model has yet to measure prefill steps: chunks stay under `COLD_PREFILL_CHUNK`.
    cold: bool,
    /// One request in the scheduler, no other running, waiting or swapped.
    alone: bool,
    /// No request in the scheduler decodes: all are on their prompts, none swapped.
    nothing_decoding: bool,
    /// At least as many short requests wait for their first token as requests decode (see
    /// [`BURST_BUDGETS`]).
    short_burst: bool,
}

impl StepBudget {
    pub fn new(sharing: StepSharing, model: StepTimeCoefficients, max_tokens: usize) -> Self {
        Self {
            sharing,
            model,
            cold: false,
            alone: false,
            nothing_decoding: false,
            short_burst: false,
            tokens_left: max_tokens,
            used: StepShape::default(),
            reserved_decodes: StepShape::default(),
            reserved_prompts: StepShape::default(),
            prefills: 0,
            long_prefills: 0,
        }
    }

    /// Caps chunks while the step-time model is still unmeasured (time budget on only).
    pub fn cold(mut self, cold: bool) -> Self {
        self.cold = cold && self.sharing.max_step.is_some();
        self
    }

    /// The step's one request is the only one in the scheduler (see [`LONE_PROMPT_BUDGETS`]).
    pub fn alone(mut self, alone: bool) -> Self {
        self.alone = alone;
        self
    }

    /// No request in the scheduler decodes yet (see [`LONE_PROMPT_BUDGETS`]).
    pub fn nothing_decoding(mut self, nothing_decoding: bool) -> Self {
        self.nothing_decoding = nothing_decoding;
        self
    }

    /// At least as many short requests wait for their first token as requests decode (see
    /// [`BURST_BUDGETS`]).
    pub fn short_burst(mut self, short_burst: bool) -> Self {
        self.short_burst = short_burst;
        self
    }

    pub fn tokens_left(&self) -> usize {
        self.tokens_left
    }

    pub fn has_tokens(&self) -> bool {
        self.tokens_left > 0
    }

    /// Keeps room for a decode scheduled later, from every prompt.
    pub fn reserve_decode(&mut self, start: usize) {
        if self.sharing.is_on() {
            self.reserved_decodes.add(StepShape::chunk(1, start));
        }
    }

    /// Keeps room for a short prompt's chunk scheduled later, from long prompts.
    pub fn reserve_prompt(&mut self, shape: StepShape) {
        if self.sharing.is_on() {
            self.reserved_prompts.add(shape);
        }
    }

    /// A decode token (or a last prompt token) at `start`: always fits while tokens last.
    pub fn take_decode(&mut self, start: usize) -> usize {
        if self.tokens_left == 0 {
            return 0;
        }
        self.charge(1, start);
        self.reserved_decodes = self.reserved_decodes.less(StepShape::chunk(1, start));
        1
    }

    /// A prefill chunk of at most `remaining` tokens from `start`: what fits the tokens and
    /// the time left (0 when the partial-prefill limits say wait).
    pub fn take_prefill(&mut self, remaining: usize, start: usize) -> usize {
        let long = self.sharing.is_long(start + remaining);
        let long_limit_reached = long && self.long_prefills >= self.sharing.max_long_partial_prefills;
        // A short prompt is inside the reservation (and leaves the other short ones to
        // arrival order); a long one is not.
        let (own, others) = if long {
            let mut others = self.reserved_decodes;
            others.add(self.reserved_prompts);
            (StepShape::default(), others)
        } else {
            (StepShape::chunk(remaining, start), self.reserved_decodes)
        };
        if !long_limit_reached && self.finishes_uncut(remaining, start, others, long) {
            self.prefills += 1;
            self.long_prefills += usize::from(long);
            self.charge_prefill(remaining, start, own);
            return remaining;
        }
        if self.prefills >= self.sharing.max_num_partial_prefills || long_limit_reached {
            return 0;
        }
        let mut n = self.fit(remaining, start, others);
        // Only when nothing fits: a larger floor would take the room kept for the short
        // prompts and decodes scheduled after it.
        if n == 0 && (self.prefills == 0 || (long && self.long_prefills == 0)) {
            n = remaining.min(MIN_PREFILL_CHUNK).min(self.tokens_left);
        }
        if n > 0 {
            self.prefills += 1;
            self.long_prefills += usize::from(long);
            self.charge_prefill(n, start, own);
        }
        n
    }

    /// Whether a waiting request with a prompt of `len` tokens may start, with
    /// `long_prefilling` long prompts already prefilling (running, or admitted this step).
    pub fn may_admit(&self, len: usize, long_prefilling: usize) -> bool {
        !self.sharing.is_long(len) || long_prefilling < self.sharing.max_long_partial_prefills
    }

    pub fn is_long(&self, len: usize) -> bool {
        self.sharing.is_long(len)
    }

    fn charge(&mut self, n: usize, start: usize) {
        self.tokens_left -= n;
        self.used.add(StepShape::chunk(n, start));
    }

    /// Charges a chunk of `n` and gives back the room kept for it (`reservation`).
    fn charge_prefill(&mut self, n: usize, start: usize, reservation: StepShape) {
        self.charge(n, start);
        self.reserved_prompts = self.reserved_prompts.less(reservation);
    }

    /// Whether a prompt with `remaining` tokens from `start` is taken whole, and the step
    /// with it and `others` (work kept room for) stays within the token budget and:
    /// - [`LONE_PROMPT_BUDGETS`] budgets when no one waits on the step: a prompt alone with
    ///   nothing placed yet, or a short request's prompt while nothing decodes;
    /// - [`BURST_BUDGETS`] budgets for a short request's prompt in a burst that outnumbers
    ///   the decodes.
    fn finishes_uncut(&self, remaining: usize, start: usize, others: StepShape, long: bool) -> bool {
        let Some(limit) = self.sharing.max_step else {
            return false;
        };
        let alone = self.alone && self.used.tokens == 0.0 && others.tokens == 0.0 && self.prefills == 0;
        let budgets = if alone || (!long && self.nothing_decoding) {
            LONE_PROMPT_BUDGETS
        } else if !long && self.short_burst {
            BURST_BUDGETS
        } else {
            return false;
        };
        let mut step = self.used;
        step.add(others);
        step.add(StepShape::chunk(remaining, start));
        remaining <= self.tokens_left && self.model.predict(step) <= limit.as_secs_f64() * budgets
    }

    /// The largest chunk ≤ `remaining` that keeps tokens and predicted time within the
    /// budget after `others` (work kept room for).
    fn fit(&self, remaining: usize, start: usize, others: StepShape) -> usize {
        let tokens = (self.tokens_left as f64 - others.tokens).max(0.0) as usize;
        let mut cap = remaining.min(tokens);
        if self.cold {
            cap = cap.min(COLD_PREFILL_CHUNK);
        }
        let Some(limit) = self.sharing.max_step else {
            return cap;
        };
        let mut base = self.used;
        base.add(others);
        let fits = |n: usize| {
            let mut shape = base;
            shape.add(StepShape::chunk(n, start));
            self.model.predict(shape) <= limit.as_secs_f64()
        };
        if fits(cap) {
            return cap;
        }
        // The predicted time grows with n: the largest n that fits, by bisection.
        let (mut lo, mut hi) = (0, cap);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if fits(mid) { lo = mid } else { hi = mid - 1 }
        }
        lo
    }
}

#[cfg(test)]
mod tests;
