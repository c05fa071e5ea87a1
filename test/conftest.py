"""Shared fixtures: test models (random checkpoints and the embedded SmolLM2) and their HF twins."""

from __future__ import annotations

import os
import sys

# Test processes and the servers they start share two cores; spinning OpenMP threads starve each other.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from model_fixtures import load_hf_model, write_tiny_model

os.environ.setdefault("SGLANG_STRICT_MEM_CHECK", "1")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {arch: write_tiny_model(arch, str(root / arch)) for arch in ("llama", "qwen2", "qwen3")}


@pytest.fixture(scope="session")
def smollm_path():
    from sglang.srt.utils.embedded_model import embedded_model_path

    return embedded_model_path()


@pytest.fixture(scope="session")
def tok(smollm_path):
    """The embedded model's tokenizer."""
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    return get_tokenizer(smollm_path)


@pytest.fixture(scope="session")
def hf_models():
    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = load_hf_model(path)
        return cache[path]

    return get


# ---------------------------------------------------------------------------- servers
from server_utils import GUARD_KEY, ServerProcess  # noqa: E402

DEFAULT_SERVER_ARGS = [
    "--max-total-tokens",
    "20000",
    "--enable-metrics",
    "--enable-cache-report",
    "--reasoning-parser",
    "qwen3",
]


@pytest.fixture(scope="session")
def default_server():
    """One `sglang serve` on the embedded SmolLM2, shared by the HTTP-level tests."""
    srv = ServerProcess(DEFAULT_SERVER_ARGS)
    yield srv
    srv.stop()


@pytest.fixture
def server_url(default_server):
    """The default server's URL; after the test the idle KV invariant must hold."""
    yield default_server.url
    default_server.check_idle_invariant()


@pytest.fixture(scope="session")
def incremental_server():
    """A server streaming deltas (--incremental-streaming-output), as SGLang does with that flag."""
    srv = ServerProcess(
        ["--max-total-tokens", "8192", "--incremental-streaming-output", "--skip-server-warmup"]
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def guarded_server():
    """A server with an API key, metrics, and short --slow-consumer-timeout / --request-read-timeout."""
    srv = ServerProcess(
        [
            "--max-total-tokens",
            "20000",
            "--enable-metrics",
            "--slow-consumer-timeout",
            "3",
            "--request-read-timeout",
            "2",
        ],
        api_key=GUARD_KEY,
    )
    yield srv
    srv.stop()
