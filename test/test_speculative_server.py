"""Speculative decoding through `sglang serve` on the embedded SmolLM2 (NGRAM drafts): the same
greedy text as the server without speculation, on /generate and the chat route, with the verify
counts in meta_info and /metrics, and the accept length in the decode log line."""

from __future__ import annotations

import pytest
import requests
from server_utils import ServerProcess, generate

QUOTE = (
    "Please repeat this sentence exactly, word for word: the quick brown fox jumps over the lazy "
    "dog near the quiet river bank. "
)


@pytest.fixture(scope="module")
def spec_server():
    srv = ServerProcess(
        [
            "--max-total-tokens",
            "8192",
            "--speculative-algorithm",
            "NGRAM",
            "--enable-metrics",
            "--decode-log-interval",
            "4",
            "--skip-server-warmup",
        ]
    )
    yield srv
    srv.stop()


def test_same_greedy_text_with_verify_counts(spec_server, default_server):
    body = {"sampling_params": {"max_new_tokens": 40, "temperature": 0}}
    text = QUOTE * 3
    a = generate(spec_server.url, text, **body).json()
    b = generate(default_server.url, text, **body).json()
    assert a["text"] == b["text"]
    m = a["meta_info"]
    assert m["completion_tokens"] == b["meta_info"]["completion_tokens"]
    # Every output token after the prefill's came from a verify step.
    assert m["spec_verify_ct"] >= 1
    # Accepted drafts + one token per step; a stop inside an accepted run emits fewer.
    emitted = m["completion_tokens"] - 1
    assert m["spec_accept_length"] * m["spec_verify_ct"] >= emitted - 1e-6
    assert sum(m["spec_accept_histogram"]) == m["spec_verify_ct"]
    assert 0.0 <= m["spec_accept_rate"] <= 1.0
    assert "spec_verify_ct" not in b["meta_info"]
    spec_server.check_idle_invariant()


def test_chat_route_and_metrics(spec_server, default_server):
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": QUOTE * 2}],
        "max_tokens": 24,
        "temperature": 0,
    }
    a = requests.post(spec_server.url + "/v1/chat/completions", json=body, timeout=120).json()
    b = requests.post(default_server.url + "/v1/chat/completions", json=body, timeout=120).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    spec_server.check_idle_invariant()
    metrics = requests.get(spec_server.url + "/metrics", timeout=30).text
    line = next(ln for ln in metrics.splitlines() if ln.startswith("sglang:spec_verify_ct_total"))
    assert float(line.split()[-1]) > 0
    assert "accept len:" in spec_server.log_text()
