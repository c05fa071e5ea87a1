"""The Triton attention backend, the CUDA-graph runner's padding logic and the fused-op bindings,
checked on the CPU through the Triton interpreter against the torch-native path.

Run as a script (TRITON_INTERPRET must be set before triton is imported):
    python test/backend_checks.py MODEL_DIR [--arch NAME]
MODEL_DIR holds a small random checkpoint (test/model_fixtures.py writes one). Exits nonzero on
any mismatch. The CUDA versions of these checks are test/gpu/test_triton_backend.py.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first `import triton`

import argparse
import math
import time
from typing import List

import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.static_batch import StaticBatch
from sglang.srt.server_args import ServerArgs

FAILURES: List[str] = []


def report(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        FAILURES.append(name)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return math.inf
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def make_runner(path: str, kv_dtype: str = "auto") -> ModelRunner:
    sa = ServerArgs(
        model_path=path, max_total_tokens=2048, max_running_requests=8, kv_cache_dtype=kv_dtype
    )
    return ModelRunner.from_server_args(ModelConfig.from_path(path), sa, "cpu", show_progress=False)


def use_triton(runner: ModelRunner) -> None:
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    # 4 SMs and 4 splits: small test batches still get several splits per request.
    runner.attn_backend = TritonAttnBackend(runner, max_kv_splits=4, num_sms=4)


def run_greedy(runner: ModelRunner, prompts, shared, steps: int, forced=None):
    """Greedy tokens and every step's logits (cloned: graph outputs are reused buffers). With
    `forced` (tokens of another run) those tokens are fed instead, so logits stay comparable even
    where a near-tie flips an argmax."""
    sb = StaticBatch(runner)
    try:
        out = sb.prefill(prompts, shared)
        logits = [out.next_token_logits.clone()]
        toks = [[] for _ in prompts]
        for step in range(steps):
            nxt = out.next_token_logits.argmax(-1)
            if forced is not None:
                nxt = torch.tensor([f[step] for f in forced])
            for t, n in zip(toks, nxt.tolist()):
                t.append(n)
            out = sb.decode(nxt)
            logits.append(out.next_token_logits.clone())
        return toks, logits
    finally:
        sb.release()


def prompts_for(vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(3, vocab, (40,), generator=g).tolist()
    other = torch.randint(3, vocab, (23,), generator=g).tolist()
    # A request sharing a 30-token prefix with request 0 (extend over a cached prefix), a 1-token one.
    return [base, base[:30] + other[:5], other, base[:1]], [-1, 0, -1, -1]


def check_backend_vs_native(path: str, seed: int) -> None:
    ref_runner, tri_runner = make_runner(path), make_runner(path)
    use_triton(tri_runner)
    prompts, shared = prompts_for(ref_runner.vocab_size, seed)
    ref_toks, ref_logits = run_greedy(ref_runner, prompts, shared, steps=5)
    tri_toks, tri_logits = run_greedy(tri_runner, prompts, shared, steps=5)
    errs = [rel(a, b) for a, b in zip(tri_logits, ref_logits)]
    report(
        "triton backend logits vs torch_native (extend + decode)",
        max(errs) < 1e-4,
        f"max rel {max(errs):.1e}",
    )
    report("triton backend greedy tokens == torch_native", tri_toks == ref_toks)


def check_graph_runner(path: str, seed: int) -> None:
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner, EagerReplayGraph

    eager, graphed = make_runner(path), make_runner(path)
    use_triton(eager)
    use_triton(graphed)
    graphed.graph_runner = CudaGraphRunner(
        graphed, capture_bs=[1, 2, 8], graph_cls=EagerReplayGraph
    )
    prompts, shared = prompts_for(eager.vocab_size, seed + 1)
    # 4 requests replay the bs-8 graph with 4 padded rows; then a 1-request batch replays bs 1 and a
    # 2-request batch replays bs 2 (rows past 2 of the bs-8 buffers hold stale data it must ignore).
    for sel in ([0, 1, 2, 3], [2], [1, 3]):
        ps = [prompts[i] for i in sel]
        sh = [-1] * len(ps)
        # Two decode replays: the second reads KV the first graphed step wrote.
        e_toks, e_logits = run_greedy(eager, ps, sh, steps=2)
        g_toks, g_logits = run_greedy(graphed, ps, sh, steps=2)
        errs = [rel(a, b) for a, b in zip(g_logits, e_logits)]
        report(
            f"graph runner (bs {len(ps)} -> {graphed.graph_runner.padded_size(len(ps))}) == eager",
            max(errs) < 1e-5 and g_toks == e_toks,
            f"max rel {max(errs):.1e}",
        )


def check_graph_hidden_states(path: str, seed: int) -> None:
    """Graphs captured with capture_hidden (an EAGLE target's verify passes) return the same
    logits and hidden states as the eager pass, for the last layer and for named layers."""
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner, EagerReplayGraph

    for capture in ((), (0, 1)):
        eager, graphed = make_runner(path), make_runner(path)
        use_triton(eager)
        use_triton(graphed)
        graphed.graph_runner = CudaGraphRunner(
            graphed, capture_bs=[4], graph_cls=EagerReplayGraph, capture_hidden=capture
        )
        prompts, _ = prompts_for(eager.vocab_size, seed + 2)
        outs = []
        for runner in (eager, graphed):
            sb = StaticBatch(runner)
            try:
                first = sb.prefill(prompts[:3], [-1] * 3).next_token_logits.argmax(-1)
                fb = sb.prepare_decode(first)
                fb.capture_hidden = capture
                out = runner.forward(fb)
                outs.append((out.next_token_logits.clone(), out.hidden_states.clone()))
            finally:
                sb.release()
        (e_logits, e_hidden), (g_logits, g_hidden) = outs
        report(
            f"graph runner with capture_hidden={capture} (bs 3 -> 4) == eager",
            graphed.graph_runner.num_replays == 1
            and g_hidden.shape == e_hidden.shape
            and rel(g_hidden, e_hidden) < 1e-5
            and rel(g_logits, e_logits) < 1e-5,
            f"hidden {tuple(g_hidden.shape)} max rel {rel(g_hidden, e_hidden):.1e}",
        )


def _head_runner(target: ModelRunner, head) -> ModelRunner:
    """An EAGLE head's runner over the target's request table (as proposers._paged_eagle builds)."""
    import dataclasses

    from sglang.srt.speculative.eagle_model import EagleDraftModel, head_model_config

    memory = dataclasses.replace(target.memory_section, exact_pool=True, eagle_head_path=None)
    runner = ModelRunner(
        head_model_config(head, target.model_config),
        dataclasses.replace(target.model_section, decode_rows_per_request=2),
        memory,
        "cpu",
        req_to_token_pool=target.req_to_token_pool,
        prebuilt=EagleDraftModel(head),
    )
    use_triton(runner)
    return runner


def check_eagle_head_graphs(path: str, seed: int) -> None:
    """An EAGLE head's decode passes replayed from graphs (bs 3 -> 4, a static feature buffer)
    give the eager passes' logits and output features, twice in a row with new features (the
    buffer is refilled) over KV an extend pass (absorbing 20 positions) wrote."""
    import json
    import tempfile

    from model_fixtures import write_eagle_head

    from sglang.srt.core.forward_batch_info import build_decode_batch, build_extend_batch
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner, EagerReplayGraph
    from sglang.srt.speculative.eagle_head import load_eagle_head

    target = make_runner(path)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    g = torch.Generator().manual_seed(seed)
    embed = target.model.model.embed_tokens.weight.data
    with tempfile.TemporaryDirectory() as d:
        write_eagle_head(d, cfg, "EAGLE", g)
        head = load_eagle_head(d, cfg["num_hidden_layers"], embed, embed)
    eager, graphed = _head_runner(target, head), _head_runner(target, head)
    graphed.graph_runner = CudaGraphRunner(graphed, capture_bs=[4], graph_cls=EagerReplayGraph)
    table, h = target.req_to_token_pool, cfg["hidden_size"]
    rows = table.alloc(3)
    for i, row in enumerate(rows):
        table.write(row, 0, torch.arange(1 + 40 * i, 1 + 40 * i + 30))
    vocab = cfg["vocab_size"]
    ids = torch.randint(0, vocab, (60,), generator=g).tolist()
    feats = torch.randn(60, h, generator=g)
    outs = {}
    for name, runner in (("eager", eager), ("graphed", graphed)):
        locs = torch.cat([table.read(r, 0, 20) for r in rows])
        fb = build_extend_batch(ids, [0] * 3, [20] * 3, rows, locs, "cpu")
        fb.spec_features = feats
        runner.forward(fb)
        got = []
        for step in range(2):
            toks = torch.randint(0, vocab, (3,), generator=torch.Generator().manual_seed(step))
            locs = torch.stack([table.read(r, 20 + step, 21 + step)[0] for r in rows])
            fb = build_decode_batch(toks, [21 + step] * 3, rows, locs, "cpu")
            fb.spec_features = torch.randn(3, h, generator=torch.Generator().manual_seed(9 + step))
            out = runner.forward(fb)
            got.append((out.next_token_logits.clone(), out.hidden_states.clone()))
        outs[name] = got
    for table_row in rows:
        table.free(table_row)
    errs = [
        max(rel(gl, el), rel(gh, eh)) for (el, eh), (gl, gh) in zip(outs["eager"], outs["graphed"])
    ]
    report(
        "EAGLE head graphs (2 decode replays, bs 3 -> 4, new features each) == eager",
        graphed.graph_runner.num_replays == 2 and max(errs) < 1e-5,
        f"replays {graphed.graph_runner.num_replays}, max rel {max(errs):.1e}",
    )


def check_fp8_kv(path: str, seed: int) -> None:
    """fp8 pools: power-of-two scales are exact in floating point, so a pool run with k_scale 0.5 /
    v_scale 2 must give the unit-scale run's logits (a missing or doubled scale would not); and the
    logits stay near the full-precision KV run's (e4m3 keeps 3 mantissa bits)."""
    import sglang.srt.layers.attention.triton_backend as tb
    from sglang.srt.layers.triton_ops.kv_store import store_kv, store_kv_ref

    # The interpreter's fp32 -> fp8 cast is not the GPU's (it loses small values), so the Triton
    # store is checked on values that are exact in e4m3 whatever the rounding, and the model-level
    # runs below store through the torch twin. test/gpu runs the real cast.
    g = torch.Generator().manual_seed(seed)
    mant = 1 + torch.randint(0, 8, (9, 2, 64), generator=g) / 8
    expo = torch.randint(-4, 4, (9, 2, 64), generator=g).float()
    sign = torch.randint(0, 2, (9, 2, 64), generator=g) * 2 - 1
    exact = sign * mant * torch.pow(2.0, expo)
    kb = torch.zeros(12, 2, 64, dtype=torch.float8_e4m3fn)
    bufs = [kb.clone() for _ in range(4)]
    loc = torch.randperm(11, generator=g)[:9] + 1
    store_kv(bufs[0], bufs[1], loc, exact * 0.5, exact * 2.0, 0.5, 2.0)
    store_kv_ref(bufs[2], bufs[3], loc, exact * 0.5, exact * 2.0, 0.5, 2.0)
    same = all(
        torch.equal(a.float(), b.float()) for a, b in ((bufs[0], bufs[2]), (bufs[1], bufs[3]))
    )
    report("fp8 store_kv (Triton) == torch on e4m3-exact values, scales 0.5/2", same)
    saved = tb.store_kv
    tb.store_kv = store_kv_ref
    try:
        _check_fp8_models(path, seed)
    finally:
        tb.store_kv = saved


def _check_fp8_models(path: str, seed: int) -> None:
    full = make_runner(path)
    runs = {}
    for name, backend, scales in (
        ("tri_unit", "triton", (1.0, 1.0)),
        ("tri_scaled", "triton", (0.5, 2.0)),
        ("nat_unit", "native", (1.0, 1.0)),
        ("nat_scaled", "native", (0.5, 2.0)),
    ):
        r = make_runner(path, "fp8_e4m3")
        if backend == "triton":
            use_triton(r)
        pool = r.token_to_kv_pool
        assert pool.k_buffer[0].dtype == torch.float8_e4m3fn
        pool.k_scale = [scales[0]] * pool.layer_num
        pool.v_scale = [scales[1]] * pool.layer_num
        runs[name] = r
    prompts, shared = prompts_for(full.vocab_size, seed + 2)
    toks, ref = run_greedy(full, prompts, shared, steps=3)
    out = {n: run_greedy(r, prompts, shared, steps=3, forced=toks)[1] for n, r in runs.items()}

    def err(a, b):
        return max(rel(x, y) for x, y in zip(out[a], out[b] if b in out else ref))

    for be in ("tri", "nat"):
        e = err(f"{be}_scaled", f"{be}_unit")
        report(f"fp8 KV ({be}): scales 0.5/2 == unit scales", e < 1e-2, f"max rel {e:.1e}")
    e = err("tri_scaled", "full")
    report(
        "fp8 KV (triton): close to full-precision KV",
        e < 0.1,
        f"max rel {e:.1e} (torch_native fp8: {err('nat_scaled', 'full'):.1e})",
    )
    # fp32 activations on the CPU: fp8 is a quarter of their KV bytes (half of bf16's on a GPU).
    report("fp8 KV: 1 byte per element", runs["nat_unit"].cell_size() * 4 == full.cell_size())


def check_fused_bindings(seed: int) -> None:
    from sglang.srt.layers.fused_ops_binding import triton_rmsnorm, triton_rotary
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.rotary_embedding import QKNorm, RotaryEmbedding

    g = torch.Generator().manual_seed(seed)
    norm = RMSNorm(96, 1e-6)
    norm.weight.data.copy_(1 + 0.1 * torch.randn(96, generator=g))
    x, r = torch.randn(5, 96, generator=g), torch.randn(5, 96, generator=g)
    y_ref, r_ref = norm(x.clone(), r.clone())
    y, r_new = triton_rmsnorm(x.clone(), norm.weight, 1e-6, r.clone())
    report(
        "fused add-rmsnorm binding == RMSNorm", rel(y, y_ref) < 1e-5 and rel(r_new, r_ref) < 1e-6
    )
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    for rd, sc in ((64, None), (64, scaling), (32, None)):
        rope = RotaryEmbedding(64, 512, 500000.0, sc, rotary_dim=rd)
        pos = torch.randint(0, 512, (7,), generator=g)
        qkv = torch.randn(7, (4 + 2 * 2) * 64, generator=g)
        q, k = qkv[:, :256], qkv[:, 256:384]
        q_ref, k_ref = rope(pos, q.clone(), k.clone())
        q2, k2 = triton_rotary(pos, q, k, rope.cos_sin_cache, 64)  # in place on the qkv views
        report(
            f"fused rotary binding == RotaryEmbedding (rotary_dim {rd}, scaling {bool(sc)})",
            rel(q2, q_ref) < 1e-5 and rel(k2, k_ref) < 1e-5,
        )
    # Qwen3: the per-head q / k norms inside the rotary kernel == the norm modules, then rotary.
    qk = QKNorm(RMSNorm(64, 1e-6), RMSNorm(64, 1e-6))
    for m in qk:
        m.weight.data.copy_(1 + 0.3 * torch.randn(64, generator=g))
    rope = RotaryEmbedding(64, 512, 1000000.0)
    pos = torch.randint(0, 512, (7,), generator=g)
    qkv = 3 * torch.randn(7, (4 + 2 * 2) * 64, generator=g)
    q, k = qkv[:, :256], qkv[:, 256:384]
    q_ref, k_ref = rope(pos, q.clone(), k.clone(), qk)
    q_mods, k_mods = qk.apply(q.clone(), k.clone(), 64)
    q_two, k_two = rope(pos, q_mods, k_mods)  # the modules, then rotary: what the model did before
    q2, k2 = triton_rotary(pos, q, k, rope.cos_sin_cache, 64, qk.kernel_args())
    report(
        "fused rotary + q/k norm binding == norm modules, then RotaryEmbedding",
        rel(q2, q_ref) < 1e-5 and rel(k2, k_ref) < 1e-5 and torch.equal(q_ref, q_two),
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only", default="backend,graph,fp8,fused")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(time.time()) % 10000
    print(f"seed {seed}")
    checks = {
        "backend": lambda: check_backend_vs_native(args.model_dir, seed),
        "graph": lambda: (
            check_graph_runner(args.model_dir, seed),
            check_graph_hidden_states(args.model_dir, seed),
            check_eagle_head_graphs(args.model_dir, seed),
        ),
        "fp8": lambda: check_fp8_kv(args.model_dir, seed),
        "fused": lambda: check_fused_bindings(seed),
    }
    for name in args.only.split(","):
        t0 = time.perf_counter()
        try:
            checks[name]()
        except Exception as e:  # noqa: BLE001 - report and go on: one run shows every failure
            import traceback

            traceback.print_exc()
            report(f"{name} raised {type(e).__name__}: {e}", False)
        print(f"  ({name}: {time.perf_counter() - t0:.1f}s)")
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
