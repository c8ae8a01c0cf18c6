//! One body becomes several engine requests: each prompt of a batch, `n` choices each. The
//! plan is pure (seeds, context fitting, ids), so a prompt that does not fit refuses the whole
//! body before anything reaches the engine; submission then either hands every choice over or
//! none (choices already submitted are dropped, which aborts them).

use std::sync::Arc;
use std::time::Instant;

use tokenizers::Tokenizer;

use super::engine_handle::EngineHandle;
use super::errors::ApiError;
use super::generation::{ChoiceRequest, ChoiceStream};
use super::prompt::{ParamNames, fit_to_context};
use super::request_log::RequestRecord;
use crate::engine::request::NewRequest;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::types::Operation;

/// What every choice of one body shares.
#[derive(Debug, Clone, Copy)]
pub struct FanOut<'a> {
    /// The response id; choice `i` is submitted as `{id}-{i}`.
    pub id: &'a str,
    pub operation: Operation,
    pub arrival: Instant,
    pub max_model_len: usize,
    /// The fields an error names when a prompt does not fit the context.
    pub params: ParamNames,
    /// The LoRA adapter every choice runs under (`None`: the base model).
    pub lora: Option<u32>,
}

/// `n` choices per prompt, numbered prompt-major as OpenAI numbers them. The choices share
/// one `Arc` of the params (a prompt whose fitted `max_tokens` differs gets its own); only
/// the seed is per choice.
pub fn plan_choices(
    fan_out: &FanOut<'_>,
    prompts: Vec<Vec<u32>>,
    params: SamplingParams,
) -> Result<Vec<ChoiceRequest>, ApiError> {
    let n = params.n.max(1);
    let mut choices = Vec::with_capacity(prompts.len() * n as usize);
    let body = Arc::new(params);
    let mut shared = Arc::clone(&body);
    for (p, prompt) in prompts.into_iter().enumerate() {
        let mut fitted = (*body).clone();
        fit_to_context(prompt.len(), &mut fitted, fan_out.max_model_len, fan_out.params)?;
        if fitted != *shared {
            shared = Arc::new(fitted);
        }
        for c in 0..n {
            let index = p as u32 * n + c;
            choices.push(ChoiceRequest {
                index,
                request: NewRequest {
                    id: format!("{}-{index}", fan_out.id),
                    prompt_token_ids: prompt.clone(),
                    params: Arc::clone(&shared),
                    // Seeded choices stay reproducible yet differ from each other.
                    seed: shared.seed.map(|s| s.wrapping_add(u64::from(c))),
                    operation: fan_out.operation,
                    arrival: fan_out.arrival,
                    trace: None,
                    lora: fan_out.lora,
                },
            });
        }
    }
    Ok(choices)
}

/// Submits every planned choice; on the first refusal the ones already submitted are
/// dropped (aborting them) and the refusal is returned.
pub async fn submit_choices(
    engine: &EngineHandle,
    tokenizer: &Arc<Tokenizer>,
    planned: Vec<ChoiceRequest>,
    record: Option<Arc<RequestRecord>>,
) -> Result<Vec<ChoiceStream>, ApiError> {
    let mut choices = Vec::with_capacity(planned.len());
    for request in planned {
        choices.push(ChoiceStream::submit(engine, tokenizer, request, record.clone()).await?);
    }
    Ok(choices)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fan_out(max_model_len: usize) -> FanOut<'static> {
        FanOut {
            id: "cmpl-x",
            operation: Operation::TextCompletion,
            arrival: Instant::now(),
            max_model_len,
            params: ParamNames {
                prompt: "prompt",
                max_tokens: "max_tokens",
            },
            lora: None,
        }
    }

    #[test]
    fn choices_are_numbered_prompt_major_with_distinct_seeds() {
        let params = SamplingParams {
            n: 3,
            seed: Some(7),
            max_tokens: Some(4),
            ..Default::default()
        };
        let plan = plan_choices(&fan_out(64), vec![vec![1, 2], vec![3]], params).expect("fits");
        let ids: Vec<&str> = plan.iter().map(|c| c.request.id.as_str()).collect();
        assert_eq!(
            ids,
            ["cmpl-x-0", "cmpl-x-1", "cmpl-x-2", "cmpl-x-3", "cmpl-x-4", "cmpl-x-5"]
        );
        assert_eq!(plan.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
        assert_eq!(plan[2].request.prompt_token_ids, [1, 2]);
        assert_eq!(plan[3].request.prompt_token_ids, [3]);
        let seeds: Vec<Option<u64>> = plan.iter().map(|c| c.request.seed).collect();
        assert_eq!(seeds, [Some(7), Some(8), Some(9), Some(7), Some(8), Some(9)]);
        assert!(
            plan.iter()
                .all(|c| Arc::ptr_eq(&c.request.params, &plan[0].request.params)),
            "one copy of the params for the whole body"
        );
        assert_eq!(
            plan[0].request.params.seed,
            Some(7),
            "the shared params keep the body's seed"
        );
    }

    #[test]
    fn open_max_tokens_is_fitted_per_prompt() {
        let params = SamplingParams {
            max_tokens: None,
            ..Default::default()
        };
        let plan = plan_choices(&fan_out(10), vec![vec![1; 4], vec![1; 7]], params).expect("fits");
        assert_eq!(plan[0].request.params.max_tokens, Some(6));
        assert_eq!(plan[1].request.params.max_tokens, Some(3));
    }

    #[test]
    fn the_choices_of_one_prompt_share_its_fitted_params() {
        let params = SamplingParams {
            max_tokens: None,
            n: 2,
            ..Default::default()
        };
        let plan = plan_choices(&fan_out(10), vec![vec![1; 4], vec![1; 7]], params).expect("fits");
        assert!(Arc::ptr_eq(&plan[0].request.params, &plan[1].request.params));
        assert!(Arc::ptr_eq(&plan[2].request.params, &plan[3].request.params));
        assert!(
            !Arc::ptr_eq(&plan[1].request.params, &plan[2].request.params),
            "fitted differently"
        );
        assert_eq!(plan.iter().map(|c| c.request.seed).collect::<Vec<_>>(), [None; 4]);
    }

    #[test]
    fn one_prompt_too_long_refuses_the_whole_body() {
        let params = SamplingParams {
            max_tokens: Some(4),
            n: 2,
            ..Default::default()
        };
        let err = plan_choices(&fan_out(8), vec![vec![1; 2], vec![1; 6]], params).unwrap_err();
        assert!(matches!(err, ApiError::ContextLengthExceeded { .. }), "{err:?}");
    }
}
