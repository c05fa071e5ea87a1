"""Bind the fused CUDA implementations of RMSNorm (+ residual), SiLU-and-mul and rotary to the layers.

The layers call their hook only for CUDA tensors, so the CPU path keeps the torch code. Our Triton
kernels are the default; sgl-kernel's versions are used instead when that package is installed and
agrees with the Triton kernel on a small random check at bind time (so an API drift in a package
we do not test against falls back instead of computing garbage).
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, Tuple, Union

import torch

from sglang.srt.layers import activation, layernorm, rotary_embedding
from sglang.srt.layers import linear as linear_mod
from sglang.srt.layers.triton_ops.activation import silu_and_mul
from sglang.srt.layers.triton_ops.pdl import set_pdl
from sglang.srt.layers.triton_ops.rms_norm import fused_add_rmsnorm, rmsnorm
from sglang.srt.layers.triton_ops.rotary import apply_rotary_emb_, apply_rotary_emb_and_store_

logger = logging.getLogger(__name__)


def triton_rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: Optional[torch.Tensor] = None
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """RMSNorm.forward semantics: with a residual, returns (norm(x + residual), x + residual).
    The sum is written into `residual` in place: the model passes each residual on exactly once."""
    if residual is None:
        return rmsnorm(x, weight, eps)
    if not residual.is_contiguous():
        residual = residual.contiguous()
    return fused_add_rmsnorm(x, residual, weight, eps), residual


def triton_rotary(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    qk_norm=None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rotate q [N, H*D] and k [N, Hkv*D] in place (views into the qkv projection are fine),
    each head RMS-normalised first with qk_norm (rotary_embedding.QKNorm)."""
    return apply_rotary_emb_(positions, q, k, head_dim, cos_sin_cache, qk_norm)


def _sgl_kernel_ops() -> Optional[dict]:
    """sgl-kernel's rmsnorm / fused_add_rmsnorm / silu_and_mul wrapped to our hook signatures, or None."""
    try:
        import sgl_kernel
    except ImportError:
        return None

    def rms(x, weight, eps, residual=None):
        if residual is None:
            return sgl_kernel.rmsnorm(x.contiguous(), weight, eps)
        x = x.contiguous()
        sgl_kernel.fused_add_rmsnorm(x, residual, weight, eps)  # x <- norm(x + r), r <- x + r
        return x, residual

    def silu(x):
        out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
        sgl_kernel.silu_and_mul(x, out)
        return out

    return {"rmsnorm": rms, "silu_and_mul": silu}


def _agrees(candidate: Callable, reference: Callable, make_args: Callable) -> bool:
    try:
        a, b = make_args(), make_args()
        out_c, out_r = candidate(*a), reference(*b)
        out_c = out_c[0] if isinstance(out_c, tuple) else out_c
        out_r = out_r[0] if isinstance(out_r, tuple) else out_r
        return bool(torch.allclose(out_c.float(), out_r.float(), atol=2e-2, rtol=2e-2))
    except Exception as e:  # noqa: BLE001 - any failure means "don't use it"
        logger.info("sgl-kernel op rejected: %s", e)
        return False


def bind_fused_ops(
    use_sgl_kernel: bool = True, skinny_matmul: str = "cublas", pdl: bool = True
) -> dict:
    """Install the CUDA hooks; returns {op: implementation name} for the startup log and tests.
    skinny_matmul: "cublas" (F.linear everywhere), "measured" (the Triton GEMV for one row, the
    small-M kernel for 2-64 rows where the H200 sweep found it faster) or "all" (our kernels for every
    matmul of at most 64 rows); pdl lets our Triton kernels launch with programmatic dependent launch
    on sm_90+ (srt/layers/triton_ops/pdl.py)."""
    chosen = {"rmsnorm": triton_rmsnorm, "silu_and_mul": silu_and_mul, "rotary": triton_rotary}
    names = {k: "triton" for k in chosen}
    ext = _sgl_kernel_ops() if use_sgl_kernel and torch.cuda.is_available() else None
    if ext:

        def rnd(gen, *shape):
            return torch.randn(*shape, generator=gen, device="cuda").to(torch.bfloat16)

        def args_for(op):
            def make():  # identical fresh inputs per call: the ops may write in place
                g = torch.Generator(device="cuda").manual_seed(0)
                if op == "rmsnorm":
                    return rnd(g, 7, 256), rnd(g, 256), 1e-6, rnd(g, 7, 256)
                return (rnd(g, 7, 512),)

            return make

        for op, impl in ext.items():
            if _agrees(impl, chosen[op], args_for(op)):
                chosen[op], names[op] = impl, "sgl_kernel"
    layernorm.set_fused_rmsnorm(chosen["rmsnorm"])
    activation.set_fused_silu_and_mul(chosen["silu_and_mul"])
    rotary_embedding.set_fused_rotary(chosen["rotary"], apply_rotary_emb_and_store_)
    names["rotary_store"] = "triton"
    linear_mod.set_skinny_matmul(None)
    if skinny_matmul != "cublas":
        from sglang.srt.layers.triton_ops.small_m_gemm import SkinnyMatmul

        linear_mod.set_skinny_matmul(SkinnyMatmul(all_shapes=skinny_matmul == "all"))
        names["skinny_matmul"] = f"triton ({skinny_matmul})"
    set_pdl(pdl)
    names["pdl"] = pdl and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
    logger.info("fused ops: %s", names)
    return names


def unbind_fused_ops() -> None:
    """Back to the torch implementations (tests compare both paths in one process)."""
    linear_mod.set_skinny_matmul(None)
    layernorm.set_fused_rmsnorm(None)
    activation.set_fused_silu_and_mul(None)
    rotary_embedding.set_fused_rotary(None)
