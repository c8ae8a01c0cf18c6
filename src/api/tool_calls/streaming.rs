//! A streamed choice's text read into OpenAI deltas as it arrives: content passes through
//! until a call begins; each call then goes out as an opening entry (index, id, type, name
//! and the first arguments text) and more arguments. A delta holds one entry per call index,
//! as OpenAI and vLLM send them (the openai SDK's accumulator relies on it). Text that may
//! still turn into a call is held back.
//! Named choices stream their arguments as they come; so do Hermes and `required` calls
//! once their head (`{"name": ..., "arguments": {`) has come, and a call shaped otherwise
//! goes out whole once its JSON closes.

use super::call_head::{Head, call_head};
use super::json_scan::json_object_end;
use super::output::RequiredCall;
use super::{ToolCallParser, ToolOutput, hermes, new_tool_call_id};
use crate::api::openai_types::DeltaToolCall;

/// What one piece of text adds to the stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamPiece {
    pub content: String,
    pub calls: Vec<DeltaToolCall>,
}

impl StreamPiece {
    /// `later` added after this piece, still one entry per call index.
    pub fn append(&mut self, later: StreamPiece) {
        self.content.push_str(&later.content);
        self.calls.extend(later.calls);
        self.calls = one_entry_per_index(std::mem::take(&mut self.calls));
    }
}

/// Joins the entries of each call index into one: the first entry's id, type and name, and
/// all their arguments text in order.
fn one_entry_per_index(calls: Vec<DeltaToolCall>) -> Vec<DeltaToolCall> {
    let mut joined: Vec<DeltaToolCall> = Vec::with_capacity(calls.len());
    for call in calls {
        let Some(same) = joined.iter_mut().find(|c| c.index == call.index) else {
            joined.push(call);
            continue;
        };
        same.id = same.id.take().or(call.id);
        same.kind = same.kind.take().or(call.kind);
        same.function.name = same.function.name.take().or(call.function.name);
        if let Some(more) = call.function.arguments {
            same.function.arguments.get_or_insert_default().push_str(&more);
        }
    }
    joined
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

/// A call opened in the stream whose arguments are sent as they come.
#[derive(Debug)]
struct OpenCall {
    index: u32,
    /// Where the arguments object begins in the buffer.
    arguments_at: usize,
    /// How far into the buffer the arguments have been sent.
    sent: usize,
}

/// The keys a Hermes call's arguments go by (vLLM accepts both).
const HERMES_ARGUMENTS: &[&str] = &["arguments", "parameters"];
/// The key of a `required` element's arguments (the schema's).
const REQUIRED_ARGUMENTS: &[&str] = &["parameters"];

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
    open: Option<OpenCall>,
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
            open: None,
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
            ToolOutput::Parsed(ToolCallParser::Hermes) => {
                self.buffer.push_str(text);
                self.drain_hermes(&mut piece);
            }
            ToolOutput::Required => {
                self.raw.push_str(text);
                self.buffer.push_str(text);
                self.drain_required(&mut piece);
            }
        }
        piece.calls = one_entry_per_index(piece.calls);
        piece
    }

    /// The end of the choice: whatever was held back.
    pub fn finish(&mut self) -> StreamPiece {
        let mut piece = StreamPiece::default();
        match self.output.clone() {
            ToolOutput::Text => {}
            ToolOutput::Named(name) => self.open_named(&name, &mut piece),
            ToolOutput::Parsed(ToolCallParser::Hermes) => {
                let rest = std::mem::take(&mut self.buffer);
                match self.hermes {
                    Hermes::InCall if self.open.is_some() => {
                        self.buffer = rest;
                        self.stream_arguments(self.buffer.len(), &mut piece.calls);
                        self.open = None;
                    }
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
                } else if self.open.is_some() {
                    // Cut short: what came of the last call's arguments has been sent.
                    self.stream_arguments(self.buffer.len(), &mut piece.calls);
                    self.open = None;
                }
            }
        }
        piece.calls = one_entry_per_index(piece.calls);
        piece
    }

    /// Opens the call at the front of the buffer once its head has come (false while it has
    /// not, or when the call is shaped otherwise and must be read whole), then sends its
    /// arguments up to `limit` bytes of the buffer or their closing brace.
    fn open_and_stream(&mut self, keys: &[&str], limit: usize, piece: &mut StreamPiece) -> bool {
        if self.open.is_none() {
            let Head::Found { name, arguments_at } = call_head(&self.buffer[..limit], keys) else {
                return false;
            };
            let index = self.calls_sent;
            piece
                .calls
                .push(DeltaToolCall::opening(index, new_tool_call_id(), name));
            self.calls_sent += 1;
            self.open = Some(OpenCall {
                index,
                arguments_at,
                sent: arguments_at,
            });
        }
        self.stream_arguments(limit, &mut piece.calls);
        true
    }

    /// Sends the open call's arguments that have come, up to `limit` or their end.
    fn stream_arguments(&mut self, limit: usize, calls: &mut Vec<DeltaToolCall>) {
        let Some(open) = self.open.as_mut() else { return };
        let arguments = &self.buffer[open.arguments_at..limit];
        let end = json_object_end(arguments).map_or(limit, |e| open.arguments_at + e);
        if end > open.sent {
            calls.push(DeltaToolCall::arguments(
                open.index,
                self.buffer[open.sent..end].to_owned(),
            ));
            open.sent = end;
        }
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
                    let end = self.buffer.find(hermes::END);
                    let limit = end.unwrap_or(self.buffer.len());
                    let streamed = self.open_and_stream(HERMES_ARGUMENTS, limit, piece);
                    let Some(end) = end else {
                        return;
                    };
                    let json: String = self.buffer.drain(..end + hermes::END.len()).collect();
                    let json = &json[..end];
                    self.hermes = Hermes::Text;
                    if streamed {
                        self.open = None;
                        continue;
                    }
                    match hermes::parse_call(json) {
                        Some(call) => self.send_call(call.name, call.arguments, piece),
                        None => {
                            let raw = format!("{}{json}{}", hermes::START, hermes::END);
                            self.content(&raw, piece);
                        }
                    }
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
                    let end = json_object_end(&self.buffer);
                    let limit = end.unwrap_or(self.buffer.len());
                    let streamed = self.open_and_stream(REQUIRED_ARGUMENTS, limit, piece);
                    let Some(end) = end else {
                        return;
                    };
                    let element: String = self.buffer.drain(..end).collect();
                    if streamed {
                        self.open = None;
                        continue;
                    }
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
