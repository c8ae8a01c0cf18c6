//! Tokenizers built from real GGUF vocabularies give the ids of the models' Hugging Face
//! tokenizers: llama.cpp's vocab-only test files (`KILN_TEST_LLAMA_VOCABS`, fetched by
//! `.ci/fetch-tokenizer-data`; their `.out` ids come from each model's HF tokenizer), and the
//! default model on a corpus of hard strings (tests/data/tokenizers/, made by the script there).

use std::path::{Path, PathBuf};

use kiln::model::gguf::GgufFile;
use kiln::testing::real_model::{greedy_reference, model_path};
use kiln::tokenizer::{SpecialTokens, Tokenizer, encode_prompt, tokenizer_from_vocab};

/// llama.cpp's vocabularies kiln tokenizes (each with `.inp`/`.out` reference pairs).
const SUPPORTED: [&str; 13] = [
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
];

/// The ones it refuses at load, with what the message must name.
const REFUSED: [(&str, &str); 4] = [
    ("bert-bge", "tokenizer model 'bert' is not supported"),
    ("gemma-4", "tokenizer model 'gemma4' is not supported"),
    ("nomic-bert-moe", "tokenizer model 't5' is not supported"),
    ("gpt-neox", "tokenizer.ggml.pre = '(missing)' is not supported"),
];

fn vocab_dir() -> PathBuf {
    let dir = std::env::var_os("KILN_TEST_LLAMA_VOCABS")
        .expect("KILN_TEST_LLAMA_VOCABS must name llama.cpp's vocab folder (.ci/fetch-tokenizer-data prints it)");
    let dir = PathBuf::from(dir);
    assert!(dir.is_dir(), "KILN_TEST_LLAMA_VOCABS={} is not a folder", dir.display());
    dir
}

fn gguf_tokenizer(path: &Path) -> Result<Tokenizer, String> {
    let gguf = GgufFile::open(path).map_err(|e| e.to_string())?;
    tokenizer_from_vocab(&gguf.tokenizer_vocab()).map_err(|e| e.to_string())
}

/// The `(text, ids)` pairs of one vocabulary, as llama.cpp's convert_hf_to_gguf_update.py
/// writes them: texts separated by `\n__ggml_vocab_test__\n`, one line of ids per text.
fn reference_pairs(dir: &Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let path = dir.join(format!("ggml-vocab-{name}.gguf.{ext}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let inputs = read("inp");
    let texts: Vec<&str> = inputs
        .strip_suffix("\n__ggml_vocab_test__\n")
        .expect("inp ends with a separator")
        .split("\n__ggml_vocab_test__\n")
        .collect();
    let outputs = read("out");
    let ids: Vec<Vec<u32>> = outputs
        .lines()
        .map(|l| l.split_whitespace().map(|id| id.parse().expect("id")).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{name}: inputs and outputs differ in count");
    texts.into_iter().map(str::to_string).zip(ids).collect()
}

#[test]
#[ignore = "needs llama.cpp's vocab files (KILN_TEST_LLAMA_VOCABS); .ci/run provides them"]
fn llama_cpp_vocabularies_give_hugging_face_ids() {
    let dir = vocab_dir();
    let mut failures = Vec::new();
    let mut checked = 0;
    for name in SUPPORTED {
        let tokenizer =
            gguf_tokenizer(&dir.join(format!("ggml-vocab-{name}.gguf"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, (text, expected)) in reference_pairs(&dir, name).into_iter().enumerate() {
            let got = encode_prompt(&tokenizer, &text, false).expect("encode");
            checked += 1;
            if got != expected {
                failures.push(format!(
                    "{name} #{i} {text:?}:\n  expected {expected:?}\n       got {got:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 13 * 40, "only {checked} cases");
}

#[test]
#[ignore = "needs llama.cpp's vocab files (KILN_TEST_LLAMA_VOCABS); .ci/run provides them"]
fn unsupported_vocabularies_are_refused_by_name_and_none_goes_untested() {
    let dir = vocab_dir();
    for (name, message) in REFUSED {
        let err = gguf_tokenizer(&dir.join(format!("ggml-vocab-{name}.gguf"))).expect_err(name);
        assert!(err.contains(message), "{name}: {err}");
        assert!(
            err.contains("supported"),
            "{name}: the message lists what is supported: {err}"
        );
    }
    // Every vocabulary with reference ids is either checked above or refused here.
    for entry in std::fs::read_dir(&dir).expect("read_dir") {
        let file = entry.expect("entry").file_name().to_string_lossy().to_string();
        if let Some(name) = file
            .strip_prefix("ggml-vocab-")
            .and_then(|f| f.strip_suffix(".gguf.out"))
        {
            assert!(
                SUPPORTED.contains(&name) || REFUSED.iter().any(|(r, _)| *r == name),
                "{file}: a vocabulary with reference ids that no test covers"
            );
        }
    }
}

fn ids_of(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|i| u32::try_from(i.as_u64().expect("id")).expect("u32"))
        .collect()
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn default_model_gives_hugging_face_ids_on_hard_strings() {
    let tokenizer = gguf_tokenizer(&model_path()).expect("tokenizer");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers/smollm2-hard-strings.json");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json");
    let cases = fixture["cases"].as_array().expect("cases");
    assert!(cases.len() >= 30);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let ids = encode_prompt(&tokenizer, text, false).expect("encode");
        assert_eq!(ids, ids_of(&case["ids"]), "{text:?}");
        // SmolLM2 adds no BOS: with special tokens the ids are the same.
        assert_eq!(encode_prompt(&tokenizer, text, true).expect("encode"), ids, "{text:?}");
        let decoded = tokenizer.decode(&ids, false).expect("decode");
        assert_eq!(decoded, text, "decoding gives the text back");
    }
}

#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn default_model_matches_reference_ids_and_stop_tokens() {
    let gguf = GgufFile::open(&model_path()).expect("open");
    let vocab = gguf.tokenizer_vocab();
    let tokenizer = tokenizer_from_vocab(&vocab).expect("tokenizer");
    let reference = greedy_reference();
    let cases = reference["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        let text = case["text"].as_str().expect("text");
        let ids = encode_prompt(&tokenizer, text, true).expect("encode");
        assert_eq!(ids, ids_of(&case["prompt_ids"]), "case {name}");
        let greedy = tokenizer.decode(&ids_of(&case["greedy_ids"]), false).expect("decode");
        assert_eq!(
            greedy,
            case["greedy_text"].as_str().expect("greedy_text"),
            "case {name}"
        );
    }
    let s = SpecialTokens::from_vocab(&vocab);
    assert_eq!((s.bos, s.eos), (Some(1), Some(2)));
    assert_eq!(s.end_of_generation, vec![2, 0]);
}
