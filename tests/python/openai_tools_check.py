"""Tool calling with the official `openai` client against kiln serving the real default model
behind a template that knows tools (--chat-template), with --enable-auto-tool-choice and
--tool-call-parser hermes.

Run by tests/it/tool_calling.rs, which starts the server and passes its base URL.
Exits non-zero on the first failed check.
"""

import json
import sys

import openai
from openai import OpenAI

base_url = sys.argv[1]
client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
model = client.models.list().data[0].id

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
            # The SDK's stream helper parses a strict tool's arguments as they come.
            "strict": True,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The current time",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            "strict": True,
        },
    },
]
NAMES = {t["function"]["name"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather in Paris right now?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def create(**kwargs):
    kwargs.setdefault("max_tokens", 64)
    kwargs.setdefault("seed", 7)
    return client.chat.completions.create(model=model, temperature=0, **kwargs)


def complete_json(text):
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def streamed(**kwargs):
    """(content, {index: [id, name, arguments]}, finish_reason) of a streamed answer, as the
    SDK's own accumulator (`chat.completions.stream`) assembles it. Each raw chunk must hold
    one entry per call index, as OpenAI sends them: the accumulator stores a delta's list as
    it is, so a second entry for one index becomes a phantom call."""
    kwargs.setdefault("max_tokens", 64)
    kwargs.setdefault("seed", 7)
    with client.chat.completions.stream(model=model, temperature=0, **kwargs) as stream:
        try:
            for event in stream:
                if event.type != "chunk" or not event.chunk.choices:
                    continue
                indexes = [c.index for c in event.chunk.choices[0].delta.tool_calls or []]
                assert len(indexes) == len(set(indexes)), ("one entry per index per delta", event.chunk)
            final = stream.get_final_completion()
        except openai.LengthFinishReasonError as cut:
            # The helper refuses to parse a cut answer; its snapshot is what it assembled.
            final = cut.completion
    choice = final.choices[0]
    calls = {}
    for i, call in enumerate(choice.message.tool_calls or []):
        assert call.type == "function" and call.id, call
        if call.function.parsed_arguments is not None and complete_json(call.function.arguments):
            # Strict tools: the SDK parsed the arguments as they streamed.
            assert call.function.parsed_arguments == json.loads(call.function.arguments), call
        calls[i] = [call.id, call.function.name, call.function.arguments]
    return choice.message.content or "", calls, choice.finish_reason


# A named function: one call of it, arguments valid for its schema; finish_reason stays
# "stop", as OpenAI and vLLM report a forced function.
first = create(messages=QUESTION, tools=TOOLS, tool_choice=NAMED)
message = first.choices[0].message
assert message.tool_calls and len(message.tool_calls) == 1, message
call = message.tool_calls[0]
assert call.id.startswith("chatcmpl-tool-"), call.id
assert call.type == "function" and call.function.name == "get_weather", call
arguments = json.loads(call.function.arguments)
assert arguments["city"] in ("Paris", "Oslo", "Lima") and arguments["unit"] in ("celsius", "fahrenheit"), arguments
assert first.choices[0].finish_reason == "stop", first.choices[0].finish_reason

# Streaming the same request: the same call, assembled from OpenAI-style deltas.
content, calls, finish = streamed(messages=QUESTION, tools=TOOLS, tool_choice=NAMED)
assert list(calls) == [0], calls
assert calls[0][1] == "get_weather" and json.loads(calls[0][2]) == arguments, calls
assert finish == "stop", finish

# The round trip: the assistant's call and the tool's result go back; the model answers.
conversation = QUESTION + [
    message,
    {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
]
final = create(messages=conversation, tools=TOOLS, tool_choice="none")
answer = final.choices[0]
assert isinstance(answer.message.content, str) and answer.message.content, answer
assert not answer.message.tool_calls, answer
assert answer.finish_reason in ("stop", "length"), answer.finish_reason
content, calls, finish = streamed(messages=conversation, tools=TOOLS, tool_choice="none")
assert content == answer.message.content and not calls, (content, calls)

# Required: one valid call (a small model repeats calls until max_tokens when several are
# allowed); finish_reason "tool_calls".
required = create(messages=QUESTION, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
choice = required.choices[0]
assert choice.finish_reason == "tool_calls", choice
assert choice.message.tool_calls, choice
for c in choice.message.tool_calls:
    assert c.function.name in NAMES, c
    json.loads(c.function.arguments)
content, calls, finish = streamed(messages=QUESTION, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
assert finish == "tool_calls", finish
assert [(v[1], json.loads(v[2])) for _, v in sorted(calls.items())] == [
    (c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls
], calls

# Parallel calls allowed: a small model repeats its call until max_tokens cuts the array.
# The complete calls come back, streamed and not; the stream has also sent what came of the
# cut one (its arguments are not whole JSON), as OpenAI streams arguments as they come.
parallel = create(messages=QUESTION, tools=TOOLS, tool_choice="required", max_tokens=80)
choice = parallel.choices[0]
assert choice.message.tool_calls, choice
whole = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
assert all(name in NAMES for name, _ in whole), whole
assert choice.finish_reason in ("length", "tool_calls"), choice.finish_reason
content, calls, finish = streamed(messages=QUESTION, tools=TOOLS, tool_choice="required", max_tokens=80)
assert finish == choice.finish_reason, (finish, choice.finish_reason)
assembled = [(v[1], v[2]) for _, v in sorted(calls.items())]
if assembled and not complete_json(assembled[-1][1]):
    assembled.pop()
assert [(name, json.loads(arguments)) for name, arguments in assembled] == whole, (assembled, whole)

# Auto: the model decides; whichever it does, the answer is well formed.
auto = create(messages=QUESTION, tools=TOOLS, tool_choice="auto")
choice = auto.choices[0]
assert choice.finish_reason in ("stop", "length", "tool_calls"), choice
if choice.message.tool_calls:
    assert choice.finish_reason == "tool_calls", choice
    for c in choice.message.tool_calls:
        assert c.id and c.function.name, c
        json.loads(c.function.arguments)
else:
    assert isinstance(choice.message.content, str), choice
content, calls, finish = streamed(messages=QUESTION, tools=TOOLS)
assert finish == choice.finish_reason, (finish, choice.finish_reason)
assert len(calls) == len(choice.message.tool_calls or []), calls

# Bad input: 400s, and the server goes on serving.
for bad in (
    {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "missing"}}},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": "not a schema"}}]},
    {"tools": [{"type": "function"}]},
):
    try:
        create(messages=QUESTION, **bad)
    except openai.BadRequestError:
        pass
    else:
        raise AssertionError(f"accepted {bad}")
assert create(messages=QUESTION, max_tokens=4).choices[0].message.content is not None

print("openai tool-calling checks passed")
