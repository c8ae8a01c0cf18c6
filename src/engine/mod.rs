//! Types and messages shared by the api, the scheduler and the executor.

pub mod events;
pub mod health;
pub mod intervals;
pub mod lora;
pub mod memory;
pub mod messages;
pub mod request;
pub mod sampling_params;
pub mod server_health;
pub mod step;
pub mod structured_output;
pub mod timeline;
pub mod trace_context;
pub mod types;
