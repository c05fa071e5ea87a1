"""Vocabulary-parallel embedding and LM head: each rank holds a contiguous slice of the vocabulary."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.distributed.parallel_state import (
    get_tp_rank,
    get_tp_size,
    tp_all_gather,
    tp_all_reduce,
    tp_distributed,
)
from sglang.srt.layers.linear import linear


def pad_vocab(vocab_size: int, tp_size: int, multiple: int = 64) -> int:
    step = multiple * tp_size
    return (vocab_size + step - 1) // step * step


class VocabParallelEmbedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.tp_rank, self.tp_size = get_tp_rank(), get_tp_size()
        self.num_embeddings = num_embeddings
        # Pad only when sharding, so single-rank weights keep their checkpoint shape.
        self.padded = (
            num_embeddings if self.tp_size == 1 else pad_vocab(num_embeddings, self.tp_size)
        )
        self.per_rank = self.padded // self.tp_size
        self.start = self.tp_rank * self.per_rank
        self.end = min(self.start + self.per_rank, num_embeddings)
        self.weight = nn.Parameter(torch.empty(self.per_rank, embedding_dim), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def weight_loader(
        self, param: nn.Parameter, loaded: torch.Tensor, shard_id: Optional[str] = None
    ) -> None:
        n = self.end - self.start
        if loaded.dim() != 2 or loaded.shape[0] < self.end or loaded.shape[1] != param.shape[1]:
            raise ValueError(
                f"checkpoint embedding {tuple(loaded.shape)} does not fit "
                f"{(self.num_embeddings, param.shape[1])}"
            )
        if n < self.per_rank:
            param.data[n:].zero_()
        param.data[:n].copy_(loaded[self.start : self.end])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if not tp_distributed():
            return F.embedding(input_ids, self.weight)
        mask = (input_ids >= self.start) & (input_ids < self.end)
        local = torch.where(mask, input_ids - self.start, torch.zeros_like(input_ids))
        out = F.embedding(local, self.weight)
        out = out * mask.unsqueeze(-1).to(out.dtype)
        return tp_all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    """Logits = hidden @ W^T per vocabulary shard, gathered across ranks and trimmed to the real vocab."""

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = tp_all_gather(
            linear(hidden, self.weight), dim=-1
        )  # the identity without a process group
        return logits[..., : self.num_embeddings]
