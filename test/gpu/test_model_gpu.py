"""The CUDA model path end to end on small random checkpoints: CUDA-graph replay equals eager,
greedy tokens equal the CPU path's (StaticBatch and the full Engine with overlap), fp8 KV stays close
to bf16 KV. Prompts are fresh random token ids per test.
"""

from __future__ import annotations

import itertools
import math
from typing import Dict, List, Optional

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

_SEEDS = itertools.count(2000)
STEPS = 16


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    if not torch.isfinite(a).all():
        return math.inf
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _runner(path: str, device: str, dtype: str = "auto", kv: str = "auto", graphs: bool = True):
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    sa = ServerArgs(
        model_path=path,
        device=device,
        dtype=dtype,
        kv_cache_dtype=kv,
        max_total_tokens=16384,
        max_running_requests=16,
        cuda_graph_max_bs=16,
        disable_cuda_graph=not graphs,
    )
    return ModelRunner.from_server_args(
        ModelConfig.from_path(path), sa, device, show_progress=False
    )


_CACHE: Dict[tuple, object] = {}


def runner(path: str, device: str, **kw):
    key = (path, device, tuple(sorted(kw.items())))
    if key not in _CACHE:
        _CACHE[key] = _runner(path, device, **kw)
    return _CACHE[key]


def _prompts(n: int, vocab: int) -> List[List[int]]:
    g = torch.Generator().manual_seed(next(_SEEDS))
    lens = torch.randint(5, 200, (n,), generator=g).tolist()
    return [torch.randint(3, vocab, (ln,), generator=g).tolist() for ln in lens]


def greedy(r, prompts, steps: int = STEPS, forced: Optional[List[List[int]]] = None):
    """Greedy tokens and per-step logits (cloned: graph outputs are reused buffers). `forced` feeds
    another run's tokens so logits stay comparable past a near-tie."""
    from sglang.srt.model_executor.static_batch import StaticBatch

    sb = StaticBatch(r)
    try:
        with torch.no_grad():
            out = sb.prefill(prompts)
            logits = [out.next_token_logits.float().cpu()]
            toks = [[] for _ in prompts]
            for step in range(steps):
                nxt = out.next_token_logits.argmax(-1)
                if forced is not None:
                    nxt = torch.tensor([f[step] for f in forced], device=nxt.device)
                for t, n in zip(toks, nxt.tolist()):
                    t.append(n)
                out = sb.decode(nxt)
                logits.append(out.next_token_logits.float().cpu())
        return toks, logits
    finally:
        sb.release()


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_cuda_graph_replay_equals_eager(arch: str, tiny_ckpts) -> None:
    r = runner(tiny_ckpts[arch], "cuda")
    gr = r.graph_runner
    assert gr is not None and gr.capture_bs[-1] == 16
    for bs in (1, 5, 12):  # 5 replays the bs-8 graph with 3 padded rows
        prompts = _prompts(bs, r.vocab_size)
        before = gr.num_replays
        toks, g_logits = greedy(r, prompts)
        assert gr.num_replays - before == STEPS, "decode steps did not replay graphs"
        r.graph_runner = None
        try:
            _, e_logits = greedy(r, prompts, forced=toks)
        finally:
            r.graph_runner = gr
        err = max(_rel(a, b) for a, b in zip(g_logits, e_logits))
        assert err < 5e-3, f"bs {bs} (graph {gr.padded_size(bs)}): rel {err:.2e}"


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_greedy_tokens_equal_cpu_path(arch: str, tiny_ckpts) -> None:
    """fp32 on both devices: Triton attention, fused ops and graphs on CUDA; torch-native on the CPU."""
    gpu = runner(tiny_ckpts[arch], "cuda", dtype="float32")
    cpu = runner(tiny_ckpts[arch], "cpu")
    prompts = _prompts(4, cpu.vocab_size)
    c_toks, c_logits = greedy(cpu, prompts)
    g_toks, g_logits = greedy(gpu, prompts)
    assert g_toks == c_toks
    err = max(_rel(a, b) for a, b in zip(g_logits, c_logits))
    assert err < 1e-2, f"rel {err:.2e}"


def test_small_m_matmul_end_to_end(tiny_ckpts) -> None:
    """Every matmul of at most 64 rows through our Triton kernels (--skinny-matmul triton) gives the
    logits of cuBLAS within bf16 rounding, at a decode batch of 12 rows (eager: a rebinding applies at
    once, where captured graphs would keep their kernels)."""
    from sglang.srt.layers.fused_ops_binding import bind_fused_ops

    r = runner(tiny_ckpts["llama"], "cuda", graphs=False)
    prompts = _prompts(12, r.vocab_size)
    try:
        bind_fused_ops(skinny_matmul="all")
        toks, ours = greedy(r, prompts)
        bind_fused_ops(skinny_matmul="cublas")
        _, ref = greedy(r, prompts, forced=toks)
    finally:
        bind_fused_ops(skinny_matmul="measured")
    err = max(_rel(a, b) for a, b in zip(ours, ref))
    assert err < 1e-2, f"rel {err:.2e}"


def test_bf16_close_to_cpu_fp32(tiny_ckpts) -> None:
    gpu = runner(tiny_ckpts["llama"], "cuda")  # bf16 (the config's dtype on CUDA)
    cpu = runner(tiny_ckpts["llama"], "cpu")
    prompts = _prompts(6, cpu.vocab_size)
    c_toks, c_logits = greedy(cpu, prompts, steps=8)
    _, g_logits = greedy(gpu, prompts, steps=8, forced=c_toks)
    err = max(_rel(a, b) for a, b in zip(g_logits, c_logits))
    assert err < 5e-2, f"rel {err:.2e}"


def test_fp8_kv_close_to_bf16(tiny_ckpts) -> None:
    path = tiny_ckpts["qwen3"]
    bf16 = runner(path, "cuda")
    fp8 = runner(path, "cuda", kv="fp8_e4m3")
    assert fp8.token_to_kv_pool.k_buffer[0].dtype == torch.float8_e4m3fn
    assert fp8.cell_size() * 2 == bf16.cell_size()
    prompts = _prompts(6, bf16.vocab_size)
    toks, ref = greedy(bf16, prompts)
    _, got = greedy(fp8, prompts, forced=toks)
    err = max(_rel(a, b) for a, b in zip(got, ref))
    assert err < 0.1, f"rel {err:.2e}"


def _engine_outputs(path: str, device: str, prompts, overlap: bool, **extra) -> List[List[int]]:
    from sglang.srt.entrypoints.engine import Engine

    sp = {"max_new_tokens": STEPS, "temperature": 0, "ignore_eos": True}
    with Engine(
        model_path=path,
        device=device,
        dtype="float32",
        skip_tokenizer_init=True,
        max_total_tokens=16384,
        cuda_graph_max_bs=16,
        disable_overlap_schedule=not overlap,
        **extra,
    ) as e:
        outs = e.generate(input_ids=prompts, sampling_params=[dict(sp) for _ in prompts])
    return [o["output_ids"] for o in outs]


def test_engine_greedy_equals_cpu_engine(tiny_ckpts) -> None:
    """The whole runtime (scheduler, overlap loop + FutureMap, graphs, device sampler) on CUDA gives
    the CPU runtime's greedy tokens."""
    path = tiny_ckpts["llama"]
    prompts = _prompts(6, 49152)
    cpu = _engine_outputs(path, "cpu", prompts, overlap=False)
    assert _engine_outputs(path, "cuda", prompts, overlap=True) == cpu
    assert _engine_outputs(path, "cuda", prompts, overlap=False) == cpu


def test_engine_mixed_chunk_equals_cpu_engine(tiny_ckpts) -> None:
    """Mixed batches (decode rows run as 1-token extends next to prefill chunks) on CUDA: the scheduler
    writes those rows' slots to the device table itself, while pure decode passes record them in the
    graph; both must give the CPU runtime's tokens under the same chunking."""
    path = tiny_ckpts["llama"]
    prompts = _prompts(6, 49152)
    extra = dict(enable_mixed_chunk=True, chunked_prefill_size=16)
    cpu = _engine_outputs(path, "cpu", prompts, overlap=False, **extra)
    assert _engine_outputs(path, "cuda", prompts, overlap=True, **extra) == cpu


def test_nccl_world_of_one_equals_plain(tiny_ckpts) -> None:
    """--force-distributed on one GPU: NCCL all-reduce / all-gather (also inside the captured decode
    graphs) and the gloo object broadcasts of the TP path, in a world of one, give the same tokens."""
    path = tiny_ckpts["qwen3"]
    prompts = _prompts(5, 49152)
    plain = _engine_outputs(path, "cuda", prompts, overlap=True)
    assert _engine_outputs(path, "cuda", prompts, overlap=True, force_distributed=True) == plain
