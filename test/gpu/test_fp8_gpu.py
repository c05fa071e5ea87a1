"""FP8 matmuls on CUDA against the fp32 product of the dequantized weights (skipped without a GPU
with FP8 tensor cores): the one-row GEMV with per-channel and block scales, the rowwise-scaled
tensor-core path at several row counts, and an FP8 model's decode under CUDA graphs."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
        reason="needs a CUDA device with FP8 tensor cores (sm_89+)",
    ),
]


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 14336), (1000, 320)])
@pytest.mark.parametrize("block", [None, (128, 128)])
def test_fp8_gemv_matches_dequantized_reference(n, k, block):
    from sglang.srt.layers.quantization.fp8_math import dequantize, quantize
    from sglang.srt.layers.triton_ops.gemv import gemv

    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    q, s = quantize(w, block)
    x = torch.randn(1, k, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    ref = x.float() @ dequantize(q, s, block).t() + bias.float()
    out = gemv(x, q, bias, w_scale=s.contiguous(), scale_block=block)
    assert _rel(out, ref) < 1e-2


@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 14336), (28672, 4096), (1000, 320)])
def test_fp8_halves_gemv_matches_dequantized_reference(n, k):
    """The f16x2 GEMV: fp16 products of x / max|x| (an outlier of 900 must not overflow), fp32
    output within fp16 rounding; bf16 in and out within bf16 rounding."""
    from sglang.srt.layers.quantization.fp8_gemv import fp8_gemv_halves
    from sglang.srt.layers.quantization.fp8_math import dequantize, quantize

    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    w[:, : k // 5] *= 1e-4
    q, s = quantize(w)
    x = torch.randn(1, k, device="cuda", generator=g)
    x[0, k // 3] = 900.0
    bias = torch.randn(n, device="cuda", generator=g)
    ref = x @ dequantize(q, s).t() + bias
    assert _rel(fp8_gemv_halves(x, q, s, bias), ref) < 1e-3
    xb = x.to(torch.bfloat16)
    out = fp8_gemv_halves(xb, q, s, bias.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    assert _rel(out, xb.float() @ dequantize(q, s).t() + bias) < 1e-2


@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 14336), (1000, 320)])
@pytest.mark.parametrize("block", [None, (128, 128)])
def test_fp8_word_gemv_matches_dequantized_reference(n, k, block):
    """The integer-widening GEMV in fp32 output, so only summation order may differ; a fifth of
    the weights are tiny (subnormal or zero e4m3 bytes): a device that flushed denormals would
    drop them."""
    from sglang.srt.layers.quantization.fp8_gemv import fp8_gemv
    from sglang.srt.layers.quantization.fp8_math import dequantize, quantize

    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    w[:, : k // 5] *= 1e-4
    q, s = quantize(w, block)
    x = torch.randn(1, k, device="cuda", generator=g)
    bias = torch.randn(n, device="cuda", generator=g)
    ref = x @ dequantize(q, s, block).t() + bias
    assert _rel(fp8_gemv(x, q, s.contiguous(), block, bias), ref) < 1e-5
    # The tiny weights alone: their products are fp32 denormals (absolute precision 2^-149 before
    # the 2^120 rescale), so a few 1e-5 relative; a flushing device would give ~100%.
    t = k // 5 // 4 * 4
    small = x[:, :t] @ dequantize(q, s, block)[:, :t].t()
    if block is None:
        out_small = fp8_gemv(x[:, :t].contiguous(), q[:, :t].contiguous(), s.contiguous())
        assert _rel(out_small, small) < 1e-3
    xb = x.to(torch.bfloat16)
    out = fp8_gemv(xb, q, s.contiguous(), block, bias.to(torch.bfloat16))
    assert (
        out.dtype == torch.bfloat16
        and _rel(out, xb.float() @ dequantize(q, s, block).t() + bias) < 1e-2
    )


@pytest.mark.parametrize("m", [2, 17, 64, 300])
def test_scaled_mm_rowwise_matches_dequantized_reference(m):
    from sglang.srt.layers.quantization.fp8_cuda import scaled_mm_rowwise
    from sglang.srt.layers.quantization.fp8_math import dequantize, quantize_per_channel

    g = torch.Generator(device="cuda").manual_seed(1)
    w = torch.randn(4096, 4096, device="cuda", generator=g) * 0.02
    q, s = quantize_per_channel(w)
    x = torch.randn(m, 4096, device="cuda", generator=g).to(torch.bfloat16)
    ref = x.float() @ dequantize(q, s).t()
    out = scaled_mm_rowwise(x, q, s)
    assert out.shape == (m, 4096) and _rel(out, ref) < 3e-2  # activations are fp8 too


@pytest.mark.parametrize("m", [1, 5, 64, 300])
@pytest.mark.parametrize("block", [None, (128, 128)])
def test_triton_fp8_matmul_matches_dequantized_reference(m, block):
    """The FP8 x FP8 Triton kernel (per-channel rows and 128-block checkpoints) on tensor cores."""
    from sglang.srt.layers.quantization.fp8_cuda import blockwise_matmul, channelwise_matmul
    from sglang.srt.layers.quantization.fp8_math import dequantize, quantize

    g = torch.Generator(device="cuda").manual_seed(2)
    w = torch.randn(3000, 4096, device="cuda", generator=g) * 0.02
    q, s = quantize(w, block)
    x = torch.randn(m, 4096, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(3000, device="cuda", generator=g).to(torch.bfloat16)
    ref = x.float() @ dequantize(q, s, block).t() + bias.float()
    if block:
        out = blockwise_matmul(x, q, s.contiguous(), block, bias)
    else:
        out = channelwise_matmul(x, q, s, bias)
    assert out.shape == (m, 3000) and _rel(out, ref) < 3e-2  # activations are fp8 too


def test_fp8_model_decode_under_cuda_graphs_matches_eager(tmp_path):
    """A Llama-shaped dummy model with --quantization fp8: greedy ids of graph replays equal the
    eager ones (same kernels, same FP8 weights)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmark"))
    from model_configs import write_model_config

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.static_batch import StaticBatch
    from sglang.srt.server_args import ServerArgs

    path = write_model_config("tiny-llama", str(tmp_path / "m"))
    outs = []
    for graphs in (False, True):
        sa = ServerArgs(
            model_path=path,
            load_format="dummy",
            quantization="fp8",
            device="cuda",
            max_total_tokens=4096,
            disable_cuda_graph=not graphs,
            cuda_graph_max_bs=8,
        )
        runner = ModelRunner.from_server_args(
            ModelConfig.from_path(path), sa, "cuda", show_progress=False
        )
        sb = StaticBatch(runner)
        ids = []
        with torch.no_grad():
            logits = sb.prefill([list(range(3, 40)), list(range(9, 30))]).next_token_logits
            for _ in range(6):
                nxt = logits.argmax(-1)
                ids.append(nxt.tolist())
                logits = sb.decode(nxt).next_token_logits
        sb.release()
        outs.append(ids)
        del runner
        torch.cuda.empty_cache()
    assert outs[0] == outs[1]


@pytest.mark.parametrize("m,k,rows", [(1, 4096, 16), (37, 14336, 48), (64, 320, 64)])
def test_per_token_quant_kernel_matches_torch(m, k, rows):
    from sglang.srt.layers.quantization.fp8_kernels import per_token_quant_fp8
    from sglang.srt.layers.quantization.fp8_math import quantize_per_token

    x = (torch.randn(m, k, device="cuda") * torch.logspace(-2, 2, m, device="cuda")[:, None]).to(
        torch.bfloat16
    )
    q, s = per_token_quant_fp8(x, rows)
    rq, rs = quantize_per_token(x)
    torch.testing.assert_close(s[:m], rs, rtol=1e-6, atol=0)
    assert (q[:m].float() - rq.float()).abs().max() <= rq.float().abs().max() * 2**-3
    assert q.shape == (rows, k) and not q[m:].float().any() and (s[m:] == 1).all()


@pytest.mark.parametrize("m", [1, 5, 64])
def test_small_m_kernel_with_fp8_weights(m):
    from sglang.srt.layers.quantization.fp8_math import dequantize, quantize_per_channel
    from sglang.srt.layers.triton_ops.small_m_gemm import small_m_matmul

    g = torch.Generator(device="cuda").manual_seed(2)
    w = torch.randn(6144, 4096, device="cuda", generator=g) * 0.02
    q, s = quantize_per_channel(w)
    x = torch.randn(m, 4096, device="cuda", generator=g).to(torch.bfloat16)
    ref = x.float() @ dequantize(q, s).t()
    assert _rel(small_m_matmul(x, q, w_scale=s), ref) < 1e-2


@pytest.mark.parametrize("m", [1, 8, 64])
@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 14336), (1000, 320)])
@pytest.mark.parametrize("block", [None, (128, 128)])
def test_fp8_fused_quant_matmul_matches_tile_quantized_reference(m, n, k, block):
    """The FP8 kernel that quantizes x per (row, K tile) itself: torch quantizes the same tiles by
    the same rule, so with fp32 in and out only the summation order and the tensor cores' FP8
    accumulation (narrower than fp32 on sm_90 within one K tile) may differ."""
    from sglang.srt.layers.quantization.fp8_gemm import _default_config, fp8_matmul_fused
    from sglang.srt.layers.quantization.fp8_math import dequantize, quantize, quantize_per_token

    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    q, s = quantize(w, block)
    x = torch.randn(m, k, device="cuda", generator=g)
    x[0, k // 3] = 900.0
    bias = torch.randn(n, device="cuda", generator=g)
    tile = block[1] if block else _default_config(m, n, k)["BLOCK_K"]
    parts = [quantize_per_token(x[:, k0 : k0 + tile]) for k0 in range(0, k, tile)]
    xq = torch.cat([p.float() * sc for p, sc in parts], dim=1)
    ref = xq @ dequantize(q, s, block).t() + bias
    assert _rel(fp8_matmul_fused(x, q, s.contiguous(), block, bias), ref) < 1e-3
    xb = x.to(torch.bfloat16)
    out = fp8_matmul_fused(xb, q, s.contiguous(), block, bias.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16 and _rel(out, ref) < 2e-2
