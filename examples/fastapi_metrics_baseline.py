"""The scrape-cost baseline: a FastAPI app instrumented by prometheus-fastapi-instrumentator.

    python3 -m venv /tmp/fastapi-venv
    /tmp/fastapi-venv/bin/pip install fastapi uvicorn prometheus-fastapi-instrumentator
    /tmp/fastapi-venv/bin/python examples/fastapi_metrics_baseline.py 8123 &
    cargo run --release --example bench_scrape -- --url http://127.0.0.1:8123/metrics

It serves a few routes and warms them up so /metrics has populated families, like kiln's run.
"""

import sys
import threading
import urllib.request

import uvicorn
from fastapi import FastAPI
from prometheus_fastapi_instrumentator import Instrumentator

app = FastAPI()


@app.get("/v1/models")
def models():
    return {"object": "list", "data": []}


@app.post("/v1/completions")
def completions():
    return {"choices": [{"text": "ok"}]}


Instrumentator().instrument(app).expose(app)


def warm(port: int) -> None:
    import time

    time.sleep(2)
    for i in range(40):
        for path in ("/v1/models", f"/nope/{i}"):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}").read()
            except Exception:
                pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8123
    threading.Thread(target=warm, args=(port,), daemon=True).start()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
