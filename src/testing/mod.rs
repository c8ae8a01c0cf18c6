//! Support for tests and benchmarks.
//!
//! Built only for the lib's unit tests and with the `testing` feature, which the integration
//! tests and the benchmarks require; a plain `cargo build` leaves all of it out of the
//! server: the engine driver (`direct_engine`, `greedy_request`, `drive`, `run_to_completion`) the
//! engine benchmarks measure the real engine with, the test doubles and fixtures (the tiny
//! random-weight model, the in-process `TestServer`, the real-model lookup) and
//! `executor::fake`.

mod direct;
pub mod real_model;
mod server;
mod tiny_model;

pub use direct::{DirectDriver, EngineRun, direct_engine, drive, greedy_request, run_to_completion};
pub use server::TestServer;
pub use tiny_model::{TINY_CHAT_TEMPLATE, TinyModelSpec, write_tiny_model};
