//! The request fields that constrain a choice's output, whichever spelling the client used
//! (OpenAI's `response_format`, vLLM's `structured_outputs` and `guided_*`), resolved into
//! one [`StructuredOutput`]; and compiling it before the request is submitted, off the HTTP
//! worker, with each failure a 400 that names the parameter.

use std::sync::Arc;

use actix::Addr;
use serde_json::Value;

use super::errors::ApiError;
use super::openai_types::{ResponseFormatParam, StructuredOutputsParam};
use super::strict_schema::close_objects_in_text;
use crate::engine::sampling_params::SamplingParams;
use crate::engine::structured_output::StructuredOutput;
use crate::grammar::{GrammarCompiler, GrammarError};
use crate::stats::actor::StatsActor;
use crate::stats::structured::RecordGrammarCompile;

/// The constraint fields of one request body.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConstraintFields<'a> {
    pub response_format: Option<&'a ResponseFormatParam>,
    pub structured_outputs: Option<&'a StructuredOutputsParam>,
    pub guided_json: Option<&'a Value>,
    pub guided_regex: Option<&'a str>,
    pub guided_choice: Option<&'a [String]>,
    pub guided_grammar: Option<&'a str>,
}

impl ConstraintFields<'_> {
    /// The one constraint these fields ask for, and the parameter that asked (named in a
    /// compile error). Two constraints at once are a 400 naming the second.
    pub fn resolve(&self) -> Result<Option<(StructuredOutput, &'static str)>, ApiError> {
        let mut found: Vec<(StructuredOutput, &'static str)> = Vec::new();
        let strict = StructuredOutputsParam::strict_schemas(self.structured_outputs);
        let schema =
            |text: String| StructuredOutput::JsonSchema(if strict { close_objects_in_text(text) } else { text });
        match self.response_format {
            None | Some(ResponseFormatParam::Text) => {}
            Some(ResponseFormatParam::JsonObject) => found.push((StructuredOutput::JsonObject, "response_format")),
            Some(ResponseFormatParam::JsonSchema { json_schema }) => {
                let param = "response_format.json_schema.schema";
                let schema_value = json_schema
                    .schema
                    .as_ref()
                    .ok_or_else(|| ApiError::invalid(param, "`response_format.json_schema.schema` is required"))?;
                if !schema_value.is_object() {
                    return Err(ApiError::invalid(
                        param,
                        format!("`{param}` must be a JSON Schema object"),
                    ));
                }
                found.push((schema(schema_value.to_string()), param));
            }
        }
        if let Some(s) = self.structured_outputs {
            if let Some(json) = &s.json {
                let param = "structured_outputs.json";
                found.push((schema(schema_text(param, json)?), param));
            }
            if let Some(regex) = &s.regex {
                found.push((StructuredOutput::Regex(regex.clone()), "structured_outputs.regex"));
            }
            if let Some(choice) = &s.choice {
                found.push((
                    choices("structured_outputs.choice", choice)?,
                    "structured_outputs.choice",
                ));
            }
            if let Some(grammar) = &s.grammar {
                found.push((StructuredOutput::Grammar(grammar.clone()), "structured_outputs.grammar"));
            }
            if s.json_object == Some(true) {
                found.push((StructuredOutput::JsonObject, "structured_outputs.json_object"));
            }
        }
        if let Some(json) = self.guided_json {
            found.push((schema(schema_text("guided_json", json)?), "guided_json"));
        }
        if let Some(regex) = self.guided_regex {
            found.push((StructuredOutput::Regex(regex.to_owned()), "guided_regex"));
        }
        if let Some(choice) = self.guided_choice {
            found.push((choices("guided_choice", choice)?, "guided_choice"));
        }
        if let Some(grammar) = self.guided_grammar {
            found.push((StructuredOutput::Grammar(grammar.to_owned()), "guided_grammar"));
        }
        if let [(_, first), (_, second), ..] = found.as_slice() {
            return Err(ApiError::invalid(
                *second,
                format!("only one output constraint may be set; got `{first}` and `{second}`"),
            ));
        }
        Ok(found.pop())
    }
}

/// Both request types carry the same six constraint fields (vLLM's request types do too).
macro_rules! constraint_fields_of {
    ($($request:ty),+) => {$(
        impl $request {
            pub fn constraint_fields(&self) -> ConstraintFields<'_> {
                ConstraintFields {
                    response_format: self.response_format.as_ref(),
                    structured_outputs: self.structured_outputs.as_ref(),
                    guided_json: self.guided_json.as_ref(),
                    guided_regex: self.guided_regex.as_deref(),
                    guided_choice: self.guided_choice.as_deref(),
                    guided_grammar: self.guided_grammar.as_deref(),
                }
            }
        }
    )+};
}

constraint_fields_of!(
    super::openai_types::CompletionRequest,
    super::openai_types::ChatCompletionRequest
);

/// Sets `params.structured` from the body's constraint fields and returns the parameter to
/// name in a compile error. A constraint set before (tool calling) cannot be combined with
/// one from these fields.
pub fn apply_constraint_fields(
    params: &mut SamplingParams,
    fields: ConstraintFields<'_>,
) -> Result<&'static str, ApiError> {
    match fields.resolve()? {
        None => Ok("tool_choice"),
        Some((_, param)) if params.structured.is_some() => Err(ApiError::invalid(
            param,
            format!("`{param}` cannot be combined with a tool call's constraint (`tool_choice`)"),
        )),
        Some((output, param)) => {
            params.structured = Some(output);
            Ok(param)
        }
    }
}

/// A schema sent as an object (or `true`/`false`), or as its JSON text.
fn schema_text(param: &'static str, schema: &Value) -> Result<String, ApiError> {
    match schema {
        Value::Object(_) | Value::Bool(_) => Ok(schema.to_string()),
        Value::String(text) => Ok(text.clone()),
        _ => Err(ApiError::invalid(
            param,
            format!("`{param}` must be a JSON Schema object"),
        )),
    }
}

fn choices(param: &'static str, choices: &[String]) -> Result<StructuredOutput, ApiError> {
    if choices.is_empty() {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must list at least one choice"),
        ));
    }
    Ok(StructuredOutput::Choice(choices.to_vec()))
}

/// Compiles `params.structured` (set by [`ConstraintFields::resolve`] or by tool calling)
/// into `params.grammar`, recording the compile metrics. `param` names the field in a 400;
/// unconstrained params pass through untouched.
pub async fn compile_constraint(
    mut params: SamplingParams,
    param: &str,
    compiler: Option<&Arc<GrammarCompiler>>,
    stats: &Addr<StatsActor>,
) -> Result<SamplingParams, ApiError> {
    let Some(output) = &params.structured else {
        return Ok(params);
    };
    let result = match compiler {
        Some(compiler) => compiler.compile(output).await,
        None => Err(GrammarError::Vocabulary(
            "the tokenizer's vocabulary could not be mapped to bytes".into(),
        )),
    };
    match result {
        Ok(outcome) => {
            stats.do_send(RecordGrammarCompile {
                cache_hit: outcome.compile_seconds.is_none(),
                compile_seconds: outcome.compile_seconds,
                failure: None,
            });
            params.grammar = Some(outcome.grammar);
            Ok(params)
        }
        Err(error) => {
            stats.do_send(RecordGrammarCompile {
                cache_hit: false,
                compile_seconds: None,
                failure: Some(error.reason()),
            });
            Err(ApiError::invalid(param, error.to_string()))
        }
    }
}
