"""Fixtures for vLLM's metrics tests ported to run over HTTP against a live kiln.

The Rust driver (tests/it/vllm_metrics_port.rs) starts kiln and passes its root URL in
KILN_URL; `server` stands in for vLLM's RemoteOpenAIServer (same `url_for`, `get_client`
and `show_hidden_metrics`), so the ported test bodies read as vLLM's.
"""

import os

import openai
import pytest
import requests


class KilnServer:
    """vLLM's RemoteOpenAIServer, for a kiln that is already running."""

    # kiln hides no deprecated metric (vLLM's --show-hidden-metrics-for-version).
    show_hidden_metrics = False

    def __init__(self, url: str):
        self.url_root = url.rstrip("/")
        models = requests.get(self.url_for("v1", "models"), timeout=30).json()
        self.model_name = models["data"][0]["id"]
        self.max_model_len = models["data"][0]["max_model_len"]

    def url_for(self, *parts: str) -> str:
        return "/".join([self.url_root, *parts])

    def get_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url_for("v1"), api_key="unused", max_retries=0)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` as the served model's tokenizer makes them (kiln's /tokenize
        in place of transformers' AutoTokenizer, which would need the hub)."""
        resp = requests.post(
            self.url_for("tokenize"),
            json={"model": self.model_name, "prompt": text},
            timeout=30,
        )
        resp.raise_for_status()
        return resp.json()["tokens"]


@pytest.fixture(scope="session")
def server() -> KilnServer:
    url = os.environ.get("KILN_URL")
    assert url, "KILN_URL: the driver (tests/it/vllm_metrics_port.rs) sets it"
    return KilnServer(url)


@pytest.fixture
def client(server: KilnServer) -> openai.OpenAI:
    return server.get_client()
