//! The request fields that constrain a choice's output, whichever spelling the client used
//! (OpenAI's `response_format`, vLLM's `structured_outputs` and `guided_*`: the wire group
//! [`ConstraintFields`]) or a tool choice's constraint, resolved into one
//! [`StructuredOutput`]; and compiling it before the request is submitted, off the HTTP
//! worker, with each failure a 400 that names the parameter.

use std::sync::Arc;

use actix::Addr;
use serde_json::Value;

use crate::api::errors::ApiError;
use crate::api::openai_types::{ConstraintFields, ResponseFormatParam, StructuredOutputsParam};
use crate::api::strict_schema::close_objects_in_text;
use crate::engine::structured_output::{CompiledGrammar, StructuredOutput};
use crate::grammar::{GrammarCompiler, GrammarError};
use crate::stats::actor::StatsActor;
use crate::stats::structured::RecordGrammarCompile;

/// The one output constraint of a body, and the parameter a compile error names.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    pub output: StructuredOutput,
    pub param: &'static str,
}

/// The one constraint these fields ask for, and the parameter that asked (named in a compile
/// error). Two constraints at once are a 400 naming the second.
fn resolve(fields: &ConstraintFields) -> Result<Option<(StructuredOutput, &'static str)>, ApiError> {
    let mut found: Vec<(StructuredOutput, &'static str)> = Vec::new();
    let strict = StructuredOutputsParam::strict_schemas(fields.structured_outputs.as_ref());
    let schema = |text: String| StructuredOutput::JsonSchema(if strict { close_objects_in_text(text) } else { text });
    match &fields.response_format {
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
    if let Some(s) = &fields.structured_outputs {
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
    if let Some(json) = &fields.guided_json {
        found.push((schema(schema_text("guided_json", json)?), "guided_json"));
    }
    if let Some(regex) = &fields.guided_regex {
        found.push((StructuredOutput::Regex(regex.clone()), "guided_regex"));
    }
    if let Some(choice) = &fields.guided_choice {
        found.push((choices("guided_choice", choice)?, "guided_choice"));
    }
    if let Some(grammar) = &fields.guided_grammar {
        found.push((StructuredOutput::Grammar(grammar.clone()), "guided_grammar"));
    }
    if let [(_, first), (_, second), ..] = found.as_slice() {
        return Err(ApiError::invalid(
            *second,
            format!("only one output constraint may be set; got `{first}` and `{second}`"),
        ));
    }
    Ok(found.pop())
}

/// The body's one output constraint: a tool choice's (`tool_constraint`) or the constraint
/// fields'; both at once are a 400 naming the field. A tool choice's compile error names
/// `tool_choice`.
pub fn output_constraint(
    tool_constraint: Option<StructuredOutput>,
    fields: &ConstraintFields,
) -> Result<Option<Constraint>, ApiError> {
    match (resolve(fields)?, tool_constraint) {
        (Some((_, param)), Some(_)) => Err(ApiError::invalid(
            param,
            format!("`{param}` cannot be combined with a tool call's constraint (`tool_choice`)"),
        )),
        (Some((output, param)), None) => Ok(Some(Constraint { output, param })),
        (None, tool) => Ok(tool.map(|output| Constraint {
            output,
            param: "tool_choice",
        })),
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

/// Compiles the constraint (off the HTTP worker), recording the compile metrics; a failure
/// is a 400 naming the constraint's parameter. No constraint compiles to no grammar.
pub async fn compile(
    constraint: Option<&Constraint>,
    compiler: Option<&Arc<GrammarCompiler>>,
    stats: &Addr<StatsActor>,
) -> Result<Option<CompiledGrammar>, ApiError> {
    let Some(constraint) = constraint else {
        return Ok(None);
    };
    let result = match compiler {
        Some(compiler) => compiler.compile(&constraint.output).await,
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
            Ok(Some(outcome.grammar))
        }
        Err(error) => {
            stats.do_send(RecordGrammarCompile {
                cache_hit: false,
                compile_seconds: None,
                failure: Some(error.reason()),
            });
            Err(ApiError::invalid(constraint.param, error.to_string()))
        }
    }
}
