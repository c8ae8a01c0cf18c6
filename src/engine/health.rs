//! One engine's lifecycle as one shared value: its executor, its step watchdog and the server
//! write it; `/health` (liveness) and `/ready` (readiness) read every engine's through
//! the server's health (`ServerHealth`).
//!
//! Liveness fails only when the engine is dead for good (restarts exhausted, or a step hung
//! past its deadline): the process then exits non-zero so the orchestrator restarts it.
//! Readiness also fails while loading, restarting the executor, or draining for shutdown,
//! states a load balancer should route around but that end by themselves.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Where the engine is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineState {
    /// The model is loading or the actors are starting.
    Loading,
    Ready,
    /// The executor panicked and is being rebuilt with a fresh cache.
    Restarting,
    /// Shutting down: no new work, running requests finish within the grace period.
    Draining,
    /// Dead for good; the reason is for the log, never for a client.
    Dead(String),
}

impl EngineState {
    /// The word `/ready` and `/health` answer with.
    pub fn name(&self) -> &'static str {
        match self {
            EngineState::Loading => "loading",
            EngineState::Ready => "ready",
            EngineState::Restarting => "restarting",
            EngineState::Draining => "draining",
            EngineState::Dead(_) => "dead",
        }
    }
}

/// The shared state, plus when the executor's current step started (for the hang watchdog).
#[derive(Debug)]
pub struct EngineHealth {
    state: watch::Sender<EngineState>,
    step_started: Mutex<Option<Instant>>,
}

impl Default for EngineHealth {
    fn default() -> Self {
        Self::new()
    }
}

impl EngineHealth {
    /// Starts in [`EngineState::Loading`].
    pub fn new() -> Self {
        Self {
            state: watch::Sender::new(EngineState::Loading),
            step_started: Mutex::new(None),
        }
    }

    pub fn state(&self) -> EngineState {
        self.state.borrow().clone()
    }

    pub fn is_alive(&self) -> bool {
        !matches!(*self.state.borrow(), EngineState::Dead(_))
    }

    pub fn is_ready(&self) -> bool {
        *self.state.borrow() == EngineState::Ready
    }

    /// Takes requests now: ready, or draining its last ones (the requests of a connection
    /// still open at shutdown are served).
    pub fn serves(&self) -> bool {
        matches!(*self.state.borrow(), EngineState::Ready | EngineState::Draining)
    }

    /// Loading or restarting is over. Draining and death are not undone.
    pub fn ready(&self) {
        self.state.send_if_modified(|s| {
            let from = matches!(s, EngineState::Loading | EngineState::Restarting);
            if from {
                *s = EngineState::Ready;
            }
            from
        });
    }

    /// The executor is being rebuilt (while draining, readiness stays "draining").
    pub fn restarting(&self) {
        self.state.send_if_modified(|s| {
            let from = matches!(s, EngineState::Loading | EngineState::Ready);
            if from {
                *s = EngineState::Restarting;
            }
            from
        });
    }

    /// Shutdown has begun.
    pub fn draining(&self) {
        self.state.send_if_modified(|s| {
            let alive = !matches!(s, EngineState::Dead(_));
            if alive {
                *s = EngineState::Draining;
            }
            alive
        });
    }

    /// Dead for good; the first reason is kept.
    pub fn dead(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.state.send_if_modified(|s| {
            let alive = !matches!(s, EngineState::Dead(_));
            if alive {
                *s = EngineState::Dead(reason);
            }
            alive
        });
    }

    /// Resolves with the reason once the engine is dead.
    pub async fn wait_dead(&self) -> String {
        let mut rx = self.state.subscribe();
        loop {
            if let EngineState::Dead(reason) = &*rx.borrow_and_update() {
                return reason.clone();
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The executor began a step.
    pub fn step_started(&self, now: Instant) {
        *self.step_started.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
    }

    /// The executor is between steps.
    pub fn step_finished(&self) {
        *self.step_started.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// How long the current step has run, if one is running.
    pub fn step_running_for(&self, now: Instant) -> Option<Duration> {
        self.step_started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|start| now.saturating_duration_since(start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_lifecycle_and_death_is_final() {
        let h = EngineHealth::new();
        assert!(!h.is_ready() && h.is_alive());
        h.ready();
        assert!(h.is_ready());
        h.restarting();
        assert_eq!(h.state(), EngineState::Restarting);
        h.ready();
        h.draining();
        h.ready();
        h.restarting();
        assert_eq!(h.state(), EngineState::Draining, "draining is not undone");
        h.dead("restarts exhausted");
        h.dead("later reason");
        h.ready();
        h.draining();
        assert_eq!(h.state(), EngineState::Dead("restarts exhausted".into()));
        assert!(!h.is_alive());
    }

    #[test]
    fn the_running_step_is_timed() {
        let h = EngineHealth::new();
        let t0 = Instant::now();
        assert_eq!(h.step_running_for(t0), None);
        h.step_started(t0);
        assert_eq!(
            h.step_running_for(t0 + Duration::from_secs(3)),
            Some(Duration::from_secs(3))
        );
        h.step_finished();
        assert_eq!(h.step_running_for(t0), None);
    }

    #[actix::test]
    async fn waiting_for_death_resolves_with_its_reason() {
        let h = std::sync::Arc::new(EngineHealth::new());
        let waiter = tokio::spawn({
            let h = h.clone();
            async move { h.wait_dead().await }
        });
        h.ready();
        h.dead("hung");
        assert_eq!(waiter.await.unwrap(), "hung");
    }
}
