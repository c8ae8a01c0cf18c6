//! The parts of a generated choice that its consumers share (the response writers, the prompt
//! echo and the request log): one token as the client sees it, and how a choice ended.

use crate::engine::events::TokenUsage;
use crate::engine::intervals::RequestIntervals;
use crate::engine::types::FinishReason;

/// One generated token as the client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenDetail {
    /// The token's own text.
    pub text: String,
    pub logprob: f32,
    /// The most likely alternatives, best first.
    pub top: Vec<(String, f32)>,
}

/// How a choice ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChoiceEnd {
    pub reason: FinishReason,
    pub usage: TokenUsage,
    pub timings: RequestIntervals,
}
