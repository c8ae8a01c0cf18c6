//! What a request constrains its output to (OpenAI's `response_format`, vLLM's
//! `structured_outputs` and `guided_*` fields, tool calls), validated by the API layer and
//! compiled into a per-sequence token mask on the executor thread.

/// One request's output constraint, in the source form the grammar engine compiles.
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
    /// A grammar in Lark syntax (GBNF/EBNF input is converted to it by the API layer).
    Grammar(String),
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
        }
    }
}
