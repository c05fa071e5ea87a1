"""TritonAttnBackend on CUDA against the torch-native backend on the same random pools.

Each check draws fresh random K/V (bf16 or fp8), a shuffled slot layout and fresh queries; requests
mix cached prefixes and new tokens. References run in the torch-native backend (fp32 math on the
same pool); pass means ||out - ref|| / ||ref|| below the tolerance.
"""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace
from typing import List

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

_SEEDS = itertools.count(1000)  # every check gets its own data


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return math.inf
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


class _Setup:
    """Pools, a RadixAttention layer and both backends for one head configuration."""

    def __init__(
        self,
        h: int,
        hkv: int,
        d: int,
        kv_dtype: torch.dtype,
        slots: int = 120000,
        rows: int = 64,
        ctx: int = 8192,
        device: str = "cuda",
    ):
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

        cfg = SimpleNamespace(num_attention_heads=h, head_dim=d, kv_heads_per_rank=lambda tp: hkv)
        runner = SimpleNamespace(model_config=cfg, device=device, gpu_id=0, tp_size=1)
        self.h, self.hkv, self.d, self.device = h, hkv, d, device
        self.pool = MHATokenToKVPool(slots, 1, kv_dtype, hkv, d, 1, device)
        self.r2t = ReqToTokenPool(rows, ctx, device)
        self.layer = RadixAttention(h, d, d**-0.5, hkv, 0)
        self.triton = TritonAttnBackend(runner, num_sms=None if device == "cuda" else 4)
        self.native = TorchNativeAttnBackend()
        seed = next(_SEEDS)
        self.gen = torch.Generator().manual_seed(seed)
        self.cgen = torch.Generator(device=device).manual_seed(seed)

    def fill_pool(self) -> None:
        kb, vb = self.pool.k_buffer[0], self.pool.v_buffer[0]
        for buf in (kb, vb):
            buf.copy_(torch.randn(buf.shape, generator=self.cgen, device=self.device).to(buf.dtype))

    def layout(self, seq_lens: List[int]) -> List[int]:
        """Rows of requests whose positions sit in random distinct slots (never slot 0)."""
        perm = torch.randperm(self.pool.size, generator=self.gen)[: sum(seq_lens)] + 1
        rows = (torch.randperm(self.r2t.size, generator=self.gen)[: len(seq_lens)] + 1).tolist()
        at = 0
        for row, n in zip(rows, seq_lens):
            self.r2t.write(row, 0, perm[at : at + n])
            at += n
        return rows

    def run(
        self, fb, new_tokens: int, act_dtype: torch.dtype = torch.bfloat16, prestore: bool = False
    ):
        """Both backends on the same inputs. prestore: the pool's own store writes the new K/V first and
        the backends skip theirs, so both read bit-identical pools (fp8 stores may round differently)."""

        def rnd(width):
            return (
                torch.randn((new_tokens, width), generator=self.gen).to(act_dtype).to(self.device)
            )

        q, k, v = rnd(self.h * self.d), rnd(self.hkv * self.d), rnd(self.hkv * self.d)
        fb.req_to_token_pool, fb.token_to_kv_pool = self.r2t, self.pool
        if prestore:
            self.pool.set_kv_buffer(
                0, fb.out_cache_loc, k.view(-1, self.hkv, self.d), v.view(-1, self.hkv, self.d)
            )
        outs = []
        for be in (self.triton, self.native):
            fb.attn_backend = be
            be.init_forward_metadata(fb)
            outs.append(self.layer(q, k, v, fb, save_kv_cache=not prestore).float())
        return outs


def _extend_batch(s: _Setup, prefix: List[int], ext: List[int]):
    from sglang.srt.core.forward_batch_info import build_extend_batch

    rows = s.layout([p + e for p, e in zip(prefix, ext)])
    locs = torch.cat([s.r2t.read(r, p, p + e) for r, p, e in zip(rows, prefix, ext)])
    ids = [0] * sum(ext)
    return build_extend_batch(ids, prefix, ext, rows, locs, s.device)


def _decode_batch(s: _Setup, seq_lens: List[int]):
    from sglang.srt.core.forward_batch_info import build_decode_batch

    rows = s.layout(seq_lens)
    locs = torch.stack([s.r2t.read(r, n - 1, n)[0] for r, n in zip(rows, seq_lens)])
    return build_decode_batch(
        torch.zeros(len(rows), dtype=torch.int64), seq_lens, rows, locs, s.device
    )


HEADS = {
    "llama3-8b 32/8 D128": (32, 8, 128),
    "qwen3-0.6b 16/8 D128": (16, 8, 128),
    "smollm 9/3 D64": (9, 3, 64),
}


@pytest.mark.parametrize("heads", list(HEADS))
def test_extend_matches_torch_native(heads: str) -> None:
    s = _Setup(*HEADS[heads], torch.bfloat16)
    s.fill_pool()
    fb = _extend_batch(s, [0, 700, 33, 2000, 5], [512, 1, 300, 64, 1200])
    tri, ref = s.run(fb, fb.extend_num_tokens)
    assert _rel(tri, ref) < 1e-2


@pytest.mark.parametrize("heads", list(HEADS))
def test_decode_matches_torch_native(heads: str) -> None:
    s = _Setup(*HEADS[heads], torch.bfloat16)
    s.fill_pool()
    g = torch.Generator().manual_seed(next(_SEEDS))
    lens = torch.randint(1, 4000, (40,), generator=g).tolist() + [1, 7000]
    fb = _decode_batch(s, lens)
    tri, ref = s.run(fb, len(lens))
    assert _rel(tri, ref) < 1e-2


@pytest.mark.parametrize("mode", ["extend", "decode"])
def test_fp8_pool_matches_torch_native_and_bf16(mode: str) -> None:
    """The fp8 pool with non-unit scales: the Triton kernels read the same fp8 values as the torch
    reference (which dequantises the gathered rows), and store_kv quantises like the pool does."""
    s = _Setup(32, 8, 128, torch.float8_e4m3fn)
    s.pool.k_scale, s.pool.v_scale = [0.37], [1.9]
    s.fill_pool()
    if mode == "extend":
        fb = _extend_batch(s, [0, 900, 40], [300, 17, 600])
        n = fb.extend_num_tokens
    else:
        fb = _decode_batch(s, [1, 300, 2500, 64, 4000])
        n = fb.batch_size
    tri, ref = s.run(fb, n, prestore=True)
    # Extend: Triton attends to the new tokens' unquantised K/V, the torch path to the pool's fp8 copy.
    assert _rel(tri, ref) < (5e-2 if mode == "extend" else 1e-2)


def test_store_kv_fp8_matches_pool_cast() -> None:
    from sglang.srt.layers.triton_ops.kv_store import store_kv

    s = _Setup(32, 8, 128, torch.float8_e4m3fn, slots=5000)
    s.pool.k_scale, s.pool.v_scale = [0.5], [3.0]
    k = torch.randn((777, 8, 128), generator=s.gen).to(torch.bfloat16).cuda()
    v = torch.randn((777, 8, 128), generator=s.gen).to(torch.bfloat16).cuda()
    loc = (torch.randperm(5000, generator=s.gen)[:777] + 1).cuda()
    s.pool.set_kv_buffer(0, loc, k, v)
    ref_k, ref_v = s.pool.k_buffer[0][loc].float(), s.pool.v_buffer[0][loc].float()
    kb, vb = torch.zeros_like(s.pool.k_buffer[0]), torch.zeros_like(s.pool.v_buffer[0])
    store_kv(kb, vb, loc, k, v, 0.5, 3.0)
    # Same quantiser up to rounding ties / saturation: at most one e4m3 step apart, nearly always equal.
    assert _rel(kb[loc].float(), ref_k) < 2e-2 and _rel(vb[loc].float(), ref_v) < 2e-2
    # The pool divides in bf16 then casts (two roundings), the kernel scales in fp32 (one).
    assert (kb[loc].float() == ref_k).float().mean().item() > 0.95
