"""Rotary position embedding (rotate-half layout) with default, linear, llama3 and yarn frequency scaling."""

from __future__ import annotations

import math
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
from torch import nn

_fused = None  # Triton in-place rotary on CUDA, bound by model_runner
_fused_store = None  # Triton rotary + KV store in one kernel (full-width rotary only)

# (rotary_dim, positions, base, scaling, device) -> (cos, sin, cos_sin) tables shared by all layers.
# Small key space; entries live as long as the process (a few per model config).
_TABLES: Dict[tuple, Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


class QKNorm(NamedTuple):
    """Qwen3's per-head RMSNorms of q and k (layernorm.RMSNorm over head_dim each)."""

    q_norm: nn.Module
    k_norm: nn.Module

    def kernel_args(self) -> Tuple[torch.Tensor, torch.Tensor, float]:
        """(q weight, k weight, eps): what the rotary kernels take as qk_norm."""
        return self.q_norm.weight, self.k_norm.weight, self.q_norm.eps

    def apply(
        self, q: torch.Tensor, k: torch.Tensor, head_dim: int
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The unfused path: the norm modules over each head."""
        n = q.shape[0]
        q = self.q_norm(q.reshape(-1, head_dim)).view(n, -1)
        return q, self.k_norm(k.reshape(-1, head_dim)).view(n, -1)


def set_fused_rotary(impl, store_impl=None) -> None:
    global _fused, _fused_store
    _fused, _fused_store = impl, store_impl


def _inv_freq(dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))


def _llama3_inv_freq(inv: torch.Tensor, s: Dict[str, Any]) -> torch.Tensor:
    factor = s["factor"]
    low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_len = s.get("original_max_position_embeddings", 8192)
    wavelen = 2 * math.pi / inv
    low_wl, high_wl = old_len / low, old_len / high
    scaled = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wl) & (wavelen <= low_wl)
    return torch.where(medium, smoothed, scaled)


def _yarn_inv_freq(
    dim: int, base: float, s: Dict[str, Any], max_pos: int
) -> Tuple[torch.Tensor, float]:
    factor = s["factor"]
    orig = s.get("original_max_position_embeddings", max_pos)
    mscale = s.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
    beta_fast, beta_slow = s.get("beta_fast", 32), s.get("beta_slow", 1)

    def corr(rot: float) -> float:
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(corr(beta_fast)), 0)
    hi = min(math.ceil(corr(beta_slow)), dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
    pos = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    extra, inter = 1.0 / pos, 1.0 / (factor * pos)
    keep = 1 - ramp
    return inter * (1 - keep) + extra * keep, float(mscale)


class RotaryEmbedding(nn.Module):
    def __init__(
        self,
        head_dim: int,
        max_position: int,
        base: float,
        scaling: Optional[Dict[str, Any]] = None,
        rotary_dim: Optional[int] = None,
    ):
        super().__init__()
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim or head_dim
        kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
        inv = _inv_freq(self.rotary_dim, base)
        mscale = 1.0
        positions = max_position
        if kind == "linear":
            inv = inv / scaling["factor"]
        elif kind == "llama3":
            inv = _llama3_inv_freq(inv, scaling)
        elif kind == "yarn":
            inv, mscale = _yarn_inv_freq(self.rotary_dim, base, scaling, max_position)
        elif kind == "dynamic":
            pass  # static context: dynamic NTK only changes frequencies beyond the trained length
        elif kind not in ("default", None):
            raise ValueError(f"unsupported rope scaling {kind!r}")
        key = (
            self.rotary_dim,
            positions,
            float(base),
            repr(sorted((scaling or {}).items())),
            str(torch.empty(0).device),
        )
        tables = _TABLES.get(key)
        if tables is None:
            t = torch.arange(positions, dtype=torch.float64)
            freqs = torch.outer(t, inv.to(t.device))
            emb = torch.cat([freqs, freqs], dim=-1)
            cos, sin = (emb.cos() * mscale).float(), (emb.sin() * mscale).float()
            half = self.rotary_dim // 2
            tables = (cos, sin, torch.cat([cos[:, :half], sin[:, :half]], dim=-1).contiguous())
            _TABLES[key] = tables
        # Every layer shares one set of tables (a 40k-position model would otherwise hold ~1 GB).
        self.register_buffer("cos_cache", tables[0], persistent=False)
        self.register_buffer("sin_cache", tables[1], persistent=False)
        # [max_pos, rotary_dim]: cos in the first half, sin in the second (the fused kernel's layout).
        self.register_buffer("cos_sin_cache", tables[2], persistent=False)

    def forward(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        qk_norm: Optional[QKNorm] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """q: [N, H*D], k: [N, Hkv*D]; returns rotated (q, k) of the same shapes. qk_norm: each
        head RMS-normalised first (Qwen3), in the rotary kernel where it is full width."""
        if qk_norm is not None and (
            self.rotary_dim != self.head_dim or _fused is None or not q.is_cuda
        ):
            q, k = qk_norm.apply(q, k, self.head_dim)
            qk_norm = None
        if _fused is not None and q.is_cuda:
            args = None if qk_norm is None else qk_norm.kernel_args()
            return _fused(positions, q, k, self.cos_sin_cache, self.head_dim, args)
        cos = self.cos_cache[positions].unsqueeze(1)
        sin = self.sin_cache[positions].unsqueeze(1)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def forward_and_store(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        target,
        qk_norm: Optional[QKNorm] = None,
    ) -> bool:
        """Normalise (qk_norm) and rotate q and k in place and write k, v to the pool target in one
        kernel; False (nothing done) where that kernel does not apply: no CUDA hook bound, or a
        partial rotary."""
        if _fused_store is None or not q.is_cuda or self.rotary_dim != self.head_dim:
            return False
        _fused_store(
            positions,
            q,
            k,
            v,
            self.head_dim,
            self.cos_sin_cache,
            target.k_buffer,
            target.v_buffer,
            target.loc,
            target.k_scale,
            target.v_scale,
            qk_norm=None if qk_norm is None else qk_norm.kernel_args(),
        )
        return True

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        x = x.view(n, -1, self.head_dim)
        rd = self.rotary_dim
        rot, rest = x[..., :rd], x[..., rd:]
        half = rd // 2
        x1, x2 = rot[..., :half].float(), rot[..., half:].float()
        rotated = torch.cat([-x2, x1], dim=-1)
        out = (rot.float() * cos + rotated * sin).to(x.dtype)
        if rest.shape[-1]:
            out = torch.cat([out, rest], dim=-1)
        return out.reshape(n, -1)
