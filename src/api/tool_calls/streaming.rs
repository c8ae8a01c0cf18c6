//! A streamed choice's text read into OpenAI deltas as it arrives: content passes through
//! until a call begins; each call then goes out as an opening delta (index, id, type, name,
//! `arguments: ""`) and its arguments. Text that may still turn into a call is held back.
//! Named choices stream their arguments as they come; Hermes and `required` calls go out
//! whole, once their JSON closes.

use super::output::RequiredCall;
use super::{ToolOutput, ToolParserKind, hermes, new_tool_call_id};
use crate::api::openai_types::DeltaToolCall;

/// What one piece of text adds to the stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamPiece {
    pub content: String,
    pub calls: Vec<DeltaToolCall>,
}

/// Where a Hermes stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hermes {
    /// Outside a call; the buffer holds at most a partial `<tool_call>`.
    Text,
    /// After `<tool_call>`; the buffer holds the call's JSON so far.
    InCall,
}

/// Where a `required` stream stands (`[ {..}, {..} ]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Required {
    BeforeArray,
    InArray,
    /// After `]`, or after output that is not the expected array.
    Over,
}

/// One choice's reader.
#[derive(Debug)]
pub struct ToolStream {
    output: ToolOutput,
    buffer: String,
    /// Everything received, for a `required` output that turns out not to be calls.
    raw: String,
    calls_sent: u32,
    hermes: Hermes,
    required: Required,
}

impl ToolStream {
    pub fn new(output: ToolOutput) -> Self {
        Self {
            output,
            buffer: String::new(),
            raw: String::new(),
            calls_sent: 0,
            hermes: Hermes::Text,
            required: Required::BeforeArray,
        }
    }

    /// The choice's calls end it as `tool_calls` (not for a named choice, which stays `stop`).
    pub fn tool_calls_finish(&self) -> bool {
        self.calls_sent > 0 && !matches!(self.output, ToolOutput::Named(_))
    }

    /// New text of the choice.
    pub fn push(&mut self, text: &str) -> StreamPiece {
        let mut piece = StreamPiece::default();
        match self.output.clone() {
            ToolOutput::Text => piece.content.push_str(text),
            ToolOutput::Named(name) => {
                self.open_named(&name, &mut piece);
                if !text.is_empty() {
                    piece.calls.push(DeltaToolCall::arguments(0, text.to_owned()));
                }
            }
            ToolOutput::Parsed(ToolParserKind::Hermes) => {
                self.buffer.push_str(text);
                self.drain_hermes(&mut piece);
            }
            ToolOutput::Required => {
                self.raw.push_str(text);
                self.buffer.push_str(text);
                self.drain_required(&mut piece);
            }
        }
        piece
    }

    /// The end of the choice: whatever was held back.
    pub fn finish(&mut self) -> StreamPiece {
        let mut piece = StreamPiece::default();
        match self.output.clone() {
            ToolOutput::Text => {}
            ToolOutput::Named(name) => self.open_named(&name, &mut piece),
            ToolOutput::Parsed(ToolParserKind::Hermes) => {
                let rest = std::mem::take(&mut self.buffer);
                match self.hermes {
                    // An unterminated last call runs to the end, as in the whole response.
                    Hermes::InCall => match hermes::parse_call(&rest) {
                        Some(call) => self.send_call(call.name, call.arguments, &mut piece),
                        None => self.content(&format!("{}{rest}", hermes::START), &mut piece),
                    },
                    Hermes::Text => self.content(&rest, &mut piece),
                }
            }
            ToolOutput::Required => {
                if self.calls_sent == 0 {
                    piece.content = std::mem::take(&mut self.raw);
                }
            }
        }
        piece
    }

    fn open_named(&mut self, name: &str, piece: &mut StreamPiece) {
        if self.calls_sent == 0 {
            piece
                .calls
                .push(DeltaToolCall::opening(0, new_tool_call_id(), name.to_owned()));
            self.calls_sent = 1;
        }
    }

    fn send_call(&mut self, name: String, arguments: String, piece: &mut StreamPiece) {
        let index = self.calls_sent;
        piece
            .calls
            .push(DeltaToolCall::opening(index, new_tool_call_id(), name));
        piece.calls.push(DeltaToolCall::arguments(index, arguments));
        self.calls_sent += 1;
    }

    /// Text outside calls is content until the first call; after it, as in the whole
    /// response, it is dropped.
    fn content(&self, text: &str, piece: &mut StreamPiece) {
        if self.calls_sent == 0 {
            piece.content.push_str(text);
        }
    }

    fn drain_hermes(&mut self, piece: &mut StreamPiece) {
        loop {
            match self.hermes {
                Hermes::Text => {
                    if let Some(at) = self.buffer.find(hermes::START) {
                        let before: String = self.buffer.drain(..at + hermes::START.len()).collect();
                        self.content(&before[..at], piece);
                        self.hermes = Hermes::InCall;
                        continue;
                    }
                    let keep = partial_suffix(&self.buffer, hermes::START);
                    let ready: String = self.buffer.drain(..self.buffer.len() - keep).collect();
                    self.content(&ready, piece);
                    return;
                }
                Hermes::InCall => {
                    let Some(end) = self.buffer.find(hermes::END) else {
                        return;
                    };
                    let json: String = self.buffer.drain(..end + hermes::END.len()).collect();
                    let json = &json[..end];
                    match hermes::parse_call(json) {
                        Some(call) => self.send_call(call.name, call.arguments, piece),
                        None => {
                            let raw = format!("{}{json}{}", hermes::START, hermes::END);
                            self.content(&raw, piece);
                        }
                    }
                    self.hermes = Hermes::Text;
                }
            }
        }
    }

    fn drain_required(&mut self, piece: &mut StreamPiece) {
        loop {
            let skipped = self.buffer.len() - self.buffer.trim_start().len();
            self.buffer.drain(..skipped);
            let Some(first) = self.buffer.chars().next() else {
                return;
            };
            match (self.required, first) {
                (Required::BeforeArray, '[') => {
                    self.buffer.drain(..1);
                    self.required = Required::InArray;
                }
                (Required::InArray, ',') => {
                    self.buffer.drain(..1);
                }
                (Required::InArray, '{') => {
                    let Some(end) = json_object_end(&self.buffer) else {
                        return;
                    };
                    let element: String = self.buffer.drain(..end).collect();
                    match serde_json::from_str::<RequiredCall>(&element) {
                        Ok(call) => {
                            let arguments = call.arguments();
                            self.send_call(call.name, arguments, piece);
                        }
                        Err(_) => self.required = Required::Over,
                    }
                }
                (Required::Over, _) => {
                    self.buffer.clear();
                    return;
                }
                _ => self.required = Required::Over,
            }
        }
    }
}

/// Bytes at the end of `text` that begin `marker` (and so may still become it).
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&k| text.ends_with(&marker[..k]))
        .unwrap_or(0)
}

/// Where the JSON object that `text` starts with ends (one past its `}`), once it has.
fn json_object_end(text: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, b) in text.bytes().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}
