"""Architecture name -> model class."""

from __future__ import annotations

from typing import Type

from torch import nn

from sglang.srt.configs.model_config import ModelConfig


def get_model_class(cfg: ModelConfig) -> Type[nn.Module]:
    if cfg.model_type == "llama":
        from sglang.srt.models.llama import LlamaForCausalLM

        return LlamaForCausalLM
    if cfg.model_type == "qwen2":
        from sglang.srt.models.qwen2 import Qwen2ForCausalLM

        return Qwen2ForCausalLM
    if cfg.model_type == "qwen3":
        from sglang.srt.models.qwen3 import Qwen3ForCausalLM

        return Qwen3ForCausalLM
    raise ValueError(f"no model class for {cfg.architecture}")
