//! A prompt computed once per body. The choices of `n > 1`, and a prompt list repeating a
//! prompt, reach the scheduler as sibling requests ([`Request::is_sibling_of`]). The first
//! to run computes the prompt while the others wait; when it is done, each sibling forks its
//! blocks ([`BlockManager::fork`]: full blocks shared, the partial one copied) and computes
//! only the last prompt token, whose logits it samples its own first token from. This works
//! with the prefix cache on or off; with it on, a sibling also waits instead of computing
//! the blocks the cache is about to hold.
//!
//! [`BlockManager::fork`]: crate::kv_cache::block::BlockManager::fork

use super::Scheduler;
use crate::engine::types::RequestId;
use crate::scheduler::request::Request;

impl Scheduler {
    /// Whether waiting `request`, with nothing computed, should wait for a running sibling
    /// that is still computing their prompt (it then forks it instead of computing it too).
    pub(super) fn waits_for_sibling(&self, request: &Request) -> bool {
        request.num_computed == 0
            && self
                .running
                .iter()
                .any(|r| r.is_sibling_of(request) && !r.prompt_computed())
    }

    /// Forks a running sibling's computed prompt into waiting request `index` when one has
    /// it (a choice that arrived, or was preempted, after its sibling's prefill).
    pub(super) fn fork_from_running_sibling(&mut self, index: usize) {
        let request = &self.waiting[index];
        if request.num_computed > 0 {
            return;
        }
        let leader = self
            .running
            .iter()
            .find(|r| r.is_sibling_of(request) && r.prompt_computed())
            .map(|r| r.id.clone());
        if let Some(leader) = leader {
            self.fork_prompt(&leader, index);
        }
    }

    /// Running request `leader_index` has just computed its prompt: its waiting siblings take
    /// it over now, before it can finish and free its blocks.
    pub(super) fn fork_into_waiting_siblings(&mut self, leader_index: usize) {
        let leader = &self.running[leader_index];
        let followers: Vec<usize> = (0..self.waiting.len())
            .filter(|&i| self.waiting[i].num_computed == 0 && self.waiting[i].is_sibling_of(leader))
            .collect();
        let leader = leader.id.clone();
        for index in followers {
            if !self.fork_prompt(&leader, index) {
                break; // no block for the copy: the rest compute their prompt themselves
            }
        }
    }

    /// Gives waiting request `index` all of `leader`'s prompt but its last token.
    fn fork_prompt(&mut self, leader: &RequestId, index: usize) -> bool {
        let request = &mut self.waiting[index];
        let tokens = request.prompt.len() - 1;
        if !self.blocks.fork(leader, &request.id, tokens) {
            return false;
        }
        tracing::debug!(id = %request.id, %leader, tokens, "prompt forked from a sibling");
        request.num_computed = tokens;
        request.forked_prompt = true;
        true
    }

    /// Waiting requests give back the blocks they forked (they will compute their prompt
    /// themselves, or fork again): the running ones need the room, or the blocks' contents
    /// may be lost. Returns whether any did.
    pub(super) fn release_waiting_forks(&mut self) -> bool {
        let mut released = false;
        for request in self
            .waiting
            .iter_mut()
            .filter(|r| r.forked_prompt && r.num_computed > 0)
        {
            self.blocks.free(&request.id);
            request.num_computed = 0;
            request.forked_prompt = false;
            released = true;
        }
        released
    }
}
