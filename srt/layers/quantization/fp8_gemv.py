"""One-row FP8 GEMV (batch-1 decode): y = x @ (w * scale)^T with w float8_e4m3fn read 4 bytes a word.

Each 32-bit word of four e4m3 bytes is widened with integer shifts and masks: a byte's sign goes
to bit 31 and its exponent and mantissa to bits 20-26, which is the fp32 of the e4m3 value times
2^-120 (subnormals included: fp32 arithmetic here keeps denormals). The 2^120 folds into the
scale. Partial sums stay per lane across K and are reduced once at the end.

Scales: one per output row (applied to the sums once), or one per (bn, bk) block of an FP8
checkpoint, loaded per word (bk is a multiple of 4, so a word's bytes share a block) and applied
to its four products; the repeated loads hit L1, and tiles may span several K blocks. The
conversion-based GEMV (triton_ops/gemv.py) is as fast on per-channel weights but loads a block
scale per weight, which at one byte per weight costs more than the weight itself.
Tile configs per (N, K[, bk]) come from `benchmark/kernels/bench_gemv.py --fp8`
(FP8_CONFIGS; SGLANG_FP8_GEMV_CONFIGS=<json> adds entries).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.gemv import load_config_override
from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait


@triton.jit
def _byte_as_f32(word, SHIFT: tl.constexpr):
    """Byte SHIFT/8 of each uint32 word as fp32 (value * 2^-120)."""
    if SHIFT <= 20:
        mag = (word << (20 - SHIFT)) & 0x07F00000
    else:
        mag = (word >> (SHIFT - 20)) & 0x07F00000
    if SHIFT <= 24:
        sign = (word << (24 - SHIFT)) & 0x80000000
    else:
        sign = word & 0x80000000
    return (mag | sign).to(tl.float32, bitcast=True)


@triton.jit
def _fp8_gemv_kernel(
    x_ptr,
    w_ptr,  # [N, K / 4] int32 words of the fp8 weight
    s_ptr,
    b_ptr,
    y_ptr,
    N,
    KW,  # K / 4
    swn,  # row stride of w in words
    ssn,
    BLOCK_N: tl.constexpr,
    BLOCK_W: tl.constexpr,  # words per tile row (4 weights each)
    BLOCKWISE: tl.constexpr,
    SCALE_BN: tl.constexpr,
    SCALE_BK: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = rn < N
    rows = tl.minimum(rn, N - 1).to(tl.int64)
    rw = tl.arange(0, BLOCK_W)
    w_rows = w_ptr + rows[:, None] * swn
    word = tl.load(w_rows + rw[None, :], mask=(rw < KW)[None, :], other=0)
    pdl_wait(PDL)  # weights never depend on the kernel before; x does
    # Partial sums stay per lane across the loop; one cross-lane reduction at the end.
    acc = tl.zeros([BLOCK_N, BLOCK_W], dtype=tl.float32)
    for w0 in range(0, KW, BLOCK_W):
        ww = w0 + rw
        mw = ww < KW
        u = word.to(tl.uint32, bitcast=True)
        nw = ww + BLOCK_W  # next tile issued before this tile's math (the last is fully masked)
        word = tl.load(w_rows + nw[None, :], mask=(nw < KW)[None, :], other=0)
        xk = x_ptr + 4 * ww
        x0 = tl.load(xk, mask=mw, other=0.0).to(tl.float32)
        x1 = tl.load(xk + 1, mask=mw, other=0.0).to(tl.float32)
        x2 = tl.load(xk + 2, mask=mw, other=0.0).to(tl.float32)
        x3 = tl.load(xk + 3, mask=mw, other=0.0).to(tl.float32)
        part = _byte_as_f32(u, 0) * x0[None, :] + _byte_as_f32(u, 8) * x1[None, :]
        part += _byte_as_f32(u, 16) * x2[None, :] + _byte_as_f32(u, 24) * x3[None, :]
        if BLOCKWISE:  # one scale per word (its 4 bytes share a K block), from L1
            sk = (4 * ww) // SCALE_BK
            part *= tl.load(
                s_ptr + (rows // SCALE_BN)[:, None] * ssn + sk[None, :], mask=mw[None, :], other=0.0
            )
        acc += part
    y = tl.sum(acc, axis=1)
    if not BLOCKWISE:
        y *= tl.load(s_ptr + rows)
    y *= 1.329227995784916e36  # 2^120: the bias of _byte_as_f32
    if HAS_BIAS:
        y += tl.load(b_ptr + rn, mask=mn, other=0.0).to(tl.float32)
    tl.store(y_ptr + rn, y.to(y_ptr.dtype.element_ty), mask=mn)


DEFAULT_CONFIG = {"BLOCK_N": 8, "BLOCK_W": 128, "num_warps": 4}
# (N, K) for per-channel scales, (N, K, bk) for block scales -> (BLOCK_N, BLOCK_W, num_warps):
# the best tile of `bench_gemv.py --fp8` on the H200 (Llama-3-8B shapes).
# fmt: off
_TUNED: Dict[Tuple[int, ...], Tuple[int, int, int]] = {
    (6144, 4096): (8, 256, 8),
    (6144, 4096, 128): (8, 128, 4),
    (4096, 4096): (8, 256, 4),
    (4096, 4096, 128): (16, 256, 8),
    (28672, 4096): (8, 128, 4),
    (28672, 4096, 128): (32, 64, 4),
    (4096, 14336): (16, 256, 8),
    (4096, 14336, 128): (16, 256, 8),
}
# fmt: on
FP8_CONFIGS: Dict[Tuple[int, ...], dict] = {
    k: dict(zip(("BLOCK_N", "BLOCK_W", "num_warps"), v)) for k, v in _TUNED.items()
}
load_config_override("SGLANG_FP8_GEMV_CONFIGS", FP8_CONFIGS)


def supports(x: torch.Tensor, w: torch.Tensor) -> bool:
    """One contiguous row and a weight whose rows pack into whole, aligned 32-bit words."""
    return (
        x.shape[0] == 1
        and x.stride(-1) == 1
        and w.shape[1] % 4 == 0
        and w.stride(1) == 1
        and w.stride(0) % 4 == 0
        and w.data_ptr() % 4 == 0
    )


def fp8_gemv(
    x: torch.Tensor,
    w: torch.Tensor,
    scale: torch.Tensor,
    block: Optional[Tuple[int, int]] = None,
    bias: Optional[torch.Tensor] = None,
    config: Optional[dict] = None,
) -> torch.Tensor:
    """x [1, K], w [N, K] float8_e4m3fn, scale [N] (per channel) or [ceil(N/bn), ceil(K/bk)] with
    block = (bn, bk) -> [1, N] in x.dtype."""
    assert supports(x, w) and scale.dtype == torch.float32
    assert block is None or block[1] % 4 == 0, block  # a word's 4 bytes share one K block
    n, k = w.shape
    key = (n, k) if block is None else (n, k, block[1])
    cfg = dict(FP8_CONFIGS.get(key, DEFAULT_CONFIG), **(config or {}))
    scale = scale.contiguous()
    words = w.view(torch.int32)
    y = torch.empty((1, n), dtype=x.dtype, device=x.device)
    _fp8_gemv_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](
        x,
        words,
        scale,
        bias if bias is not None else y,
        y,
        n,
        k // 4,
        words.stride(0),
        scale.stride(0) if block is not None else 0,
        BLOCK_N=cfg["BLOCK_N"],
        BLOCK_W=cfg["BLOCK_W"],
        BLOCKWISE=block is not None,
        SCALE_BN=block[0] if block is not None else 1,
        SCALE_BK=block[1] if block is not None else 1,
        HAS_BIAS=bias is not None,
        num_warps=cfg["num_warps"],
        **({"num_stages": cfg["num_stages"]} if "num_stages" in cfg else {}),
        **pdl_args(x),
    )
    return y


# ------------------------------------------------------------------------------ half-precision math
@triton.jit
def _fp8_gemv_halves_kernel(
    x_ptr,
    w_ptr,  # [N, K] float8_e4m3fn
    s_ptr,  # [N] per-channel scales
    b_ptr,
    y_ptr,
    N,
    K,
    swn,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr,  # K tiles summed in fp16 before each fp32 flush
    PRESCALE: tl.constexpr,  # False only to time the prescale pass (products may overflow)
    HAS_BIAS: tl.constexpr,
    PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = rn < N
    rows = tl.minimum(rn, N - 1).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + rows[:, None] * swn
    w = tl.load(w_rows + rk[None, :], mask=(rk < K)[None, :], other=0.0)
    pdl_wait(PDL)  # weights never depend on the kernel before; x does
    amax = 1.0
    if PRESCALE:  # x / max|x| is in [-1, 1], so a product is at most 448 and GROUP sums fit fp16
        top = tl.zeros([BLOCK_K], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + rk
            xa = tl.abs(tl.load(x_ptr + kk, mask=kk < K, other=0.0).to(tl.float32))
            top = tl.maximum(top, xa)
        amax = tl.maximum(tl.max(top, 0), 1e-30)
    inv = 1.0 / amax
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K * GROUP):
        part = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float16)
        for g in tl.static_range(GROUP):
            kk = k0 + g * BLOCK_K + rk
            cur = w
            nk = kk + BLOCK_K  # the next tile is issued before this one's math
            w = tl.load(w_rows + nk[None, :], mask=(nk < K)[None, :], other=0.0)
            xh = (tl.load(x_ptr + kk, mask=kk < K, other=0.0).to(tl.float32) * inv).to(tl.float16)
            part += cur.to(tl.float16) * xh[None, :]
        acc += part.to(tl.float32)
    y = tl.sum(acc, axis=1) * (tl.load(s_ptr + rows) * amax)
    if HAS_BIAS:
        y += tl.load(b_ptr + rn, mask=mn, other=0.0).to(tl.float32)
    tl.store(y_ptr + rn, y.to(y_ptr.dtype.element_ty), mask=mn)


HALVES_DEFAULT = {"BLOCK_N": 8, "BLOCK_K": 512, "GROUP": 2, "num_warps": 4}
# (N, K) -> (BLOCK_N, BLOCK_K, GROUP, num_warps): the best tile of `bench_gemv.py --halves`.
# fmt: off
_HALVES_TUNED: Dict[Tuple[int, int], Tuple[int, int, int, int]] = {
    (6144, 4096): (16, 512, 2, 4),
    (4096, 4096): (8, 512, 4, 8),
    (28672, 4096): (16, 256, 2, 4),
    (4096, 14336): (8, 512, 4, 8),
}
# fmt: on
HALVES_CONFIGS: Dict[Tuple[int, ...], dict] = {
    k: dict(zip(("BLOCK_N", "BLOCK_K", "GROUP", "num_warps"), v)) for k, v in _HALVES_TUNED.items()
}
load_config_override("SGLANG_FP8_HALVES_CONFIGS", HALVES_CONFIGS)


def fp8_gemv_halves(
    x: torch.Tensor,
    w: torch.Tensor,
    scale: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    config: Optional[dict] = None,
) -> torch.Tensor:
    """x [1, K], w [N, K] float8_e4m3fn, scale [N] (per channel) -> [1, N] in x.dtype.

    The e4m3 pairs are widened to f16x2 by the hardware conversion, the products and GROUP
    partial sums per lane are packed fp16 math, flushed to fp32 once per group; x is divided by
    its max |x| first (and the sums multiplied back), so no fp16 product can overflow. Rounding:
    x to fp16 (2^-11 relative) and up to GROUP fp16 additions, far inside e4m3's own 2^-4."""
    assert x.shape[0] == 1 and x.stride(-1) == 1 and w.stride(1) == 1 and scale.dim() == 1
    n, k = w.shape
    cfg = dict(HALVES_CONFIGS.get((n, k), HALVES_DEFAULT), **(config or {}))
    y = torch.empty((1, n), dtype=x.dtype, device=x.device)
    _fp8_gemv_halves_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](
        x,
        w,
        scale.contiguous(),
        bias if bias is not None else y,
        y,
        n,
        k,
        w.stride(0),
        BLOCK_N=cfg["BLOCK_N"],
        BLOCK_K=cfg["BLOCK_K"],
        GROUP=cfg["GROUP"],
        PRESCALE=cfg.get("PRESCALE", True),
        HAS_BIAS=bias is not None,
        num_warps=cfg["num_warps"],
        **pdl_args(x),
    )
    return y
