"""FP8 x FP8 matmul on tensor cores with the scales applied in the kernel: y = (a * sa) @ (w * sw)^T.

Both operands arrive as float8_e4m3fn, so tl.dot runs them on the FP8 tensor-core path with no
conversion in registers (widening one byte per weight costs more than reading it at decode sizes).
Two scale layouts:

- per channel (online `--quantization fp8`): sa [M] per token, sw [N] per output channel. The
  product of scales is constant along K, so it multiplies the fp32 sums once at the end.
- block (FP8 checkpoints, `weight_scale_inv`): sw [ceil(N/bn), ceil(K/bk)] per weight block and sa
  [M, ceil(K/bk)] per token and K group (the activations are quantized per 128-wide group to match).
  The scales change along K, so each K step of exactly bk columns is scaled before it is summed.

Each program owns a BLOCK_M x BLOCK_N tile of y and walks all of K; rows and columns past M / N
read the last valid one (never stored), so only K needs a mask.

`fp8_matmul_fused` takes the activations in their own precision instead and quantizes each
(row, K tile) in registers with its own scale, applied to that tile's sums: no quantization
kernel and no fp8 copy of x. For decode batches that second launch per matmul costs more than the
tile's extra max / divide, and the per-tile scales are finer than per-token ones. One row (batch-1
decode) quantizes the row once per tile and broadcasts it to the mma's 16 rows.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.layers.quantization.fp8_math import FP8_MAX
from sglang.srt.layers.triton_ops.gemv import load_config_override
from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait


@triton.jit
def _to_e4m3(v, dtype, GRID_ROUND: tl.constexpr):
    """v (fp32, |v| <= 448) as e4m3. GRID_ROUND first rounds v to the e4m3 grid in fp32 (nearest,
    ties to even), so the conversion itself is exact: Triton's interpreter converts values that
    round up into the next binade to half their value; the GPU's conversion needs no help."""
    if GRID_ROUND:
        bits = v.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -0x100000  # keep 3 mantissa bits
        normal = bits.to(tl.float32, bitcast=True)
        sub = (v + 24576.0) - 24576.0  # 1.5 * 2^14: fp32 addition rounds to multiples of 2^-9
        v = tl.where(tl.abs(v) < 0.015625, sub, normal)  # e4m3 subnormals: below 2^-6
    return v.to(dtype)


@triton.jit
def _quantized_tile(
    row_ptrs,
    tile_ptrs,
    kmask,
    dtype,
    BLOCK_M: tl.constexpr,
    ONE_ROW: tl.constexpr,
    FP8_MAX_C: tl.constexpr,
    GRID_ROUND: tl.constexpr,
):
    """(the [BLOCK_M, BLOCK_K] activation tile as e4m3, its scales): one per row ([BLOCK_M, 1]),
    or with ONE_ROW the single row quantized once (a scalar scale) and broadcast to BLOCK_M rows."""
    if ONE_ROW:
        x = tl.load(row_ptrs, mask=kmask, other=0.0).to(tl.float32)
        s = tl.maximum(tl.max(tl.abs(x), 0) / FP8_MAX_C, 1e-12)
        q = _to_e4m3(tl.clamp(x / s, -FP8_MAX_C, FP8_MAX_C), dtype, GRID_ROUND)
        q = tl.broadcast_to(q[None, :], (BLOCK_M, q.shape[0]))
    else:
        x = tl.load(tile_ptrs, mask=kmask[None, :], other=0.0).to(tl.float32)
        s = tl.maximum(tl.max(tl.abs(x), 1) / FP8_MAX_C, 1e-12)[:, None]
        q = _to_e4m3(tl.clamp(x / s, -FP8_MAX_C, FP8_MAX_C), dtype, GRID_ROUND)
    return q, s


@triton.jit
def _fp8_mm_kernel(
    a_ptr,
    sa_ptr,
    w_ptr,
    sw_ptr,
    b_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_am,
    stride_wn,
    stride_ym,
    stride_sam,
    stride_swn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SCALE_BN: tl.constexpr,
    BLOCKWISE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    QUANT_A: tl.constexpr,  # a is high precision, quantized per (row, K tile) here
    ONE_ROW: tl.constexpr,  # with QUANT_A and M == 1: quantize the row once, broadcast to BLOCK_M
    FP8_MAX_C: tl.constexpr,
    GRID_ROUND: tl.constexpr,
    PDL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.minimum(rm, M - 1).to(tl.int64)
    cols = tl.minimum(rn, N - 1).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None] * stride_am + rk[None, :]  # [BLOCK_M, BLOCK_K]
    w_tile = w_ptr + cols[None, :] * stride_wn + rk[:, None]  # W^T tile [BLOCK_K, BLOCK_N]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    pdl_wait(PDL)  # a is the previous kernel's output
    for k0 in range(0, K, BLOCK_K):
        kmask = (k0 + rk) < K
        w = tl.load(w_tile + k0, mask=kmask[:, None], other=0.0)
        if QUANT_A:
            a, sa = _quantized_tile(
                a_ptr + k0 + rk,
                a_tile + k0,
                kmask,
                w.dtype,
                BLOCK_M,
                ONE_ROW,
                FP8_MAX_C,
                GRID_ROUND,
            )
        else:
            a = tl.load(a_tile + k0, mask=kmask[None, :], other=0.0)
        if QUANT_A or BLOCKWISE:  # scales that change along K: each K step is scaled, then summed
            part = tl.dot(a, w)
            if QUANT_A:
                part *= sa
            else:
                part *= tl.load(sa_ptr + rows * stride_sam + k0 // BLOCK_K)[:, None]
            if BLOCKWISE:
                part *= tl.load(sw_ptr + (cols // SCALE_BN) * stride_swn + k0 // BLOCK_K)[None, :]
            acc += part
        else:
            acc = tl.dot(a, w, acc)
    if not BLOCKWISE:
        acc *= tl.load(sw_ptr + cols)[None, :]
        if not QUANT_A:
            acc *= tl.load(sa_ptr + rows * stride_sam)[:, None]
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(
        y_ptr + rm[:, None] * stride_ym + rn[None, :],
        acc.to(y_ptr.dtype.element_ty),
        mask=(rm < M)[:, None] & (rn < N)[None, :],
    )


def block_m_for(m: int) -> int:
    """Rows per tile: 16 (the smallest FP8 mma) for decode batches, 64 up to 64 rows, then 128."""
    return 16 if m <= 16 else (64 if m <= 64 else 128)


# Small M (decode) wants many narrow column tiles so every SM streams weights; large M (prefill)
# wants square tiles for reuse.
DEFAULT_CONFIGS: Dict[int, dict] = {
    16: {"BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    64: {"BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    128: {"BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 8, "num_stages": 3},
}
# (N, K, BLOCK_M) for channel scales, (N, K, BLOCK_M, block width) for block scales -> the
# measured tile (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): benchmark/kernels/
# bench_fp8_matmul.py --out on the H200, Llama-3-8B shapes, the tiles that beat the default path
# there. SGLANG_FP8_GEMM_CONFIGS=<json file> adds or replaces entries.
# fmt: off
_TUNED: Dict[Tuple[int, ...], Tuple[int, int, int, int, int]] = {
    (4096, 4096, 16): (16, 32, 256, 4, 5),
    (4096, 4096, 16, 128): (16, 32, 128, 4, 5),
    (4096, 4096, 64): (64, 32, 256, 4, 5),
    (4096, 4096, 64, 128): (64, 32, 128, 4, 5),
    (4096, 4096, 128): (64, 128, 128, 4, 5),
    (4096, 4096, 128, 128): (64, 128, 128, 4, 5),
    (4096, 14336, 16): (16, 32, 256, 4, 5),
    (4096, 14336, 16, 128): (16, 32, 128, 4, 5),
    (4096, 14336, 64): (64, 32, 256, 4, 5),
    (4096, 14336, 64, 128): (64, 32, 128, 4, 5),
    (4096, 14336, 128): (64, 64, 128, 4, 5),
    (4096, 14336, 128, 128): (64, 128, 128, 4, 5),
    (6144, 4096, 16): (16, 64, 256, 4, 5),
    (6144, 4096, 64): (64, 64, 256, 4, 5),
    (6144, 4096, 64, 128): (64, 64, 128, 4, 5),
    (6144, 4096, 128, 128): (64, 128, 128, 4, 3),
    (28672, 4096, 16): (16, 128, 128, 4, 3),
    (28672, 4096, 16, 128): (16, 128, 128, 4, 5),
    (28672, 4096, 64): (64, 64, 128, 4, 3),
    (28672, 4096, 64, 128): (64, 128, 128, 4, 3),
    (28672, 4096, 128, 128): (64, 128, 128, 4, 3),
}
# fmt: on
_FIELDS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
CONFIGS: Dict[Tuple[int, ...], dict] = {k: dict(zip(_FIELDS, v)) for k, v in _TUNED.items()}
load_config_override("SGLANG_FP8_GEMM_CONFIGS", CONFIGS)


def _config_key(m: int, n: int, k: int, block: Optional[Tuple[int, int]]) -> Tuple[int, ...]:
    bm = block_m_for(m)
    return (n, k, bm) if block is None else (n, k, bm, block[1])


def has_tuned_config(m: int, n: int, k: int, block: Optional[Tuple[int, int]] = None) -> bool:
    return _config_key(m, n, k, block) in CONFIGS


def _default_config(m: int, n: int = 0, k: int = 0, block=None) -> dict:
    bm = block_m_for(m)
    return {"BLOCK_M": bm, **CONFIGS.get(_config_key(m, n, k, block), DEFAULT_CONFIGS[bm])}


def fp8_matmul(
    a: torch.Tensor,
    sa: torch.Tensor,
    w: torch.Tensor,
    sw: torch.Tensor,
    out_dtype: torch.dtype,
    block: Optional[Tuple[int, int]] = None,
    bias: Optional[torch.Tensor] = None,
    config: Optional[dict] = None,
) -> torch.Tensor:
    """a [M, K] fp8 with sa ([M] or [M, 1] per token; [M, ceil(K/bk)] when block), w [N, K] fp8 with
    sw ([N] per channel; [ceil(N/bn), ceil(K/bk)] for block = (bn, bk)) -> y [M, N] out_dtype."""
    return _launch(a, sa, w, sw, out_dtype, block, bias, config, quant_a=False)


def _launch(
    a: torch.Tensor,
    sa: Optional[torch.Tensor],
    w: torch.Tensor,
    sw: torch.Tensor,
    out_dtype: torch.dtype,
    block: Optional[Tuple[int, int]],
    bias: Optional[torch.Tensor],
    config: Optional[dict],
    quant_a: bool,
) -> torch.Tensor:
    m, k = a.shape
    n = w.shape[0]
    assert w.shape[1] == k and a.stride(1) == 1 and w.stride(1) == 1
    cfg = dict(_default_config(m, n, k, block), **(config or {}))
    if block is not None:
        scale_bn, block_k = block
        sw2 = sw.reshape(-1, triton.cdiv(k, block_k))
    else:
        scale_bn, block_k = 1, cfg["BLOCK_K"]
        sw2 = sw.reshape(n, 1)
    # The fused kernel computes its activation scales; sa2 is then a placeholder it never reads.
    sa2 = sw2 if sa is None else sa.reshape(m, -1)
    y = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0:
        return y
    grid = (triton.cdiv(m, cfg["BLOCK_M"]), triton.cdiv(n, cfg["BLOCK_N"]))
    _fp8_mm_kernel[grid](
        a,
        sa2,
        w,
        sw2,
        bias if bias is not None else y,
        y,
        m,
        n,
        k,
        a.stride(0),
        w.stride(0),
        y.stride(0),
        sa2.stride(0),
        sw2.stride(0),
        BLOCK_M=cfg["BLOCK_M"],
        BLOCK_N=cfg["BLOCK_N"],
        BLOCK_K=block_k,
        SCALE_BN=scale_bn,
        BLOCKWISE=block is not None,
        HAS_BIAS=bias is not None,
        QUANT_A=quant_a,
        ONE_ROW=quant_a and m == 1,
        FP8_MAX_C=FP8_MAX,
        GRID_ROUND=not a.is_cuda,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
        **pdl_args(a),
    )
    return y


def fp8_matmul_fused(
    x: torch.Tensor,
    w: torch.Tensor,
    sw: torch.Tensor,
    block: Optional[Tuple[int, int]] = None,
    bias: Optional[torch.Tensor] = None,
    config: Optional[dict] = None,
) -> torch.Tensor:
    """x [M, K] (bf16 / fp16 / fp32) @ (w [N, K] fp8 with sw per channel or per block)^T -> [M, N]
    in x.dtype, x quantized per (row, K tile) inside the kernel (tiles of the block width when
    block is given)."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    return _launch(x, None, w, sw, x.dtype, block, bias, config, quant_a=True)
