"""Rotary frequency scaling against HF transformers' own rope initialisation."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.layers.rotary_embedding import RotaryEmbedding

HEAD_DIM = 64


@pytest.mark.parametrize(
    "params",
    [
        {"rope_type": "linear", "factor": 4.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024,
        },
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 2048,
            "beta_fast": 16,
            "beta_slow": 2,
        },
    ],
)
def test_scaled_frequencies_match_hf(params):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    theta = 500000.0
    cfg = LlamaConfig(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        max_position_embeddings=4096,
        rope_parameters={**params, "rope_theta": theta},
    )
    inv, scale = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu")
    ours = RotaryEmbedding(HEAD_DIM, 4096, theta, params)
    pos = torch.arange(4096, dtype=torch.float64)
    freqs = torch.outer(pos, inv.double())
    emb = torch.cat([freqs, freqs], dim=-1)
    # HF keeps inv_freq in fp32, which is ~1e-4 of angle noise at 4k positions.
    assert torch.allclose(ours.cos_cache.double(), emb.cos() * scale, atol=1e-3)
    assert torch.allclose(ours.sin_cache.double(), emb.sin() * scale, atol=1e-3)
