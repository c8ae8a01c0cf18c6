"""The Responses API with the official `openai` client (`responses.create`,
`responses.stream`) against kiln serving the real default model behind a template that knows
tools, with --enable-auto-tool-choice and --tool-call-parser hermes.

Run by tests/it/responses_api.rs, which starts the server and passes its base URL.
Exits non-zero on the first failed check.
"""

import json
import sys

import openai
from openai import OpenAI
from pydantic import BaseModel, Field

base_url = sys.argv[1]
client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
model = client.models.list().data[0].id

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The current weather in a city",
        # No additionalProperties: the server's strict default keeps the call to `city`.
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]}},
            "required": ["city"],
        },
    }
]
QUESTION = "What is the weather in Paris right now?"
NAMED = {"type": "function", "name": "get_weather"}


def create(**kwargs):
    kwargs.setdefault("max_output_tokens", 48)
    return client.responses.create(model=model, temperature=0, **kwargs)


# Plain text, with instructions: one message item; usage with cached tokens.
first = create(instructions="Answer briefly.", input="Say hello.")
assert first.object == "response" and first.status in ("completed", "incomplete"), first
assert first.id.startswith("resp") and first.store is False, first
assert isinstance(first.output_text, str) and first.output_text, first
assert first.output[0].type == "message" and first.output[0].role == "assistant", first.output
usage = first.usage
assert usage.input_tokens > 0 and usage.output_tokens > 0, usage
assert usage.total_tokens == usage.input_tokens + usage.output_tokens, usage
assert usage.input_tokens_details.cached_tokens >= 0, usage
if first.status == "incomplete":
    assert first.incomplete_details.reason == "max_output_tokens", first

# The same request again: its prompt is in the prefix cache now.
again = create(instructions="Answer briefly.", input="Say hello.")
assert again.usage.input_tokens_details.cached_tokens > 0, again.usage
assert again.output_text == first.output_text, (again.output_text, first.output_text)

# Streamed: the event sequence, and the same text as the whole response.
with client.responses.stream(
    model=model, temperature=0, max_output_tokens=48, instructions="Answer briefly.", input="Say hello."
) as stream:
    kinds = [event.type for event in stream]
    final = stream.get_final_response()
assert kinds[:2] == ["response.created", "response.in_progress"], kinds
for kind in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
             "response.output_text.done", "response.content_part.done", "response.output_item.done"):
    assert kind in kinds, (kind, kinds)
assert kinds[-1] == "response.completed", kinds
assert final.output_text == first.output_text, (final.output_text, first.output_text)
assert final.usage.output_tokens == first.usage.output_tokens, final.usage

# A forced function call: a function_call item whose arguments hold to the schema, streamed
# and not; the call and its output go back as items and the model answers.
forced = create(input=QUESTION, tools=TOOLS, tool_choice=NAMED)
calls = [item for item in forced.output if item.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_weather", forced.output
arguments = json.loads(calls[0].arguments)
assert list(arguments) == ["city"] and arguments["city"] in ("Paris", "Oslo", "Lima"), arguments
with client.responses.stream(
    model=model, temperature=0, max_output_tokens=48, input=QUESTION, tools=TOOLS, tool_choice=NAMED
) as stream:
    kinds = [event.type for event in stream]
    streamed = stream.get_final_response()
assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds, kinds
streamed_calls = [item for item in streamed.output if item.type == "function_call"]
assert [(c.name, json.loads(c.arguments)) for c in streamed_calls] == [("get_weather", arguments)], streamed.output

followup = create(
    input=[
        {"role": "user", "content": QUESTION},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": json.dumps({"sky": "clear"})},
    ],
    tools=TOOLS,
    tool_choice="none",
)
assert followup.output_text, followup.output

# Required, one call only.
required = create(input=QUESTION, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
assert [item.type for item in required.output] == ["function_call"], required.output


# Structured output through text.format, parsed by the SDK.
class City(BaseModel):
    name: str = Field(max_length=20)
    country: str = Field(max_length=20)


parsed = client.responses.parse(
    model=model, temperature=0, max_output_tokens=80, input="Describe Paris as JSON.", text_format=City
)
assert parsed.status == "completed" and isinstance(parsed.output_parsed, City), parsed

# What cannot be served: 400s naming the field; the server goes on.
for bad, param in (
    ({"input": "hi", "previous_response_id": "resp_123"}, "previous_response_id"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
):
    try:
        create(**bad)
    except openai.BadRequestError as error:
        assert error.body["param"] == param, error.body
    else:
        raise AssertionError(f"accepted {bad}")
assert create(input="Hi", max_output_tokens=4).output

print("openai responses checks passed")
