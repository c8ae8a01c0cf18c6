//! The server's health over its engines: each engine of a data-parallel server
//! (`--data-parallel-size`) has its own [`EngineHealth`], written by its own executor and step
//! watchdog, so one engine restarting or dying leaves the others serving. The server as a
//! whole is ready while any engine is ready, and alive (`/health` 200, the process running)
//! while any engine is alive; it dies only once every engine is dead.

use std::sync::Arc;

use super::health::{EngineHealth, EngineState};

#[derive(Debug)]
pub struct ServerHealth {
    engines: Vec<Arc<EngineHealth>>,
}

impl ServerHealth {
    /// `engines` engines (at least one), each loading.
    pub fn new(engines: usize) -> Self {
        Self {
            engines: (0..engines.max(1)).map(|_| Arc::new(EngineHealth::new())).collect(),
        }
    }

    /// Engine `i`'s health (`i` below [`Self::len`]).
    pub fn engine(&self, i: usize) -> &Arc<EngineHealth> {
        &self.engines[i]
    }

    pub fn engines(&self) -> &[Arc<EngineHealth>] {
        &self.engines
    }

    pub fn len(&self) -> usize {
        self.engines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.engines.is_empty()
    }

    /// The server's state: ready while any engine is; else the state of the engine nearest
    /// to serving (draining, restarting, loading); dead once all are, with the first reason.
    pub fn state(&self) -> EngineState {
        let states: Vec<EngineState> = self.engines.iter().map(|e| e.state()).collect();
        let rank = |s: &EngineState| match s {
            EngineState::Ready => 0,
            EngineState::Draining => 1,
            EngineState::Restarting => 2,
            EngineState::Loading => 3,
            EngineState::Dead(_) => 4,
        };
        states.into_iter().min_by_key(rank).unwrap_or(EngineState::Loading)
    }

    /// Alive while any engine is.
    pub fn is_alive(&self) -> bool {
        self.engines.iter().any(|e| e.is_alive())
    }

    /// Ready while any engine is.
    pub fn is_ready(&self) -> bool {
        self.engines.iter().any(|e| e.is_ready())
    }

    /// Every engine has loaded.
    pub fn ready(&self) {
        self.engines.iter().for_each(|e| e.ready());
    }

    /// Shutdown has begun, for every engine.
    pub fn draining(&self) {
        self.engines.iter().for_each(|e| e.draining());
    }

    /// Resolves once every engine is dead, with their reasons.
    pub async fn wait_all_dead(&self) -> String {
        let mut reasons = Vec::with_capacity(self.engines.len());
        for (i, engine) in self.engines.iter().enumerate() {
            let reason = engine.wait_dead().await;
            reasons.push(if self.engines.len() == 1 {
                reason
            } else {
                format!("engine {i}: {reason}")
            });
        }
        reasons.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_ready_and_alive_while_any_engine_is() {
        let h = ServerHealth::new(2);
        assert_eq!(h.state(), EngineState::Loading);
        h.ready();
        assert!(h.is_ready());
        h.engine(1).restarting();
        assert!(h.is_ready() && h.engine(0).is_ready() && !h.engine(1).is_ready());
        h.engine(1).dead("restarts exhausted");
        assert_eq!(h.state(), EngineState::Ready);
        assert!(h.is_alive());
        h.engine(0).restarting();
        assert_eq!(h.state(), EngineState::Restarting);
        assert!(!h.is_ready() && h.is_alive());
        h.engine(0).dead("hung");
        assert!(!h.is_alive());
        assert_eq!(h.state(), EngineState::Dead("hung".into()));
    }

    #[actix::test]
    async fn the_server_dies_only_once_every_engine_has() {
        let h = Arc::new(ServerHealth::new(2));
        h.ready();
        let waiter = tokio::spawn({
            let h = h.clone();
            async move { h.wait_all_dead().await }
        });
        h.engine(1).dead("one");
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        h.engine(0).dead("zero");
        assert_eq!(waiter.await.unwrap(), "engine 0: zero; engine 1: one");
    }
}
