"""Qwen3: the Llama decoder with per-head RMSNorm on q and k before rotary (ModelConfig.qk_norm)."""

from sglang.srt.models.llama import LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    pass


EntryClass = Qwen3ForCausalLM
