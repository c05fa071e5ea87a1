"""Tensor-parallel group state and the few collectives the layers need.

Without a process group every collective is the identity, so the single-rank path pays nothing.
With more ranks (or one rank and --force-distributed, which runs the multi-rank code paths through a
world of one) the scheduler process calls init_tensor_parallel() once, after torch.distributed is set
up (NCCL on CUDA, gloo on the CPU).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

_TP_RANK = 0
_TP_SIZE = 1
_TP_GROUP: Optional[dist.ProcessGroup] = None
_CPU_GROUP: Optional[dist.ProcessGroup] = None


def init_tensor_parallel(
    rank: int,
    size: int,
    group: Optional[dist.ProcessGroup] = None,
    cpu_group: Optional[dist.ProcessGroup] = None,
) -> None:
    global _TP_RANK, _TP_SIZE, _TP_GROUP, _CPU_GROUP
    _TP_RANK, _TP_SIZE, _TP_GROUP, _CPU_GROUP = rank, size, group, cpu_group


def get_tp_rank() -> int:
    return _TP_RANK


def get_tp_size() -> int:
    return _TP_SIZE


def tp_distributed() -> bool:
    """Collectives go through torch.distributed (more than one rank, or a forced world of one)."""
    return _TP_GROUP is not None


def get_tp_group() -> Optional[dist.ProcessGroup]:
    return _TP_GROUP


def get_tp_cpu_group() -> Optional[dist.ProcessGroup]:
    return _CPU_GROUP


def tp_all_reduce(x: torch.Tensor) -> torch.Tensor:
    if _TP_GROUP is None:
        return x
    dist.all_reduce(x, group=_TP_GROUP)
    return x


def tp_all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate every rank's shard along `dim`."""
    if _TP_GROUP is None:
        return x
    parts = [torch.empty_like(x) for _ in range(_TP_SIZE)]
    dist.all_gather(parts, x.contiguous(), group=_TP_GROUP)
    return torch.cat(parts, dim=dim)


def tp_broadcast_object(obj, src: int = 0):
    """rank `src`'s Python object on every rank (identity with one rank)."""
    if _TP_GROUP is None:
        return obj
    box = [obj if _TP_RANK == src else None]
    dist.broadcast_object_list(box, src=src, group=_CPU_GROUP)
    return box[0]


def tp_all_gather_object(obj) -> list:
    if _TP_GROUP is None:
        return [obj]
    out = [None] * _TP_SIZE
    dist.all_gather_object(out, obj, group=_CPU_GROUP)
    return out


def tp_min_int(x: int) -> int:
    if _TP_GROUP is None:
        return x
    t = torch.tensor([x], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=_CPU_GROUP)
    return int(t.item())
