"""ModelConfig: the architecture facts the runtime needs, read from config.json or GGUF metadata."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

SUPPORTED_ARCHS = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}


@dataclass
class ModelConfig:
    architecture: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Optional[Dict[str, Any]]
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    qk_norm: bool = False
    hidden_act: str = "silu"
    torch_dtype: Optional[str] = None
    eos_token_ids: List[int] = field(default_factory=list)
    bos_token_id: Optional[int] = None
    model_path: str = ""
    tokenizer_path: str = ""
    is_gguf: bool = False
    context_len: int = 0
    # config.json's quantization_config (FP8 checkpoints: quant_method, weight_block_size, ...).
    quantization_config: Optional[Dict[str, Any]] = None

    @property
    def model_type(self) -> str:
        return SUPPORTED_ARCHS[self.architecture]

    # ------------------------------------------------------------------
    @staticmethod
    def from_path(model_path: str, context_length: Optional[int] = None) -> "ModelConfig":
        gguf_file = resolve_gguf_file(model_path)
        if gguf_file is not None:
            cfg = _from_gguf(gguf_file)
        else:
            cfg_path = os.path.join(model_path, "config.json")
            if not os.path.exists(cfg_path):
                raise ValueError(f"{model_path} has no config.json and is not a .gguf file")
            with open(cfg_path) as f:
                cfg = _from_hf_dict(json.load(f))
            cfg.model_path = model_path
            cfg.tokenizer_path = model_path
            cfg.eos_token_ids = _merge_generation_eos(model_path, cfg.eos_token_ids)
        cfg.context_len = context_length or cfg.max_position_embeddings
        return cfg

    def resolve_dtype(self, dtype: str, device: str) -> torch.dtype:
        if dtype != "auto":
            return getattr(torch, dtype)
        if device == "cpu":
            return torch.float32
        if self.torch_dtype in ("float16", "bfloat16"):
            return getattr(torch, self.torch_dtype)
        return torch.bfloat16

    def num_params(self) -> int:
        """Parameter count from the shapes (embedding, decoder layers, norms, LM head)."""
        h, hd = self.hidden_size, self.head_dim
        attn = h * (self.num_attention_heads + 2 * self.num_key_value_heads) * hd
        attn += self.num_attention_heads * hd * h
        if self.attention_bias:
            attn += (self.num_attention_heads + 2 * self.num_key_value_heads) * hd
        if self.qk_norm:
            attn += 2 * hd
        layer = attn + 3 * h * self.intermediate_size + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * layer + h + head

    def kv_heads_per_rank(self, tp_size: int) -> int:
        """KV heads are split across ranks, or replicated when there are fewer heads than ranks."""
        return max(1, self.num_key_value_heads // tp_size)


def resolve_gguf_file(model_path: str) -> Optional[str]:
    if model_path.endswith(".gguf") and os.path.isfile(model_path):
        return model_path
    if os.path.isdir(model_path) and not os.path.exists(os.path.join(model_path, "config.json")):
        ggufs = sorted(f for f in os.listdir(model_path) if f.endswith(".gguf"))
        if ggufs:
            return os.path.join(model_path, ggufs[0])
    return None


def _from_hf_dict(d: Dict[str, Any]) -> ModelConfig:
    archs = d.get("architectures") or []
    arch = next((a for a in archs if a in SUPPORTED_ARCHS), None)
    if arch is None:
        raise ValueError(f"Unsupported architecture {archs}; supported: {sorted(SUPPORTED_ARCHS)}")
    heads = d["num_attention_heads"]
    hidden = d["hidden_size"]
    rope = d.get("rope_parameters") or {}
    rope_scaling = d.get("rope_scaling") or None
    if rope and rope.get("rope_type", "default") != "default":
        rope_scaling = dict(rope)
    if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) in (
        None,
        "default",
    ):
        rope_scaling = None
    theta = d.get("rope_theta", rope.get("rope_theta", 10000.0))
    eos = d.get("eos_token_id")
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    model_type = SUPPORTED_ARCHS[arch]
    return ModelConfig(
        architecture=arch,
        hidden_size=hidden,
        num_hidden_layers=d["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=d.get("num_key_value_heads") or heads,
        head_dim=d.get("head_dim") or hidden // heads,
        intermediate_size=d["intermediate_size"],
        vocab_size=d["vocab_size"],
        rms_norm_eps=d.get("rms_norm_eps", 1e-6),
        rope_theta=float(theta),
        rope_scaling=rope_scaling,
        max_position_embeddings=d.get("max_position_embeddings", 4096),
        tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
        attention_bias=bool(d.get("attention_bias", model_type == "qwen2")),
        qk_norm=model_type == "qwen3",
        hidden_act=d.get("hidden_act", "silu"),
        torch_dtype=str(d.get("torch_dtype") or d.get("dtype") or "") or None,
        eos_token_ids=eos_ids,
        bos_token_id=d.get("bos_token_id"),
        quantization_config=d.get("quantization_config") or None,
    )


def _merge_generation_eos(model_path: str, eos_ids: List[int]) -> List[int]:
    """generation_config.json may list extra end-of-turn ids (Llama-3 chat models do)."""
    p = os.path.join(model_path, "generation_config.json")
    if not os.path.exists(p):
        return eos_ids
    with open(p) as f:
        g = json.load(f)
    extra = g.get("eos_token_id")
    extra = [extra] if isinstance(extra, int) else list(extra or [])
    return sorted(set(eos_ids) | set(extra))


def _from_gguf(path: str) -> ModelConfig:
    from sglang.srt.configs.gguf_metadata import read_gguf_metadata

    md, tensor_names = read_gguf_metadata(path)
    arch = md["general.architecture"]
    if arch not in ("llama", "qwen2", "qwen3"):
        raise ValueError(f"GGUF architecture {arch!r} is not supported")
    p = f"{arch}."
    heads = int(md[p + "attention.head_count"])
    hidden = int(md[p + "embedding_length"])
    kv = int(md.get(p + "attention.head_count_kv", heads))
    vocab = int(md.get(p + "vocab_size", len(md.get("tokenizer.ggml.tokens", [])) or 0))
    eos = md.get("tokenizer.ggml.eos_token_id")
    arch_name = {
        "llama": "LlamaForCausalLM",
        "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM",
    }[arch]
    return ModelConfig(
        architecture=arch_name,
        hidden_size=hidden,
        num_hidden_layers=int(md[p + "block_count"]),
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=int(md.get(p + "attention.key_length", hidden // heads)),
        intermediate_size=int(md[p + "feed_forward_length"]),
        vocab_size=vocab,
        rms_norm_eps=float(md.get(p + "attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(md.get(p + "rope.freq_base", 10000.0)),
        rope_scaling=None,
        max_position_embeddings=int(md.get(p + "context_length", 4096)),
        tie_word_embeddings="output.weight" not in tensor_names,
        attention_bias=arch == "qwen2",
        qk_norm=arch == "qwen3",
        eos_token_ids=[int(eos)] if eos is not None else [],
        bos_token_id=md.get("tokenizer.ggml.bos_token_id"),
        model_path=path,
        tokenizer_path=path,
        is_gguf=True,
    )
