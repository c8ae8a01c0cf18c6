//! One valid body becomes several engine requests: each prompt of a batch, `n` choices each,
//! built from the [`ValidPrompt`]s alone (validation has fitted each prompt's parameters to
//! the context). Submission then either hands every choice over or none (choices already
//! submitted are dropped, which aborts them).

use std::sync::Arc;
use std::time::Instant;

use tokenizers::Tokenizer;

use super::engine_handle::EngineHandle;
use super::errors::ApiError;
use super::generation::{ChoiceRequest, ChoiceStream};
use super::request_log::RequestRecord;
use super::validation::ValidPrompt;
use crate::engine::request::NewRequest;
use crate::engine::types::Operation;

/// What every choice of one body shares.
#[derive(Debug, Clone, Copy)]
pub struct FanOut<'a> {
    /// The response id; choice `i` is submitted as `{id}-{i}`.
    pub id: &'a str,
    pub operation: Operation,
    pub arrival: Instant,
    /// The LoRA adapter every choice runs under (`None`: the base model).
    pub lora: Option<u32>,
}

/// `n` choices per prompt, numbered prompt-major as OpenAI numbers them. The choices of a
/// prompt share its `Arc` of the params; only the seed is per choice.
pub fn plan_choices(fan_out: &FanOut<'_>, prompts: Vec<ValidPrompt>) -> Vec<ChoiceRequest> {
    let n = prompts.first().map_or(1, |p| p.params.n.max(1));
    let mut choices = Vec::with_capacity(prompts.len() * n as usize);
    for (p, prompt) in prompts.into_iter().enumerate() {
        for c in 0..n {
            let index = p as u32 * n + c;
            choices.push(ChoiceRequest {
                index,
                request: NewRequest {
                    id: format!("{}-{index}", fan_out.id),
                    prompt_token_ids: prompt.token_ids.clone(),
                    params: Arc::clone(&prompt.params),
                    // Seeded choices stay reproducible yet differ from each other.
                    seed: prompt.params.seed.map(|s| s.wrapping_add(u64::from(c))),
                    operation: fan_out.operation,
                    arrival: fan_out.arrival,
                    trace: None,
                    lora: fan_out.lora,
                },
            });
        }
    }
    choices
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
    // The choices of one prompt (consecutive) go to one engine, where they share its prefill.
    let mut chosen: Option<(Vec<u32>, EngineHandle)> = None;
    for request in planned {
        let prompt = &request.request.prompt_token_ids;
        let target = match &chosen {
            Some((for_prompt, target)) if for_prompt == prompt => target.clone(),
            _ => {
                let target = engine.choose_for(prompt, request.request.lora).await;
                chosen = Some((prompt.clone(), target.clone()));
                target
            }
        };
        choices.push(ChoiceStream::submit(&target, tokenizer, request, record.clone()).await?);
    }
    Ok(choices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sampling_params::SamplingParams;

    fn fan_out() -> FanOut<'static> {
        FanOut {
            id: "cmpl-x",
            operation: Operation::TextCompletion,
            arrival: Instant::now(),
            lora: None,
        }
    }

    #[test]
    fn choices_are_numbered_prompt_major_with_distinct_seeds() {
        let params = Arc::new(SamplingParams {
            n: 3,
            seed: Some(7),
            max_tokens: Some(4),
            ..Default::default()
        });
        let prompt = |token_ids: Vec<u32>| ValidPrompt {
            token_ids,
            params: Arc::clone(&params),
        };
        let plan = plan_choices(&fan_out(), vec![prompt(vec![1, 2]), prompt(vec![3])]);
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
            plan.iter().all(|c| Arc::ptr_eq(&c.request.params, &params)),
            "one copy of the params for the whole body"
        );
        assert_eq!(
            plan[0].request.params.seed,
            Some(7),
            "the shared params keep the body's seed"
        );
    }
}
