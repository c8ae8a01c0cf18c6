//! The compiler over kiln's tiny vocabulary: every kind of constraint compiles, masks only
//! ever allow outputs that satisfy it, bad constraints are refused with a reason, and the
//! cache serves repeats.

use std::time::Duration;

use super::test_support::{random_walk, tiny_compiler};
use super::*;
use crate::engine::structured_output::StructuredOutput;

fn compile(output: StructuredOutput) -> Result<CompileOutcome, GrammarError> {
    tiny_compiler(GrammarLimits::default()).compile_blocking(&output)
}

/// Outputs of `output` from several seeds; those cut by the token budget are left out, but
/// most must finish.
fn outputs(output: StructuredOutput, max_tokens: usize) -> Vec<String> {
    let grammar = compile(output).expect("compiles").grammar;
    let done: Vec<String> = (0..20)
        .filter_map(|seed| random_walk(&grammar, seed, max_tokens))
        .map(|bytes| String::from_utf8(bytes).expect("utf-8"))
        .collect();
    assert!(
        done.len() >= 10,
        "most walks finish within {max_tokens} tokens: {done:?}"
    );
    done
}

#[test]
fn json_schema_outputs_parse_and_follow_the_schema() {
    let schema = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
        "required": ["name", "age", "tags"], "additionalProperties": false}"#;
    for text in outputs(StructuredOutput::JsonSchema(schema.into()), 200) {
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let object = value.as_object().expect("an object");
        assert_eq!(object.len(), 3, "{text}");
        assert!(
            object["name"].as_str().is_some_and(|s| s.chars().count() <= 5),
            "{text}"
        );
        assert!(object["age"].as_u64().is_some_and(|a| a <= 120), "{text}");
        let tags = object["tags"].as_array().expect("tags");
        assert!(tags.len() <= 3 && tags.iter().all(|t| t == "a" || t == "b"), "{text}");
        assert!(
            text.starts_with("{\"") && !text.contains('\n'),
            "JSON is compact: {text}"
        );
    }
}

#[test]
fn json_object_choice_regex_and_both_grammar_forms_hold() {
    for text in outputs(StructuredOutput::JsonObject, 60) {
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(value.is_object(), "{text}");
    }
    let choices = vec!["yes".to_string(), "no".into(), "a \"quoted\" one".into()];
    for text in outputs(StructuredOutput::Choice(choices.clone()), 40) {
        assert!(choices.contains(&text), "{text}");
    }
    for text in outputs(StructuredOutput::Regex("[0-9]{3}-[a-z]{2,4}".into()), 40) {
        let (digits, letters) = text.split_once('-').expect("a dash");
        assert!(
            digits.len() == 3 && digits.bytes().all(|b| b.is_ascii_digit()),
            "{text}"
        );
        assert!(
            (2..=4).contains(&letters.len()) && letters.bytes().all(|b| b.is_ascii_lowercase()),
            "{text}"
        );
    }
    let lark = "start: \"(\" num (\",\" num)* \")\"\nnum: /[1-9]/";
    let gbnf = "root ::= \"(\" num (\",\" num)* \")\"\nnum ::= [1-9]";
    for grammar in [lark, gbnf] {
        for text in outputs(StructuredOutput::Grammar(grammar.into()), 60) {
            let inner = text
                .strip_prefix('(')
                .and_then(|t| t.strip_suffix(')'))
                .expect("parenthesised");
            assert!(inner.split(',').all(|n| n.len() == 1 && n != "0"), "{text}");
        }
    }
}

#[test]
fn bad_constraints_are_refused_with_a_reason() {
    let reason = |output: StructuredOutput| compile(output).map(|_| ()).unwrap_err().reason();
    assert_eq!(reason(StructuredOutput::JsonSchema("{\"type\": ".into())), "invalid");
    assert_eq!(
        reason(StructuredOutput::JsonSchema("{\"type\": \"no-such-type\"}".into())),
        "invalid"
    );
    assert_eq!(reason(StructuredOutput::Regex("(unclosed".into())), "invalid");
    assert_eq!(
        reason(StructuredOutput::Grammar("start: undefined_rule".into())),
        "invalid"
    );
    assert_eq!(reason(StructuredOutput::Choice(Vec::new())), "invalid");
    let huge = format!("\"{}\"", "x".repeat(70 * 1024));
    assert_eq!(reason(StructuredOutput::Regex(huge)), "too_large");
}

#[test]
fn a_pathological_regex_fails_within_its_limits() {
    let start = std::time::Instant::now();
    let result = compile(StructuredOutput::Regex(
        "(a|aa|aaa){1,500}(b|bb){1,500}[a-z]{1,500}x{1,1000}".into(),
    ));
    assert!(start.elapsed() < Duration::from_secs(30), "took {:?}", start.elapsed());
    if let Err(error) = result {
        assert_eq!(error.reason(), "invalid", "{error}");
    }
}

#[test]
fn repeats_come_from_the_cache_and_the_cache_is_bounded() {
    let compiler = tiny_compiler(GrammarLimits {
        cache_entries: 2,
        ..GrammarLimits::default()
    });
    let regex = |r: &str| StructuredOutput::Regex(r.into());
    let first = compiler.compile_blocking(&regex("a+")).expect("compiles");
    assert!(first.compile_seconds.is_some());
    let again = compiler.compile_blocking(&regex("a+")).expect("cached");
    assert!(again.compile_seconds.is_none(), "a repeat is a cache hit");
    assert_eq!(first.grammar, again.grammar);
    // A tool's schema and a json_schema with the same text share an entry.
    let schema = r#"{"type": "integer"}"#;
    compiler
        .compile_blocking(&StructuredOutput::JsonSchema(schema.into()))
        .expect("compiles");
    let tool = compiler
        .compile_blocking(&StructuredOutput::Tool(schema.into()))
        .expect("cached");
    assert!(tool.compile_seconds.is_none());
    compiler.compile_blocking(&regex("b+")).expect("compiles");
    assert_eq!(compiler.cached(), 2, "the LRU holds at most its size");
}

#[actix::test]
async fn compiling_waits_for_a_slot_and_gives_up_at_the_timeout() {
    let compiler = std::sync::Arc::new(tiny_compiler(GrammarLimits {
        compile_timeout: Duration::from_millis(50),
        ..GrammarLimits::default()
    }));
    let schema =
        StructuredOutput::JsonSchema(r#"{"type": "string", "pattern": "^[a-z]{3,9}@[a-z]{2,8}\\.com$"}"#.into());
    let busy = compiler.occupy_every_slot();
    let error = compiler.compile(&schema).await.map(|_| ()).unwrap_err();
    assert_eq!(error.reason(), "timeout", "{error}");
    drop(busy);
    let outcome = compiler.compile(&schema).await.expect("compiles once a slot is free");
    assert!(outcome.compile_seconds.is_some());
}

/// A JSON schema whose compile time doubles with each level: `anyOf`s nested `depth` deep,
/// each level doubling the schema (depth 12: about 0.55 s on an idle Zen 3 core; 13 is past
/// llguidance's size limit and fails at once as "schema too large").
fn slow_schema(depth: usize, leaf: &str) -> StructuredOutput {
    let mut schema = format!(r#"{{"type": "{leaf}"}}"#);
    for level in 0..depth {
        schema = format!(r#"{{"anyOf": [{schema}, {{"type": "object", "properties": {{"k{level}": {schema}}}}}]}}"#);
    }
    StructuredOutput::JsonSchema(schema)
}

#[actix::test]
async fn a_compile_that_times_out_frees_its_slot_at_once() {
    let compiler = std::sync::Arc::new(tiny_compiler(GrammarLimits {
        // A quarter of depth 12's compile on an idle machine; a loaded one only widens the gap.
        compile_timeout: Duration::from_millis(150),
        max_source_bytes: 1 << 20,
        ..GrammarLimits::default()
    }));
    // Two slow compiles take both slots and time out (each would run on for half a second).
    let (integers, strings) = (slow_schema(12, "integer"), slow_schema(12, "string"));
    let (first, second) = futures_util::join!(compiler.compile(&integers), compiler.compile(&strings));
    for outcome in [first, second] {
        let error = outcome.map(|_| ()).expect_err("a compile slower than its timeout");
        assert_eq!(error.reason(), "timeout", "{error}");
    }
    // Their slots are free again, though their threads may still be winding down.
    let outcome = compiler
        .compile(&StructuredOutput::Regex("a+".into()))
        .await
        .expect("a free slot: the timed-out compiles gave theirs back");
    assert!(outcome.compile_seconds.is_some());
}
