//! Wire types of the OpenAI completions, chat and models APIs, shaped after what the official
//! `openai` Python client sends and parses: requests, responses and their logprobs.

mod fields;
mod logprobs;
mod prompt_logprobs;
mod requests;
mod responses;
pub mod schemas;
mod structured;
mod tokenize;
mod tools;

pub use fields::*;
pub use logprobs::*;
pub use prompt_logprobs::*;
pub use requests::*;
pub use responses::*;
pub use structured::*;
pub use tokenize::*;
pub use tools::*;

#[cfg(test)]
mod tests;
