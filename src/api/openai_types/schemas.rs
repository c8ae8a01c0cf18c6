//! OpenAPI schemas for the wire types whose serde shape the `ToSchema` derive cannot state
//! exactly: the untagged enums (a `oneOf` whose arms carry the non-empty rules kiln enforces,
//! which also keeps the arms disjoint: `[]` matches none) and the maps keyed by token id.
//! The request and response types hand these to utoipa through their `PartialSchema` impls.

use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, SchemaType,
    Type,
};
use utoipa::openapi::{Ref, RefOr};

/// The component every token id refers to; the served document narrows its `maximum` to the
/// served vocabulary.
pub const TOKEN_ID: &str = "TokenId";

fn string(min_length: usize) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length((min_length > 0).then_some(min_length))
}

/// `type: [t, "null"]`: what an `Option` field with `#[serde(default)]` accepts.
fn nullable(t: Type) -> SchemaType {
    [t, Type::Null].into_iter().collect()
}

fn non_empty_array(item: impl Into<RefOr<Schema>>) -> ArrayBuilder {
    ArrayBuilder::new().items(item.into()).min_items(Some(1))
}

fn token_id_ref() -> Ref {
    Ref::from_schema_name(TOKEN_ID)
}

/// A `u32` as JSON Schema can say it: `int32` would wrongly cap it at 2^31 - 1.
fn unsigned_32() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(0))
        .maximum(Some(u32::MAX))
}

/// A token id of the served model's vocabulary.
pub fn token_id() -> RefOr<Schema> {
    unsigned_32()
        .description(Some("A token id of the served model's vocabulary."))
        .into()
}

/// `stop_token_ids`: any `u32`s (they need not be in the vocabulary).
pub fn stop_token_ids() -> RefOr<Schema> {
    ArrayBuilder::new()
        .schema_type(nullable(Type::Array))
        .items(unsigned_32())
        .description(Some(
            "Token ids that end a choice when generated; at most `limits.max_stop_token_ids`.",
        ))
        .into()
}

/// `prompt`: a string, strings, token ids, or lists of token ids; none of them empty.
pub fn prompt_input() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(string(1))
        .item(non_empty_array(string(1)))
        .item(non_empty_array(token_id_ref()))
        .item(non_empty_array(non_empty_array(token_id_ref())))
        .description(Some(
            "One prompt as text or token ids, or a batch of them (each runs `n` times). \
             Token ids must be below the vocabulary size; prompt plus `max_tokens` must fit \
             the model's context.",
        ))
        .into()
}

/// `stop`: one string or a list.
pub fn stop_input() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(string(0))
        .item(ArrayBuilder::new().items(string(0)))
        .description(Some(
            "Strings that end a choice when generated (not included in the text). At most 4 \
             non-empty strings (empty ones are ignored), together at most `limits.max_stop_bytes` \
             bytes.",
        ))
        .into()
}

/// `content` of a chat message: a string or a list of content parts.
pub fn message_content(content_part: RefOr<Schema>) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(string(0))
        .item(ArrayBuilder::new().items(content_part))
        .description(Some("Text, or a list of text parts joined by newlines."))
        .into()
}

/// A content part's `type`: only text parts are served (others are refused by name).
pub fn content_part_type() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["text"]))
        .into()
}

/// `chat_template`: only `null` (or leaving it out); kiln never renders a client's template.
pub fn refused_chat_template() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Null)
        .description(Some(
            "Not accepted: the server renders only the model's or the operator's template.",
        ))
        .into()
}

/// Keys that Rust's `u32::from_str` reads (an optional `+`, then digits).
const TOKEN_ID_KEY_PATTERN: &str = "^\\+?[0-9]{1,10}$";

/// `logit_bias`: token id (as a decimal string) to a bias in [-100, 100].
pub fn logit_bias() -> RefOr<Schema> {
    let bias = ObjectBuilder::new()
        .schema_type(Type::Number)
        .minimum(Some(-100))
        .maximum(Some(100));
    ObjectBuilder::new()
        .schema_type(nullable(Type::Object))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(TOKEN_ID_KEY_PATTERN)),
        ))
        .additional_properties(Some(AdditionalProperties::RefOr(bias.into())))
        .description(Some(
            "Token id (a decimal string, below the vocabulary size) to a bias in [-100, 100], \
             added to that token's logit before sampling.",
        ))
        .into()
}

/// The top alternatives of a completions token: token text to its logprob, most likely first.
pub fn top_logprob_map() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::RefOr(
            ObjectBuilder::new().schema_type(Type::Number).into(),
        )))
        .into()
}

/// `tokens` of `/detokenize`: token ids of the served vocabulary (an empty list decodes to "").
pub fn token_ids() -> RefOr<Schema> {
    ArrayBuilder::new().items(token_id_ref()).into()
}
