"""Tensor-parallel linear layers.

Column-parallel layers split the output features across ranks (no communication); row-parallel
layers split the input features and all-reduce the partial products. QKV and gate/up are merged
column-parallel layers whose weight loaders place each HF shard (q, k, v / gate, up) into its slice
of the merged matrix, taking only this rank's part.

Parameters are allocated uninitialised: the loader (or the dummy initialiser) fills them.

Where a checkpoint shard lands is one rule per layer (`placement`: the dimension, the offset in this
rank's matrix, the size, and where this rank's part starts in the shard), so weights and their
block scales (quantization/fp8.py) are sliced alike. A layer with a `quant_method` hands its matmul
to it (FP8 weights); without one it is a plain matmul.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.distributed.parallel_state import get_tp_rank, get_tp_size, tp_all_reduce

_skinny_matmul = None  # triton_ops.small_m_gemm.SkinnyMatmul on CUDA (--skinny-matmul), or None
# batch_invariant's matmul under --enable-deterministic-inference (it then takes every product).
_invariant_matmul = None


def set_skinny_matmul(impl) -> None:
    global _skinny_matmul
    _skinny_matmul = impl


def set_invariant_matmul(impl) -> None:
    global _invariant_matmul
    _invariant_matmul = impl


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """F.linear, or the bound skinny-matrix kernel for inputs of few rows where it takes them."""
    if _invariant_matmul is not None:
        return _invariant_matmul(x, weight, bias)
    skinny = _skinny_matmul
    if (
        skinny is not None
        and x.is_cuda
        and x.dim() == 2
        and x.shape[0] <= skinny.max_m
        and x.stride(-1) == 1
    ):
        y = skinny(x, weight, bias)
        if y is not None:
            return y
    return F.linear(x, weight, bias)


class Placement(NamedTuple):
    """Rows (dim 0) or columns (dim 1) [dst, dst + size) of this rank's matrix come from
    [src, src + size) of the checkpoint shard along the same dimension."""

    dim: int
    dst: int
    size: int
    src: int


def load_placed(param: torch.Tensor, loaded: torch.Tensor, where: Placement) -> None:
    dst = param.data.narrow(where.dim, where.dst, where.size)
    if loaded.dim() != dst.dim() or loaded.shape[where.dim] < where.src + where.size:
        raise ValueError(f"a checkpoint tensor of shape {tuple(loaded.shape)} cannot fill {where}")
    src = loaded.narrow(where.dim, where.src, where.size)
    if src.shape != dst.shape:  # copy_ would broadcast a wrong shape silently
        raise ValueError(f"checkpoint shard {tuple(src.shape)} does not fit {tuple(dst.shape)}")
    dst.copy_(src)


def load_whole(param: torch.Tensor, loaded: torch.Tensor, shard_id: Any = None) -> None:
    """A replicated tensor (every rank holds all of it)."""
    if loaded.shape != param.shape:
        raise ValueError(f"checkpoint {tuple(loaded.shape)} does not fit {tuple(param.shape)}")
    param.data.copy_(loaded)


class LinearBase(nn.Module):
    """What the layers share: their shard placement and an optional quantized matmul."""

    quant_method: Any = None

    def placement(self, shard_id: Optional[Union[str, int]] = None) -> Placement:
        raise NotImplementedError

    def weight_loader(
        self, param: nn.Parameter, loaded: torch.Tensor, shard_id: Optional[Union[str, int]] = None
    ) -> None:
        load_placed(param, loaded, self.placement(shard_id))

    def matmul(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.quant_method is not None:
            return self.quant_method.apply(self, x, bias)
        return linear(x, self.weight, bias)


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


def _divide(a: int, b: int) -> int:
    if a % b:
        raise ValueError(f"{a} is not divisible by tensor-parallel size {b}")
    return a // b


class ColumnParallelLinear(LinearBase):
    def __init__(
        self, input_size: int, output_size: int, bias: bool = False, gather_output: bool = False
    ):
        super().__init__()
        self.tp_rank, self.tp_size = get_tp_rank(), get_tp_size()
        self.input_size = input_size
        self.output_size_per_rank = _divide(output_size, self.tp_size)
        self.weight = _param(self.output_size_per_rank, input_size)
        self.weight.weight_loader = self.weight_loader
        self.bias = _param(self.output_size_per_rank) if bias else None
        if self.bias is not None:
            self.bias.weight_loader = self.weight_loader
        assert not gather_output, "gathering column outputs is not needed by our models"

    def placement(self, shard_id: Optional[Union[str, int]] = None) -> Placement:
        n = self.output_size_per_rank
        return Placement(0, 0, n, self.tp_rank * n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul(x, self.bias)


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel matrices stored as one (gate_up_proj = [gate; up])."""

    def __init__(self, input_size: int, output_sizes: List[int], bias: bool = False):
        super().__init__(input_size, sum(output_sizes), bias)
        self.output_sizes = output_sizes

    def placement(self, shard_id: Optional[Union[str, int]] = None) -> Placement:
        assert isinstance(shard_id, int)
        size = _divide(self.output_sizes[shard_id], self.tp_size)
        offset = sum(_divide(s, self.tp_size) for s in self.output_sizes[:shard_id])
        return Placement(0, offset, size, self.tp_rank * size)


class QKVParallelLinear(ColumnParallelLinear):
    """q, k and v projections merged; query heads split across ranks, KV heads split or replicated."""

    def __init__(
        self,
        hidden_size: int,
        head_dim: int,
        total_num_heads: int,
        total_num_kv_heads: int,
        bias: bool = False,
    ):
        tp = get_tp_size()
        self.head_dim = head_dim
        self.num_heads = _divide(total_num_heads, tp)
        if total_num_kv_heads >= tp:
            self.num_kv_heads = _divide(total_num_kv_heads, tp)
            self.kv_replicas = 1
        else:
            self.num_kv_heads = 1
            self.kv_replicas = _divide(tp, total_num_kv_heads)
        out = (self.num_heads + 2 * self.num_kv_heads) * head_dim * tp
        super().__init__(hidden_size, out, bias)

    def placement(self, shard_id: Optional[Union[str, int]] = None) -> Placement:
        q_size = self.num_heads * self.head_dim
        kv_size = self.num_kv_heads * self.head_dim
        if shard_id == "q":
            offset, size, rank_slot = 0, q_size, self.tp_rank
        elif shard_id == "k":
            offset, size, rank_slot = q_size, kv_size, self.tp_rank // self.kv_replicas
        elif shard_id == "v":
            offset, size, rank_slot = q_size + kv_size, kv_size, self.tp_rank // self.kv_replicas
        else:
            raise ValueError(f"bad qkv shard id {shard_id}")
        return Placement(0, offset, size, rank_slot * size)


class RowParallelLinear(LinearBase):
    def __init__(
        self, input_size: int, output_size: int, bias: bool = False, reduce_results: bool = True
    ):
        super().__init__()
        self.tp_rank, self.tp_size = get_tp_rank(), get_tp_size()
        self.input_size_per_rank = _divide(input_size, self.tp_size)
        self.output_size = output_size
        self.reduce_results = reduce_results
        self.weight = _param(output_size, self.input_size_per_rank)
        self.weight.weight_loader = self.weight_loader
        self.bias = _param(output_size) if bias else None
        if self.bias is not None:
            self.bias.weight_loader = load_whole

    def placement(self, shard_id: Optional[Union[str, int]] = None) -> Placement:
        n = self.input_size_per_rank
        return Placement(1, 0, n, self.tp_rank * n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.matmul(x)
        if self.reduce_results:  # the identity without a process group
            out = tp_all_reduce(out)
        if self.bias is not None:
            out = out + self.bias
        return out


class ReplicatedLinear(LinearBase):
    def __init__(self, input_size: int, output_size: int, bias: bool = False):
        super().__init__()
        self.weight = _param(output_size, input_size)
        self.bias = _param(output_size) if bias else None

    def placement(self, shard_id: Optional[Union[str, int]] = None) -> Placement:
        return Placement(0, 0, self.weight.shape[0], 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul(x, self.bias)
