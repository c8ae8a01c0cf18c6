//! The executor actor survives a panic at every stage of a step, and dies when restarts
//! run out.

use std::sync::Arc;

use actix::Addr;

use super::*;
use crate::engine::health::EngineState;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::step::{ScheduledSequence, SchedulerOutput, StepStage};
use crate::executor::fake::{FakeBehaviour, FakeExecutor};

const POISON: u32 = 7;

fn batch(token: u32) -> ExecuteBatch {
    ExecuteBatch {
        batch: Arc::new(SchedulerOutput {
            sequences: vec![ScheduledSequence {
                id: format!("r{token}"),
                token_ids: vec![1, token],
                last_token_pending: false,
                start_position: 0,
                block_table: vec![0],
                sample: true,
                params: Arc::new(SamplingParams::default()),
                seed: None,
                num_generated: 0,
                output_token_ids: Vec::new(),
                prompt_token_ids: None,
                lora: None,
            }],
            ..SchedulerOutput::default()
        }),
    }
}

fn start(behaviour: FakeBehaviour, max_restarts: u32) -> (Addr<ExecutorActor<FakeExecutor>>, Arc<EngineHealth>) {
    let health = Arc::new(EngineHealth::new());
    health.ready();
    let executor = start_executor(
        FakeExecutor::new(32, behaviour),
        Supervision {
            health: health.clone(),
            max_restarts,
        },
    );
    (executor, health)
}

#[actix::test]
async fn a_panic_at_any_stage_fails_only_its_step_and_restarts_the_executor() {
    for stage in [StepStage::BeforeExecute, StepStage::Execute, StepStage::AfterExecute] {
        let (executor, health) = start(
            FakeBehaviour {
                panic_on_token: Some(POISON),
                panic_stage: stage,
                ..Default::default()
            },
            3,
        );
        let failed = executor.send(batch(POISON)).await.unwrap();
        assert_eq!(failed, Err(ExecutorError::Restarted { restarts: 1 }), "{stage:?}");
        assert!(executor.send(batch(2)).await.unwrap().is_ok(), "{stage:?}");
        assert_eq!(health.state(), EngineState::Ready, "{stage:?}");
        assert_eq!(health.step_running_for(Instant::now()), None);
    }
}

#[actix::test]
async fn a_reset_that_panics_is_retried_as_another_restart() {
    let (executor, health) = start(
        FakeBehaviour {
            panic_on_token: Some(POISON),
            panics_in_reset: 1,
            ..Default::default()
        },
        3,
    );
    let failed = executor.send(batch(POISON)).await.unwrap();
    assert_eq!(failed, Err(ExecutorError::Restarted { restarts: 2 }));
    assert!(executor.send(batch(2)).await.unwrap().is_ok());
    assert!(health.is_ready());
}

#[actix::test]
async fn restarts_without_a_successful_step_in_between_are_limited() {
    let (executor, health) = start(
        FakeBehaviour {
            panic_on_token: Some(POISON),
            ..Default::default()
        },
        2,
    );
    // A successful step in between starts the count again.
    for _ in 0..3 {
        assert!(matches!(
            executor.send(batch(POISON)).await.unwrap(),
            Err(ExecutorError::Restarted { .. })
        ));
        assert!(executor.send(batch(2)).await.unwrap().is_ok());
    }
    for expected in [
        Err(ExecutorError::Restarted { restarts: 1 }),
        Err(ExecutorError::Restarted { restarts: 1 }),
        Err(ExecutorError::Dead { restarts: 0 }),
    ] {
        assert_eq!(executor.send(batch(POISON)).await.unwrap(), expected);
    }
    assert!(!health.is_alive());
    assert_eq!(
        executor.send(batch(2)).await.unwrap(),
        Err(ExecutorError::Dead { restarts: 0 })
    );
}

#[actix::test]
async fn resets_that_keep_panicking_exhaust_the_restarts_within_one_step() {
    let (executor, health) = start(
        FakeBehaviour {
            panic_on_token: Some(POISON),
            panics_in_reset: 10,
            ..Default::default()
        },
        2,
    );
    assert_eq!(
        executor.send(batch(POISON)).await.unwrap(),
        Err(ExecutorError::Dead { restarts: 2 })
    );
    assert!(!health.is_alive());
}
