"""Fused elementwise / row-wise Triton kernels (GPU path), each with a torch `*_ref` twin."""

from sglang.srt.layers.triton_ops.activation import silu_and_mul, silu_and_mul_ref
from sglang.srt.layers.triton_ops.kv_store import store_kv, store_kv_ref
from sglang.srt.layers.triton_ops.rms_norm import (
    fused_add_rmsnorm,
    fused_add_rmsnorm_ref,
    rmsnorm,
    rmsnorm_ref,
)
from sglang.srt.layers.triton_ops.rotary import (
    apply_rotary_emb_,
    apply_rotary_emb_ref,
    build_cos_sin_cache,
)

__all__ = [
    "apply_rotary_emb_",
    "apply_rotary_emb_ref",
    "build_cos_sin_cache",
    "fused_add_rmsnorm",
    "fused_add_rmsnorm_ref",
    "rmsnorm",
    "rmsnorm_ref",
    "silu_and_mul",
    "silu_and_mul_ref",
    "store_kv",
    "store_kv_ref",
]
