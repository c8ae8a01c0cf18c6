//! LoRA adapters in the scheduler: at most `max_loras` adapters in a step (a request whose
//! adapter finds no slot waits), and no prefix reuse across adapters or the base model.

use std::collections::BTreeSet;
use std::time::Instant;

use super::super::test_driver::{EOS, config, request};
use crate::executor::Executor;
use crate::executor::fake::{FakeBehaviour, FakeExecutor};
use crate::scheduler::Scheduler;
use crate::scheduler::request::NewRequest;

fn under(id: &str, lora: Option<u32>, prompt_len: usize, max_tokens: u32) -> NewRequest {
    NewRequest {
        lora,
        ..request(id, prompt_len, max_tokens)
    }
}

#[test]
fn a_step_runs_at_most_max_loras_adapters_and_the_others_wait() {
    let mut s = Scheduler::new(
        crate::scheduler::SchedulerConfig {
            max_loras: 2,
            ..config(64)
        },
        vec![EOS],
    );
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    let loras = [Some(1), Some(2), Some(3), None, Some(1), Some(3)];
    for (i, lora) in loras.iter().enumerate() {
        s.add(under(&format!("r{i}"), *lora, 4, 3), Instant::now())
            .expect("admitted");
    }
    let mut first_step = None;
    let mut seen = BTreeSet::new();
    let mut steps = 0;
    while s.has_work() {
        steps += 1;
        assert!(steps < 1000, "no progress");
        let batch = s.schedule(Instant::now());
        let adapters: BTreeSet<u32> = batch.sequences.iter().filter_map(|q| q.lora).collect();
        assert!(adapters.len() <= 2, "step with adapters {adapters:?}");
        for q in &batch.sequences {
            let i: usize = q.id[1..].parse().expect("id");
            assert_eq!(q.lora, loras[i], "{} runs under its own adapter", q.id);
            seen.insert(q.id.clone());
        }
        if first_step.is_none() {
            // r2 and r5 (adapter 3) wait for a slot: vLLM's `deferred` reason.
            assert_eq!(s.make_stats_snapshot().num_waiting_deferred, 2);
        }
        first_step.get_or_insert_with(|| {
            let mut ids: Vec<String> = batch.sequences.iter().map(|q| q.id.clone()).collect();
            ids.sort();
            ids
        });
        let out = fake.execute(&batch).expect("fake runs");
        s.update_from_output(&batch, out, Instant::now());
    }
    // Adapters 1 and 2 take the slots; 3 waits (r2, r5), the base and adapter 1 do not.
    assert_eq!(first_step.expect("a step"), ["r0", "r1", "r3", "r4"]);
    assert_eq!(seen.len(), loras.len(), "every request ran in the end");
}

/// The first scheduled chunk's start: the prompt tokens found in the prefix cache.
fn cached_tokens(s: &mut Scheduler, fake: &mut FakeExecutor, new: NewRequest) -> usize {
    let id = new.id.clone();
    s.add(new, Instant::now()).expect("admitted");
    let mut cached = None;
    while s.has_work() {
        let batch = s.schedule(Instant::now());
        if let Some(q) = batch.sequences.iter().find(|q| q.id == id) {
            cached.get_or_insert(q.start_position);
        }
        let out = fake.execute(&batch).expect("fake runs");
        s.update_from_output(&batch, out, Instant::now());
    }
    cached.expect("scheduled")
}

/// A scheduler with prefix caching and room for four adapters in a step.
fn caching_scheduler() -> Scheduler {
    Scheduler::new(
        crate::scheduler::SchedulerConfig {
            enable_prefix_caching: true,
            max_loras: 4,
            ..config(64)
        },
        vec![EOS],
    )
}

#[test]
fn a_prefix_computed_under_one_adapter_is_reused_only_under_the_same_adapter() {
    let mut s = caching_scheduler();
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    assert_eq!(cached_tokens(&mut s, &mut fake, under("a", Some(1), 13, 1)), 0);
    assert_eq!(
        cached_tokens(&mut s, &mut fake, under("b", Some(2), 13, 1)),
        0,
        "another adapter"
    );
    assert_eq!(
        cached_tokens(&mut s, &mut fake, under("c", None, 13, 1)),
        0,
        "the base model"
    );
    // Block size 4: three full blocks of the 13-token prompt are reused.
    assert_eq!(
        cached_tokens(&mut s, &mut fake, under("d", Some(1), 13, 1)),
        12,
        "the same adapter"
    );
    assert_eq!(cached_tokens(&mut s, &mut fake, under("e", Some(2), 13, 1)), 12);
    assert_eq!(cached_tokens(&mut s, &mut fake, under("f", None, 13, 1)), 12);
}

/// A tiny adapter for the change messages (the fake executor never reads its deltas).
fn adapter(id: u32) -> std::sync::Arc<crate::engine::lora::LoraAdapter> {
    std::sync::Arc::new(crate::engine::lora::LoraAdapter {
        id,
        name: format!("a{id}"),
        path: std::path::PathBuf::new(),
        rank: 1,
        base_model_name_or_path: None,
        layers: Vec::new(),
    })
}

/// What each step tells the executor about adapters: `(+id)` installs, `(-id)` drops.
fn changes(batch: &crate::engine::step::SchedulerOutput) -> Vec<i64> {
    use crate::engine::step::LoraChange;
    batch
        .lora_changes
        .iter()
        .map(|c| match c {
            LoraChange::Install(a) => i64::from(a.id),
            LoraChange::Remove(id) => -i64::from(*id),
        })
        .collect()
}

/// A run-time adapter reaches the executor with the first step after its load; unloaded
/// while a request runs under it, the request keeps running under it to its end, the
/// adapter leaves the executor only with the step after, and a new request naming it is
/// refused.
#[test]
fn an_unloaded_adapter_stays_until_its_requests_finish() {
    let mut s = Scheduler::new(config(64), vec![EOS]);
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    s.load_lora(adapter(7));
    s.add(under("r", Some(7), 4, 5), Instant::now()).expect("admitted");
    let mut seen = Vec::new();
    let mut steps = 0;
    while s.has_work() {
        steps += 1;
        let batch = s.schedule(Instant::now());
        seen.push(changes(&batch));
        assert!(
            batch.sequences.iter().all(|q| q.lora == Some(7)),
            "r runs under adapter 7"
        );
        if steps == 2 {
            s.unload_lora(7);
            let refused = s.add(under("late", Some(7), 4, 5), Instant::now());
            assert!(
                matches!(refused, Err(crate::engine::events::EngineError::AdapterUnloaded)),
                "{refused:?}"
            );
        }
        let out = fake.execute(&batch).expect("fake runs");
        s.update_from_output(&batch, out, Instant::now());
    }
    assert!(steps >= 3, "r ran past the unload ({steps} steps)");
    assert_eq!(seen[0], [7], "installed with the first step");
    assert!(
        seen[1..].iter().all(Vec::is_empty),
        "{seen:?}: nothing dropped while r runs"
    );
    s.add(under("base", None, 4, 1), Instant::now()).expect("admitted");
    let next = s.schedule(Instant::now());
    assert_eq!(changes(&next), [-7], "dropped with the first step after r");
}

/// `lora_requests_info`'s data: the adapters of the running and the waiting requests by name,
/// each once, and none of it without LoRA.
#[test]
fn the_lora_load_names_the_adapters_running_and_waiting() {
    let mut s = Scheduler::new(config(64), vec![EOS]);
    assert_eq!(s.make_stats().lora, None, "no LoRA, no info");
    s.serve_loras([(1, "a".to_string()), (2, "b".to_string())]);
    for (i, lora) in [Some(1), Some(2), None, Some(1)].iter().enumerate() {
        s.add(under(&format!("r{i}"), *lora, 4, 3), Instant::now())
            .expect("admitted");
    }
    let _ = s.schedule(Instant::now());
    let load = s.make_stats().lora.expect("LoRA on");
    // One adapter slot: a runs (twice, named once), b waits.
    assert_eq!(load.max_loras, 1);
    assert_eq!(load.running, ["a"]);
    assert_eq!(load.waiting, ["b"]);
}

/// KV events name the adapter a block was computed under, by id and by name, as vLLM's
/// `BlockStored` does, so a router's index keeps adapters apart; base-model blocks name none.
#[test]
fn stored_blocks_name_their_adapter() {
    let mut s = caching_scheduler();
    s.serve_loras([(1, "sql".to_string())]);
    s.record_kv_events();
    let mut fake = FakeExecutor::new(1000, FakeBehaviour::default());
    cached_tokens(&mut s, &mut fake, under("a", Some(1), 13, 1));
    cached_tokens(&mut s, &mut fake, under("b", None, 13, 1));
    let stored: Vec<(Option<u32>, Option<String>)> = s
        .take_kv_events()
        .into_iter()
        .filter_map(|e| match e {
            crate::kv_cache::events::KvCacheEvent::BlockStored { lora_id, lora_name, .. } => Some((lora_id, lora_name)),
            _ => None,
        })
        .collect();
    assert_eq!(stored, [(Some(1), Some("sql".to_string())), (None, None)]);
}
