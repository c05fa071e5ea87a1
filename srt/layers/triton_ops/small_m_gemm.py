"""Matrix products with few rows (2 <= M <= 64): y = x @ W^T (+ bias), for decode at batch 2-64.

At batch 64 a Llama-3-8B decode step spends about 60% of its time in the four per-layer matmuls,
and cuBLAS reaches only 65-88% of copy bandwidth on them (H200, M = 64: qkv 17.0 us vs a 12.0 us
floor, o_proj 12.4 vs 8.0, gate_up 63.6 vs 55.8, down 33.9 vs 27.9); its kernels also cannot take
part in programmatic dependent launch, so each one ramps up only after the previous kernel drained.

Each program owns BLOCK_N output columns for all M rows and walks K: W^T tiles [BLOCK_K, BLOCK_N]
stream from memory once, x tiles [BLOCK_M, BLOCK_K] come from L2 (x is small and shared by every
program), and tl.dot runs them on tensor cores with fp32 accumulation. Two loop shapes:
PREFETCH = 0 leaves the pipelining to Triton (num_stages buffers in shared memory, loads issued
after the PDL wait); PREFETCH = 1 loads the first weight tile before the PDL wait (weights never
depend on the previous kernel) and keeps one tile in flight in registers, like the GEMV.

Configs per (N, K, BLOCK_M) come from `benchmark/kernels/bench_small_m.py` (which writes only shapes
where the kernel beat cuBLAS); `--skinny-matmul auto` uses the kernel for listed shapes only, and
`triton` for every shape. SGLANG_SMALL_M_CONFIGS=<json file> adds or replaces entries.

Not on by default: a shape is listed only when the kernel makes the whole decode step faster, not
just the matmul in isolation (tiles that win alone can lose inside the step, where they compete with
the other kernels); no shape has passed that test yet, so CONFIGS is empty and auto keeps cuBLAS for
2-64 rows (benchmark/RESULTS.md has the measurements).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.gemv import gemv, load_config_override
from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait

MAX_M = 64


@triton.jit
def _small_m_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PREFETCH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PDL: tl.constexpr,
    s_ptr=None,
    SCALED: tl.constexpr = False,
):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    # Columns past N read column N-1 (in bounds, never stored): the weight loads need only the K mask.
    cols = tl.minimum(rn, N - 1).to(tl.int64)
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    mask_m = rm < M
    w_tile = w_ptr + cols[None, :] * stride_wn + rk[:, None]  # W^T tile [BLOCK_K, BLOCK_N]
    x_tile = x_ptr + rm[:, None] * stride_xm + rk[None, :]  # x tile [BLOCK_M, BLOCK_K]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if PREFETCH:
        w = tl.load(w_tile, mask=(rk < K)[:, None], other=0.0)
        pdl_wait(PDL)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + rk
            x = tl.load(x_tile + k0, mask=mask_m[:, None] & (kk < K)[None, :], other=0.0)
            nk = kk + BLOCK_K  # next tile issued before this tile's math (the last is fully masked)
            w_next = tl.load(w_tile + k0 + BLOCK_K, mask=(nk < K)[:, None], other=0.0)
            acc = tl.dot(x, w.to(x.dtype), acc)  # fp8 weights widen in registers (packed converts)
            w = w_next
    else:
        pdl_wait(PDL)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + rk
            x = tl.load(x_tile + k0, mask=mask_m[:, None] & (kk < K)[None, :], other=0.0)
            w = tl.load(w_tile + k0, mask=(kk < K)[:, None], other=0.0)
            acc = tl.dot(x, w.to(x.dtype), acc)
    if SCALED:  # fp8 weights: one scale per output column, applied to the sums
        acc *= tl.load(s_ptr + cols).to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(
        y_ptr + rm[:, None] * stride_ym + rn[None, :],
        acc.to(y_ptr.dtype.element_ty),
        mask=mask_m[:, None] & (rn < N)[None, :],
    )


DEFAULT_CONFIG = {"BLOCK_N": 32, "BLOCK_K": 128, "PREFETCH": 0, "num_warps": 4, "num_stages": 4}
# (N, K, BLOCK_M) -> launch config for `auto`; empty (see the module note): auto keeps cuBLAS. The run-8
# sweep's tiles are in benchmark/results/h200/small-m-configs-run8.json.
CONFIGS: Dict[Tuple[int, int, int], dict] = {}


load_config_override("SGLANG_SMALL_M_CONFIGS", CONFIGS)


def block_m_for(m: int) -> int:
    """Rows per tile: tl.dot needs at least 16."""
    return max(16, triton.next_power_of_2(m))


def has_config(n: int, k: int, m: int) -> bool:
    return (n, k, block_m_for(m)) in CONFIGS


def small_m_matmul(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    config: Optional[dict] = None,
    w_scale: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """x [M, K] (M <= MAX_M, half precision, rows contiguous in K), w [N, K] contiguous -> [M, N].
    An fp8 w carries w_scale [N] float32 (one per output row): x @ (w * scale)^T."""
    m, k = x.shape
    n = w.shape[0]
    assert 1 <= m <= MAX_M and w.shape[1] == k and w.stride(1) == 1 and x.stride(1) == 1
    bm = block_m_for(m)
    cfg = dict(CONFIGS.get((n, k, bm), DEFAULT_CONFIG), **(config or {}))
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, cfg["BLOCK_N"]),)
    _small_m_kernel[grid](
        x,
        w,
        bias if bias is not None else w,
        y,
        m,
        n,
        k,
        x.stride(0),
        w.stride(0),
        y.stride(0),
        BLOCK_M=bm,
        BLOCK_N=cfg["BLOCK_N"],
        BLOCK_K=cfg["BLOCK_K"],
        PREFETCH=cfg["PREFETCH"],
        HAS_BIAS=bias is not None,
        s_ptr=w_scale,
        SCALED=w_scale is not None,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
        **pdl_args(x),
    )
    return y


class SkinnyMatmul:
    """The matmul bound by `--skinny-matmul` for inputs of at most MAX_M rows: the GEMV for one row,
    this kernel for 2..MAX_M rows of half-precision inputs (every shape when all_shapes, else only
    the measured ones); None means "use F.linear"."""

    max_m = MAX_M

    def __init__(self, all_shapes: bool):
        self.all_shapes = all_shapes

    def __call__(
        self, x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor]
    ) -> Optional[torch.Tensor]:
        m = x.shape[0]
        if m == 1:
            return gemv(x, w, bias)
        if (
            m == 0
            or x.dtype not in (torch.bfloat16, torch.float16)
            or w.dtype != x.dtype
            or w.stride(1) != 1
        ):
            return None
        if self.all_shapes or has_config(w.shape[0], w.shape[1], m):
            return small_m_matmul(x, w, bias)
        return None
