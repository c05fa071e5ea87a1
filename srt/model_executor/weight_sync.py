"""Weights moving in and out of a running model: process groups shared with a trainer (whose rank 0
broadcasts new weights, /update_weights_from_distributed), and the piece of a checkpoint tensor
this rank holds (/get_weights_by_name gathers them).

A group is built the way RL trainers build theirs (a TCP rendezvous at the trainer's address, the
store prefixed by the group name, a group outside torch's default one), so a trainer's side made
with the usual recipe and this side meet; the server's own tensor-parallel group is untouched."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import distributed_c10d as c10d

logger = logging.getLogger(__name__)

# How long a rendezvous or a broadcast may wait for the trainer.
GROUP_TIMEOUT = timedelta(minutes=10)


def dtype_of(name: str) -> torch.dtype:
    """The torch dtype a name ("bfloat16", "torch.float32") stands for; ValueError otherwise."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


class WeightUpdateGroups:
    """The named process groups this rank has joined."""

    def __init__(self) -> None:
        self.groups: Dict[str, dist.ProcessGroup] = {}
        self.backends: Dict[str, str] = {}

    def init(
        self,
        master_address: str,
        master_port: int,
        rank: int,
        world_size: int,
        group_name: str,
        backend: str,
    ) -> None:
        if group_name in self.groups:
            raise ValueError(f"group {group_name!r} already exists")
        if not 0 < rank < world_size:
            raise ValueError(f"rank {rank} is not a receiver in a group of {world_size}")
        url = f"tcp://{master_address}:{master_port}"
        store, rank, world_size = next(
            c10d.rendezvous(url, rank, world_size, timeout=GROUP_TIMEOUT)
        )
        store.set_timeout(GROUP_TIMEOUT)
        group, _ = c10d._new_process_group_helper(
            world_size,
            rank,
            [],
            c10d.Backend(backend),
            c10d.PrefixStore(group_name, store),
            group_name=group_name,
            timeout=GROUP_TIMEOUT,
        )
        c10d._world.pg_group_ranks[group] = {i: i for i in range(world_size)}
        self.groups[group_name] = group
        self.backends[group_name] = backend
        logger.info("Joined weight update group %s as rank %d of %d", group_name, rank, world_size)

    def destroy(self, group_name: str) -> None:
        group = self.groups.pop(group_name, None)
        if group is None:
            raise ValueError(f"no group {group_name!r}")
        del self.backends[group_name]
        dist.destroy_process_group(group)

    def receive(
        self,
        names: Sequence[str],
        dtypes: Sequence[str],
        shapes: Sequence[Sequence[int]],
        group_name: str,
        device: torch.device,
    ) -> List[Tuple[str, torch.Tensor]]:
        """One broadcast from group rank 0 per tensor, in order (a gloo group receives on the CPU)."""
        group = self.groups.get(group_name)
        if group is None:
            raise ValueError(f"no group {group_name!r}: call /init_weights_update_group first")
        if not len(names) == len(dtypes) == len(shapes):
            raise ValueError("names, dtypes and shapes must have the same length")
        if self.backends[group_name] == "gloo":
            device = torch.device("cpu")
        out = [
            (n, torch.empty(tuple(s), dtype=dtype_of(d), device=device))
            for n, d, s in zip(names, dtypes, shapes)
        ]
        works = [dist.broadcast(t, src=0, group=group, async_op=True) for _, t in out]
        for w in works:
            w.wait()
        return out


def load_named(
    model: nn.Module, named: Sequence[Tuple[str, torch.Tensor]], load_format: Optional[str]
) -> None:
    """Some of the weights from named tensors: checkpoint names (load_format None / "auto") or the
    model's own parameter names ("direct"). Every name and shape is checked before anything is
    written, so a refused update leaves the weights as they were."""
    if load_format in (None, "auto"):
        model.load_weights(named, require_all=False, dry_run=True)
        model.load_weights(named, require_all=False)
        return
    if load_format != "direct":
        raise ValueError(
            f"load_format {load_format!r} is not supported for tensor updates (auto, direct)"
        )
    params = dict(model.named_parameters())
    for name, t in named:
        if name not in params:
            raise KeyError(f"{name} is not a parameter of {type(model).__name__}")
        if params[name].shape != t.shape:
            raise ValueError(
                f"shape mismatch for {name}: {tuple(t.shape)} vs {tuple(params[name].shape)}"
            )
    for name, t in named:
        params[name].data.copy_(t)


@dataclass
class RankPiece:
    """Rows (dim 0) or columns (dim 1) [src, src + n) of the checkpoint tensor, as this rank holds
    them (float32, on the CPU, only the rows asked for); a replicated tensor is all of it at src 0."""

    data: torch.Tensor
    dim: int
    src: int


def rank_piece(model: nn.Module, name: str, truncate_size: int) -> Optional[RankPiece]:
    """None when the model keeps no tensor of that checkpoint name."""
    target, shard = model.param_of(name)
    params = dict(model.named_parameters())
    if target is None or target not in params:
        return None
    param = params[target]
    owner = getattr(getattr(param, "weight_loader", None), "__self__", None)
    if owner is not None and hasattr(owner, "placement"):
        where = owner.placement(shard)
        dim, src, piece = where.dim, where.src, param.data.narrow(where.dim, where.dst, where.size)
    elif owner is not None and hasattr(owner, "per_rank"):  # a vocabulary-parallel embedding
        dim, src, piece = 0, owner.start, param.data[: owner.end - owner.start]
    else:
        dim, src, piece = 0, 0, param.data
    rows = max(0, truncate_size - src) if dim == 0 else truncate_size
    return RankPiece(piece[:rows].float().cpu().clone(), dim, src)


def assemble(pieces: Sequence[RankPiece], truncate_size: int) -> list:
    """The checkpoint tensor from every rank's piece (replicas counted once), first rows only."""
    seen, parts = set(), []
    for p in sorted(pieces, key=lambda p: p.src):
        if p.src not in seen:
            seen.add(p.src)
            parts.append(p.data)
    whole = torch.cat(parts, dim=pieces[0].dim) if len(parts) > 1 else parts[0]
    return whole[:truncate_size].tolist()
