"""SiLU(gate) * up over a merged [gate; up] projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_fused = None  # Triton implementation on CUDA, bound by model_runner
_cpu = None  # batch_invariant's padded version under --enable-deterministic-inference


def set_fused_silu_and_mul(impl) -> None:
    global _fused
    _fused = impl


def set_cpu_silu_and_mul(impl) -> None:
    global _cpu
    _cpu = impl


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _fused is not None and x.is_cuda:
            return _fused(x)
        if _cpu is not None:
            return _cpu(x)
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]
