"""FP8 matmuls on a CUDA device.

- One row (batch-1 decode): the word GEMV (fp8_gemv.py) reads the fp8 weight four bytes at a time
  and widens it with integer ops, its scales applied in registers, so the step streams half the
  bytes of bf16. The f16x2 GEMV (fp8_gemv.fp8_gemv_halves: hardware e4m3x2 conversion, packed
  fp16 math; per-channel weights) is 11-15% faster alone on the H200 but not yet checked inside
  the model there, so it is opt-in (SGLANG_FP8_ONE_ROW=halves).
- 2-64 rows (decode batches), and up to 256 where a tile was tuned for the shape: the Triton
  FP8 x FP8 kernel (fp8_gemm.py) with the activations quantized per token (one kernel:
  fp8_kernels.py); its narrow tiles keep every SM streaming weights.
- More rows, per-channel weights: `torch._scaled_mm` on FP8 tensor cores, the activations
  quantized per token into rows padded to a multiple of 16, as _scaled_mm requires.
- More rows, block-scaled weights (FP8 checkpoints): the Triton FP8 x FP8 kernel (fp8_gemm.py) with
  the activations quantized per token and 128-wide K group, the weight's block scales applied per
  K step.
- A device without FP8 tensor cores (before sm_89): the weight is dequantized for the call.
  Correct, not fast; logged once.

A/B switches (read once per process): SGLANG_FP8_ONE_ROW=words|halves|gemv|scaled_mm|triton|mma
picks the one-row path (halves: the f16x2 GEMV for per-channel weights, the word GEMV for block
scales; gemv: the conversion-based GEMV of triton_ops/gemv.py; mma: the Triton FP8 kernel with the
row quantized inside it, fp8_gemm.fp8_matmul_fused; mma_wide: that kernel for weights of 16,384
rows or more, the word GEMV below); SGLANG_FP8_TRITON_MAX_M=N sends every
per-channel product of 2..N rows to the Triton kernel (0: none), instead of the default rule
above; SGLANG_FP8_FUSED_QUANT=1 makes the Triton kernel's 2..64-row products quantize their
activations inside it instead of in a kernel of their own.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from sglang.srt.layers.quantization import fp8_gemv
from sglang.srt.layers.quantization.fp8_gemm import (
    fp8_matmul,
    fp8_matmul_fused,
    has_tuned_config,
)
from sglang.srt.layers.quantization.fp8_kernels import (
    per_token_group_quant_fp8,
    per_token_quant_fp8,
)
from sglang.srt.layers.quantization.fp8_math import dequantize

logger = logging.getLogger(__name__)

_ROW_MULTIPLE = 16  # _scaled_mm wants both dimensions of its first operand divisible by 16
_TRITON_ROWS = 64  # up to here the Triton kernel's default tiles beat _scaled_mm
_TUNED_ROWS = 256  # up to here a tuned tile does


class Fp8Matmul:
    def __init__(self, native: bool):
        self.native = native
        self.one_row = os.environ.get("SGLANG_FP8_ONE_ROW", "words")
        forced = os.environ.get("SGLANG_FP8_TRITON_MAX_M")
        self.triton_max_m = None if forced is None else int(forced)
        # SGLANG_FP8_SMALL_M=1: 1-64 rows on the small-M kernel with fp8 weights widened to bf16
        # in registers (no activation quantization), per-channel weights only (A/B runs).
        self.small_m = os.environ.get("SGLANG_FP8_SMALL_M", "0") == "1"
        self.fused_quant = os.environ.get("SGLANG_FP8_FUSED_QUANT", "0") == "1"

    @staticmethod
    @functools.lru_cache(maxsize=8)
    def for_device(device: torch.device) -> "Fp8Matmul":
        major, minor = torch.cuda.get_device_capability(device)
        native = (major, minor) >= (8, 9)
        if not native:
            logger.warning(
                "FP8 weights on sm_%d%d, which has no FP8 tensor cores: every matmul dequantizes "
                "its weight (correct, slower than bf16)",
                major,
                minor,
            )
        return Fp8Matmul(native)

    def __call__(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        s: torch.Tensor,
        block: Optional[Tuple[int, int]],
        bias: Optional[torch.Tensor],
    ) -> torch.Tensor:
        if (
            self.native
            and self.small_m
            and block is None
            and x.shape[0] <= 64
            and x.dtype in (torch.bfloat16, torch.float16)
        ):
            from sglang.srt.layers.triton_ops.small_m_gemm import small_m_matmul

            return small_m_matmul(x.contiguous(), w, bias, w_scale=s)
        m = x.shape[0]
        if not self.native:
            return F.linear(x, dequantize(w, s, block, x.dtype), bias)
        if m == 1 and self.one_row == "halves" and block is None and x.stride(-1) == 1:
            return fp8_gemv.fp8_gemv_halves(x, w, s, bias)
        if m == 1 and self.one_row in ("halves", "words") and fp8_gemv.supports(x, w):
            return fp8_gemv.fp8_gemv(x, w, s, block, bias)
        if m == 1 and self.one_row == "gemv" and x.stride(-1) == 1:
            from sglang.srt.layers.triton_ops.gemv import gemv

            return gemv(x, w, bias, w_scale=s, scale_block=block)
        if m == 1 and (
            self.one_row == "mma" or (self.one_row == "mma_wide" and w.shape[0] >= 16384)
        ):
            return fp8_matmul_fused(x, w, s, block, bias)
        if (
            self.fused_quant
            and 2 <= m <= _TRITON_ROWS
            and (block is not None or self._triton_rows(m, w))
        ):
            return fp8_matmul_fused(x, w, s, block, bias)
        if block is not None:
            return blockwise_matmul(x, w, s, block, bias)
        if self._triton_rows(m, w) or (m == 1 and self.one_row == "triton"):
            return channelwise_matmul(x, w, s, bias)
        return scaled_mm_rowwise(x, w, s, bias)

    def _triton_rows(self, m: int, w: torch.Tensor) -> bool:
        if self.triton_max_m is not None:
            return 2 <= m <= self.triton_max_m
        n, k = w.shape
        return 2 <= m <= _TRITON_ROWS or (m <= _TUNED_ROWS and has_tuned_config(m, n, k))


def scaled_mm_rowwise(
    x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """x [M, K] (high precision) @ (w [N, K] fp8 * s [N])^T with per-token activation scales."""
    m = x.shape[0]
    if x.stride(-1) != 1:
        x = x.contiguous()
    xq, xs = per_token_quant_fp8(x, m + (-m) % _ROW_MULTIPLE)
    y = torch._scaled_mm(xq, w.t(), scale_a=xs, scale_b=s.view(1, -1), out_dtype=x.dtype)[:m]
    return y + bias if bias is not None else y


def channelwise_matmul(
    x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """The Triton FP8 kernel with per-token activation and per-channel weight scales."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    xq, xs = per_token_quant_fp8(x, x.shape[0])
    return fp8_matmul(xq, xs, w, s, x.dtype, bias=bias)


def blockwise_matmul(
    x: torch.Tensor,
    w: torch.Tensor,
    s: torch.Tensor,
    block: Tuple[int, int],
    bias: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """x [M, K] @ (w [N, K] fp8 with block scales s)^T: activations quantized per token and K group
    of the weight's block width, so each K step of the kernel has one scale per row and column."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    xq, xs = per_token_group_quant_fp8(x, block[1])
    return fp8_matmul(xq, xs, w, s, x.dtype, block=block, bias=bias)
