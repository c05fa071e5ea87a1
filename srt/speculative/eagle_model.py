"""An EAGLE head as a one-layer model over a paged KV pool, for a ModelRunner of its own.

The head (eagle_head.py) keeps its weights and its layer; this wrapper gives it the model
interface the runner drives: its KV is layer 0 of the runner's pool, read and written through the
runner's attention backend at the target's slot numbers (the runner shares the target's request
table), and each row's input feature comes in ForwardBatch.spec_features. Decode passes of such a
model replay CUDA graphs: the graph runner keeps a static feature buffer for models that declare
`feature_size`.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.core.forward_batch_info import ForwardBatch
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.speculative.eagle_head import EagleHead


class EagleDraftModel(nn.Module):
    def __init__(self, head: EagleHead):
        super().__init__()
        self.head = head
        c = head.c
        self.feature_size = c.hidden
        self.attn = RadixAttention(c.heads, c.head_dim, c.head_dim**-0.5, c.kv_heads, layer_id=0)

    @torch.no_grad()
    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        """Logits and output features at each request's last row (every row of a decode pass)."""
        head, fb = self.head, forward_batch

        def attention(x: torch.Tensor) -> torch.Tensor:
            q, k, v = head.qkv(x, positions)
            o = self.attn(q.reshape(q.shape[0], -1), k, v, fb)
            return head.out_proj(o.reshape(o.shape[0], -1))

        h = head.layer(input_ids, fb.spec_features, attention)
        if not fb.forward_mode.is_decode():
            h = h[fb.extend_start_loc + fb.extend_seq_lens - 1]
        return LogitsProcessorOutput(next_token_logits=head.logits(h), hidden_states=h)


def head_model_config(head: EagleHead, target: ModelConfig) -> ModelConfig:
    """The target's config with the head's attention shape and one layer: what the runner sizes
    its pool and graphs by (the weights are the head's own, never loaded by the runner)."""
    c = head.c
    return dataclasses.replace(
        target,
        hidden_size=c.hidden,
        num_hidden_layers=1,
        num_attention_heads=c.heads,
        num_key_value_heads=c.kv_heads,
        head_dim=c.head_dim,
        intermediate_size=c.intermediate,
        quantization_config=None,
    )
