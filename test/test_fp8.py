"""FP8 weights on the CPU: the quantization arithmetic, online --quantization fp8 against the
unquantized model, the embedded model still answering, and an FP8 block-scaled checkpoint read as
it is (matching a checkpoint of its dequantized weights exactly)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.quantization.fp8 import resolve_quantization
from sglang.srt.layers.quantization.fp8_math import (
    FP8,
    dequantize,
    quantize_blocks,
    quantize_per_channel,
    quantize_per_tensor,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.static_batch import StaticBatch
from sglang.srt.server_args import ServerArgs

# e4m3 has 3 mantissa bits: a normal value rounds within 2^-4 of itself; below 2^-6 (in scaled
# units) the spacing is the subnormal step 2^-9, so the absolute error there is at most 2^-10.
REL, SUB = 2.0**-4, 2.0**-10


def _bound(w: torch.Tensor, scale_full: torch.Tensor) -> torch.Tensor:
    return w.abs() * REL + scale_full * SUB


def test_round_trip_errors_stay_within_fp8_bounds():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(96, 200, generator=g) * torch.logspace(-3, 1, 96)[:, None]  # rows far apart
    q, s = quantize_per_channel(w)
    assert q.dtype == FP8 and s.shape == (96,)
    err = (dequantize(q, s) - w).abs()
    assert (err <= _bound(w, s[:, None].expand_as(w))).all()
    assert torch.allclose(q.float().abs().amax(dim=1), torch.full((96,), 448.0))
    qb, sb = quantize_blocks(w, (32, 64))
    assert sb.shape == (3, 4)
    full = sb.repeat_interleave(32, 0).repeat_interleave(64, 1)[:, :200]
    assert ((dequantize(qb, sb, (32, 64)) - w).abs() <= _bound(w, full)).all()
    qt, st = quantize_per_tensor(w)
    assert ((dequantize(qt, st) - w).abs() <= _bound(w, st.expand_as(w))).all()
    zero_q, zero_s = quantize_per_channel(torch.zeros(2, 8))
    assert torch.equal(dequantize(zero_q, zero_s), torch.zeros(2, 8))


def test_quantization_choices_are_refused_clearly():
    with pytest.raises(ValueError, match="quantization"):
        ServerArgs(quantization="int4")
    with pytest.raises(ValueError, match="'awq' is not supported"):
        resolve_quantization(None, {"quant_method": "awq"})
    with pytest.raises(ValueError, match="weight_block_size"):
        resolve_quantization(None, {"quant_method": "fp8"})
    assert resolve_quantization("fp8", None).block is None
    assert resolve_quantization(
        None, {"quant_method": "fp8", "weight_block_size": [128, 128]}
    ).block == (128, 128)


def _runner(path: str, **kw) -> ModelRunner:
    sa = ServerArgs(model_path=path, device="cpu", max_total_tokens=4096, dtype="float32", **kw)
    return ModelRunner.from_server_args(ModelConfig.from_path(path), sa, "cpu", show_progress=False)


def _last_logits(runner: ModelRunner, prompt) -> torch.Tensor:
    sb = StaticBatch(runner)
    try:
        with torch.no_grad():
            return sb.prefill([prompt]).next_token_logits[-1].clone()
    finally:
        sb.release()


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_online_fp8_is_close_to_the_unquantized_model(tiny_models, arch):
    path = tiny_models[arch]
    prompt = list(range(5, 45))
    ref = _runner(path)
    fp8 = _runner(path, quantization="fp8")
    assert fp8.quantization_name() == "fp8 (per channel)"
    layer = fp8.model.model.layers[0].mlp.down_proj
    assert layer.weight.dtype == FP8 and layer.weight_scale.dtype == torch.float32
    assert ref.model.lm_head.weight.dtype == fp8.model.lm_head.weight.dtype == torch.float32
    # Linear weights halve again against bf16 (a quarter of float32); embeddings and head do not.
    assert fp8.weight_bytes() < ref.weight_bytes()
    a, b = _last_logits(ref, prompt), _last_logits(fp8, prompt)
    assert torch.nn.functional.cosine_similarity(a, b, dim=0) > 0.99


def test_embedded_model_with_fp8_weights_still_knows_paris(smollm_path, tok):
    runner = _runner(smollm_path, quantization="fp8")
    ids = tok.encode("The capital of France is")
    sb = StaticBatch(runner)
    out = []
    with torch.no_grad():
        logits = sb.prefill([ids]).next_token_logits
        for _ in range(4):
            nxt = int(logits[-1].argmax())
            out.append(nxt)
            logits = sb.decode([nxt]).next_token_logits
    sb.release()
    assert "Paris" in tok.decode(out)


def _write_block_fp8_checkpoint(src: str, dst_fp8: str, dst_ref: str, block=(32, 32)) -> None:
    """From a float checkpoint: one with fp8 linear weights + weight_scale_inv (and a
    quantization_config), one with exactly those weights dequantized."""
    weights = load_file(os.path.join(src, "model.safetensors"))
    fp8, ref = {}, {}
    for name, w in weights.items():
        linear = name.endswith("_proj.weight")
        if linear:
            q, s = quantize_blocks(w, block)
            fp8[name], fp8[name.replace(".weight", ".weight_scale_inv")] = q, s
            ref[name] = dequantize(q, s, block)
        else:
            fp8[name] = ref[name] = w
    for dst, tensors in ((dst_fp8, fp8), (dst_ref, ref)):
        shutil.copytree(src, dst)
        save_file(
            {k: v.contiguous() for k, v in tensors.items()}, os.path.join(dst, "model.safetensors")
        )
    cfg_path = os.path.join(dst_fp8, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["quantization_config"] = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": list(block),
    }
    json.dump(cfg, open(cfg_path, "w"))


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_block_scaled_fp8_checkpoint_matches_its_dequantized_weights(tiny_models, tmp_path, arch):
    fp8_path, ref_path = str(tmp_path / "fp8"), str(tmp_path / "ref")
    _write_block_fp8_checkpoint(tiny_models[arch], fp8_path, ref_path)
    fp8, ref = _runner(fp8_path), _runner(ref_path)
    assert fp8.quantization_name() == "fp8 (blocks 32x32)"
    qkv = fp8.model.model.layers[1].self_attn.qkv_proj
    assert qkv.weight.dtype == FP8 and qkv.weight_scale_inv.shape == (
        qkv.weight.shape[0] // 32,
        qkv.weight.shape[1] // 32,
    )
    prompt = list(range(7, 40))
    assert torch.equal(_last_logits(fp8, prompt), _last_logits(ref, prompt))
