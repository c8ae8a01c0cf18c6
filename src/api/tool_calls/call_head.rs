//! The head of one call's JSON object as it streams in: `{"name": "NAME", "<key>": {`. Once
//! that much has come, a stream can open the call and send its arguments as they arrive, as
//! OpenAI and vLLM do; a call shaped otherwise is read whole once it closes.

/// What the text so far says about a call's head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// Not enough text yet to tell.
    Pending,
    /// The call's name, and the byte offset where its arguments object begins.
    Found { name: String, arguments_at: usize },
    /// Shaped otherwise (keys in another order, arguments not an object, not JSON).
    Other,
}

/// Reads `{"name": "NAME", "K": {` at the start of `text` (whitespace allowed between
/// tokens), where `K` is one of `arguments_keys`.
pub fn call_head(text: &str, arguments_keys: &[&str]) -> Head {
    let mut cursor = Cursor { text, at: 0 };
    let mut steps = || -> Result<Head, Head> {
        cursor.byte(b'{')?;
        if cursor.string()? != "name" {
            return Err(Head::Other);
        }
        cursor.byte(b':')?;
        let name = cursor.string()?;
        cursor.byte(b',')?;
        let key = cursor.string()?;
        if !arguments_keys.contains(&key.as_str()) {
            return Err(Head::Other);
        }
        cursor.byte(b':')?;
        cursor.skip_whitespace();
        match cursor.text.as_bytes().get(cursor.at) {
            None => Err(Head::Pending),
            Some(b'{') => Ok(Head::Found {
                name,
                arguments_at: cursor.at,
            }),
            Some(_) => Err(Head::Other),
        }
    };
    steps().unwrap_or_else(|head| head)
}

/// A reader over the text so far; `Err(Head::Pending)` when the text ends mid-token.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn skip_whitespace(&mut self) {
        let bytes = self.text.as_bytes();
        while bytes.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn byte(&mut self, expected: u8) -> Result<(), Head> {
        self.skip_whitespace();
        match self.text.as_bytes().get(self.at) {
            None => Err(Head::Pending),
            Some(&b) if b == expected => {
                self.at += 1;
                Ok(())
            }
            Some(_) => Err(Head::Other),
        }
    }

    /// A JSON string, unescaped.
    fn string(&mut self) -> Result<String, Head> {
        self.byte(b'"')?;
        let start = self.at - 1;
        let bytes = self.text.as_bytes();
        let mut escaped = false;
        while let Some(&b) = bytes.get(self.at) {
            self.at += 1;
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => return serde_json::from_str(&self.text[start..self.at]).map_err(|_| Head::Other),
                _ => {}
            }
        }
        Err(Head::Pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: &[&str] = &["arguments"];

    #[test]
    fn the_head_is_found_once_the_arguments_object_begins() {
        let text = " {\"name\" : \"get_\\u0077eather\",\n \"arguments\": {\"city\"";
        let arguments_at = text.find("{\"city").expect("arguments");
        assert_eq!(
            call_head(text, KEYS),
            Head::Found {
                name: "get_weather".into(),
                arguments_at
            }
        );
        for cut in 0..arguments_at {
            assert_eq!(call_head(&text[..cut], KEYS), Head::Pending, "{:?}", &text[..cut]);
        }
    }

    #[test]
    fn other_shapes_are_read_whole() {
        for text in [
            r#"{"arguments": {}, "name": "f"}"#,
            r#"{"name": "f", "parameters": {}}"#,
            r#"{"name": "f", "arguments": "{}"}"#,
            r#"{"name": "f", "arguments": null}"#,
            r#"{oops}"#,
            r#"["name"]"#,
        ] {
            assert_eq!(call_head(text, KEYS), Head::Other, "{text}");
        }
    }
}
