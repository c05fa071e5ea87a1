"""A GGUF file turned into an ordinary HF model folder (config.json, model.safetensors, tokenizer).

transformers reads GGUF files but will not save_pretrained a model it dequantised from one, and no
model hub is reachable here; this writes the folder from our own readers, so the embedded model (or
any Llama / Qwen2 / Qwen3 GGUF) can be served, tested or fine-tuned as a plain float32 checkpoint.
`sglang export-gguf OUT_DIR [--model-path FILE.gguf]` runs it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from sglang.srt.configs.model_config import ModelConfig, resolve_gguf_file


def hf_config_dict(cfg: ModelConfig) -> Dict[str, Any]:
    d: Dict[str, Any] = {
        "architectures": [cfg.architecture],
        "model_type": cfg.model_type,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "hidden_act": cfg.hidden_act,
        "torch_dtype": "float32",
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_ids[0] if len(cfg.eos_token_ids) == 1 else cfg.eos_token_ids,
    }
    if cfg.model_type == "qwen2":
        d["attention_bias"] = True
    return d


def export_gguf(gguf_path: str, out_dir: str) -> str:
    """Write an HF folder for the GGUF file; returns out_dir."""
    from safetensors.torch import save_file

    from sglang.srt.model_loader.gguf_reader import iterate_gguf_weights
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    path = resolve_gguf_file(gguf_path)
    if path is None:
        raise ValueError(f"{gguf_path!r} is not a .gguf file (or a folder holding one)")
    cfg = ModelConfig.from_path(path)
    os.makedirs(out_dir, exist_ok=True)
    weights = {
        name: w.contiguous()
        for name, w in iterate_gguf_weights(
            path, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.model_type
        )
    }
    save_file(weights, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config_dict(cfg), f, indent=2)
    get_tokenizer(path).save_pretrained(out_dir)
    return out_dir
