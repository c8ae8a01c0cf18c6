"""Checks kiln with the official `openai` client against the real default model.

Run by tests/openai_client.rs, which starts the server and passes its base URL.
Exits non-zero on the first failed check.
"""

import sys

import openai
from openai import OpenAI

base_url = sys.argv[1]
client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)

models = client.models.list()
model = models.data[0].id
assert model == "SmolLM2-135M-Instruct", model

# Completions: greedy answer and usage.
completion = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
text = completion.choices[0].text
assert text.startswith(" Paris."), repr(text)
assert completion.usage.prompt_tokens == 5, completion.usage
assert completion.usage.completion_tokens == 8, completion.usage
assert completion.choices[0].finish_reason == "length"

# Chat: the model's real answer, stopped by <|im_end|>.
chat = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of France?"}],
    temperature=0,
    max_tokens=32,
)
answer = chat.choices[0].message.content
assert answer == "The capital of France is Paris.", repr(answer)
assert chat.choices[0].finish_reason == "stop"
assert chat.usage.prompt_tokens == 37, chat.usage

# Streaming equals non-streaming, with a usage chunk at the end.
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of France?"}],
    temperature=0,
    max_tokens=32,
    stream=True,
    stream_options={"include_usage": True},
)
pieces, finish, usage = [], None, None
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
assert "".join(pieces) == answer, pieces
assert finish == "stop"
assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens, usage

text_stream = client.completions.create(
    model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True
)
assert "".join(c.choices[0].text for c in text_stream if c.choices) == text

# Content given as text parts, a system message, and logprobs.
chat = client.chat.completions.create(
    model=model,
    messages=[
        {"role": "system", "content": "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
        {"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]},
    ],
    temperature=0,
    max_tokens=32,
    logprobs=True,
    top_logprobs=3,
)
assert chat.choices[0].message.content == answer
lp = chat.choices[0].logprobs.content
assert len(lp) == chat.usage.completion_tokens and len(lp[0].top_logprobs) == 3
assert lp[0].token == "The" and lp[0].logprob <= 0.0

# Seeded sampling repeats; n > 1 gives n choices.
a = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=123)
b = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=123)
assert a.choices[0].text == b.choices[0].text
many = client.completions.create(model=model, prompt="Once upon a time", max_tokens=4, n=3, seed=5)
assert sorted(c.index for c in many.choices) == [0, 1, 2]

# Stop strings.
stopped = client.completions.create(model=model, prompt="The capital of France is", max_tokens=16, temperature=0, stop=["."])
assert stopped.choices[0].text == " Paris", repr(stopped.choices[0].text)
assert stopped.choices[0].finish_reason == "stop"

# Errors arrive as the client's typed exceptions.
try:
    client.completions.create(model=model, prompt="hi", temperature=5)
    raise AssertionError("temperature=5 accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "temperature", e.body
try:
    client.completions.create(model="no-such-model", prompt="hi")
    raise AssertionError("unknown model accepted")
except openai.NotFoundError:
    pass

print("openai client: all checks passed")
