//! The scheduler: a pure policy (`Scheduler`) and its actor shell (`SchedulerActor`).

pub mod actor;
mod in_flight;
pub mod policy;
pub mod request;

pub use policy::{PreemptionMode, Scheduler, SchedulerConfig, StepResult};
pub use request::NewRequest;
