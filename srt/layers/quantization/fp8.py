"""FP8 weights for the linear layers (QKV, O, gate-up, down; never embeddings, norms or the LM head).

Two sources:
- online (`--quantization fp8` on a bf16 / fp16 / fp32 checkpoint): after loading, each weight
  becomes float8_e4m3fn with one float32 scale per output channel;
- an FP8 checkpoint (config.json `quantization_config.quant_method: fp8`, 128 x 128 blocks with
  `weight_scale_inv`, as Qwen3-*-FP8 and DeepSeek ship them): the layers get fp8 weights and block
  scale parameters before loading, so the checkpoint is read as it is, never dequantized.

The matmul (Fp8LinearMethod.apply) runs on FP8 tensor cores where the device has them
(fp8_cuda.py); elsewhere it dequantizes the layer's weight on the fly (the CPU, for tests and small
models), which gives exactly what a checkpoint of the dequantized weights would.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.layers.linear import LinearBase, Placement, load_placed
from sglang.srt.layers.quantization.fp8_math import FP8, dequantize, quantize_per_channel

logger = logging.getLogger(__name__)

# What --quantization accepts.
QUANTIZATION_METHODS = ["fp8"]


@dataclass(frozen=True)
class Fp8Config:
    block: Optional[Tuple[int, int]]  # None: one scale per output channel
    from_checkpoint: bool
    ignored: Tuple[str, ...] = ()  # module names the checkpoint left in high precision

    @staticmethod
    def from_hf(q: Dict[str, Any]) -> "Fp8Config":
        block = q.get("weight_block_size")
        if not block or len(block) != 2:
            raise ValueError(
                "FP8 checkpoints are read with 2-D block scales (quantization_config."
                f"weight_block_size, e.g. [128, 128]); this one has {block!r}"
            )
        if q.get("activation_scheme", "dynamic") != "dynamic":
            raise ValueError("FP8 checkpoints with static activation scales are not supported")
        ignored = tuple(q.get("modules_to_not_convert") or q.get("ignored_layers") or ())
        return Fp8Config((int(block[0]), int(block[1])), True, ignored)


def resolve_quantization(
    requested: Optional[str], checkpoint: Optional[Dict[str, Any]]
) -> Optional[Fp8Config]:
    """The FP8 plan from --quantization and the checkpoint's quantization_config."""
    method = (checkpoint or {}).get("quant_method")
    if method is not None and method != "fp8":
        raise ValueError(f"checkpoint quantization {method!r} is not supported (only fp8)")
    if requested is not None and requested not in QUANTIZATION_METHODS:
        raise ValueError(f"--quantization must be one of {QUANTIZATION_METHODS}, got {requested!r}")
    if method == "fp8":
        return Fp8Config.from_hf(checkpoint)
    if requested == "fp8":
        return Fp8Config(block=None, from_checkpoint=False)
    return None


def quantizable_layers(model: nn.Module, cfg: Fp8Config) -> Iterator[Tuple[str, LinearBase]]:
    for name, mod in model.named_modules():
        if isinstance(mod, LinearBase) and not any(i in name for i in cfg.ignored):
            yield name, mod


# ------------------------------------------------------------------------------ before loading
def prepare_checkpoint_layers(model: nn.Module, cfg: Fp8Config) -> None:
    """FP8 checkpoints: fp8 weight and block-scale parameters that the loader fills as they are."""
    assert cfg.block is not None
    bn, bk = cfg.block
    for _, layer in quantizable_layers(model, cfg):
        n, k = layer.weight.shape
        w = nn.Parameter(
            torch.empty(n, k, dtype=FP8, device=layer.weight.device), requires_grad=False
        )
        w.weight_loader = layer.weight_loader
        layer.weight = w
        s = nn.Parameter(
            torch.empty(math.ceil(n / bn), math.ceil(k / bk), dtype=torch.float32, device=w.device),
            requires_grad=False,
        )
        s.weight_loader = _block_scale_loader(layer, cfg.block)
        layer.weight_scale_inv = s
        layer.quant_method = Fp8LinearMethod(cfg.block)


def _block_scale_loader(layer: LinearBase, block: Tuple[int, int]):
    def load(param: nn.Parameter, loaded: torch.Tensor, shard_id: Any = None) -> None:
        p = layer.placement(shard_id)
        b = block[p.dim]
        if p.dst % b or p.src % b:
            raise ValueError(
                f"an FP8 block of {b} straddles this layer's shard boundary ({p}); this tensor-"
                "parallel split cannot read its block scales"
            )
        size = math.ceil(p.size / b)
        load_placed(param, loaded, Placement(p.dim, p.dst // b, size, p.src // b))

    return load


# ------------------------------------------------------------------------------ after loading
@torch.no_grad()
def quantize_loaded_layers(model: nn.Module, cfg: Fp8Config) -> None:
    """Online FP8: every loaded high-precision weight becomes fp8 with per-channel scales."""
    for _, layer in quantizable_layers(model, cfg):
        q, s = quantize_per_channel(layer.weight.data)
        layer.weight = nn.Parameter(q, requires_grad=False)
        layer.weight_scale = nn.Parameter(s, requires_grad=False)
        layer.quant_method = Fp8LinearMethod(None)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the high-precision copies go back before the KV pool is sized


@torch.no_grad()
def fill_dummy_fp8(model: nn.Module, seed: int) -> None:
    """--load-format dummy on an FP8 checkpoint config: small random fp8 weights, scales of 1/448."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    for _, mod in model.named_modules():
        if isinstance(mod, LinearBase) and mod.weight.dtype == FP8:
            w = torch.empty(mod.weight.shape).uniform_(-8.0, 8.0, generator=g)
            mod.weight.data.copy_(w.to(FP8))
            mod.weight_scale_inv.data.fill_(0.02 / 8.0)


# ------------------------------------------------------------------------------ the matmul
class Fp8LinearMethod:
    def __init__(self, block: Optional[Tuple[int, int]]):
        self.block = block
        self._cuda: Any = None  # fp8_cuda.Fp8Matmul, bound on the first CUDA call

    @staticmethod
    def scales(layer: LinearBase) -> torch.Tensor:
        return layer.weight_scale_inv if hasattr(layer, "weight_scale_inv") else layer.weight_scale

    def apply(
        self, layer: LinearBase, x: torch.Tensor, bias: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])
        if x.is_cuda:
            if self._cuda is None:
                from sglang.srt.layers.quantization.fp8_cuda import Fp8Matmul

                self._cuda = Fp8Matmul.for_device(x.device)
            y = self._cuda(x2, layer.weight, self.scales(layer), self.block, bias)
        else:
            w = dequantize(layer.weight, self.scales(layer), self.block, x.dtype)
            y = F.linear(x2, w, bias)
        return y.reshape(*lead, y.shape[-1])
