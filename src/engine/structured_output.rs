//! What a request constrains its output to (OpenAI's `response_format`, vLLM's
//! `structured_outputs` and `guided_*` fields, tool calls), validated by the API layer,
//! compiled off the hot path into a [`CompiledGrammar`], and turned into a per-sequence token
//! mask on the executor thread.

use std::fmt;
use std::sync::{Arc, Mutex};

use llguidance::Matcher;

/// One request's output constraint, in the source form the grammar engine compiles.
///
/// Another part of the API that wants "the output is JSON following this schema" sets
/// `params.structured = Some(StructuredOutput::JsonSchema(schema_text))`; tool calling sets
/// [`StructuredOutput::Tool`] instead, which compiles the same way but is counted under the
/// `tool` kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StructuredOutput {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON Schema, as its JSON text.
    JsonSchema(String),
    /// A regular expression the whole output matches.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A grammar in Lark syntax, or in GBNF (recognised by its `::=`, converted to Lark).
    Grammar(String),
    /// A JSON Schema that a tool call's arguments follow (`tool_choice: required` or a named
    /// function): compiled as [`StructuredOutput::JsonSchema`], counted as kind `tool`.
    Tool(String),
}

impl StructuredOutput {
    /// The `kind` label of the constraint metrics: a fixed set, never a client's string.
    pub fn kind(&self) -> &'static str {
        match self {
            StructuredOutput::JsonObject => "json_object",
            StructuredOutput::JsonSchema(_) => "json_schema",
            StructuredOutput::Regex(_) => "regex",
            StructuredOutput::Choice(_) => "choice",
            StructuredOutput::Grammar(_) => "grammar",
            StructuredOutput::Tool(_) => "tool",
        }
    }

    /// Every kind, so each metric series can exist from the start.
    pub const KINDS: [&'static str; 6] = ["json_object", "json_schema", "regex", "choice", "grammar", "tool"];
}

/// A grammar compiled once and shared by every request that sends the same constraint: the
/// executor starts each constrained sequence from a clone of this matcher and never compiles.
#[derive(Clone)]
pub struct CompiledGrammar {
    /// The matcher at the grammar's start. Behind a mutex only so the value is `Sync`; it is
    /// locked just long enough to clone (clones share the lexer's caches).
    initial: Arc<Mutex<Matcher>>,
    /// The tokens that end generation: all a broken matcher still allows.
    end_tokens: Arc<[u32]>,
}

impl CompiledGrammar {
    pub fn new(matcher: Matcher) -> Self {
        let end_tokens = matcher
            .tok_env()
            .map(|env| env.tok_trie().eos_tokens().to_vec())
            .unwrap_or_default();
        Self {
            initial: Arc::new(Mutex::new(matcher)),
            end_tokens: end_tokens.into(),
        }
    }

    /// The tokens that end generation.
    pub fn end_tokens(&self) -> &[u32] {
        &self.end_tokens
    }

    /// A matcher at the grammar's start, for one sequence.
    pub fn start(&self) -> Matcher {
        self.initial
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl fmt::Debug for CompiledGrammar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompiledGrammar")
    }
}

impl PartialEq for CompiledGrammar {
    /// The same compiled grammar (one cache entry), not two equal ones.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.initial, &other.initial)
    }
}
