//! The request fields that constrain a choice's output: OpenAI's `response_format` and vLLM's
//! `structured_outputs` object and older `guided_*` fields. `api::validation` turns
//! them into one `StructuredOutput`.

use serde::de::{DeserializeOwned, Error};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

/// A struct-typed field read from a JSON object only: serde's derive would also take one
/// from an array of its fields' values, which the document does not allow.
pub(super) fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<T, D::Error> {
    match serde_json::Value::deserialize(deserializer)? {
        value @ serde_json::Value::Object(_) => serde_json::from_value(value).map_err(D::Error::custom),
        other => Err(D::Error::custom(format!("expected an object, got {other}"))),
    }
}

/// [`object`] for an optional field (`null` is `None`).
pub(super) fn optional_object<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::Null => Ok(None),
        value @ serde_json::Value::Object(_) => serde_json::from_value(value).map(Some).map_err(D::Error::custom),
        other => Err(D::Error::custom(format!("expected an object, got {other}"))),
    }
}

/// `response_format`: free text, any JSON object, or JSON following a schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormatParam {
    Text,
    JsonObject,
    JsonSchema {
        #[serde(deserialize_with = "object")]
        json_schema: JsonSchemaParam,
    },
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JsonSchemaParam {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// The JSON Schema the output follows.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<serde_json::Value>,
    /// Accepted; the schema is always enforced.
    #[serde(default)]
    pub strict: Option<bool>,
}

/// vLLM's `structured_outputs`: exactly one of its constraints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StructuredOutputsParam {
    /// A JSON Schema, as an object or as its JSON text.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    pub json: Option<serde_json::Value>,
    #[serde(default)]
    pub regex: Option<String>,
    #[serde(default)]
    pub choice: Option<Vec<String>>,
    /// A grammar in Lark syntax or GBNF (`root ::= ...`).
    #[serde(default)]
    pub grammar: Option<String>,
    /// Any JSON object.
    #[serde(default)]
    pub json_object: Option<bool>,
    /// Object schemas that do not set `additionalProperties` get `false` (absent: `true`, as
    /// vLLM's default backend compiles them); `false` keeps the schemas as sent. Applies to
    /// `response_format`, the `json` schemas and tool parameters alike.
    #[serde(default)]
    pub disable_additional_properties: Option<bool>,
}

impl StructuredOutputsParam {
    /// Whether schemas are made strict (see `api::strict_schema`).
    pub fn strict_schemas(param: Option<&Self>) -> bool {
        param.and_then(|p| p.disable_additional_properties).unwrap_or(true)
    }
}
