//! Run-time adapter changes as the scheduler sees them: an adapter loaded while the server
//! runs is sent to the executor with the next step; one unloaded leaves the executor only
//! once no queued, running or swapped request names it (requests in flight finish under the
//! adapter they started with), and later requests that still name it are refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::Scheduler;
use crate::engine::lora::LoraAdapter;
use crate::engine::step::{LoraChange, SchedulerOutput};
use crate::scheduler::request::Request;
use crate::stats::data::{LoraLoad, LoraRequests};

/// Changes not yet sent to the executor, and the adapters on their way out.
#[derive(Debug, Default)]
pub(super) struct LoraChanges {
    /// For the next step that runs anything, in order.
    pending: Vec<LoraChange>,
    /// Unloaded, still named by a request the scheduler holds.
    draining: BTreeSet<u32>,
    /// Unloaded: a new request naming one of these is refused (ids are never reused).
    gone: BTreeSet<u32>,
    /// Adapter names by id, for `lora_requests_info`; `None` without `--enable-lora`.
    names: Option<BTreeMap<u32, String>>,
}

impl Scheduler {
    /// Serves LoRA (`--enable-lora`), with the start-up adapters' names by id.
    pub fn serve_loras(&mut self, adapters: impl IntoIterator<Item = (u32, String)>) {
        self.loras.names = Some(adapters.into_iter().collect());
    }

    /// Sends `adapter` to the executor with the next step.
    pub fn load_lora(&mut self, adapter: Arc<LoraAdapter>) {
        if let Some(names) = self.loras.names.as_mut() {
            names.insert(adapter.id, adapter.name.clone());
        }
        self.loras.gone.remove(&adapter.id);
        self.loras.draining.remove(&adapter.id);
        self.loras.pending.push(LoraChange::Install(adapter));
    }

    /// Refuses new requests under adapter `id`; the executor drops it once the requests that
    /// name it have finished.
    pub fn unload_lora(&mut self, id: u32) {
        self.loras.gone.insert(id);
        self.loras.draining.insert(id);
    }

    /// Waiting requests whose adapter finds no slot among the running ones (`--max-loras`).
    pub(super) fn num_waiting_deferred(&self) -> usize {
        self.waiting.iter().filter(|r| !self.lora_fits(r.lora)).count()
    }

    /// Whether adapter `id` has been unloaded (new requests naming it are refused).
    pub(super) fn lora_gone(&self, lora: Option<u32>) -> bool {
        lora.is_some_and(|id| self.loras.gone.contains(&id))
    }

    /// Hands the pending changes to a step that runs something (an empty step is not sent),
    /// with a removal for each draining adapter no request names any more.
    pub(super) fn attach_lora_changes(&mut self, out: &mut SchedulerOutput) {
        if out.sequences.is_empty() {
            return;
        }
        let named: BTreeSet<u32> = self
            .running
            .iter()
            .chain(&self.waiting)
            .chain(&self.swapped)
            .filter_map(|r| r.lora)
            .collect();
        let idle: Vec<u32> = self.loras.draining.difference(&named).copied().collect();
        for id in idle {
            self.loras.draining.remove(&id);
            self.loras.pending.push(LoraChange::Remove(id));
            if let Some(names) = self.loras.names.as_mut() {
                names.remove(&id);
            }
        }
        out.lora_changes.append(&mut self.loras.pending);
    }

    /// The adapters in use by name, for `lora_requests_info`; `None` without LoRA.
    pub(super) fn lora_load(&self) -> Option<LoraLoad> {
        let names = self.loras.names.as_ref()?;
        let distinct = |requests: &mut dyn Iterator<Item = &Request>| {
            let mut found: Vec<String> = Vec::new();
            for id in requests.filter_map(|r| r.lora) {
                let name = names.get(&id).cloned().unwrap_or_else(|| id.to_string());
                if !found.contains(&name) {
                    found.push(name);
                }
            }
            found
        };
        let mut requests: Vec<LoraRequests> = Vec::new();
        let mut count = |lora: Option<u32>, running: bool| {
            let at = requests.iter().position(|r| r.lora == lora).unwrap_or_else(|| {
                requests.push(LoraRequests {
                    lora,
                    ..LoraRequests::default()
                });
                requests.len() - 1
            });
            if running {
                requests[at].running += 1;
            } else {
                requests[at].waiting += 1;
            }
        };
        self.running.iter().for_each(|r| count(r.lora, true));
        self.waiting.iter().for_each(|r| count(r.lora, false));
        Some(LoraLoad {
            max_loras: self.config.max_loras,
            running: distinct(&mut self.running.iter()),
            waiting: distinct(&mut self.waiting.iter().chain(&self.swapped)),
            adapters: names.iter().map(|(id, name)| (*id, name.clone())).collect(),
            requests,
        })
    }

    /// Whether the scheduler serves LoRA (`--enable-lora`): steps then count by adapter.
    pub(super) fn serves_loras(&self) -> bool {
        self.loras.names.is_some()
    }

    /// Adapter `id`'s name, while it is served (`None` without `--enable-lora`).
    pub(super) fn lora_name(&self, id: u32) -> Option<String> {
        self.loras.names.as_ref()?.get(&id).cloned()
    }
}
