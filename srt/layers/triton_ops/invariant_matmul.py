"""A batch-invariant matmul for --enable-deterministic-inference on CUDA: y = x @ w^T (+ bias).

cuBLAS picks its algorithm (tile shape, split-K) by the whole problem's shape, so one row's result
changes with the number of rows beside it. This kernel has one launch config for every shape: each
program owns a BLOCK_M x BLOCK_N output tile and sums K in BLOCK_K steps from 0, with tl.dot
accumulating in fp32, and never splits K. A row's output then depends only on that row and the
weights: tensor-core products compute each output element from its own row and column, rows past M
are masked to zeros, and the K order is the same whatever M is. The price is cuBLAS's choice of a
shape-tuned kernel (decode's narrow products get fewer programs than the device has SMs; prefill's
wide ones run in small tiles). Products of more than LARGE_M rows take large tiles where that is
known to give the small tiles' bits, so a row's result still does not depend on M: on sm_90 every
tile shape accumulates K in the same 16-wide tensor-core steps from 0 into fp32, and the H100 gave
equal bits for all eight configs swept (bf16) and equal served logprobs with the large config.
"""

from __future__ import annotations

import os
from typing import Optional

import torch
import triton
import triton.language as tl

# One config for every problem, so no row's reduction order depends on M (see the module doc).
_CONFIG_CUDA = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=3)
# Products of more than LARGE_M rows (bf16 / fp16 on LARGE_ARCHS) take this config; other
# architectures and fp32 (FMA, not tensor-core, products) are unmeasured and keep one config.
_CONFIG_CUDA_LARGE = dict(
    BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3
)
LARGE_M = 256
LARGE_ARCHS = ((9, 0),)
_CONFIG_INTERPRET = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=4, num_warps=1, num_stages=1)
_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")


def _parse(raw: str) -> dict:
    return dict(zip(_KEYS, (int(v) for v in raw.split(","))))


# Read once: a process keeps one config (two with the large one) for all its products.
_ENV_SMALL = os.environ.get("SGLANG_INVARIANT_MM_CONFIG")
_ENV_LARGE = os.environ.get("SGLANG_INVARIANT_MM_LARGE")
_SMALL = _parse(_ENV_SMALL) if _ENV_SMALL else _CONFIG_CUDA
_LARGE_FIXED = None if _ENV_LARGE in (None, "", "off") else _parse(_ENV_LARGE)
_large_by_device: dict = {}


def config_for(m: int, x: Optional[torch.Tensor] = None) -> dict:
    """The CUDA config of an m-row product of x: SGLANG_INVARIANT_MM_CONFIG="BM,BN,BK,GM,warps,
    stages" replaces the default (A/B runs); SGLANG_INVARIANT_MM_LARGE the one for more than
    LARGE_M rows ("off": none, one config for every product)."""
    if m <= LARGE_M:
        return _SMALL
    if _LARGE_FIXED is not None or _ENV_LARGE == "off":
        return _LARGE_FIXED or _SMALL
    if x is None or x.dtype == torch.float32:
        return _SMALL
    index = x.device.index or 0
    if index not in _large_by_device:
        arch = torch.cuda.get_device_capability(index)
        _large_by_device[index] = _CONFIG_CUDA_LARGE if arch in LARGE_ARCHS else _SMALL
    return _large_by_device[index]


@triton.jit(do_not_specialize=["M"])
def _invariant_mm_kernel(
    X,
    W,
    Y,
    Bias,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_ym,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # Groups of GROUP_M row tiles walk the column tiles together (weight tiles stay in L2).
    per_group = GROUP_M * grid_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = X + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    w_ptrs = W + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        mask_k = (k0 + offs_k) < K
        x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(x, w, acc, input_precision=DOT_PREC)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if HAS_BIAS:
        acc += tl.load(Bias + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    y_ptrs = Y + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(Y.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def invariant_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    config: Optional[dict] = None,
) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [..., K], weight [N, K]; each row's result is independent of
    the other rows."""
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    m, n = x2.shape[0], weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return y.reshape(*lead, n)
    cfg = config or (config_for(m, x) if x.is_cuda else _CONFIG_INTERPRET)
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    _invariant_mm_kernel[grid](
        x2,
        weight,
        y,
        bias if bias is not None else y,
        m,
        n,
        k,
        x2.stride(0),
        weight.stride(0),
        y.stride(0),
        HAS_BIAS=bias is not None,
        BLOCK_M=cfg["BLOCK_M"],
        BLOCK_N=cfg["BLOCK_N"],
        BLOCK_K=cfg["BLOCK_K"],
        GROUP_M=cfg["GROUP_M"],
        DOT_PREC="ieee" if x.dtype == torch.float32 else "tf32",
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )
    return y.reshape(*lead, n)
