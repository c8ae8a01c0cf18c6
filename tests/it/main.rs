//! Integration tests, in one binary so the crate is linked once.

mod api_tiny;
mod common;
mod model_formats;
mod openai_client;
mod reference_parity;
