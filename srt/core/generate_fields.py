"""The top-level fields of SGLang's /generate body, and what this server does with each one.

SGLang's own clients (bench_serving, sglang-router, the frontend) send fields for features a server
may not have, at neutral values (`"lora_path": null`, `"return_hidden_states": false`). The rule:
- every field SGLang's GenerateReqInput has is accepted;
- a field of a feature not built here is accepted at its neutral value (null, false, 0, an empty
  list or object, or a batch list of those) and refused with a 400 naming the feature otherwise;
- routing and tracing hints are accepted and change nothing on one server;
- a top-level name SGLang does not know is ignored, as SGLang ignores it. (Unknown keys inside
  `sampling_params` stay an error: a misspelt sampling knob must not be silently dropped.)
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

# Hints for a router, a tracer or a multi-worker front end.
HINT_FIELDS: Tuple[str, ...] = (
    "routing_key",
    "conversation_id",
    "external_trace_header",
    "custom_labels",
    "http_worker_ipc",
)

# Feature not built here -> the fields that ask for it.
UNBUILT_FEATURES: Dict[str, Tuple[str, ...]] = {
    "multimodal input": (
        "input_embeds", "image_data", "video_data", "audio_data", "mm_hashes", "mm_content_hashes",
        "use_audio_in_video", "video_config", "modalities", "need_wait_for_mm_inputs", "num_items_assigned",
        "encoder_urls", "max_dynamic_patch", "min_dynamic_patch", "image_max_dynamic_patch",
        "video_max_dynamic_patch", "images_config", "mm_processor_kwargs",
    ),
    "sessions": ("session_id", "session_params"),
    "LoRA adapters": ("lora_path", "lora_id"),
    "watermarking": ("watermark",),
    "logprobs of chosen token ids": ("token_ids_logprob",),
    "sampling masks and raw logprob outputs": (
        "return_sampling_mask", "sampling_logprobs_mode", "return_flat_raw_top_logprobs",
        "return_flat_raw_output_top_logprobs", "return_flat_raw_top_logprobs_b64",
    ),
    "hidden-state output": ("return_hidden_states",),
    "MoE routed-expert output": ("return_routed_experts", "routed_experts_start_len", "return_indexer_topk"),
    "custom logit processors": ("custom_logit_processor",),
    "positional embedding overrides": ("positional_embed_overrides",),
    "prefill/decode disaggregation": (
        "bootstrap_host", "bootstrap_port", "bootstrap_room", "bootstrap_pair_key", "decode_tp_size",
        "disagg_prefill_dp_rank",
    ),
    "routing to a chosen data-parallel rank": ("routed_dp_rank", "data_parallel_rank"),
    "reasoning control": ("require_reasoning", "max_thinking_tokens"),
    "byte and entropy outputs": ("return_bytes", "return_entropy"),
    "prompt token ids in the output": ("return_prompt_token_ids",),
    "embedding and scoring inputs": ("multi_item_delimiter_indices", "token_indices_to_pool"),
    "cache salts": ("cache_salt",),
    "KV hints": ("kv_hints",),
}  # fmt: skip

FEATURE_OF: Dict[str, str] = {
    f: feature for feature, names in UNBUILT_FEATURES.items() for f in names
}


def is_neutral(value: Any) -> bool:
    """null, false, 0, "", [] or {} (or a batch list of such): the value that asks for nothing."""
    if isinstance(value, list):
        return all(is_neutral(v) for v in value)
    if isinstance(value, (str, dict)):
        return not value
    return value is None or value is False or (isinstance(value, (int, float)) and value == 0)


def check_unbuilt(body: Dict[str, Any]) -> None:
    """Raise ValueError naming the feature when a field asks for something this server lacks."""
    for name, value in body.items():
        feature = FEATURE_OF.get(name)
        if feature is not None and not is_neutral(value):
            raise ValueError(
                f"`{name}` asks for {feature}, which this server does not support; leave it unset "
                f"(null or false) or send the request to a server that has it."
            )
