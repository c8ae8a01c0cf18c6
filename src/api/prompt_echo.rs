//! What a choice sends before its first generated token: the prompt itself for OpenAI's
//! `echo` (with its tokens' logprobs when `logprobs` is set) and vLLM's `prompt_logprobs`.
//! The engine computes the prompt logprobs in chunks, before the first token; a recompute
//! after preemption may send positions again, which are skipped here.

use tokenizers::Tokenizer;

use super::choice_parts::TokenDetail;
use super::openai_types::{PromptLogprob, PromptLogprobMap, finite_logprob};
use crate::engine::events::{PromptLogprobs, PromptTokenLogprob};
use crate::engine::sampling_params::SamplingParams;

/// One prompt position's logprobs as the client sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptPositionDetail {
    pub token: u32,
    pub text: String,
    pub logprob: f32,
    pub rank: u32,
    /// The most likely tokens (id, text, logprob), best first.
    pub top: Vec<(u32, String, f32)>,
}

/// The preamble of one choice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Preamble {
    /// The prompt's text (`echo`), else empty.
    pub text: String,
    /// The prompt's tokens with their logprobs (`echo` with `logprobs`); the first token's
    /// logprob is NaN: it has none.
    pub tokens: Vec<TokenDetail>,
    /// Per prompt position (the first has none), when `prompt_logprobs` was asked.
    pub prompt_logprobs: Option<Vec<Option<PromptPositionDetail>>>,
}

/// Collects a choice's prompt logprobs until its preamble is taken.
#[derive(Debug)]
pub struct PromptEcho {
    prompt: Vec<u32>,
    echo: bool,
    echo_logprobs: bool,
    prompt_logprobs: bool,
    /// Positions `1..` received so far, in order.
    received: Vec<PromptTokenLogprob>,
    taken: bool,
}

impl PromptEcho {
    pub fn new(prompt: &[u32], params: &SamplingParams) -> Self {
        let wanted = params.echo || params.return_prompt_logprobs;
        Self {
            prompt: if wanted { prompt.to_vec() } else { Vec::new() },
            echo: params.echo,
            echo_logprobs: params.echo && params.logprobs.is_some(),
            prompt_logprobs: params.return_prompt_logprobs,
            received: Vec::new(),
            taken: !wanted,
        }
    }

    /// Keeps the positions not received yet.
    pub fn receive(&mut self, chunk: PromptLogprobs) {
        for (i, entry) in chunk.positions.into_iter().enumerate() {
            if chunk.first_position + i == self.received.len() + 1 {
                self.received.push(entry);
            }
        }
    }

    /// The preamble, once; `None` afterwards or when nothing was asked.
    pub fn take(&mut self, tokenizer: &Tokenizer) -> Option<Preamble> {
        if std::mem::replace(&mut self.taken, true) {
            return None;
        }
        let text_of = |id: u32| tokenizer.decode(&[id], false).unwrap_or_default();
        let positions: Vec<Option<PromptPositionDetail>> = std::iter::once(None)
            .chain(self.received.iter().map(|p| {
                Some(PromptPositionDetail {
                    token: p.token,
                    text: text_of(p.token),
                    logprob: p.logprob,
                    rank: p.rank,
                    top: p.top.iter().map(|&(t, l)| (t, text_of(t), l)).collect(),
                })
            }))
            .collect();
        let mut preamble = Preamble::default();
        if self.echo {
            preamble.text = tokenizer.decode(&self.prompt, false).unwrap_or_default();
        }
        if self.echo_logprobs {
            preamble.tokens = self
                .prompt
                .iter()
                .enumerate()
                .map(|(i, &id)| match positions.get(i).cloned().flatten() {
                    Some(p) => TokenDetail {
                        text: p.text,
                        logprob: p.logprob,
                        top: p.top.into_iter().map(|(_, text, l)| (text, l)).collect(),
                    },
                    None => TokenDetail {
                        text: text_of(id),
                        logprob: f32::NAN,
                        top: Vec::new(),
                    },
                })
                .collect();
        }
        if self.prompt_logprobs {
            preamble.prompt_logprobs = Some(positions);
        }
        Some(preamble)
    }
}

/// vLLM's wire shape of prompt logprobs: the prompt token first, then the top ones (ranked).
pub fn wire_prompt_logprobs(positions: &[Option<PromptPositionDetail>]) -> Vec<Option<PromptLogprobMap>> {
    let entry = |logprob: f32, rank: u32, text: &str| PromptLogprob {
        logprob: finite_logprob(logprob),
        rank,
        decoded_token: text.to_owned(),
    };
    positions
        .iter()
        .map(|p| {
            p.as_ref().map(|p| {
                let mut map = vec![(p.token, entry(p.logprob, p.rank, &p.text))];
                for (i, (token, text, logprob)) in p.top.iter().enumerate() {
                    if *token != p.token {
                        map.push((*token, entry(*logprob, i as u32 + 1, text)));
                    }
                }
                PromptLogprobMap(map)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(token: u32) -> PromptTokenLogprob {
        PromptTokenLogprob {
            token,
            logprob: -(token as f32),
            rank: 1,
            top: Vec::new(),
        }
    }

    #[test]
    fn repeated_positions_are_skipped() {
        let params = SamplingParams {
            return_prompt_logprobs: true,
            prompt_logprobs: Some(0),
            ..Default::default()
        };
        let mut echo = PromptEcho::new(&[5, 6, 7], &params);
        echo.receive(PromptLogprobs {
            first_position: 1,
            positions: vec![entry(6)],
        });
        // A recompute sends both positions again.
        echo.receive(PromptLogprobs {
            first_position: 1,
            positions: vec![entry(6), entry(7)],
        });
        let tokens: Vec<u32> = echo.received.iter().map(|p| p.token).collect();
        assert_eq!(tokens, [6, 7]);
    }
}
