"""The official `openai` client's structured outputs against kiln: `chat.completions.parse`
with a Pydantic model (the client sends `response_format: json_schema`, strict, and parses the
answer back into the model), and an unknown `response_format` type refused with 400.

Usage: openai_structured_check.py BASE_URL
Run by tests/it/structured_outputs.rs. Exits non-zero on the first failed check.
"""

import sys
from typing import Literal

import openai
from openai import OpenAI
from pydantic import BaseModel, Field


class Pet(BaseModel):
    name: str = Field(max_length=6)
    kind: Literal["cat", "dog", "fish"]
    age: int = Field(ge=0, le=30)
    vaccinated: bool


client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0, timeout=120)
model = client.models.list().data[0].id
parsed = 0
for seed in range(5):
    completion = client.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": "Describe a pet as JSON."}],
        response_format=Pet,
        temperature=1.0,
        seed=seed,
        max_tokens=120,
    )
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop", completion
    assert isinstance(message.parsed, Pet), message
    assert message.parsed.kind in ("cat", "dog", "fish") and 0 <= message.parsed.age <= 30, message.parsed
    parsed += 1

try:
    client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        response_format={"type": "yaml"},
        max_tokens=4,
    )
    raise AssertionError("an unknown response_format type was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400, e

print(f"parsed {parsed} answers")
