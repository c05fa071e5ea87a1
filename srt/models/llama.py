"""Llama-family decoder (Llama 2/3/3.1, SmolLM2, Mistral); Qwen2 and Qwen3 reuse it with small switches.

Switches read from ModelConfig: attention_bias (Qwen2 has q/k/v biases), qk_norm (Qwen3 normalises
each head's q and k before rotary), tie_word_embeddings.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple, Union

import torch
from torch import nn

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.core.forward_batch_info import ForwardBatch
from sglang.srt.layers.activation import SiluAndMul
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.linear import (
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from sglang.srt.layers.logits_processor import LogitsProcessor, LogitsProcessorOutput
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.layers.rotary_embedding import QKNorm, RotaryEmbedding
from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding


class LlamaMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden, [intermediate, intermediate])
        self.down_proj = RowParallelLinear(intermediate, hidden)
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.head_dim = cfg.head_dim
        self.qkv_proj = QKVParallelLinear(
            cfg.hidden_size,
            cfg.head_dim,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            bias=cfg.attention_bias,
        )
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size)
        self.rotary_emb = RotaryEmbedding(
            cfg.head_dim,
            cfg.context_len or cfg.max_position_embeddings,
            cfg.rope_theta,
            cfg.rope_scaling,
        )
        self.qk_norm = cfg.qk_norm
        if self.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.attn = RadixAttention(
            self.num_heads, self.head_dim, self.head_dim**-0.5, self.num_kv_heads, layer_id
        )

    def forward(
        self, positions: torch.Tensor, hidden: torch.Tensor, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        qkv = self.qkv_proj(hidden)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        # Qwen3's per-head q / k norms run inside the rotary kernel where it can take them.
        norm = QKNorm(self.q_norm, self.k_norm) if self.qk_norm else None
        # Copies into this pass's slots (HiCache) land before the fused store writes beside them.
        self.attn.wait_for_kv(forward_batch)
        target = forward_batch.attn_backend.kv_store_target(self.attn, forward_batch)
        if target is not None and self.rotary_emb.forward_and_store(
            positions, q, k, v, target, norm
        ):
            o = self.attn(q, k, v, forward_batch, save_kv_cache=False)  # K/V already in the pool
        else:
            q, k = self.rotary_emb(positions, q, k, norm)
            o = self.attn(q, k, v, forward_batch)
        return self.o_proj(o)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.self_attn = LlamaAttention(cfg, layer_id)
        self.mlp = LlamaMLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, positions, hidden, forward_batch, residual):
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden, forward_batch)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(
            [LlamaDecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, input_ids, positions, forward_batch, aux: Optional[dict] = None):
        """Final hidden states; with `aux` (a dict), also stores the outputs (residual stream) of
        the layers named in forward_batch.capture_hidden, by layer id."""
        hidden = self.embed_tokens(input_ids)
        residual = None
        keep = set(forward_batch.capture_hidden or ()) if aux is not None else ()
        for i, layer in enumerate(self.layers):
            hidden, residual = layer(positions, hidden, forward_batch, residual)
            if i in keep:
                aux[i] = hidden + residual
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    # HF checkpoint name -> (our merged parameter, shard id)
    stacked_params = [
        (".qkv_proj", ".q_proj", "q"),
        (".qkv_proj", ".k_proj", "k"),
        (".qkv_proj", ".v_proj", "v"),
        (".gate_up_proj", ".gate_proj", 0),
        (".gate_up_proj", ".up_proj", 1),
    ]

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg)
        if cfg.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens
            self.lm_head.compute_logits = ParallelLMHead.compute_logits.__get__(self.lm_head)
        else:
            self.lm_head = ParallelLMHead(cfg.vocab_size, cfg.hidden_size)
        self.logits_processor = LogitsProcessor(cfg.vocab_size)

    @torch.no_grad()
    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        capture = forward_batch.capture_hidden
        aux: Optional[dict] = {} if capture else None
        hidden = self.model(input_ids, positions, forward_batch, aux)
        out = self.logits_processor(hidden, self.lm_head, forward_batch)
        if capture is not None:
            out.hidden_states = torch.cat([aux[i] for i in capture], dim=-1) if capture else hidden
        return out

    def load_weights(
        self,
        weights: Iterable[Tuple[str, torch.Tensor]],
        require_all: bool = True,
        dry_run: bool = False,
    ) -> None:
        """Checkpoint tensors (HF names) into the parameters. require_all=False: a subset (a
        weight update of some tensors). dry_run: every check, on meta tensors, nothing written."""
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            target, shard = self.param_of(name)
            if target is None:
                continue
            if target not in params:
                raise KeyError(
                    f"checkpoint tensor {name} has no parameter in {type(self).__name__}"
                )
            p = params[target]
            if dry_run:
                p, w = torch.empty_like(p, device="meta"), w.to("meta")
            w = w.to(p.dtype)
            loader = getattr(params[target], "weight_loader", None)
            if loader is not None:
                loader(p, w, shard) if shard is not None else loader(p, w)
            else:
                if p.shape != w.shape:
                    raise ValueError(
                        f"shape mismatch for {name}: checkpoint {tuple(w.shape)} vs {tuple(p.shape)}"
                    )
                p.data.copy_(w)
            loaded.add(target)
        missing = set(params) - loaded
        if require_all and missing:
            raise ValueError(f"checkpoint is missing weights: {sorted(missing)[:8]}")

    def param_of(self, name: str) -> Tuple[Optional[str], Optional[Union[str, int]]]:
        """Our parameter holding checkpoint tensor `name`, and its shard id in a merged one; (None,
        None) for a tensor the model does not keep (rotary tables, a tied LM head)."""
        if "rotary_emb.inv_freq" in name:
            return None, None
        if self.config.tie_word_embeddings and name == "lm_head.weight":
            return None, None
        for merged, hf, shard_id in self.stacked_params:
            if hf in name:
                return name.replace(hf, merged), shard_id
        return name, None


EntryClass = LlamaForCausalLM
