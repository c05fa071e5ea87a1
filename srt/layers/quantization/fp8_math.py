"""FP8 (float8_e4m3fn) quantization arithmetic in torch: the reference every FP8 path is checked
against, and the CPU path itself.

A weight is stored as fp8 values q with float32 scales s such that w ~= q * s, where s is one per
output channel ([N] scales), one per 128 x 128 block ([ceil(N/128), ceil(K/128)], as FP8
checkpoints ship it under `weight_scale_inv`), or one for the tensor. e4m3 keeps 3 mantissa bits:
a scaled value carries a relative rounding error of at most 2^-4 (half an ulp).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)  # 448
# Smallest scale, so an all-zero row or block does not divide by zero.
_MIN_SCALE = 1e-12


def quantize_per_channel(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] -> (q [N, K] fp8, s [N] float32): each output row scaled so its largest |w| is 448."""
    amax = w.abs().amax(dim=1).float()
    s = (amax / FP8_MAX).clamp(min=_MIN_SCALE)
    q = (w.float() / s[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, s


def quantize_per_tensor(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    s = (w.abs().amax().float() / FP8_MAX).clamp(min=_MIN_SCALE)
    return (w.float() / s).clamp(-FP8_MAX, FP8_MAX).to(FP8), s.reshape(1)


def quantize_blocks(
    w: torch.Tensor, block: Tuple[int, int] = (128, 128)
) -> Tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] -> (q, s [ceil(N/bn), ceil(K/bk)]): the layout of FP8 checkpoints."""
    bn, bk = block
    n, k = w.shape
    padded = torch.zeros(-(-n // bn) * bn, -(-k // bk) * bk, dtype=torch.float32, device=w.device)
    padded[:n, :k] = w.float()
    tiles = padded.view(padded.shape[0] // bn, bn, padded.shape[1] // bk, bk)
    s = (tiles.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=_MIN_SCALE)
    q = (tiles / s[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).view_as(padded)[:n, :k]
    return q.to(FP8).contiguous(), s


def quantize(
    w: torch.Tensor, block: Optional[Tuple[int, int]] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-channel scales, or per (bn, bk) block when block is given (the two layouts the FP8
    matmuls take)."""
    return quantize_per_channel(w) if block is None else quantize_blocks(w, block)


def expand_block_scales(
    s: torch.Tensor, shape: Tuple[int, int], block: Tuple[int, int]
) -> torch.Tensor:
    n, k = shape
    return s.repeat_interleave(block[0], 0)[:n].repeat_interleave(block[1], 1)[:, :k]


def dequantize(
    q: torch.Tensor,
    s: torch.Tensor,
    block: Optional[Tuple[int, int]] = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """q * s in `dtype`: s is per-channel ([N]), per-tensor ([1]) or per-block (with `block`)."""
    w = q.to(torch.float32)
    if block is not None:
        w = w * expand_block_scales(s, tuple(q.shape), block)
    elif s.numel() == 1:
        w = w * s
    else:
        w = w * s[:, None]
    return w.to(dtype)


def quantize_per_token(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Activations [M, K] -> (fp8 [M, K], scales [M, 1] float32): the dynamic scales of the matmul."""
    amax = x.abs().amax(dim=-1, keepdim=True).float()
    s = (amax / FP8_MAX).clamp(min=_MIN_SCALE)
    return (x.float() / s).clamp(-FP8_MAX, FP8_MAX).to(FP8), s
