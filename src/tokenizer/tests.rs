//! Tokenizer tests on synthetic vocabularies: byte-level BPE, SentencePiece, refusals, BOS
//! insertion, special tokens and a Hugging Face folder round trip. The real vocabularies
//! (llama.cpp's test files, the default model) are tested in tests/it/tokenizer_vocabs.rs.

use std::path::Path;

use super::*;

fn tiny_vocab(eos: u32, add_bos: Option<bool>) -> GgufVocab {
    let (tokens, merges, types) = tiny_test_vocab();
    GgufVocab {
        source: "tiny.gguf".into(),
        model: Some("gpt2".into()),
        pre: Some("smollm".into()),
        tokens: Some(tokens),
        token_types: Some(types),
        merges: Some(merges),
        bos: Some(1),
        eos: Some(eos),
        add_bos,
        ..GgufVocab::default()
    }
}

fn byte_id(b: u8) -> u32 {
    3 + u32::from(b)
}

fn ids(tok: &Tokenizer, text: &str, special: bool) -> Vec<u32> {
    encode_prompt(tok, text, special).expect("encode")
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
    let tok = tokenizer_from_vocab(&tiny_vocab(2, None)).expect("tokenizer");
    let text = "<|im_start|>user\n the hello 42é<|im_end|>";
    let got = ids(&tok, text, true);
    let mut expected = vec![1];
    expected.extend(b"user\n".map(byte_id));
    expected.push(261); // "Ġthe"
    expected.extend([byte_id(b' '), 260, byte_id(b'l'), 262]); // "Ġ" "he" "l" "lo"
    expected.extend([byte_id(b' '), byte_id(b'4'), byte_id(b'2')]); // digits split singly
    expected.extend("é".bytes().map(byte_id));
    expected.push(2);
    assert_eq!(got, expected, "smollm adds no BOS by default");
    assert_eq!(tok.decode(&got, false).expect("decode"), text);
    assert_eq!(tok.decode(&got, true).expect("decode"), "user\n the hello 42é");
    assert!(!adds_bos(&tok));
}

#[test]
fn bos_follows_the_model_and_is_never_doubled() {
    let tok = tokenizer_from_vocab(&tiny_vocab(2, Some(true))).expect("tokenizer");
    assert!(adds_bos(&tok));
    let the = 261;
    assert_eq!(ids(&tok, " the", true), vec![1, the]);
    assert_eq!(ids(&tok, " the", false), vec![the]);
    // A prompt (a rendered chat template) that starts with BOS keeps exactly one.
    assert_eq!(ids(&tok, "<|im_start|> the", true), vec![1, the]);
    assert_eq!(ids(&tok, "<|im_start|><|im_start|> the", false), vec![1, 1, the]);
    let off = tokenizer_from_vocab(&tiny_vocab(2, Some(false))).expect("tokenizer");
    assert_eq!(ids(&off, " the", true), vec![the]);
    // llama.cpp's default for the Llama 3 pre-tokenizer and SentencePiece is to add BOS.
    assert!(bos::default_add_bos("gpt2", Some("llama-bpe")));
    assert!(bos::default_add_bos("llama", Some("default")));
    assert!(!bos::default_add_bos("gpt2", Some("qwen2")));
}

#[test]
fn special_tokens_skip_start_token_eos_and_add_eot_eom() {
    let s = SpecialTokens::from_vocab(&tiny_vocab(2, None));
    assert_eq!((s.bos, s.eos), (Some(1), Some(2)));
    assert_eq!(s.end_of_generation, vec![2, 0]);
    // A GGUF that records <|im_start|> as EOS must not stop on it.
    let s = SpecialTokens::from_vocab(&tiny_vocab(1, None));
    assert_eq!(s.eos, Some(1));
    assert_eq!(s.end_of_generation, vec![2, 0]);
    assert!(!s.end_of_generation.contains(&1));
    let mut vocab = tiny_vocab(2, None);
    vocab.eot = Some(7);
    vocab.eom = Some(8);
    let s = SpecialTokens::from_vocab(&vocab);
    assert_eq!(s.end_of_generation, vec![2, 0, 7, 8]);
}

#[test]
fn unknown_models_and_pre_tokenizers_are_refused_by_name() {
    let mut vocab = tiny_vocab(2, None);
    vocab.model = Some("bert".into());
    let err = tokenizer_from_vocab(&vocab).expect_err("bert").to_string();
    assert!(
        err.contains("'bert' is not supported") && err.contains("llama (SentencePiece)"),
        "{err}"
    );

    let mut vocab = tiny_vocab(2, None);
    vocab.pre = Some("tekken".into());
    let err = tokenizer_from_vocab(&vocab).expect_err("tekken").to_string();
    assert!(err.contains("'tekken' is not supported"), "{err}");
    assert!(
        err.contains("llama-bpe") && err.contains("qwen2") && err.contains("smollm"),
        "{err}"
    );

    let mut vocab = tiny_vocab(2, None);
    vocab.pre = None;
    let err = tokenizer_from_vocab(&vocab).expect_err("no pre").to_string();
    assert!(err.contains("'(missing)' is not supported"), "{err}");

    let mut vocab = tiny_vocab(2, None);
    vocab.model = Some("llama".into());
    let err = tokenizer_from_vocab(&vocab).expect_err("no scores").to_string();
    assert!(err.contains("tokenizer.ggml.scores"), "{err}");

    let (tokens, _, _) = tiny_test_vocab();
    let err = build_bpe_tokenizer(Path::new("x"), &tokens, &["ab".into()], None, "gpt-2").expect_err("merge");
    assert!(matches!(err, TokenizerError::BadMerge { index: 0, .. }), "{err}");
}

/// A small SentencePiece vocabulary: `<unk>` `<s>` `</s>`, the 256 byte pieces, then pieces
/// whose scores make `▁he` + `llo` the way to `▁hello`.
fn tiny_spm(add_space_prefix: bool) -> Tokenizer {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    let mut types = vec![2, 3, 3];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    types.resize(tokens.len(), TOKEN_TYPE_BYTE);
    let pieces = ["▁", "h", "e", "l", "o", "▁h", "▁he", "ll", "llo", "▁hello", "w"];
    tokens.extend(pieces.map(String::from));
    types.resize(tokens.len(), TOKEN_TYPE_NORMAL);
    let mut scores = vec![0.0; 259];
    scores.extend([-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0, -9.0, -10.0, -11.0]);
    let vocab = GgufVocab {
        source: "spm.gguf".into(),
        model: Some("llama".into()),
        pre: Some("default".into()),
        tokens: Some(tokens),
        token_types: Some(types),
        scores: Some(scores),
        bos: Some(1),
        eos: Some(2),
        add_space_prefix: Some(add_space_prefix),
        ..GgufVocab::default()
    };
    tokenizer_from_vocab(&vocab).expect("spm")
}

#[test]
fn sentencepiece_merges_by_score_with_byte_fallback() {
    let tok = tiny_spm(true);
    let piece = |p: &str| tok.token_to_id(p).expect("piece");
    // SentencePiece adds BOS unless the GGUF says otherwise, and a dummy `▁` prefix.
    let got = ids(&tok, "hello é", true);
    let mut expected = vec![1, piece("▁hello"), piece("▁")];
    expected.extend([0xC3u32, 0xA9].map(|b| 3 + b));
    assert_eq!(got, expected);
    assert_eq!(tok.decode(&got, true).expect("decode"), "hello é");
    // Gemma turns the dummy prefix off.
    let gemma = tiny_spm(false);
    assert_eq!(ids(&gemma, "hello", false), vec![piece("h"), piece("e"), piece("llo")]);
    assert_eq!(
        gemma.decode(&ids(&gemma, " hello", false), false).expect("decode"),
        " hello"
    );
}

#[test]
fn hf_folder_round_trip() {
    let tok = tokenizer_from_vocab(&tiny_vocab(2, None)).expect("tokenizer");
    let dir = tempfile::tempdir().expect("tempdir");
    tok.save(dir.path().join("tokenizer.json"), false).expect("save");
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>", "add_bos_token": true}"#,
    )
    .expect("write");
    std::fs::write(dir.path().join("config.json"), r#"{"eos_token_id": [2, 7]}"#).expect("write");
    std::fs::write(dir.path().join("generation_config.json"), r#"{"eos_token_id": [9, 2]}"#).expect("write");
    let (loaded, s) = hf_folder_tokenizer(dir.path()).expect("load");
    let text = "<|im_start|>the 12<|im_end|>";
    assert_eq!(ids(&loaded, text, false), ids(&tok, text, false));
    assert_eq!(ids(&loaded, "the", true), [vec![1], ids(&tok, "the", false)].concat());
    assert_eq!((s.bos, s.eos), (Some(1), Some(2)));
    assert_eq!(s.end_of_generation, vec![2, 0, 7, 9]);
    assert!(load_tokenizer_json(&dir.path().join("missing.json")).is_err());
}
