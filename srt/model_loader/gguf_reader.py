"""Read GGUF files: metadata, and tensors dequantized and renamed to HF parameter names.

llama.cpp's converter stores Q and K projections of Llama-family models with their rows permuted
for its interleaved rotary layout; we undo that so the weights match HF's rotate-half layout.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, Iterator, Tuple

import numpy as np
import torch

from sglang.srt.configs.gguf_metadata import gguf_cache_dir, gguf_reader, read_gguf_metadata

logger = logging.getLogger(__name__)

_LAYER_MAP = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_MAP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(gguf_name: str) -> str:
    if gguf_name in _TOP_MAP:
        return _TOP_MAP[gguf_name]
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) >= 4:
        layer, kind, suffix = parts[1], parts[2], ".".join(parts[3:])
        if kind in _LAYER_MAP:
            return f"model.layers.{layer}.{_LAYER_MAP[kind]}.{suffix}"
    raise KeyError(f"unknown GGUF tensor {gguf_name}")


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    rows = w.shape[0]
    rest = w.shape[1:]
    return w.reshape(n_head, rows // n_head // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def iterate_gguf_weights(
    path: str, n_head: int, n_kv_head: int, arch: str
) -> Iterator[Tuple[str, torch.Tensor]]:
    """Yield (hf_name, float32 tensor) for every tensor in the file (from the dequantised cache if present)."""
    cached = os.path.join(gguf_cache_dir(path), "weights.safetensors")
    if os.path.exists(cached):
        from safetensors import safe_open

        with safe_open(cached, framework="pt") as h:
            for k in h.keys():
                yield k, h.get_tensor(k)
        return
    logger.info(
        "First start with %s: dequantising its weights to float32 once; later starts read them from %s.",
        os.path.basename(path),
        os.path.dirname(cached),
    )
    out: Dict[str, torch.Tensor] = {}
    for name, w in _dequantize_all(path, n_head, n_kv_head, arch):
        out[name] = w
        yield name, w
    _write_weight_cache(cached, out)


def _dequantize_all(
    path: str, n_head: int, n_kv_head: int, arch: str
) -> Iterator[Tuple[str, torch.Tensor]]:
    import gguf

    for t in gguf_reader(path).tensors:
        arr = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        name = hf_name(t.name)
        if arch == "llama":
            if name.endswith("q_proj.weight"):
                arr = _unpermute(arr, n_head)
            elif name.endswith("k_proj.weight"):
                arr = _unpermute(arr, n_kv_head)
        yield name, torch.from_numpy(np.array(arr, copy=True))


def _write_weight_cache(path: str, tensors: Dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        save_file(tensors, tmp)
        os.replace(tmp, path)
    except OSError:  # a full or read-only disk only costs the next start its speed
        if os.path.exists(tmp):
            os.remove(tmp)


def gguf_tensor_count(path: str) -> int:
    _, names = read_gguf_metadata(path)
    return len(names)
