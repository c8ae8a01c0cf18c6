//! `SchedulerActor`: a thin actor around [`Scheduler`]. It keeps the executor fed (with
//! async scheduling, one step running and the next one queued behind it), routes token
//! events to each request's channel, and reports stats to the stats actor with `do_send`
//! (never awaited).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient, SpawnHandle, WrapFuture};
use tokio::sync::mpsc::UnboundedSender;

use super::ahead_timer::{AheadTimer, Rearm};
use super::policy::{Scheduler, StepResult};
use crate::engine::events::{EngineError, TokenEvent};
use crate::engine::messages::{Abort, AbortReason, Generate};
use crate::engine::step::{ExecuteBatch, SchedulerOutput};
use crate::engine::types::RequestId;
use crate::kv_events::KvEventSender;
use crate::scheduler::step::run_loop::{StepFailure, StepLoop};
use crate::stats::actor::{AdmissionRejected, EngineRestarted, RecordStep, StatsActor};
use crate::stats::data::{IterationStats, SchedulerStats};

pub struct SchedulerActor {
    scheduler: Scheduler,
    executor: Recipient<ExecuteBatch>,
    stats: Addr<StatsActor>,
    channels: HashMap<RequestId, UnboundedSender<TokenEvent>>,
    /// Steps sent to the executor and not answered: one running, one queued at most.
    steps: StepLoop,
    /// Shutdown's grace period is over: new requests are refused.
    closed: bool,
    /// The KV-event publisher's queue (`--kv-events-config`).
    kv_events: Option<KvEventSender>,
    /// The timer that calls `step` when the step ahead is due (`StepLoop::ahead_delay`).
    ahead_timer: AheadTimer<SpawnHandle>,
    /// This engine's index in a data-parallel server (its `engine` label), 0 alone.
    engine: usize,
}

impl SchedulerActor {
    pub fn new(scheduler: Scheduler, executor: Recipient<ExecuteBatch>, stats: Addr<StatsActor>) -> Self {
        Self {
            scheduler,
            executor,
            stats,
            channels: HashMap::new(),
            steps: StepLoop::default(),
            closed: false,
            kv_events: None,
            ahead_timer: AheadTimer::default(),
            engine: 0,
        }
    }

    /// Runs as engine `index` of a data-parallel server: its stats carry the index.
    pub fn as_engine(mut self, index: usize) -> Self {
        self.engine = index;
        self
    }

    /// Publishes the prefix cache's changes through `sender` after every step.
    pub fn with_kv_events(mut self, sender: KvEventSender) -> Self {
        if !self.scheduler.config().enable_prefix_caching {
            tracing::warn!("KV-cache events enabled without prefix caching: there will be none");
        }
        self.scheduler.record_kv_events();
        self.kv_events = Some(sender);
        self
    }

    /// Sends steps to the executor until it has as many as it should hold (the step loop
    /// the direct driver in `kiln::testing` runs too).
    fn step(&mut self, ctx: &mut Context<Self>) {
        self.abort_departed();
        let now = Instant::now();
        for batch in self.steps.step(&mut self.scheduler, now) {
            self.send(batch, ctx);
        }
        if let Some(delay) = self.steps.ahead_delay(now)
            && let Rearm::Arm { cancel } = self.ahead_timer.due(now + delay)
        {
            if let Some(stale) = cancel {
                ctx.cancel_future(stale);
            }
            let handle = ctx.run_later(delay, |act, ctx| {
                act.ahead_timer.fired();
                act.step(ctx);
            });
            self.ahead_timer.armed(handle, now + delay);
        }
    }

    fn send(&mut self, batch: Arc<SchedulerOutput>, ctx: &mut Context<Self>) {
        let request = self.executor.send(ExecuteBatch {
            batch: Arc::clone(&batch),
        });
        ctx.spawn(request.into_actor(self).map(move |result, act, ctx| {
            let outcome = match result {
                Ok(outcome) => outcome.map_err(StepFailure::Executor),
                Err(mailbox) => Err(StepFailure::Lost(mailbox.to_string())),
            };
            let returned = act.steps.returned(&mut act.scheduler, &batch, outcome, Instant::now());
            if returned.restarts > 0 {
                act.stats.do_send(EngineRestarted {
                    engine: act.engine,
                    restarts: returned.restarts,
                });
            }
            act.publish(returned.result);
            act.step(ctx);
        }));
    }

    /// Sends events to their requests and stats to the stats actor. A request whose client
    /// has gone (its receiver is dropped) is aborted at once, and the stats it leaves follow.
    fn publish(&mut self, step: StepResult) {
        if let Some(kv_events) = self.kv_events.as_mut() {
            kv_events.send(self.scheduler.take_kv_events());
        }
        let mut gone = self.deliver(step.events);
        gone.sort_unstable();
        gone.dedup();
        self.record(step.scheduler_stats, step.iteration_stats);
        if gone.is_empty() {
            return;
        }
        let aborted = self.abort(gone, AbortReason::ClientGone);
        // Final events only, to clients that are gone: they close the channels and find no
        // receiver, so no request is gone in turn.
        let also_gone = self.deliver(aborted.events);
        debug_assert!(also_gone.is_empty(), "final events never make a request gone");
        self.record(aborted.scheduler_stats, aborted.iteration_stats);
    }

    /// Sends each event to its request's channel, and drops the channel after a final event.
    /// Returns the requests whose client is gone (a token found no receiver).
    fn deliver(&mut self, events: Vec<(RequestId, TokenEvent)>) -> Vec<RequestId> {
        let mut gone = Vec::new();
        for (id, event) in events {
            let last = !matches!(event, TokenEvent::Token { .. } | TokenEvent::PromptLogprobs(_));
            if let Some(tx) = self.channels.get(&id)
                && tx.send(event).is_err()
                && !last
            {
                gone.push(id.clone());
            }
            if last {
                self.channels.remove(&id);
            }
        }
        gone
    }

    /// Aborts the requests whose client left before any event could tell (a receiver
    /// dropped while the request was on its way in, queued or prefilling), so no prefill
    /// runs to its end for nobody.
    fn abort_departed(&mut self) {
        let gone: Vec<RequestId> = self
            .channels
            .iter()
            .filter(|(_, tx)| tx.is_closed())
            .map(|(id, _)| id.clone())
            .collect();
        if !gone.is_empty() {
            let aborted = self.abort(gone, AbortReason::ClientGone);
            self.publish(aborted);
        }
    }

    fn record(&self, scheduler: SchedulerStats, iteration: IterationStats) {
        self.stats.do_send(RecordStep {
            engine: self.engine,
            scheduler,
            iteration,
        });
    }

    /// Ends requests wherever they are. Returns their final events (none for a request that
    /// had already finished) and the stats they leave, for [`Self::publish`].
    fn abort(&mut self, ids: impl IntoIterator<Item = RequestId>, reason: AbortReason) -> StepResult {
        let mut events = Vec::new();
        for id in ids {
            if let Some(event) = self.scheduler.abort(&id, reason, Instant::now()) {
                events.push((id, event));
            }
        }
        StepResult {
            events,
            ..self.scheduler.take_pending()
        }
    }
}

impl Actor for SchedulerActor {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Self::Context) {
        self.record_lora_snapshot();
    }
}

impl Handler<Generate> for SchedulerActor {
    type Result = Result<(), EngineError>;

    fn handle(&mut self, msg: Generate, ctx: &mut Context<Self>) -> Self::Result {
        if self.closed {
            return Err(EngineError::Unavailable);
        }
        if msg.events.is_closed() {
            // The client left while the request was on its way: nobody would read it.
            tracing::debug!(id = %msg.request.id, "client gone before admission; not queued");
            return Ok(());
        }
        let id = msg.request.id.clone();
        if let Err(error) = self.scheduler.add(msg.request, Instant::now()) {
            self.stats.do_send(AdmissionRejected {
                reason: error.error_type(),
            });
            return Err(error);
        }
        self.channels.insert(id, msg.events);
        self.step(ctx);
        Ok(())
    }
}

impl Handler<Abort> for SchedulerActor {
    type Result = ();

    fn handle(&mut self, msg: Abort, ctx: &mut Context<Self>) {
        // Its final event, the gauges and its stats go out now, not at the next step.
        let aborted = self.abort([msg.id], msg.reason);
        self.publish(aborted);
        self.step(ctx);
    }
}

/// Shutdown's grace period is over: every request still in the engine ends with
/// [`EngineError::Unavailable`], and new ones are refused.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct AbortAll;

impl Handler<AbortAll> for SchedulerActor {
    type Result = usize;

    fn handle(&mut self, _: AbortAll, _: &mut Context<Self>) -> usize {
        self.closed = true;
        let ids: Vec<RequestId> = self.channels.keys().cloned().collect();
        let mut aborted = self.abort(ids, AbortReason::ClientGone);
        // Their clients are still there: they get an error, not a plain end.
        for (_, event) in &mut aborted.events {
            *event = TokenEvent::Failed {
                error: EngineError::Unavailable,
            };
        }
        let count = aborted.events.len();
        if count > 0 {
            tracing::warn!(
                requests = count,
                "shutdown grace period over; aborting the requests left"
            );
        }
        self.publish(aborted);
        count
    }
}

/// The engine's load now: what routers and `/load` read.
#[derive(Debug, Message)]
#[rtype(result = "SchedulerStats")]
pub struct GetLoad;

impl Handler<GetLoad> for SchedulerActor {
    type Result = actix::MessageResult<GetLoad>;

    fn handle(&mut self, _: GetLoad, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(self.scheduler.make_stats_snapshot())
    }
}

/// What the API's engine choice asks each engine about a prompt.
#[derive(Debug, Message)]
#[rtype(result = "Placement")]
pub struct GetPlacement {
    pub prompt: Arc<[u32]>,
    pub lora: Option<u32>,
}

/// One engine's answer: the prompt's tokens it has cached and its load in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub cached_tokens: u64,
    pub load_tokens: u64,
}

impl Handler<GetPlacement> for SchedulerActor {
    type Result = actix::MessageResult<GetPlacement>;

    fn handle(&mut self, msg: GetPlacement, _: &mut Context<Self>) -> Self::Result {
        let load = self.scheduler.token_load();
        actix::MessageResult(Placement {
            cached_tokens: self.scheduler.cached_prefix_tokens(&msg.prompt, msg.lora) as u64,
            load_tokens: load.running + load.waiting,
        })
    }
}

/// Empty the prefix cache; answers whether it did (no request held blocks).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct ResetPrefixCache;

impl Handler<ResetPrefixCache> for SchedulerActor {
    type Result = bool;

    fn handle(&mut self, _: ResetPrefixCache, _: &mut Context<Self>) -> bool {
        let reset = self.scheduler.reset_prefix_cache();
        // Subscribers learn of it now, not at the next step (there may be none for a while).
        if reset && let Some(kv_events) = self.kv_events.as_mut() {
            kv_events.send(self.scheduler.take_kv_events());
        }
        tracing::info!(reset, "prefix cache reset requested");
        reset
    }
}

/// The prefix cache's hashes now and the KV-event batches queued so far, for tests that
/// check a subscriber's view against the engine's.
#[cfg(feature = "testing")]
#[derive(Debug, Message)]
#[rtype(result = "KvEventsSnapshot")]
pub struct GetKvEventsSnapshot;

#[cfg(feature = "testing")]
#[derive(Debug, Clone, PartialEq)]
pub struct KvEventsSnapshot {
    pub cached_block_hashes: Vec<u64>,
    /// Batches handed to the publisher: the last one has sequence `batches_queued - 1`.
    pub batches_queued: u64,
    pub batches_dropped: u64,
}

#[cfg(feature = "testing")]
impl Handler<GetKvEventsSnapshot> for SchedulerActor {
    type Result = actix::MessageResult<GetKvEventsSnapshot>;

    fn handle(&mut self, _: GetKvEventsSnapshot, _: &mut Context<Self>) -> Self::Result {
        // Events recorded since the last step (a schedule's evictions) go out first, so the
        // hashes below are what a subscriber holds after the last queued batch.
        if let Some(kv_events) = self.kv_events.as_mut() {
            kv_events.send(self.scheduler.take_kv_events());
        }
        let (batches_queued, batches_dropped) = self.kv_events.as_ref().map_or((0, 0), |k| (k.accepted(), k.dropped()));
        actix::MessageResult(KvEventsSnapshot {
            cached_block_hashes: self
                .scheduler
                .cached_block_hashes()
                .into_iter()
                .map(|h| h.external())
                .collect(),
            batches_queued,
            batches_dropped,
        })
    }
}

mod lora;
#[cfg(test)]
mod tests;

pub use lora::{LoadLora, UnloadLora};
