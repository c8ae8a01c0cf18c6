//! Tokenizer tests: a synthetic vocabulary written through `GgufWriter`, a Hugging Face
//! folder round trip, and the SmolLM2 reference token ids from the real GGUF (`KILN_TEST_MODEL`).

use super::*;
use crate::model::gguf::{GgufValue, GgufWriter};

fn tiny_gguf(eos: u32) -> (tempfile::NamedTempFile, GgufFile) {
    let (tokens, merges, types) = tiny_test_vocab();
    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.model", "gpt2")
        .add_metadata("tokenizer.ggml.pre", "smollm")
        .add_metadata("tokenizer.ggml.tokens", GgufValue::string_array(tokens))
        .add_metadata("tokenizer.ggml.merges", GgufValue::string_array(merges))
        .add_metadata(
            "tokenizer.ggml.token_type",
            GgufValue::Array(types.into_iter().map(GgufValue::I32).collect()),
        )
        .add_metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(1))
        .add_metadata("tokenizer.ggml.eos_token_id", GgufValue::U32(eos));
    let file = tempfile::NamedTempFile::new().expect("tempfile");
    w.write_to(file.path()).expect("write");
    let gguf = GgufFile::open(file.path()).expect("open");
    (file, gguf)
}

fn byte_id(b: u8) -> u32 {
    3 + u32::from(b)
}

#[test]
fn tiny_vocab_shape() {
    let (tokens, merges, types) = tiny_test_vocab();
    assert_eq!(tokens.len(), 3 + 256 + 4);
    assert_eq!(types.len(), tokens.len());
    assert_eq!(merges.len(), 4);
    assert_eq!(tokens[byte_id(b' ') as usize], "Ġ");
    assert_eq!(tokens[byte_id(b'\n') as usize], "Ċ");
    assert_eq!(tokens[byte_id(b'a') as usize], "a");
    let distinct: std::collections::HashSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len());
}

#[test]
fn tiny_vocab_encodes_specials_merges_and_bytes() {
    let (_file, gguf) = tiny_gguf(2);
    let tok = tokenizer_from_gguf(&gguf).expect("tokenizer");
    let text = "<|im_start|>user\n the hello 42é<|im_end|>";
    let ids = tok.encode(text, false).expect("encode").get_ids().to_vec();
    let mut expected = vec![1];
    expected.extend(b"user\n".map(byte_id));
    expected.push(261); // "Ġthe"
    expected.extend([byte_id(b' '), 260, byte_id(b'l'), 262]); // "Ġ" "he" "l" "lo"
    expected.extend([byte_id(b' '), byte_id(b'4'), byte_id(b'2')]); // digits split singly
    expected.extend("é".bytes().map(byte_id));
    expected.push(2);
    assert_eq!(ids, expected);
    assert_eq!(tok.decode(&ids, false).expect("decode"), text);
    assert_eq!(tok.decode(&ids, true).expect("decode"), "user\n the hello 42é");
}

#[test]
fn special_tokens_skip_start_token_eos() {
    let (_f, good) = tiny_gguf(2);
    let s = SpecialTokens::from_gguf(&good);
    assert_eq!((s.bos, s.eos, s.add_bos), (Some(1), Some(2), false));
    assert_eq!(s.end_of_generation, vec![2, 0]);
    // A GGUF that records <|im_start|> as EOS must not stop on it.
    let (_f, bad) = tiny_gguf(1);
    let s = SpecialTokens::from_gguf(&bad);
    assert_eq!(s.eos, Some(1));
    assert_eq!(s.end_of_generation, vec![2, 0]);
    assert!(s.is_end(2) && !s.is_end(1));
}

#[test]
fn unsupported_model_and_bad_merge_are_errors() {
    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.model", "llama");
    let file = tempfile::NamedTempFile::new().expect("tempfile");
    w.write_to(file.path()).expect("write");
    let gguf = GgufFile::open(file.path()).expect("open");
    let err = tokenizer_from_gguf(&gguf).expect_err("llama");
    assert!(err.to_string().contains("'llama' is not supported"), "{err}");

    let (tokens, _, _) = tiny_test_vocab();
    let err = build_bpe_tokenizer(Path::new("x"), &tokens, &["ab".into()], None, None).expect_err("merge");
    assert!(matches!(err, TokenizerError::BadMerge { index: 0, .. }), "{err}");
}

#[test]
fn hf_folder_round_trip() {
    let (_f, gguf) = tiny_gguf(2);
    let tok = tokenizer_from_gguf(&gguf).expect("tokenizer");
    let dir = tempfile::tempdir().expect("tempdir");
    tok.save(dir.path().join("tokenizer.json"), false).expect("save");
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>", "add_bos_token": true}"#,
    )
    .expect("write");
    std::fs::write(dir.path().join("config.json"), r#"{"eos_token_id": [2, 7]}"#).expect("write");
    let loaded = load_tokenizer_json(&dir.path().join("tokenizer.json")).expect("load");
    let text = "<|im_start|>the 12<|im_end|>";
    assert_eq!(
        loaded.encode(text, false).expect("encode").get_ids(),
        tok.encode(text, false).expect("encode").get_ids()
    );
    let s = SpecialTokens::from_hf_folder(dir.path()).expect("special");
    assert_eq!((s.bos, s.eos, s.add_bos), (Some(1), Some(2), true));
    assert_eq!(s.end_of_generation, vec![2, 0, 7]);
    assert!(load_tokenizer_json(&dir.path().join("missing.json")).is_err());
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn smollm2_matches_reference_ids() {
    let gguf = GgufFile::open(&crate::testing::real_model::model_path()).expect("open");
    let tok = tokenizer_from_gguf(&gguf).expect("tokenizer");
    let reference = crate::testing::real_model::greedy_reference();
    let cases = reference["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    let ids_of = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|i| i.as_u64().expect("id") as u32)
            .collect()
    };
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        let text = case["text"].as_str().expect("text");
        let ids = tok.encode(text, false).expect("encode");
        assert_eq!(ids.get_ids(), ids_of(&case["prompt_ids"]), "case {name}");
        let greedy = tok.decode(&ids_of(&case["greedy_ids"]), false).expect("decode");
        assert_eq!(
            greedy,
            case["greedy_text"].as_str().expect("greedy_text"),
            "case {name}"
        );
    }
    let s = SpecialTokens::from_gguf(&gguf);
    assert_eq!((s.bos, s.eos, s.add_bos), (Some(1), Some(2), false));
    assert_eq!(s.end_of_generation, vec![2, 0]);
}
