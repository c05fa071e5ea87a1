"""Architecture configs of real models, written as config.json for `--load-format dummy` benchmarks.

No weights are needed: the runtime fills the parameters with small random values. The `tiny-*`
shapes keep CPU runs (and the CPU test of the benchmarks) fast.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from typing import Any, Dict

_LLAMA3_8B: Dict[str, Any] = dict(
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=128256,
    max_position_embeddings=8192,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_id=128001,
    hidden_act="silu",
    attention_bias=False,
    torch_dtype="bfloat16",
)

# Llama-3.1-8B: the same shape with a 128k context (llama3 rope scaling).
_LLAMA31_8B: Dict[str, Any] = dict(
    _LLAMA3_8B,
    max_position_embeddings=131072,
    rope_scaling=dict(
        rope_type="llama3",
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    ),
)

# Llama-3.2-1B: Llama-3's tokenizer in a 1.2B model, the natural draft for Llama-3-8B.
_LLAMA32_1B: Dict[str, Any] = dict(
    _LLAMA3_8B,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    head_dim=64,
    tie_word_embeddings=True,
)

_QWEN3_06B: Dict[str, Any] = dict(
    architectures=["Qwen3ForCausalLM"],
    model_type="qwen3",
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    bos_token_id=151643,
    eos_token_id=151645,
    hidden_act="silu",
    attention_bias=False,
    torch_dtype="bfloat16",
)

_QWEN3_8B: Dict[str, Any] = dict(
    _QWEN3_06B,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    tie_word_embeddings=False,
)

# An FP8 checkpoint as published (Qwen3-8B-FP8, DeepSeek): 128 x 128 block scales, dynamic
# activation scales; --load-format dummy fills it with random fp8 weights.
_FP8_BLOCKS: Dict[str, Any] = dict(
    quant_method="fp8", fmt="e4m3", activation_scheme="dynamic", weight_block_size=[128, 128]
)

MODEL_CONFIGS: Dict[str, Dict[str, Any]] = {
    "llama3-8b": _LLAMA3_8B,
    "llama3-8b-fp8-blocks": dict(_LLAMA3_8B, quantization_config=_FP8_BLOCKS),
    "llama3.1-8b": _LLAMA31_8B,
    "llama3.2-1b": _LLAMA32_1B,
    "qwen3-0.6b": _QWEN3_06B,
    "qwen3-8b": _QWEN3_8B,
    # CPU-sized shapes with the same structure (GQA, rope, tied / untied heads).
    "tiny-llama": dict(
        _LLAMA3_8B,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "tiny-llama-fp8-blocks": dict(
        _LLAMA3_8B,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=512,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        quantization_config=_FP8_BLOCKS,
    ),
    "tiny-qwen3": dict(
        _QWEN3_06B,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=512,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
    ),
}


def write_model_config(name: str, folder: str = "") -> str:
    """Write MODEL_CONFIGS[name] as folder/config.json (a fresh temp folder by default); returns the folder."""
    if name not in MODEL_CONFIGS:
        raise ValueError(f"unknown model config {name!r}; known: {sorted(MODEL_CONFIGS)}")
    folder = folder or tempfile.mkdtemp(prefix=f"sgl-{name}-")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(MODEL_CONFIGS[name], f, indent=1)
    return folder


def write_model_dir(name: str, folder: str, tokenizer_dir: str) -> str:
    """A servable dummy model: MODEL_CONFIGS[name] with its vocabulary and special ids taken from the
    tokenizer in tokenizer_dir (copied in), so every sampled id decodes and the server has a chat template."""
    cfg = dict(MODEL_CONFIGS[name])
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(tokenizer_dir):
        shutil.copy(os.path.join(tokenizer_dir, f), folder)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    cfg.update(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return folder


def main() -> None:
    p = argparse.ArgumentParser(
        description="Write a model config (and tokenizer) folder for --load-format dummy"
    )
    p.add_argument("name", choices=sorted(MODEL_CONFIGS))
    p.add_argument("folder")
    p.add_argument(
        "--tokenizer-dir",
        default=None,
        help="Copy this tokenizer in and take the vocabulary from it",
    )
    a = p.parse_args()
    if a.tokenizer_dir:
        print(write_model_dir(a.name, a.folder, a.tokenizer_dir))
    else:
        print(write_model_config(a.name, a.folder))


if __name__ == "__main__":
    main()
