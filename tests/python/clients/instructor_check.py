"""instructor 1.17 against kiln: a Pydantic model extracted through a forced tool call
(Mode.TOOLS), streamed as partial objects (which read tool_calls[0] of each delta), and
through response_format (Mode.JSON_SCHEMA)."""

import instructor
from openai import OpenAI

from common import API_KEY, BASE_URL, EXTRACT, MODEL, Place

client = OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=120)
messages = [{"role": "user", "content": EXTRACT}]

tools = instructor.from_openai(client, mode=instructor.Mode.TOOLS)
place = tools.chat.completions.create(
    model=MODEL, response_model=Place, messages=messages, temperature=0, max_tokens=64, max_retries=0
)
assert isinstance(place, Place) and place.city, place

partials = list(
    tools.chat.completions.create_partial(
        model=MODEL, response_model=Place, messages=messages, temperature=0, max_tokens=64, max_retries=0
    )
)
assert partials and partials[-1].model_dump() == place.model_dump(), (partials[-1], place)

schema = instructor.from_openai(client, mode=instructor.Mode.JSON_SCHEMA)
structured = schema.chat.completions.create(
    model=MODEL, response_model=Place, messages=messages, temperature=0, max_tokens=64, max_retries=0
)
assert isinstance(structured, Place) and structured.city, structured
print("instructor checks passed")
