//! `SchedulerActor`: a thin actor around [`Scheduler`]. It keeps one batch in flight on the
//! executor, routes token events to each request's channel, and reports stats to the
//! stats actor with `do_send` (never awaited).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient, WrapFuture};
use tokio::sync::mpsc::UnboundedSender;

use super::policy::{Scheduler, StepResult};
use super::request::NewRequest;
use crate::engine::events::{EngineError, TokenEvent};
use crate::engine::messages::{Abort, AbortReason, Generate};
use crate::engine::types::RequestId;
use crate::executor::ExecuteBatch;
use crate::stats::actor::{AdmissionRejected, RecordStep, StatsActor};
use crate::stats::data::SchedulerStats;

pub struct SchedulerActor {
    scheduler: Scheduler,
    executor: Recipient<ExecuteBatch>,
    stats: Addr<StatsActor>,
    channels: HashMap<RequestId, UnboundedSender<TokenEvent>>,
    in_flight: bool,
}

impl SchedulerActor {
    pub fn new(scheduler: Scheduler, executor: Recipient<ExecuteBatch>, stats: Addr<StatsActor>) -> Self {
        Self {
            scheduler,
            executor,
            stats,
            channels: HashMap::new(),
            in_flight: false,
        }
    }

    /// Starts the next step unless one is running or there is nothing to do.
    fn step(&mut self, ctx: &mut Context<Self>) {
        if self.in_flight || !self.scheduler.has_work() {
            return;
        }
        let batch = Arc::new(self.scheduler.schedule(Instant::now()));
        if batch.is_empty() {
            return;
        }
        self.in_flight = true;
        let request = self.executor.send(ExecuteBatch {
            batch: Arc::clone(&batch),
        });
        ctx.spawn(request.into_actor(self).map(move |result, act, ctx| {
            act.in_flight = false;
            let now = Instant::now();
            let step = match result {
                Ok(Ok(output)) => act.scheduler.update_from_output(&batch, output, now),
                Ok(Err(error)) => act.fail_batch(EngineError::Executor(error.to_string()), now),
                Err(mailbox) => act.fail_batch(EngineError::Executor(mailbox.to_string()), now),
            };
            act.publish(step);
            act.step(ctx);
        }));
    }

    fn fail_batch(&mut self, error: EngineError, now: Instant) -> StepResult {
        tracing::error!(%error, "step failed; failing the running requests");
        self.scheduler.fail_running(&error, now)
    }

    /// Sends events to their requests and stats to the stats actor. A request whose
    /// receiver is gone (client vanished) is aborted at once.
    fn publish(&mut self, step: StepResult) {
        let mut gone = Vec::new();
        for (id, event) in step.events {
            let last = !matches!(event, TokenEvent::Token { .. });
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
        self.stats.do_send(RecordStep {
            scheduler: step.scheduler_stats,
            iteration: step.iteration_stats,
        });
        if !gone.is_empty() {
            for id in gone {
                self.abort(&id, AbortReason::ClientGone);
            }
            let pending = self.scheduler.take_pending();
            self.publish(pending);
        }
    }

    fn abort(&mut self, id: &RequestId, reason: AbortReason) {
        if let Some(event) = self.scheduler.abort(id, reason, Instant::now())
            && let Some(tx) = self.channels.remove(id)
        {
            let _ = tx.send(event);
        }
        self.channels.remove(id);
    }
}

impl Actor for SchedulerActor {
    type Context = Context<Self>;
}

impl Handler<Generate> for SchedulerActor {
    type Result = Result<(), EngineError>;

    fn handle(&mut self, msg: Generate, ctx: &mut Context<Self>) -> Self::Result {
        let request = NewRequest {
            id: msg.id.clone(),
            prompt_token_ids: msg.prompt_token_ids,
            params: msg.params,
            operation: msg.operation,
            arrival: msg.arrival,
        };
        if let Err(error) = self.scheduler.add(request, Instant::now()) {
            self.stats.do_send(AdmissionRejected {
                reason: error.error_type(),
            });
            return Err(error);
        }
        self.channels.insert(msg.id, msg.events);
        self.step(ctx);
        Ok(())
    }
}

impl Handler<Abort> for SchedulerActor {
    type Result = ();

    fn handle(&mut self, msg: Abort, ctx: &mut Context<Self>) {
        self.abort(&msg.id, msg.reason);
        // Gauges and the finished request's stats go out now, not at the next step.
        let pending = self.scheduler.take_pending();
        self.publish(pending);
        self.step(ctx);
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
