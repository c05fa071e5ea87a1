"""--enable-deterministic-inference: a request's logprobs are the same bits however it was served.

The seeds' case: one greedy prompt sent twice, the second time mostly from the radix tree, and the
same prompt in batches of different sizes and prompt chunkings. Every comparison is exact (the
logprobs as floats, not within a tolerance). The ops are checked on their own too, against the
library product / softmax they replace.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from server_utils import ServerProcess, generate

from sglang.srt.entrypoints.engine import Engine
from sglang.srt.layers.attention.invariant_attention import KEY_TILE, tiled_attention
from sglang.srt.layers.batch_invariant import padded_rows, rowwise_linear
from sglang.srt.server_args import ServerArgs

CHECK = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "benchmark", "check_determinism.py"
)
PROMPT = "The quick brown fox jumps over the lazy dog because it was"
OTHERS = [
    "Hello",
    "A much longer prompt about the history of the Roman empire and its roads",
    "1 2 3",
]
GREEDY = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}


# ---------------------------------------------------------------- the operations
@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 40),
    k=st.sampled_from([8, 24, 64]),
    n=st.integers(1, 50),
    seed=st.integers(0, 99),
)
def test_rowwise_linear_rows_do_not_see_the_batch(m, k, n, seed):
    g = torch.Generator().manual_seed(seed)
    x, w, b = (
        torch.randn(m, k, generator=g),
        torch.randn(n, k, generator=g),
        torch.randn(n, generator=g),
    )
    out = rowwise_linear(x, w, b)
    i = seed % m
    assert torch.equal(out[i], rowwise_linear(x[i : i + 1], w, b)[0])
    assert torch.equal(out[i], rowwise_linear(torch.cat([x[i : i + 1], x]), w, b)[0])
    assert torch.allclose(out, F.linear(x, w, b), atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(
    length=st.integers(1, 3 * KEY_TILE + 5),
    hkv=st.sampled_from([1, 2]),
    g=st.sampled_from([1, 3]),
    seed=st.integers(0, 99),
)
def test_tiled_attention_is_the_same_for_prefill_chunk_and_decode(length, hkv, g, seed):
    gen = torch.Generator().manual_seed(seed)
    d = 16
    k = torch.randn(1, length, hkv, d, generator=gen)
    v = torch.randn(1, length, hkv, d, generator=gen)
    q = torch.randn(length, hkv, g, d, generator=gen)
    full = tiled_attention(q, k, v, torch.arange(length), 0.25)  # one prefill
    p = seed % length
    # The same query after a cached prefix of p keys (a chunk of one), and as a decode row padded
    # among longer requests' keys.
    chunk = tiled_attention(q[p : p + 1], k[:, : p + 1], v[:, : p + 1], torch.tensor([p]), 0.25)
    pad = torch.randn(1, KEY_TILE, hkv, d, generator=gen)
    kd = torch.cat([k[:, : p + 1], pad], dim=1).expand(2, -1, -1, -1)
    vd = torch.cat([v[:, : p + 1], pad], dim=1).expand(2, -1, -1, -1)
    dec = tiled_attention(q[[p, 0]], kd, vd, torch.tensor([p, 0]), 0.25)
    assert torch.equal(full[p], chunk[0]) and torch.equal(full[p], dec[0])
    s = torch.einsum("hgd,lhd->hgl", q[p], k[0, : p + 1]) * 0.25
    ref = torch.einsum("hgl,lhd->hgd", s.softmax(-1), v[0, : p + 1])
    assert torch.allclose(full[p], ref, atol=1e-5)


def test_padded_rows_equals_the_plain_function():
    x = torch.randn(5, 70)
    assert torch.allclose(padded_rows(F.silu, x), F.silu(x))
    assert padded_rows(F.silu, x).shape == x.shape


def test_unsupported_combinations_are_refused_at_startup():
    for extra, word in (
        ({"speculative_algorithm": "NGRAM"}, "speculative"),
        ({"quantization": "fp8"}, "quantization"),
        ({"tp_size": 4}, "tp-size"),
    ):
        with pytest.raises(ValueError, match=word):
            ServerArgs(enable_deterministic_inference=True, device="cpu", **extra).validate()


# ---------------------------------------------------------------- served requests
def _lps(out: dict, key: str = "output_token_logprobs"):
    return [(t[0], t[1]) for t in out["meta_info"][key]]


@pytest.fixture(scope="module")
def engines(tiny_models):
    """Two deterministic engines of one checkpoint: default chunking, and 7-token prompt chunks."""
    path = tiny_models["llama"]
    with Engine(model_path=path, enable_deterministic_inference=True, max_total_tokens=4096) as a:
        with Engine(
            model_path=path,
            enable_deterministic_inference=True,
            max_total_tokens=4096,
            chunked_prefill_size=7,
        ) as b:
            yield a, b


def test_a_prompt_from_the_radix_tree_gives_the_same_bits(engines):
    """The seeds' case: the second send takes all but the last prompt token from the tree."""
    e, _ = engines
    assert e.get_server_info()["enable_deterministic_inference"] is True
    e.flush_cache()
    first = e.generate(PROMPT, GREEDY, return_logprob=True)
    second = e.generate(PROMPT, GREEDY, return_logprob=True)
    assert second["meta_info"]["cached_tokens"] > 0
    assert second["output_ids"] == first["output_ids"]
    assert _lps(second) == _lps(first)


def test_batch_size_and_chunking_do_not_change_the_bits(engines):
    e, chunked = engines
    e.flush_cache()
    alone = e.generate(PROMPT, GREEDY, return_logprob=True)
    batched = e.generate(OTHERS + [PROMPT] + OTHERS, GREEDY, return_logprob=True)[len(OTHERS)]
    in_chunks = chunked.generate(OTHERS + [PROMPT], GREEDY, return_logprob=True)[-1]
    assert _lps(batched) == _lps(alone)
    assert _lps(in_chunks) == _lps(alone)


def test_a_replay_scores_the_rollout_with_the_same_logprobs(engines, tok):
    """RL: a prefill of prompt + generated tokens gives, at each generated position, the logprob
    the rollout reported when it decoded that token."""
    e, chunked = engines
    prompt = tok.encode(PROMPT)
    out = e.generate(input_ids=prompt, sampling_params=GREEDY, return_logprob=True)
    replay = chunked.generate(
        input_ids=prompt + out["output_ids"],
        sampling_params={"max_new_tokens": 1, "temperature": 0},
        return_logprob=True,
        logprob_start_len=len(prompt) - 1,
    )
    # The first entry is the last prompt token's (None when it starts the range).
    assert _lps(replay, "input_token_logprobs")[1:] == _lps(out)


def test_seeded_sampling_is_the_same_alone_and_batched(engines):
    e, chunked = engines
    sp = {"max_new_tokens": 12, "temperature": 0.9, "sampling_seed": 7, "ignore_eos": True}
    alone = e.generate(PROMPT, sp, return_logprob=True)
    batched = chunked.generate(OTHERS + [PROMPT], sp, return_logprob=True)[-1]
    assert batched["output_ids"] == alone["output_ids"]
    assert _lps(batched) == _lps(alone)
    # Without a seed, deterministic mode uses seed 42: two sends agree.
    unseeded = {k: v for k, v in sp.items() if k != "sampling_seed"}
    assert e.generate(PROMPT, unseeded)["output_ids"] == e.generate(PROMPT, unseeded)["output_ids"]


def test_the_default_model_over_http_twice_and_batched():
    """`sglang serve --enable-deterministic-inference` on the embedded SmolLM2: the seeds' greedy
    prompt sent twice (the second from the tree) and inside a batch gives the same logprobs, and
    the answer is still right."""
    srv = ServerProcess(
        ["--enable-deterministic-inference", "--max-total-tokens", "4096", "--skip-server-warmup"]
    )
    try:
        assert srv.server_info()["enable_deterministic_inference"] is True
        body = {"sampling_params": {"max_new_tokens": 6, "temperature": 0}, "return_logprob": True}
        outs = [generate(srv.url, text="The capital of France is", **body).json() for _ in range(2)]
        batch = generate(srv.url, text=["Hi", "The capital of France is", "2 + 2 ="], **body).json()
        assert outs[1]["meta_info"]["cached_tokens"] > 0
        assert "Paris" in outs[0]["text"]
        assert _lps(outs[1]) == _lps(outs[0]) == _lps(batch[1])
        # The client check SGLang ships (benchmark/check_determinism.py), a mode per run.
        for mode, temp in (("prefix", "0"), ("mixed", "0.8")):
            tool = [sys.executable, CHECK, "--port", str(srv.port), "--test-mode", mode]
            opts = ["--n-trials", "3", "--max-new-tokens", "4", "--temperature", temp]
            out = subprocess.run(tool + opts, capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, out.stderr[-2000:]
            assert out.stdout.strip().endswith("Unique samples: 1"), out.stdout
        srv.check_idle_invariant()
    finally:
        srv.stop()


def test_tensor_parallel_2_is_deterministic_too(tiny_models):
    """Two ranks: the row-parallel partial sums add in either order to the same bits."""
    kw = dict(model_path=tiny_models["llama"], enable_deterministic_inference=True)
    with Engine(tp_size=2, max_total_tokens=4096, **kw) as e:
        alone = e.generate(PROMPT, GREEDY, return_logprob=True)
        again = e.generate(PROMPT, GREEDY, return_logprob=True)
        batched = e.generate(OTHERS + [PROMPT], GREEDY, return_logprob=True)[-1]
    assert again["meta_info"]["cached_tokens"] > 0
    assert _lps(alone) == _lps(again) == _lps(batched)
