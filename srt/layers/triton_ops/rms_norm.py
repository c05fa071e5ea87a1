"""Fused RMSNorm and residual-add + RMSNorm (one read and one write of each row).

Math matches the HF Llama convention up to one rounding: the residual sum is rounded to the
activation dtype first (that rounded value is both the new residual and the input to the norm),
then y = x * rsqrt(mean(x^2) + eps) * weight is computed in fp32 and rounded once.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait


@triton.jit
def _rmsnorm_kernel(
    X,
    Residual,
    W,
    Y,
    stride_x,
    stride_r,
    stride_y,
    n_cols,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    pdl_wait(PDL)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(Residual + row * stride_r + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(Residual.dtype.element_ty)
        tl.store(Residual + row * stride_r + offs, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, 0) / n_cols + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_y + offs, (xf * rstd * w).to(Y.dtype.element_ty), mask=mask)


def _launch(
    x: torch.Tensor,
    residual: Optional[torch.Tensor],
    weight: torch.Tensor,
    eps: float,
    out: Optional[torch.Tensor],
) -> torch.Tensor:
    hidden = x.shape[-1]
    assert weight.shape == (hidden,) and x.stride(-1) == 1
    x2 = x.reshape(-1, hidden)  # a view for the usual contiguous-rows case
    y = torch.empty_like(x2) if out is None else out.view(-1, hidden)
    r2 = x2 if residual is None else residual.view(-1, hidden)
    if x2.shape[0] == 0:
        return y.view(x.shape)
    block = triton.next_power_of_2(hidden)
    num_warps = 1 if not x.is_cuda else min(16, max(1, block // 512))
    _rmsnorm_kernel[(x2.shape[0],)](
        x2,
        r2,
        weight,
        y,
        x2.stride(0),
        r2.stride(0),
        y.stride(0),
        hidden,
        eps,
        HAS_RESIDUAL=residual is not None,
        BLOCK=block,
        num_warps=num_warps,
        **pdl_args(x),
    )
    return y.view(x.shape)


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """y = x / rms(x) * weight over the last dim; x [..., hidden] with contiguous last dim."""
    return _launch(x, None, weight, eps, out)


def fused_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """residual <- x + residual (in place, residual must be contiguous); returns rmsnorm(residual)."""
    assert residual.shape == x.shape and residual.is_contiguous()
    return _launch(x, residual, weight, eps, out)


def rmsnorm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


def fused_add_rmsnorm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    residual.copy_((x.float() + residual.float()).to(residual.dtype))
    return rmsnorm_ref(residual, weight, eps).to(x.dtype)
