//! The scheduler: a pure policy (`Scheduler`) and its actor shell (`SchedulerActor`).

pub mod actor;
mod ahead_timer;
mod in_flight;
pub mod policy;
pub mod request;
pub mod step;

pub use policy::{PreemptionMode, Scheduler, SchedulerConfig, StepResult, StepSharing};
pub use request::NewRequest;
pub use step::run_loop::{ReturnedStep, StepFailure, StepLoop};
