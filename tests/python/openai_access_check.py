"""Checks kiln's API key (and HTTPS, when a CA file is given) with the official `openai` client.

Usage: openai_access_check.py BASE_URL KEY [CA_FILE]
Run by tests/it/tls.rs against a real kiln process. Exits non-zero on the first failed check.
"""

import ssl
import sys

import openai
from openai import DefaultHttpxClient, OpenAI

base_url, key = sys.argv[1], sys.argv[2]
ca_file = sys.argv[3] if len(sys.argv) > 3 else None


def client(api_key):
    http_client = None
    if ca_file:
        http_client = DefaultHttpxClient(verify=ssl.create_default_context(cafile=ca_file))
    return OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60, http_client=http_client)


good = client(key)
model = good.models.list().data[0].id
completion = good.completions.create(model=model, prompt="a", max_tokens=3, temperature=0)
assert completion.usage.completion_tokens >= 1, completion.usage
chunks = list(
    good.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
    )
)
assert chunks and chunks[-1].choices[0].finish_reason in ("length", "stop"), chunks[-1]

for wrong in ("sk-wrong", key + "x"):
    try:
        client(wrong).completions.create(model=model, prompt="a", max_tokens=3)
    except openai.AuthenticationError as e:
        assert e.status_code == 401, e.status_code
        assert key not in str(e), "the refusal must not echo the key"
        assert e.body["type"] == "authentication_error", e.body
    else:
        raise AssertionError(f"the wrong key {wrong!r} was accepted")

print("ok")
