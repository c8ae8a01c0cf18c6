"""Traffic through a router in front of kiln replicas, with the official `openai` client,
for tests/it/routers/.

Usage: router_traffic.py BASE_URL MODE [ARGS...] prints one JSON line.
  check                 completions, chat, and both streamed, each once (exits non-zero on
                        a failed check);
  burst N CONCURRENCY [SESSION|-] [PREFIX]
                        N completions, CONCURRENCY at a time, each with `user`,
                        X-Session-ID and X-SMG-Routing-Key = SESSION when given and a prompt starting with PREFIX;
                        prints how many succeeded and each error's class and status.
  ttft N STEP           N streamed completions one at a time, the i-th prompt about
                        1 + STEP * i words long; prints each one's time to its first chunk
                        as the client saw it, in seconds.
"""

import concurrent.futures
import json
import sys
import time

import openai
from openai import OpenAI


def client(base_url):
    # No client-side retries: every error the router does not absorb is counted.
    return OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)


def check(base_url):
    c = client(base_url)
    model = c.models.list().data[0].id
    completion = c.completions.create(model=model, prompt="The capital of France is", max_tokens=6)
    assert completion.choices[0].text, completion
    # The client's default temperature samples, so the model may end before max_tokens.
    tokens, finish = completion.usage.completion_tokens, completion.choices[0].finish_reason
    assert tokens == 6 or (1 <= tokens < 6 and finish == "stop"), completion
    chat = c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello there"}], max_tokens=6
    )
    assert chat.choices[0].message.role == "assistant", chat
    assert chat.usage.completion_tokens >= 1, chat.usage
    chunks = list(c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Count to three"}], max_tokens=6,
        stream=True, stream_options={"include_usage": True},
    ))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1, chunks[-1]
    text_chunks = list(c.completions.create(model=model, prompt="Once upon", max_tokens=5, stream=True))
    assert any(ch.choices and ch.choices[0].finish_reason for ch in text_chunks), text_chunks[-1]
    return {"model": model, "checks": 4}


def burst(base_url, n, concurrency, session, prefix):
    c = client(base_url)
    model = c.models.list().data[0].id

    def one(i):
        extra = {}
        kwargs = {}
        if session:
            extra["X-Session-ID"] = session  # vllm-router's session header
            extra["X-SMG-Routing-Key"] = session  # smg's
            kwargs["user"] = session
        try:
            c.completions.create(
                model=model, prompt=f"{prefix} request {i}:", max_tokens=8,
                extra_headers=extra, extra_body={"ignore_eos": True}, **kwargs,
            )
            return None
        except openai.APIStatusError as e:
            return {"class": type(e).__name__, "status": e.status_code}
        except openai.APIError as e:
            return {"class": type(e).__name__, "status": None}

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(n)))
    errors = [r for r in results if r is not None]
    return {"ok": n - len(errors), "errors": errors}


def ttft(base_url, n, step):
    c = client(base_url)
    model = c.models.list().data[0].id
    ttfts = []
    for i in range(n):
        prompt = f"Request {i}: " + " ".join(["word"] * (1 + step * i))
        started = time.perf_counter()
        first = None
        for _ in c.completions.create(model=model, prompt=prompt, max_tokens=4, stream=True,
                                      extra_body={"ignore_eos": True}):
            if first is None:
                first = time.perf_counter() - started
        ttfts.append(first)
    return {"ttfts": ttfts}


def main():
    base_url, mode = sys.argv[1], sys.argv[2]
    if mode == "check":
        out = check(base_url)
    elif mode == "burst":
        n, concurrency = int(sys.argv[3]), int(sys.argv[4])
        session = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] != "-" else None
        prefix = sys.argv[6] if len(sys.argv) > 6 else "Tell me a story"
        out = burst(base_url, n, concurrency, session, prefix)
    elif mode == "ttft":
        out = ttft(base_url, int(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
