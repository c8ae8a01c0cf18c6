//! One engine step: its time budget, the model that predicts its time, the loop that sends
//! steps to the executor, and the debug line each step leaves.

pub mod budget;
mod log;
pub mod run_loop;
pub mod time;
