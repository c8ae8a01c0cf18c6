//! Logprobs as both APIs send them: the legacy parallel arrays of completions and chat's
//! per-token objects.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::openapi::{RefOr, schema::Schema};
use utoipa::{PartialSchema, ToSchema};

use super::schemas;

/// Logprobs below this are sent as this value: JSON has no `-inf`
/// (serde_json would write `null`, which the client cannot parse as a float).
pub const MIN_LOGPROB: f32 = -9999.0;

/// Clamps a logprob to a JSON-representable value (see [`MIN_LOGPROB`]).
pub fn finite_logprob(logprob: f32) -> f32 {
    if logprob.is_nan() {
        MIN_LOGPROB
    } else {
        logprob.max(MIN_LOGPROB)
    }
}

/// `{token: logprob}` in insertion order (most likely first, as OpenAI
/// sends it); a `HashMap` would scramble the order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopLogprobMap(pub Vec<(String, f32)>);

impl PartialSchema for TopLogprobMap {
    fn schema() -> RefOr<Schema> {
        schemas::top_logprob_map()
    }
}

impl ToSchema for TopLogprobMap {}

impl Serialize for TopLogprobMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            map.serialize_entry(token, logprob)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TopLogprobMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor;
        impl<'de> Visitor<'de> for MapVisitor {
            type Value = TopLogprobMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of token to logprob")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(access.size_hint().unwrap_or(0));
                while let Some(entry) = access.next_entry()? {
                    entries.push(entry);
                }
                Ok(TopLogprobMap(entries))
            }
        }
        deserializer.deserialize_map(MapVisitor)
    }
}

/// Logprobs of the legacy completions API (parallel arrays).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    /// `null` for the first token of an echoed prompt (it has no logprob).
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<TopLogprobMap>>,
    /// Character offset of each token in the choice's text.
    pub text_offset: Vec<u32>,
}

/// One top alternative of a chat token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatTopLogprob {
    pub token: String,
    pub logprob: f32,
    /// UTF-8 bytes of the token (a token can be part of a character).
    pub bytes: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Option<Vec<u8>>,
    pub top_logprobs: Vec<ChatTopLogprob>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}
