//! JSON Schemas of valid tool-call output, as vLLM builds them (`_get_json_schema_from_tool`):
//! a named function's output is its arguments; `required` output is an array of
//! `{"name", "parameters"}` objects, one branch per tool.

use serde_json::{Map, Value, json};

use crate::api::errors::ApiError;
use crate::api::openai_types::ToolDefinition;
use crate::api::strict_schema::close_objects;

/// A function without `parameters` takes an empty object. `strict`: objects that do not
/// set `additionalProperties` get `false`, as vLLM compiles them (see `api::strict_schema`).
fn parameters_of(tool: &ToolDefinition, strict: bool) -> Value {
    let mut parameters = match &tool.function.parameters {
        Some(p) if p.as_object().is_some_and(|o| !o.is_empty()) => p.clone(),
        _ => json!({"type": "object", "properties": {}}),
    };
    if strict {
        close_objects(&mut parameters);
    }
    parameters
}

/// The arguments of `name` (validation has checked that it is among `tools`).
pub fn named_call(tools: &[ToolDefinition], name: &str, strict: bool) -> Value {
    tools
        .iter()
        .find(|t| t.function.name == name)
        .map_or_else(|| json!({"type": "object"}), |t| parameters_of(t, strict))
}

/// At least one call (exactly one unless `parallel`) of any of `tools`. Each tool's `$defs`
/// move to the root, where its `#/$defs/...` references then resolve; two tools defining
/// one name differently are refused.
pub fn required_calls(tools: &[ToolDefinition], parallel: bool, strict: bool) -> Result<Value, ApiError> {
    let mut defs = Map::new();
    let mut branches = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let mut parameters = parameters_of(tool, strict);
        if let Some(Value::Object(own)) = parameters.as_object_mut().and_then(|p| p.remove("$defs")) {
            for (name, def) in own {
                match defs.get(&name) {
                    Some(seen) if *seen != def => {
                        return Err(ApiError::invalid(
                            format!("tools[{i}].function.parameters.$defs.{name}"),
                            format!("`$defs.{name}` is defined differently by another tool"),
                        ));
                    }
                    _ => {
                        defs.insert(name, def);
                    }
                }
            }
        }
        branches.push(json!({
            "properties": {
                "name": {"type": "string", "enum": [tool.function.name]},
                "parameters": parameters,
            },
            "required": ["name", "parameters"],
            // Nothing but the call: an open object would let sampling wander into extra keys.
            "additionalProperties": false,
        }));
    }
    let mut schema = json!({
        "type": "array",
        "minItems": 1,
        "items": {"type": "object", "anyOf": branches},
    });
    if !parallel {
        schema["maxItems"] = json!(1);
    }
    if !defs.is_empty() {
        schema["$defs"] = Value::Object(defs);
    }
    Ok(schema)
}
