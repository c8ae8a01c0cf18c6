use std::time::Duration;

use super::*;

fn sharing(max_step_ms: u64, threshold: usize) -> StepSharing {
    StepSharing {
        max_step: Some(Duration::from_millis(max_step_ms)),
        max_num_partial_prefills: 4,
        max_long_partial_prefills: 1,
        long_prefill_token_threshold: threshold,
        step_time_prior: StepTimeCoefficients::default(),
        learn_step_time: false,
    }
}

/// 10 ms a step plus 1 ms a token, no attention cost: easy numbers.
const FLAT: StepTimeCoefficients = StepTimeCoefficients {
    per_step: 0.010,
    per_token: 0.001,
    per_pair: 0.0,
};

#[test]
fn a_chunk_fills_the_time_left_after_the_reserved_decodes() {
    let mut budget = StepBudget::new(sharing(100, 50), FLAT, 2048);
    for position in [10, 20, 30] {
        budget.reserve_decode(position);
    }
    // 100 ms - 10 ms per step - 3 decodes at 1 ms: 87 tokens of a long prompt.
    assert_eq!(budget.take_prefill(1000, 0), 87);
    for position in [10, 20, 30] {
        assert_eq!(budget.take_decode(position), 1);
    }
    assert_eq!(budget.tokens_left(), 2048 - 90);
}

#[test]
fn attention_pairs_shrink_chunks_deep_in_a_prompt() {
    // 200 ms: the late chunk stays above the minimum chunk, which may exceed the budget.
    let quadratic = StepTimeCoefficients { per_pair: 1e-6, ..FLAT };
    let early = StepBudget::new(sharing(200, 50), quadratic, 2048).take_prefill(4000, 0);
    let late = StepBudget::new(sharing(200, 50), quadratic, 2048).take_prefill(4000, 3000);
    assert!(late < early / 2, "{late} tokens at 3000 vs {early} at 0");
    // Each stays within the budget.
    for (n, start) in [(early, 0), (late, 3000)] {
        let predicted = quadratic.predict(StepShape::chunk(n, start));
        assert!(predicted <= 0.200, "{n} tokens from {start}: {predicted} s");
    }
}

#[test]
fn one_long_prefill_per_step_and_the_first_always_progresses() {
    let mut budget = StepBudget::new(sharing(100, 50), FLAT, 2048);
    // Short prompts alone take the whole budget...
    budget.reserve_prompt(StepShape::chunk(200, 0));
    // ...yet the first long prompt moves by the minimum chunk, and a second waits.
    assert_eq!(budget.take_prefill(1000, 0), MIN_PREFILL_CHUNK);
    assert_eq!(budget.take_prefill(1000, 0), 0);
    assert!(!budget.may_admit(1000, 1));
    assert!(
        budget.may_admit(40, 1),
        "a short prompt is admitted past the long-prefill limit"
    );
}

#[test]
fn off_means_the_token_budget_alone() {
    let mut budget = StepBudget::new(StepSharing::default(), FLAT, 64);
    budget.reserve_prompt(StepShape::chunk(10, 0));
    assert_eq!(budget.take_prefill(1000, 0), 64);
    assert!(!budget.has_tokens());
}

#[test]
fn a_lone_prompt_that_finishes_within_the_lone_budgets_is_not_cut() {
    // 100 ms budgets: a lone prompt may take one step of up to 1.2 s (FLAT: 10 ms + 1 ms a token).
    assert_eq!(LONE_PROMPT_BUDGETS, 12.0);
    let lone = |max_tokens: usize, remaining: usize| {
        StepBudget::new(sharing(100, 50), FLAT, max_tokens)
            .alone(true)
            .take_prefill(remaining, 0)
    };
    assert_eq!(lone(2048, 1000), 1000, "1.01 s predicted, nothing to protect: not cut");
    assert_eq!(lone(2048, 1500), 90, "1.51 s: cut to the budget");
    assert_eq!(lone(800, 1000), 90, "beyond the token budget: cut to the budget");
    let cold = StepBudget::new(sharing(100, 50), FLAT, 2048)
        .alone(true)
        .cold(true)
        .take_prefill(1000, 0);
    assert_eq!(cold, 1000, "nor by the cold cap");
    let not_alone = StepBudget::new(sharing(100, 50), FLAT, 2048)
        .nothing_decoding(true)
        .take_prefill(1000, 0);
    assert_eq!(not_alone, 90, "another request in the scheduler: cut to the budget");
}

#[test]
fn a_burst_on_an_idle_engine_is_prefilled_together_within_the_lone_budgets() {
    // Eight short prompts of 40 tokens (330 ms in one step), more than the four partial
    // prefills, with nothing decoding: each is taken whole.
    let mut burst = StepBudget::new(sharing(100, 50), FLAT, 2048).nothing_decoding(true);
    for _ in 0..8 {
        burst.reserve_prompt(StepShape::chunk(40, 0));
    }
    let taken: Vec<usize> = (0..8).map(|_| burst.take_prefill(40, 0)).collect();
    assert_eq!(taken, vec![40; 8]);
    // The same burst while a stream decodes: cut to the budget, four prompts at most.
    let mut busy = StepBudget::new(sharing(100, 50), FLAT, 2048);
    busy.reserve_decode(10);
    for _ in 0..8 {
        busy.reserve_prompt(StepShape::chunk(40, 0));
    }
    let taken: Vec<usize> = (0..8).map(|_| busy.take_prefill(40, 0)).collect();
    // In arrival order, each filling what the ones before it left: 10 ms + the decode's 1 ms
    // + 89 tokens = 100 ms. (Each keeping room for all the others left the first a 32-token
    // floor and the step at 43 ms.)
    assert_eq!(taken, vec![40, 40, 9, 0, 0, 0, 0, 0]);
    // The same burst, outnumbering the decodes: taken whole within the burst budgets, and
    // what would pass them waits (40 prompts: 560 ms predicted over 600 ms of burst budgets).
    let mut outnumbered = StepBudget::new(sharing(100, 50), FLAT, 2048).short_burst(true);
    outnumbered.reserve_decode(10);
    let taken: Vec<usize> = (0..8).map(|_| outnumbered.take_prefill(40, 0)).collect();
    assert_eq!(taken, vec![40; 8]);
    assert_eq!(BURST_BUDGETS, 6.0);
    // The tail of a long prompt (40 tokens left after 5,000: 252 ms with attention) is not a
    // short request, however few tokens are left: cut to the budget, burst or not.
    let attention = StepTimeCoefficients { per_pair: 1e-6, ..FLAT };
    let mut tail = StepBudget::new(sharing(100, 50), attention, 2048).short_burst(true);
    tail.reserve_decode(10);
    assert_eq!(tail.take_prefill(40, 5000), 14);
    let mut idle_tail = StepBudget::new(sharing(100, 50), attention, 2048).nothing_decoding(true);
    idle_tail.reserve_decode(10);
    assert_eq!(idle_tail.take_prefill(40, 5000), 14, "nor while nothing decodes");
    let mut lone_tail = StepBudget::new(sharing(100, 50), attention, 2048).alone(true);
    assert_eq!(lone_tail.take_prefill(40, 5000), 40, "alone, it finishes");
    let mut many = StepBudget::new(sharing(100, 50), FLAT, 2048).short_burst(true);
    many.reserve_decode(10);
    let taken: Vec<usize> = (0..40).map(|_| many.take_prefill(40, 0)).collect();
    assert_eq!(taken.iter().filter(|&&n| n == 40).count(), 14, "{taken:?}");
    // Up to the lone budgets: of 40 prompts of 40 tokens, those that fit 1.2 s are whole and
    // the rest wait.
    let mut many = StepBudget::new(sharing(100, 50), FLAT, 2048).nothing_decoding(true);
    let taken: Vec<usize> = (0..40).map(|_| many.take_prefill(40, 0)).collect();
    assert_eq!(taken.iter().filter(|&&n| n == 40).count(), 29, "{taken:?}");
    assert_eq!(taken.iter().sum::<usize>(), 29 * 40, "{taken:?}");
    // A long prompt is not taken whole beside others, even with nothing decoding.
    let long = StepBudget::new(sharing(100, 50), FLAT, 2048)
        .nothing_decoding(true)
        .take_prefill(300, 0);
    assert_eq!(long, 90);
}

#[test]
fn the_long_prompt_never_takes_the_room_kept_for_a_short_one() {
    let mut budget = StepBudget::new(sharing(100, 50), FLAT, 2048);
    // A short prompt (5 ms) and 80 decodes (80 ms) to come: 5 ms are left for the long one.
    budget.reserve_prompt(StepShape::chunk(5, 0));
    for position in 0..80 {
        budget.reserve_decode(position);
    }
    assert_eq!(budget.take_prefill(1000, 0), 5);
    assert_eq!(budget.take_prefill(5, 0), 5, "the short prompt still starts");
}
