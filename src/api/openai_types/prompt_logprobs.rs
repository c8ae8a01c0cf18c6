//! vLLM's `prompt_logprobs` of a completions choice: per prompt position (`null` for the
//! first), a map from token id to its logprob, rank and text: the prompt's own token first,
//! then the most likely ones.

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Type};
use utoipa::{PartialSchema, ToSchema};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PromptLogprob {
    pub logprob: f32,
    /// 1 for the most likely token of the position.
    pub rank: u32,
    pub decoded_token: String,
}

/// Token id (a decimal string) to its [`PromptLogprob`], in insertion order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptLogprobMap(pub Vec<(u32, PromptLogprob)>);

impl Serialize for PromptLogprobMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            map.serialize_entry(&token.to_string(), logprob)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for PromptLogprobMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = std::collections::BTreeMap::<u32, PromptLogprob>::deserialize(deserializer)?;
        Ok(Self(entries.into_iter().collect()))
    }
}

impl PartialSchema for PromptLogprobMap {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(AdditionalProperties::RefOr(PromptLogprob::schema())))
            .description(Some(
                "Token id to its logprob, rank and text; the prompt's token first.",
            ))
            .into()
    }
}

impl ToSchema for PromptLogprobMap {}
