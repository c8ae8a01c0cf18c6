"""litellm 1.110 against kiln as an OpenAI-compatible server: a forced tool call, streamed and
rebuilt with stream_chunk_builder, and response_format from a Pydantic model."""

import json

import litellm

from common import API_KEY, BASE_URL, EXTRACT, MODEL, QUESTION, Place

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
common = dict(model=f"openai/{MODEL}", api_base=BASE_URL, api_key=API_KEY, temperature=0, max_tokens=64)
forced = dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
messages = [{"role": "user", "content": QUESTION}]

whole = litellm.completion(messages=messages, **forced, **common)
calls = whole.choices[0].message.tool_calls
assert len(calls) == 1 and calls[0].function.name == "get_weather", calls
arguments = json.loads(calls[0].function.arguments)
assert list(arguments) == ["city"], arguments

chunks = list(litellm.completion(messages=messages, stream=True, **forced, **common))
rebuilt = litellm.stream_chunk_builder(chunks, messages=messages)
streamed = rebuilt.choices[0].message.tool_calls
assert [(c.function.name, json.loads(c.function.arguments)) for c in streamed] == [("get_weather", arguments)], streamed

structured = litellm.completion(messages=[{"role": "user", "content": EXTRACT}], response_format=Place, **common)
place = Place.model_validate_json(structured.choices[0].message.content)
assert place.city, place
print("litellm checks passed")
