//! The end of a request: its final event (with the timeline of a traced request) and the
//! stats the stats actor records, both from the one `intervals()` call.

use std::time::Instant;

use super::Scheduler;
use crate::engine::events::{TokenEvent, TokenUsage};
use crate::engine::types::{FinishReason, RequestId};
use crate::scheduler::request::Request;
use crate::stats::data::FinishedRequestStats;

impl Scheduler {
    pub(super) fn finish(
        mut request: Request,
        reason: FinishReason,
        error_type: Option<&'static str>,
        now: Instant,
    ) -> (RequestId, TokenEvent, FinishedRequestStats) {
        request.timestamps.finished = Some(now);
        let intervals = request.timestamps.intervals(request.output.len());
        let usage = TokenUsage {
            prompt_tokens: request.prompt.len(),
            completion_tokens: request.output.len(),
            cached_prompt_tokens: request.cached_prompt_tokens.unwrap_or(0),
        };
        let stats = FinishedRequestStats {
            finish_reason: reason,
            operation: request.operation,
            error_type,
            prompt_tokens: usage.prompt_tokens as u64,
            generation_tokens: usage.completion_tokens as u64,
            // The API fits an open bound to the context; one left open ran to what it made.
            max_tokens: request
                .params
                .max_tokens
                .map_or(usage.completion_tokens as u64, u64::from),
            n: u64::from(request.params.n),
            num_preemptions: request.num_preemptions,
            intervals,
            constraint_kind: request.params.structured.as_ref().map(|s| s.kind()),
            lora: request.lora,
            trace: request.trace,
        };
        let event = TokenEvent::Finished {
            reason,
            usage,
            timings: intervals,
            timeline: request.take_timeline(),
        };
        (request.id, event, stats)
    }
}
