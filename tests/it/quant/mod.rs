//! Quantised GGUF files, made by llama.cpp's own tools, against their references.

mod k_parity;
mod q4km;
mod types;
