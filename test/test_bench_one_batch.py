"""The GPU benchmarks' code paths on the CPU at tiny shapes: bench_one_batch (ours + the HF peer,
floors, JSON), the offline-throughput Engine run (overlap on and off, --skip-tokenizer-init), and the
session summary that reads both."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmark"
sys.path.insert(0, str(BENCH))


def test_bench_one_batch_cpu(tmp_path, capsys) -> None:
    import bench_one_batch

    out = tmp_path / "one_batch.jsonl"
    summary = bench_one_batch.main(
        [
            "--model-config",
            "tiny-llama",
            "--batch-size",
            "1",
            "3",
            "--input-len",
            "24",
            "--output-len",
            "3",
            "--long-prefill",
            "40",
            "--hf",
            "--hf-batch-size",
            "1",
            "--hf-output-len",
            "3",
            "--bench-sampler",
            "--max-total-tokens",
            "4096",
            "--result-file",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert "max_total_num_tokens 4096" in text and "decode floor" in text
    rows = {(r["system"], r["batch_size"], r["input_len"]): r for r in summary["rows"]}
    assert set(rows) == {
        ("hf", 1, 24),
        ("hf", 1, 40),
        ("ours", 1, 24),
        ("ours", 3, 24),
        ("ours", 1, 40),
    }
    ours = rows[("ours", 3, 24)]
    assert ours["decode_step_s"] > 0 and ours["decode_pipelined_s"] > 0 and ours["prefill_s"] > 0
    assert ours["decode_ratio"] == ours["decode_step_s"] / ours["decode_floor_s"]
    assert rows[("ours", 1, 24)]["speedup_vs_hf"] > 0
    assert summary["weight_bytes"] > 0 and summary["bandwidth"] > 0 and len(summary["sampler"]) == 2
    assert json.loads(out.read_text())["model"] == "tiny-llama"


def test_bench_offline_throughput_cpu(tmp_path, capsys) -> None:
    import bench_offline_throughput
    import gpu_summary

    out = tmp_path / "offline.jsonl"
    args = [
        "--model-config",
        "tiny-qwen3",
        "--num-prompts",
        "6",
        "--input-len-range",
        "5",
        "30",
        "--output-len-range",
        "3",
        "12",
        "--max-total-tokens",
        "4096",
        "--result-file",
        str(out),
    ]
    trace = tmp_path / "trace.jsonl"
    on = bench_offline_throughput.main(args + ["--step-trace", str(trace)])
    off = bench_offline_throughput.main(args + ["--disable-overlap-schedule"])
    for res in (on, off):
        assert res["output_tokens"] == res["expected_output_tokens"] and res["output_tok_s"] > 0
    assert on["overlap"] and not off["overlap"]
    # The step trace of the timed run: every output token but each request's first (sampled by its
    # prefill) is one row of one decode pass; every pass ends after it starts.
    groups = on["trace"]["groups"]
    decoded = sum(g["tokens"] for g in groups if g["name"].startswith("decode"))
    assert decoded == on["output_tokens"] - on["num_prompts"]
    assert sum(g["passes"] for g in groups if g["name"] == "extend") >= 1
    assert on["trace"]["busy_ms"] > 0 and on["trace"]["idle_ms"] >= 0
    assert on["floor"]["floor_s"] > 0 and on["floor"]["decode_steps"] >= 11
    gpu_summary.main(str(tmp_path))
    assert "overlap off" in capsys.readouterr().out


def test_bench_long_context_cpu(tmp_path) -> None:
    import bench_long_context

    out = tmp_path / "long.jsonl"
    s = bench_long_context.main(
        "--model-config tiny-llama --batch-size 1 4 --context 64 3000 --prefill 200 --chunk 64 "
        f"--steps 3 --max-total-tokens 4096 --hf-cells 1x64 --result-file {out}".split()
    )
    cells = {(c["batch_size"], c["context"]): c for c in s["decode"]}
    assert cells[(1, 3000)]["fits"] and not cells[(4, 3000)]["fits"]  # 12,000 tokens > the pool
    assert all(c["ratio"] > 0 for c in s["decode"] if c["fits"])
    assert cells[(1, 64)]["hf_step_s"] > 0
    assert s["prefill"][0]["ratio"] > 0 and json.loads(out.read_text())["chunk"] == 64


def test_chunked_prefill_matches_one_pass() -> None:
    """StaticBatch.prefill_chunked (the long-prefill bench's path) gives the one-pass logits."""
    import torch
    from bench_one_batch import make_runner, parse_args
    from model_configs import write_model_config

    args = parse_args("--model-config tiny-llama --max-total-tokens 2048 --device cpu".split())
    runner = make_runner(args, write_model_config("tiny-llama"), 2, 300)
    from sglang.srt.model_executor.static_batch import StaticBatch

    prompt = torch.randint(3, 500, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    sb = StaticBatch(runner)
    with torch.no_grad():
        whole = sb.prefill([prompt]).next_token_logits.clone()
        sb.release()
        chunked = sb.prefill_chunked(prompt, 64).next_token_logits
        sb.release()
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-4)


def test_offline_floor_counts_steps_kv_reads_and_prefill() -> None:
    from bench_offline_throughput import offline_floor
    from bench_one_batch import ModelFacts

    facts = ModelFacts(
        weight_bytes=1000,
        layer_matmul_params=10,
        lm_head_params=0,
        num_layers=1,
        num_heads=1,
        head_dim=1,
        kv_bytes_per_token=2,
    )
    # Two requests: in 3 / out 2 and in 1 / out 4, all fitting at once.
    f = offline_floor(facts, [3, 1], [2, 4], max_running=8, bw=100.0, flops=10.0)
    assert f["decode_steps"] == 3  # max(out) - 1: the first token comes from the prefill
    assert f["weights_s"] == 3 * 1000 / 100
    # KV reads per output token after the first: (3+1) and (1+1) + (1+2) + (1+3).
    assert f["kv_s"] == (4 + 2 + 3 + 4) * 2 / 100
    assert f["prefill_s"] == (2 * 4 * 10 + 4 * (3 * 4 / 2 + 1)) / 10
    # Only one request at a time: the steps are the sum of the decode tokens.
    assert offline_floor(facts, [3, 1], [2, 4], 1, 100.0, 10.0)["decode_steps"] == 4


def test_step_trace_report_floors_and_idle() -> None:
    """Each pass against its own floor; gaps between passes are device idle time."""
    from bench_one_batch import ModelFacts
    from step_trace_report import summarize

    facts = ModelFacts(
        weight_bytes=1000,
        layer_matmul_params=10,
        lm_head_params=5,
        num_layers=2,
        num_heads=4,
        head_dim=8,
        kv_bytes_per_token=100,
    )
    rows = [
        dict(
            mode="extend", bs=2, tokens=30, kv_tokens=30, attn_pairs=200, start_ms=0.0, end_ms=4.0
        ),
        dict(mode="decode", bs=2, tokens=2, kv_tokens=32, attn_pairs=0, start_ms=5.0, end_ms=6.0),
        dict(
            mode="decode", bs=200, tokens=200, kv_tokens=9, attn_pairs=0, start_ms=6.0, end_ms=8.5
        ),
    ]
    s = summarize(rows, facts, bw=1e6, flops=1e6)
    assert (s.wall_ms, s.busy_ms, s.idle_ms, s.long_gaps) == (8.5, 7.5, 1.0, 0)
    by = {g.name: g for g in s.groups}
    # extend: (2*30*10 + 2*2*5 + 4*8*4*2*200) FLOPs = 51,820 at 1e6/s = 51.82 ms (> weights 1 ms)
    assert abs(by["extend"].floor_ms - 51.82) < 1e-9
    # decode: (1000 weight bytes + 32 * 100 KV bytes) at 1e6 B/s = 4.2 ms
    assert abs(by["decode bs 2-8"].floor_ms - 4.2) < 1e-9
    assert by["decode bs 129-256"].passes == 1 and by["decode bs 129-256"].tokens == 200


@pytest.mark.parametrize("breadth", [1, 3])
def test_bench_speculative_cpu(breadth: int) -> None:
    """The oracle-draft benchmark at a tiny shape: with every draft kept, each verify emits all 4
    tokens (the last steps trimmed by the length cap), the tokens equal the plain run's, and with
    none kept each verify emits exactly one. Breadth 3: the same through tree verify passes (5
    nodes: the oracle's chain at rows 1, 4, 5 beside two wrong siblings; its KV moves into place)."""
    import bench_speculative

    drafts = 4 if breadth == 1 else 6
    out = bench_speculative.main(
        "--model-config tiny-llama --batch-size 1 3 --accept 0 1.0 --input-len 24 "
        f"--output-len 13 --max-total-tokens 4096 --num-draft-tokens {drafts} "
        f"--tree-breadth {breadth}".split()
    )
    rows = {(r["batch_size"], r["accept"]): r for r in out["rows"]}
    for bs in (1, 3):
        assert rows[(bs, 1.0)]["same_tokens"] and rows[(bs, 0.0)]["same_tokens"]
        assert rows[(bs, 0.0)]["accept_length"] == 1.0
        # 12 decode tokens per request: chains 4 + 4 + 4 in three verify passes; trees 4 + 4 then
        # 2 + 2, where the length cap leaves 3 and 1 nodes (the chain's first draft among them).
        assert rows[(bs, 1.0)]["accept_length"] == (4.0 if breadth == 1 else 3.0)


@pytest.mark.parametrize("drafter,topk", [("model", 1), ("model", 3), ("EAGLE3", 1)])
def test_bench_speculative_real_draft_cpu(drafter: str, topk: int) -> None:
    """With a real draft model or a random EAGLE-3 head drafting every verify (its cost paid, its
    tokens swapped for the oracle's), the verdicts are the oracle's: the tokens equal the plain
    run's and the accept lengths equal the oracle-only run of the same tree shape."""
    import bench_speculative

    common = (
        "--model-config tiny-llama --batch-size 1 3 --accept 0 1.0 --input-len 24 "
        "--output-len 13 --max-total-tokens 4096 --num-draft-tokens 6"
    ).split()
    source = "--draft-model-config tiny-llama" if drafter == "model" else f"--eagle {drafter}"
    real = bench_speculative.main(
        f"{source} --topk {topk} --num-steps {3 if topk > 1 else 5}".split() + common
    )
    oracle = bench_speculative.main(common + ["--tree-breadth", str(real["tree_breadth"])])
    assert real["tree_breadth"] == (1 if topk == 1 else 3)
    for r, o in zip(real["rows"], oracle["rows"]):
        assert (r["batch_size"], r["accept"]) == (o["batch_size"], o["accept"])
        assert r["accept_length"] == o["accept_length"]
        assert r.get("same_tokens", True)


@pytest.mark.parametrize("shape", ["--topk 1 --num-steps 3", "--topk 3 --num-steps 3"])
def test_bench_eagle_draft_cpu(shape: str, capsys) -> None:
    """The EAGLE drafting benchmark: at most one round per new token after the prefill's, and a
    round runs at most num_steps head passes whatever the batch (one per depth; fewer where the
    length cap shrinks the last drafts). Drafting four requests one by one would run up to 12."""
    import bench_eagle_draft

    rows = bench_eagle_draft.main(
        f"--batch-size 1 4 --output-len 12 --num-draft-tokens 4 --count-ops {shape} "
        "--profile-rounds 2".split()
    )
    for r in rows:
        assert 0 < r["rounds"] <= 11
        assert 1 <= r["head_passes_per_round"] <= 3
        assert r["aten_ops_per_round"] > 0
        assert r["median_ms"] > 0
    assert capsys.readouterr().out.count("rounds profiled") == 2  # one table per batch size


def test_bench_ngram_text_cpu() -> None:
    """NGRAM on real text with the embedded trained model: asked to copy a passage, the model's
    greedy continuation repeats the prompt, so verify passes accept drafts (more than one token per
    verify), and the tokens equal plain decoding's for every request."""
    import bench_ngram_text

    rows = bench_ngram_text.main(
        "--workload quote --batch-size 2 --num-draft-tokens 4 --max-new-tokens 24".split()
    )
    plain = next(r for r in rows if r.variant == "plain")
    spec = next(r for r in rows if r.variant == "chain k=4")
    assert spec.same_tokens == 1.0 and spec.output_tokens == plain.output_tokens
    assert spec.tokens_per_verify > 1.0 and spec.steps < plain.steps
