//! Support for tests and benchmarks.
//!
//! The engine driver (`direct_engine`, `greedy_request`, `run_to_completion`) is always built:
//! the engine benchmarks measure the real engine with it. The test doubles and fixtures (the
//! tiny random-weight model, the in-process `TestServer`, the real-model lookup) and
//! `executor::fake` are built only for the lib's unit tests and with the `testing` feature,
//! which the integration tests and the tiny-model benchmarks require; a plain `cargo build`
//! leaves them out of the server.

mod direct;
#[cfg(any(test, feature = "testing"))]
pub mod real_model;
#[cfg(any(test, feature = "testing"))]
mod server;
#[cfg(any(test, feature = "testing"))]
mod tiny_model;

pub use direct::{EngineRun, direct_engine, greedy_request, run_to_completion};
#[cfg(any(test, feature = "testing"))]
pub use server::TestServer;
#[cfg(any(test, feature = "testing"))]
pub use tiny_model::{TINY_CHAT_TEMPLATE, TinyModelSpec, write_tiny_model};
