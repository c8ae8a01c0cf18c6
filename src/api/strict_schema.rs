//! Strict JSON Schemas, as vLLM compiles them by default: an object schema that lists its
//! `properties` (or `patternProperties`) and says nothing of `additionalProperties` gets
//! `additionalProperties: false`. JSON Schema and llguidance would allow any other key, and a
//! small model then pads its output with invented keys until `max_tokens` cuts the JSON.
//! vLLM's default backend (xgrammar) is strict this way; its guidance backend becomes so with
//! `disable_additional_properties` (the walk below is that option's). A request opts out with
//! `structured_outputs: {"disable_additional_properties": false}`, or per object by writing
//! `additionalProperties` itself.

use serde_json::Value;

/// Keywords whose value maps names to subschemas.
const SCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// Keywords whose value is a subschema or a list of them.
const SUBSCHEMAS: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "additionalItems",
    "unevaluatedItems",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
    "items",
    "prefixItems",
    "allOf",
    "anyOf",
    "oneOf",
];

/// Closes every object schema in `schema` that does not say whether it allows other keys.
pub fn close_objects(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            for key in SCHEMA_MAPS {
                if let Some(Value::Object(map)) = object.get_mut(*key) {
                    map.values_mut().for_each(close_objects);
                }
            }
            for key in SUBSCHEMAS {
                if let Some(value @ (Value::Object(_) | Value::Array(_))) = object.get_mut(*key) {
                    close_objects(value);
                }
            }
            let lists_keys = ["properties", "patternProperties"]
                .iter()
                .any(|k| object.get(*k).is_some_and(Value::is_object));
            if lists_keys && !object.contains_key("additionalProperties") {
                object.insert("additionalProperties".into(), Value::Bool(false));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// [`close_objects`] on a schema's JSON text; text that is not JSON is left for the
/// compiler to refuse.
pub fn close_objects_in_text(text: String) -> String {
    match serde_json::from_str::<Value>(&text) {
        Ok(mut schema) => {
            close_objects(&mut schema);
            schema.to_string()
        }
        Err(_) => text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_that_say_nothing_are_closed_and_the_rest_kept() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "open": {"type": "object", "properties": {"a": {}}, "additionalProperties": true},
                "list": {"type": "array", "items": {"type": "object", "properties": {"b": {}}}},
                "either": {"anyOf": [{"properties": {"c": {}}}, {"type": "string"}]},
                "free": {"type": "object"},
            },
            "$defs": {"d": {"type": "object", "properties": {"e": {}}}},
        });
        close_objects(&mut schema);
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["open"]["additionalProperties"], json!(true));
        assert_eq!(
            schema["properties"]["list"]["items"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(
            schema["properties"]["either"]["anyOf"][0]["additionalProperties"],
            json!(false)
        );
        assert_eq!(
            schema["properties"]["either"]["anyOf"][1].get("additionalProperties"),
            None
        );
        assert_eq!(
            schema["properties"]["free"].get("additionalProperties"),
            None,
            "lists no keys"
        );
        assert_eq!(schema["$defs"]["d"]["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["city"], json!({"type": "string"}));
    }

    #[test]
    fn schema_text_that_is_not_json_is_left_alone() {
        assert_eq!(close_objects_in_text("{oops".into()), "{oops");
        let closed = close_objects_in_text(r#"{"properties":{"a":{}}}"#.into());
        assert_eq!(
            serde_json::from_str::<Value>(&closed).unwrap(),
            json!({"additionalProperties": false, "properties": {"a": {}}})
        );
    }
}
