"""Fused SiLU-and-multiply for gated MLPs: out = silu(x[:, :I]) * x[:, I:] (fp32 math, one rounding)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait


@triton.jit
def _silu_and_mul_kernel(X, Y, stride_x, stride_y, inter, BLOCK: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    pdl_wait(PDL)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < inter
    gate = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(X + row * stride_x + inter + offs, mask=mask, other=0.0).to(tl.float32)
    y = gate * tl.sigmoid(gate) * up
    tl.store(Y + row * stride_y + offs, y.to(Y.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [..., 2I] (gate first, then up) -> [..., I]."""
    assert x.shape[-1] % 2 == 0 and x.stride(-1) == 1
    inter = x.shape[-1] // 2
    x2 = x.reshape(-1, 2 * inter)
    y = (
        torch.empty((x2.shape[0], inter), dtype=x.dtype, device=x.device)
        if out is None
        else out.view(-1, inter)
    )
    if x2.shape[0] == 0:
        return y.view(*x.shape[:-1], inter)
    block = min(1024, triton.next_power_of_2(inter))
    grid = (x2.shape[0], triton.cdiv(inter, block))
    _silu_and_mul_kernel[grid](
        x2,
        y,
        x2.stride(0),
        y.stride(0),
        inter,
        BLOCK=block,
        num_warps=4 if x.is_cuda else 1,
        **pdl_args(x),
    )
    return y.view(*x.shape[:-1], inter)


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    inter = x.shape[-1] // 2
    xf = x.float()
    return (F.silu(xf[..., :inter]) * xf[..., inter:]).to(x.dtype)
