//! Token ids and the embedding: a model whose tokenizer has ids past its embedding is refused
//! at load; padding rows past the tokenizer's ids are never sampled; request token ids are
//! checked against the tokenizer.

use kiln::model::loader::open_model;
use kiln::testing::{TinyModelSpec, direct_engine, greedy_request, run_to_completion, write_tiny_model};
use kiln::tokenizer::token_id_bound;
use serde_json::json;

use crate::common::start_tiny;

fn tokenizer_size() -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_tiny_model(dir.path(), TinyModelSpec::default()).expect("tiny model");
    token_id_bound(&open_model(&path).expect("open").tokenizer)
}

#[test]
fn a_tokenizer_with_ids_past_the_embedding_is_refused_at_load() {
    let size = tokenizer_size();
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = TinyModelSpec {
        embedding_rows: Some(size - 10),
        ..Default::default()
    };
    let path = write_tiny_model(dir.path(), spec).expect("tiny model");
    let err = match open_model(&path) {
        Ok(_) => panic!("a tokenizer with {size} ids over {} embedding rows loaded", size - 10),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("embedding has only"), "{err}");
    assert!(err.contains("tiny-llama.gguf"), "names the file: {err}");
}

#[test]
fn padding_rows_of_the_embedding_are_never_sampled() {
    // As many padding rows as real ones: unmasked, about every other sampled token would be one.
    let size = tokenizer_size();
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = TinyModelSpec {
        embedding_rows: Some(2 * size),
        ..Default::default()
    };
    let path = write_tiny_model(dir.path(), spec).expect("tiny model");
    let (mut scheduler, mut executor) = direct_engine(&path, |_| {}).expect("engine");
    for seed in 0..4u64 {
        let mut request = greedy_request(&format!("r{seed}"), vec![5, 6, 7], 64, true);
        std::sync::Arc::make_mut(&mut request.params).temperature = 1.0;
        request.seed = Some(seed);
        scheduler.add(request, std::time::Instant::now()).expect("admitted");
    }
    let run = run_to_completion(&mut scheduler, &mut executor);
    let sampled: Vec<u32> = run.tokens.values().flatten().copied().collect();
    assert_eq!(sampled.len(), 4 * 64);
    let padded: Vec<&u32> = sampled.iter().filter(|&&t| t as usize >= size).collect();
    assert!(
        padded.is_empty(),
        "sampled padding ids {padded:?} (tokenizer has {size})"
    );
}

#[test]
fn request_token_ids_are_checked_against_the_tokenizer() {
    let size = tokenizer_size() as u32;
    let t = start_tiny(|_| {});
    let (status, body) = t.post("/v1/completions", &json!({"prompt": [1, size - 1], "max_tokens": 1}));
    assert_eq!(status, 200, "the last id is in range: {body}");
    let (status, body) = t.post("/v1/completions", &json!({"prompt": [1, size], "max_tokens": 1}));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "prompt", "{body}");
}
