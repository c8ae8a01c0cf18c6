//! The Responses API's wording of one choice: the whole response, or its event stream
//! (`response.created`, `response.in_progress`, then per output item `output_item.added`,
//! its text or arguments deltas and `.done` events, `output_item.done`, and last
//! `response.completed` with the usage). Tool calls are read from
//! the text as chat reads them (see `api::tool_calls`).

use bytes::Bytes;
use serde_json::{Value, json};

use super::output::{
    Status, function_call_id, function_call_item, message_id, message_item, output_text, response_object,
};
use super::request::Echo;
use crate::api::generation::ChoiceDelta;
use crate::api::openai_types::{DeltaToolCall, Usage};
use crate::api::pipeline::{ResponseFormat, ResponseHead};
use crate::api::sse::ChunkFormat;
use crate::api::tool_calls::{ToolOutput, ToolStream, shape_output};
use crate::engine::types::FinishReason;

pub struct ResponsesFormat {
    head: ResponseHead,
    echo: Echo,
    tools: ToolOutput,
    stream: Option<ToolStream>,
    sequence: u64,
    /// The output items so far, as the final response lists them.
    output: Vec<Value>,
    /// The message item being written: its place in `output` and its text so far.
    message: Option<(usize, String)>,
    /// The function calls being written: (delta index, place in `output`, arguments so far).
    calls: Vec<(u32, usize, String)>,
    status: Status,
}

impl ResponsesFormat {
    pub fn new(head: ResponseHead, echo: Echo, tools: ToolOutput) -> Self {
        Self {
            head,
            echo,
            tools,
            stream: None,
            sequence: 0,
            output: Vec::new(),
            message: None,
            calls: Vec::new(),
            status: Status::InProgress,
        }
    }

    /// One event, `event: TYPE` and its data with the next sequence number.
    fn event(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.extend_from_slice(format!("event: {kind}\ndata: ").as_bytes());
        // A `Value` always serializes.
        out.extend_from_slice(data.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn snapshot(&self, usage: Option<&Usage>) -> Value {
        response_object(&self.head, &self.echo, self.status, self.output.clone(), usage)
    }

    fn text(&mut self, out: &mut Vec<u8>, text: &str) {
        if self.message.is_none() {
            let at = self.output.len();
            let id = message_id();
            self.output.push(
                json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []}),
            );
            let item = self.output[at].clone();
            self.event(
                out,
                "response.output_item.added",
                json!({"output_index": at, "item": item}),
            );
            self.event(
                out,
                "response.content_part.added",
                json!({"item_id": id, "output_index": at, "content_index": 0, "part": output_text("")}),
            );
            self.message = Some((at, String::new()));
        }
        let Some((at, so_far)) = self.message.as_mut() else {
            return;
        };
        so_far.push_str(text);
        let (at, id) = (*at, self.output[*at]["id"].clone());
        self.event(
            out,
            "response.output_text.delta",
            json!({"item_id": id, "output_index": at, "content_index": 0, "delta": text, "logprobs": []}),
        );
    }

    fn close_message(&mut self, out: &mut Vec<u8>) {
        let Some((at, text)) = self.message.take() else { return };
        let id = self.output[at]["id"].as_str().unwrap_or_default().to_owned();
        self.event(
            out,
            "response.output_text.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "text": text, "logprobs": []}),
        );
        self.event(
            out,
            "response.content_part.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "part": output_text(&text)}),
        );
        self.output[at] = message_item(&id, &text, "completed");
        let item = self.output[at].clone();
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": at, "item": item}),
        );
    }

    fn call(&mut self, out: &mut Vec<u8>, delta: DeltaToolCall) {
        let arguments = delta.function.arguments.unwrap_or_default();
        let at = match self.calls.iter().position(|(index, ..)| *index == delta.index) {
            Some(open) => self.calls[open].1,
            None => {
                self.close_message(out);
                let at = self.output.len();
                let call_id = delta.id.unwrap_or_default();
                let name = delta.function.name.unwrap_or_default();
                self.output.push(function_call_item(
                    &function_call_id(),
                    &call_id,
                    &name,
                    "",
                    "in_progress",
                ));
                let item = self.output[at].clone();
                self.event(
                    out,
                    "response.output_item.added",
                    json!({"output_index": at, "item": item}),
                );
                self.calls.push((delta.index, at, String::new()));
                at
            }
        };
        if arguments.is_empty() {
            return;
        }
        if let Some(open) = self.calls.iter_mut().find(|(index, ..)| *index == delta.index) {
            open.2.push_str(&arguments);
        }
        let id = self.output[at]["id"].clone();
        self.event(
            out,
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": at, "delta": arguments}),
        );
    }

    fn close_calls(&mut self, out: &mut Vec<u8>) {
        for (_, at, arguments) in std::mem::take(&mut self.calls) {
            let item = &self.output[at];
            let (id, call_id, name) = (
                item["id"].as_str().unwrap_or_default().to_owned(),
                item["call_id"].as_str().unwrap_or_default().to_owned(),
                item["name"].as_str().unwrap_or_default().to_owned(),
            );
            self.event(
                out,
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": at, "name": name, "arguments": arguments}),
            );
            self.output[at] = function_call_item(&id, &call_id, &name, &arguments, "completed");
            let item = self.output[at].clone();
            self.event(
                out,
                "response.output_item.done",
                json!({"output_index": at, "item": item}),
            );
        }
    }
}

fn status_of(reason: FinishReason) -> Status {
    if reason == FinishReason::Length {
        Status::Incomplete
    } else {
        Status::Completed
    }
}

impl ChunkFormat for ResponsesFormat {
    fn opening(&mut self, _index: u32) -> Option<Bytes> {
        let mut out = Vec::new();
        let response = self.snapshot(None);
        self.event(&mut out, "response.created", json!({"response": response}));
        let response = self.snapshot(None);
        self.event(&mut out, "response.in_progress", json!({"response": response}));
        Some(Bytes::from(out))
    }

    fn delta(&mut self, _index: u32, delta: &ChoiceDelta, _usage: Option<Usage>) -> Option<Bytes> {
        let tools = self.tools.clone();
        let stream = self.stream.get_or_insert_with(|| ToolStream::new(tools));
        let mut piece = stream.push(&delta.text);
        if delta.end.is_some() {
            piece.append(stream.finish());
        }
        let mut out = Vec::new();
        if !piece.content.is_empty() {
            self.text(&mut out, &piece.content);
        }
        for call in piece.calls {
            self.call(&mut out, call);
        }
        if let Some(end) = delta.end {
            self.close_message(&mut out);
            self.close_calls(&mut out);
            self.status = status_of(end.reason);
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// The last event: the whole response with its usage. Always `response.completed`, its
    /// `status` `incomplete` when cut, as vLLM sends it (the openai SDK's stream helper
    /// finishes only on that event).
    fn usage(&mut self, usage: Usage) -> Bytes {
        let mut out = Vec::new();
        if self.status == Status::InProgress {
            self.status = Status::Completed;
        }
        let response = self.snapshot(Some(&usage));
        self.event(&mut out, "response.completed", json!({"response": response}));
        Bytes::from(out)
    }

    /// The Responses stream ends with its last event, without `[DONE]`.
    fn done(&mut self) -> Option<Bytes> {
        None
    }
}

impl ResponseFormat for ResponsesFormat {
    fn response(mut self, choices: Vec<(u32, ChoiceDelta)>, usage: Usage) -> serde_json::Result<Vec<u8>> {
        // One choice: the Responses API has no `n`.
        if let Some((_, delta)) = choices.into_iter().next() {
            let shaped = shape_output(&self.tools, delta.text);
            let text = shaped.message.content.unwrap_or_default();
            if !text.is_empty() || shaped.message.tool_calls.is_empty() {
                self.output.push(message_item(&message_id(), &text, "completed"));
            }
            for call in shaped.message.tool_calls {
                let item = function_call_item(
                    &function_call_id(),
                    &call.id,
                    &call.function.name,
                    &call.function.arguments,
                    "completed",
                );
                self.output.push(item);
            }
            self.status = delta.end.map_or(Status::Completed, |e| status_of(e.reason));
        }
        serde_json::to_vec(&self.snapshot(Some(&usage)))
    }
}
