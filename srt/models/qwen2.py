"""Qwen2: the Llama decoder with biases on the q/k/v projections (set by ModelConfig.attention_bias)."""

from sglang.srt.models.llama import LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    pass


EntryClass = Qwen2ForCausalLM
