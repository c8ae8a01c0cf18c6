//! Wire types of the OpenAI completions, chat and models APIs, shaped after what the official
//! `openai` Python client sends and parses: requests, responses and their logprobs.

mod logprobs;
mod requests;
mod responses;
pub mod schemas;
mod tools;

pub use logprobs::*;
pub use requests::*;
pub use responses::*;
pub use tools::*;

#[cfg(test)]
mod tests;
