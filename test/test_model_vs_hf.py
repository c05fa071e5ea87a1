"""The model execution core against HF transformers: logits through the KV pool, greedy tokens, batching."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.static_batch import StaticBatch
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import get_tokenizer

ARCHS = ["llama", "qwen2", "qwen3", "smollm"]
TEXT = "The quick brown fox jumps over the lazy dog. In the beginning the Universe was created."
DECODE_STEPS = 32


def _path(arch, tiny_models, smollm_path):
    return smollm_path if arch == "smollm" else tiny_models[arch]


def _runner(path: str) -> ModelRunner:
    sa = ServerArgs(model_path=path, max_total_tokens=4096, max_running_requests=16)
    return ModelRunner.from_server_args(ModelConfig.from_path(path), sa, "cpu", show_progress=False)


@pytest.fixture(scope="module")
def runners():
    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = _runner(path)
        return cache[path]

    return get


def _hf_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_and_decode_logits_match_hf(arch, tiny_models, smollm_path, runners, hf_models):
    path = _path(arch, tiny_models, smollm_path)
    runner, hf = runners(path), hf_models(path)
    ids = get_tokenizer(path).encode(TEXT)
    sb = StaticBatch(runner)
    try:
        out = sb.prefill([ids])
        seq = list(ids)
        for step in range(DECODE_STEPS + 1):
            ref = _hf_logits(hf, seq)[-1]
            ours = out.next_token_logits[0]
            scale = ref.abs().max().item()
            assert (ours - ref).abs().max().item() <= 2e-4 * max(scale, 1.0), f"step {step}"
            nxt = int(ours.argmax())
            assert nxt == int(ref.argmax()), f"greedy token differs at step {step}"
            if step == DECODE_STEPS:
                break
            seq.append(nxt)
            out = sb.decode([nxt])
    finally:
        sb.release()


def test_smollm_greedy_reference_text(smollm_path, runners):
    tok = get_tokenizer(smollm_path)
    sb = StaticBatch(runners(smollm_path))
    try:
        out = sb.prefill([tok.encode("The capital of France is")])
        gen = []
        for _ in range(16):
            nxt = int(out.next_token_logits[0].argmax())
            gen.append(nxt)
            out = sb.decode([nxt])
    finally:
        sb.release()
    assert tok.decode(gen).startswith(" Paris.\n\nThe answer is: 2018-01")


def _greedy(runner, prompts, shared=None, steps=8):
    sb = StaticBatch(runner)
    try:
        out = sb.prefill(prompts, shared)
        toks = [[] for _ in prompts]
        for _ in range(steps):
            nxt = out.next_token_logits.argmax(-1).tolist()
            for t, n in zip(toks, nxt):
                t.append(n)
            out = sb.decode(nxt)
        return toks
    finally:
        sb.release()


@pytest.mark.parametrize("arch", ["llama", "qwen3", "smollm"])
def test_batch_with_shared_prefixes_matches_single(arch, tiny_models, smollm_path, runners):
    path = _path(arch, tiny_models, smollm_path)
    runner = runners(path)
    tok = get_tokenizer(path)
    base = tok.encode(TEXT)
    other = tok.encode("Paris is the capital and most populous city of France.")
    prompts = [base[:24], base[:24] + other[:9], other, base[:10]]
    shared = [-1, 0, -1, 0]
    alone = [_greedy(runner, [p])[0] for p in prompts]
    batched = _greedy(runner, prompts, shared)
    assert batched == alone
