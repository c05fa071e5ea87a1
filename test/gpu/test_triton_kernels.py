"""Triton kernels vs torch references on CUDA, bf16 at realistic shapes (skipped without a GPU).

Same checks as the interpreter run (test/kernel_checks.py: random scattered slots, NaN in every
slot a request does not own and in the output before the call), plus CUDA-graph replay of decode.
References run in fp32 on the upcast bf16 inputs; pass means ||out - ref|| / ||ref|| < 1e-2.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = 1e-2
BF16 = dict(dtype=torch.bfloat16, device="cuda")


def _kc():
    import kernel_checks  # imported lazily: it imports triton, which is fine but not needed when skipped

    return kernel_checks


def _mixed_lens(bs: int, max_len: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, max_len + 1, (bs,), generator=g).tolist()
    lens[0], lens[-1] = 1, max_len  # always a 1-token request and a full-length one
    return lens


DECODE_CASES = {
    # name: (seq_lens, H, H_kv, D, extra kwargs)
    "llama3-8b bs64 mixed<=4096": (_mixed_lens(64, 4096, 0), 32, 8, 128, {}),
    "llama3-8b bs1 len8191 16 splits": ([8191], 32, 8, 128, dict(max_kv_splits=16)),
    "llama3-8b bs7 random splits": (
        _mixed_lens(7, 3000, 1),
        32,
        8,
        128,
        dict(splits="random", max_kv_splits=16),
    ),
    "smollm 9/3 D64 bs33": (_mixed_lens(33, 2048, 2), 9, 3, 64, dict(max_kv_splits=8)),
    "MHA 16/16 D128 per-head": (_mixed_lens(16, 2048, 3), 16, 16, 128, {}),
    "MHA 16/16 D128 grouped": (_mixed_lens(16, 2048, 4), 16, 16, 128, dict(grouped=True)),
    "ratio3 24/8 D80": (_mixed_lens(12, 1500, 5), 24, 8, 80, {}),
    "ratio20 40/2 D128": (_mixed_lens(5, 1000, 6), 40, 2, 128, {}),
    "D256 8/1 cap": (_mixed_lens(9, 1200, 7), 8, 1, 256, dict(logit_cap=30.0)),
    "q view + cap": (_mixed_lens(10, 900, 8), 32, 8, 128, dict(q_view=True, logit_cap=50.0)),
    "seq_len 0 row": ([0, 100, 1], 32, 8, 128, {}),
    "llama3-8b bs256 mixed<=1024 pack 2": (
        _mixed_lens(256, 1024, 9),
        32,
        8,
        128,
        dict(config=dict(KV_PACK=2)),
    ),
    "qwen3-0.6b bs256 pack 4, BLOCK_N 128": (
        _mixed_lens(256, 800, 10),
        16,
        8,
        128,
        dict(config=dict(KV_PACK=4, BLOCK_N=128)),
    ),
    "llama3-8b bs9 pack 4, random splits": (
        _mixed_lens(9, 2000, 11),
        32,
        8,
        128,
        dict(splits="random", max_kv_splits=16, config=dict(KV_PACK=4)),
    ),
}


@pytest.mark.parametrize("name", list(DECODE_CASES))
def test_decode_attention_cuda(name: str) -> None:
    lens, h, hkv, d, kw = DECODE_CASES[name]
    assert _kc().check_decode(lens, h, hkv, d, **kw, **BF16, seed=11) < TOL


EXTEND_CASES = {
    # name: (prefix_lens, extend_lens, H, H_kv, D, extra kwargs)
    "llama3-8b 4096 prompt": ([0], [4096], 32, 8, 128, {}),
    "llama3-8b mixed prefixes": ([0, 1000, 37, 2048, 5], [700, 1, 513, 64, 1200], 32, 8, 128, {}),
    "smollm 9/3 D64": ([300, 0, 17], [129, 1000, 1], 9, 3, 64, {}),
    "ratio3 D80 cap": ([64, 0], [300, 77], 24, 8, 80, dict(logit_cap=30.0)),
    "MHA D128": ([500, 3], [260, 900], 16, 16, 128, {}),
    "D256": ([100], [300], 8, 2, 256, {}),
}


@pytest.mark.parametrize("name", list(EXTEND_CASES))
def test_extend_attention_cuda(name: str) -> None:
    prefix, ext, h, hkv, d, kw = EXTEND_CASES[name]
    assert _kc().check_extend(prefix, ext, h, hkv, d, **kw, **BF16, seed=12) < TOL


def test_fused_ops_cuda() -> None:
    kc = _kc()
    assert kc.check_rmsnorm(1000, 4096, residual=False, **BF16) < TOL
    assert kc.check_rmsnorm(257, 4096, residual=True, **BF16) < TOL
    assert kc.check_rmsnorm(33, 576, residual=True, **BF16) < TOL
    assert kc.check_silu_and_mul(517, 14336, **BF16) < TOL
    assert kc.check_rotary(1000, 32, 8, 128, **BF16) < TOL
    assert kc.check_rotary(100, 9, 3, 64, **BF16) < TOL
    assert kc.check_store_kv(1000, 8, 128, **BF16) == 0.0
    assert kc.check_store_kv(77, 3, 64, strided=False, **BF16) == 0.0
    assert kc.check_rotary_store(300, 32, 8, 128, **BF16) < TOL
    assert kc.check_rotary_store(17, 9, 3, 64, **BF16) < TOL
    assert (
        kc.check_rotary_store(
            64, 32, 8, 128, kv_dtype=torch.float8_e4m3fn, k_scale=0.5, v_scale=2.0, **BF16
        )
        < 0.1
    )


def test_race_argmax_cuda() -> None:
    """The fused sampler race picks the torch sampler's ids at a real vocabulary (tl.log may differ from
    torch's log by an ulp; with continuous random rows a flip would need a sub-ulp near-tie)."""
    kc = _kc()
    assert kc.check_race(64, 128256, device="cuda") == 0.0
    assert kc.check_race(1, 151936, kind="filtered", device="cuda") == 0.0
    assert kc.check_race(3, 49152, kind="strided", device="cuda") == 0.0
    assert kc.check_race(2, 32000, kind="zeros", device="cuda") == 0.0


def test_greedy_argmax_cuda() -> None:
    """The fused greedy pick equals the torch rule at real vocabularies, incl. ties, NaN / inf and dead rows."""
    kc = _kc()
    assert kc.check_greedy(1, 128256, device="cuda") == 0.0
    assert kc.check_greedy(64, 151936, dtype=torch.bfloat16, device="cuda") == 0.0
    assert kc.check_greedy(7, 49152, kind="ties", device="cuda") == 0.0
    assert kc.check_greedy(9, 32000, kind="special", device="cuda") == 0.0


def test_sampler_kernels_one_variant_per_vocabulary() -> None:
    """Prefill batches come in every size: after the first call, no batch size compiles another
    variant of the greedy or race kernels (a compile mid-serving stalls every request)."""
    from sglang.srt.layers.triton_ops.sampling import greedy_argmax, race_argmax
    from sglang.srt.utils import jit_watch

    if not jit_watch.install():
        pytest.skip("this Triton has no JIT hooks")
    vocab = 128256
    hashes = torch.arange(64, device="cuda", dtype=torch.int64)

    def run(bs: int) -> None:
        x = torch.randn((bs, vocab), device="cuda")
        greedy_argmax(x)
        race_argmax(x.softmax(-1), hashes[:bs])

    run(1)
    torch.cuda.synchronize()
    before = jit_watch.compile_counts()
    for bs in (2, 3, 5, 7, 9, 13, 33, 64):
        run(bs)
    torch.cuda.synchronize()
    assert jit_watch.compile_counts() == before


def test_decode_cuda_graph_replay() -> None:
    """Capture once, then replay with new lengths, new slot tables and new split counts."""
    from sglang.srt.layers.attention.triton_ops.decode_attention import (
        compute_num_kv_splits,
        decode_attention_fwd,
        decode_attention_ref,
    )

    kc = _kc()
    bs, h, hkv, d, max_splits = 8, 32, 8, 128, 16
    max_len, dev = 3000, "cuda"
    gen = torch.Generator().manual_seed(5)
    # One pool big enough for every round; each round draws its own lengths and slot tables.
    pb = kc.make_paged_batch([max_len] * bs, hkv, d, d, torch.bfloat16, dev, gen, extra_slots=0)
    q = torch.empty((bs, h, d), **BF16)
    o = torch.empty((bs, h, d), **BF16)
    seq_lens = torch.empty(bs, dtype=torch.int64, device=dev)
    nks = torch.empty(bs, dtype=torch.int32, device=dev)
    logits = torch.empty((bs, h, max_splits, d), dtype=torch.float32, device=dev)
    lse = torch.empty((bs, h, max_splits), dtype=torch.float32, device=dev)
    scale = 1.0 / math.sqrt(d)

    def step():
        compute_num_kv_splits(seq_lens, h, hkv, max_splits, out=nks)
        decode_attention_fwd(
            q,
            pb.k_buffer,
            pb.v_buffer,
            o,
            pb.req_to_token,
            pb.req_pool_indices,
            seq_lens,
            logits,
            lse,
            nks,
            max_splits,
            scale,
        )

    def new_round(i: int) -> None:
        g = torch.Generator().manual_seed(100 + i)
        seq_lens.copy_(torch.randint(1, max_len + 1, (bs,), generator=g))
        q.copy_(torch.randn((bs, h, d), generator=g).to(torch.bfloat16))
        # Shuffle each row's slot order so the graph must follow req_to_token, not a cached layout.
        rows = pb.req_pool_indices.tolist()
        for r in rows:
            perm = torch.randperm(max_len, generator=g).to(dev)
            pb.req_to_token[r, :max_len] = pb.req_to_token[r, :max_len][perm]

    new_round(0)
    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    seen_splits = set()
    for i in range(1, 4):
        new_round(i)
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        seen_splits.update(nks.tolist())
        ref = decode_attention_ref(
            q, pb.k_buffer, pb.v_buffer, pb.req_to_token, pb.req_pool_indices, seq_lens, scale
        )
        assert kc.rel_err(o, ref) < TOL, f"round {i}"
    assert len(seen_splits) > 1, "the replays should have exercised different split counts"


def test_gemv_cuda() -> None:
    """The skinny matmul at Llama-3-8B decode shapes (its tuned configs) and with row / K tails."""
    kc = _kc()
    for m in (1, 2, 3, 4):
        for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)):
            assert kc.check_gemv(m, n, k, seed=m, **BF16) < TOL, (m, n, k)
    assert kc.check_gemv(1, 1000, 900, bias=True, seed=7, **BF16) < TOL
    assert (
        kc.check_gemv(
            3, 37, 4100, config=dict(BLOCK_N=16, BLOCK_K=1024, num_warps=8), seed=8, **BF16
        )
        < TOL
    )


def test_small_m_cuda() -> None:
    """The tensor-core small-M matmul at Llama-3-8B decode shapes for every BLOCK_M, both loop shapes,
    with bias and with N / K tails."""
    kc = _kc()
    for m in (2, 8, 17, 33, 64):
        for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)):
            for prefetch in (0, 1):
                cfg = dict(PREFETCH=prefetch, num_stages=4 if prefetch == 0 else 1)
                assert kc.check_small_m(m, n, k, config=cfg, seed=m, **BF16) < TOL, (
                    m,
                    n,
                    k,
                    prefetch,
                )
    assert kc.check_small_m(5, 1000, 900, bias=True, seed=7, **BF16) < TOL
    assert (
        kc.check_small_m(
            64, 37, 4100, config=dict(BLOCK_N=64, BLOCK_K=256, num_stages=3), seed=8, **BF16
        )
        < TOL
    )


def test_pdl_chain_in_graph_equals_plain() -> None:
    """Dependent kernels launched with PDL inside a CUDA graph give bit-identical results to the
    same kernels launched plainly: a kernel that read its input before the previous one finished
    would show up as a difference (fresh inputs on every replay, torch ops mixed in)."""
    from sglang.srt.layers.triton_ops import activation, pdl, rms_norm
    from sglang.srt.layers.triton_ops.gemv import gemv

    if not pdl.pdl_on(torch.empty(1, device="cuda")):
        pytest.skip("PDL needs sm_90+")
    g = torch.Generator(device="cuda").manual_seed(3)
    hid, inter = 4096, 2048
    ws = [
        (
            torch.randn(hid, generator=g, device="cuda").to(torch.bfloat16),
            (torch.randn(2 * inter, hid, generator=g, device="cuda") * 0.02).to(torch.bfloat16),
            (torch.randn(hid, inter, generator=g, device="cuda") * 0.02).to(torch.bfloat16),
        )
        for _ in range(4)
    ]

    def chain(x: torch.Tensor) -> torch.Tensor:
        residual = x.clone()
        h = x
        for norm_w, up, down in ws:
            h = rms_norm.fused_add_rmsnorm(h, residual, norm_w, 1e-5)
            h = gemv(activation.silu_and_mul(gemv(h, up)), down)
            h = h * 0.5  # a plain torch kernel between PDL kernels
        return h + residual

    inputs = [torch.randn(2, hid, generator=g, device="cuda").to(torch.bfloat16) for _ in range(5)]
    before = pdl._ENABLED
    try:
        pdl.set_pdl(False)
        plain = [chain(x) for x in inputs]
        pdl.set_pdl(True)
        static = inputs[0].clone()
        chain(static)  # compile the PDL variants outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = chain(static)
        for x, ref in zip(inputs, plain):
            static.copy_(x)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, ref)
    finally:
        pdl.set_pdl(before)
