"""Build a model on its device and fill its weights: safetensors (sharded or not), .bin, GGUF, or dummy."""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import threading
from typing import Iterator, List, Optional, Tuple

import torch
from torch import nn
from tqdm import tqdm

from sglang.srt.configs.model_config import ModelConfig, resolve_gguf_file
from sglang.srt.layers.quantization.fp8 import (
    Fp8Config,
    fill_dummy_fp8,
    prepare_checkpoint_layers,
    quantize_loaded_layers,
)
from sglang.srt.layers.quantization.fp8_math import FP8
from sglang.srt.models.registry import get_model_class

logger = logging.getLogger(__name__)

# tqdm guards its bars with a multiprocessing lock (a named semaphore). Children are killed at
# shutdown, so that semaphore would be reported as leaked on every exit; a thread lock is enough.
tqdm.set_lock(threading.RLock())


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def load_model(
    cfg: ModelConfig,
    load_format: str,
    dtype: torch.dtype,
    device: str,
    seed: int = 0,
    show_progress: bool = True,
    quantization: Optional[Fp8Config] = None,
) -> nn.Module:
    with _default_dtype(dtype), torch.device(device):
        model = get_model_class(cfg)(cfg)
    if quantization is not None and quantization.from_checkpoint:
        prepare_checkpoint_layers(model, quantization)
    _fill_weights(model, cfg, load_format, seed, show_progress)
    if quantization is not None and not quantization.from_checkpoint:
        quantize_loaded_layers(model, quantization)
    model.eval()
    return model


def _fill_weights(
    model: nn.Module, cfg: ModelConfig, load_format: str, seed: int, show_progress: bool
) -> None:
    fmt = _resolve_format(cfg, load_format)
    if fmt == "dummy":
        _fill_dummy(model, seed)
        fill_dummy_fp8(model, seed)
        return
    weights, total = _weight_iterator(cfg, fmt)
    model.load_weights(
        tqdm(
            weights,
            total=total,
            desc="Loading weights",
            unit="tensor",
            disable=not show_progress,
            mininterval=0.5,
        )
    )


# What a new checkpoint must share with the loaded model for its tensors to replace the weights in
# place (the shapes, and what the modules built from the config at load time).
_SAME_MODEL_FIELDS = (
    "architecture",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "tie_word_embeddings",
    "attention_bias",
    "qk_norm",
    "hidden_act",
)


def reload_weights(
    model: nn.Module,
    loaded: Tuple[ModelConfig, str],
    new: Tuple[ModelConfig, str],
    seed: int,
) -> None:
    """Copy a checkpoint of the same model into the weights in place (buffers captured by CUDA
    graphs stay valid). A checkpoint of another shape is refused before anything is written; one
    that fails midway is rolled back to `loaded`'s weights, and the error raised. Each side is
    (its config, its load format)."""
    (old_cfg, old_fmt), (new_cfg, new_fmt) = loaded, new
    differ = [f for f in _SAME_MODEL_FIELDS if getattr(old_cfg, f) != getattr(new_cfg, f)]
    if differ:
        raise ValueError(
            f"{new_cfg.model_path} is not the same model as {old_cfg.model_path}: "
            + ", ".join(f"{f} {getattr(new_cfg, f)!r} != {getattr(old_cfg, f)!r}" for f in differ)
        )
    try:
        _fill_weights(model, new_cfg, new_fmt, seed, show_progress=False)
    except Exception:
        logger.exception("Loading %s failed; restoring %s", new_cfg.model_path, old_cfg.model_path)
        _fill_weights(model, old_cfg, old_fmt, seed, show_progress=False)
        raise


def _resolve_format(cfg: ModelConfig, load_format: str) -> str:
    if load_format != "auto":
        return load_format
    if cfg.is_gguf:
        return "gguf"
    if glob.glob(os.path.join(cfg.model_path, "*.safetensors")):
        return "safetensors"
    if glob.glob(os.path.join(cfg.model_path, "*.bin")):
        return "pt"
    raise ValueError(
        f"no weights found in {cfg.model_path} (expected *.safetensors, *.bin or a .gguf file)"
    )


def _weight_iterator(cfg: ModelConfig, fmt: str) -> Tuple[Iterator[Tuple[str, torch.Tensor]], int]:
    if fmt == "gguf":
        from sglang.srt.model_loader.gguf_reader import gguf_tensor_count, iterate_gguf_weights

        path = resolve_gguf_file(cfg.model_path) or cfg.model_path
        return (
            iterate_gguf_weights(
                path, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.model_type
            ),
            gguf_tensor_count(path),
        )
    if fmt == "safetensors":
        files = _safetensors_files(cfg.model_path)
        from safetensors import safe_open

        total = 0
        for f in files:
            with safe_open(f, framework="pt") as h:
                total += len(list(h.keys()))

        def gen() -> Iterator[Tuple[str, torch.Tensor]]:
            for f in files:
                with safe_open(f, framework="pt") as h:
                    for k in h.keys():
                        yield k, h.get_tensor(k)

        return gen(), total
    if fmt == "pt":
        files = sorted(glob.glob(os.path.join(cfg.model_path, "*.bin")))

        def gen_pt() -> Iterator[Tuple[str, torch.Tensor]]:
            for f in files:
                for k, v in torch.load(f, map_location="cpu", weights_only=True).items():
                    yield k, v

        return gen_pt(), None
    raise ValueError(f"unknown load format {fmt}")


def _safetensors_files(path: str) -> List[str]:
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(path, n) for n in names]
    return sorted(glob.glob(os.path.join(path, "*.safetensors")))


@torch.no_grad()
def _fill_dummy(model: nn.Module, seed: int) -> None:
    """Small random weights: realistic shapes and memory traffic for benchmarks, no checkpoint needed."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dtype == FP8 or name.endswith("weight_scale_inv"):
            continue  # an FP8 checkpoint's layers: fill_dummy_fp8
        if name.endswith("norm.weight"):
            p.fill_(1.0)
            continue
        if p.is_cuda:
            g = torch.Generator(device=p.device).manual_seed(seed + hash(name) % 10_000)
            p.uniform_(-0.02, 0.02, generator=g)
        else:
            p.copy_(torch.empty(p.shape, dtype=torch.float32).uniform_(-0.02, 0.02, generator=gen))
