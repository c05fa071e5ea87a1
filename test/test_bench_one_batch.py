"""The GPU benchmarks' code paths on the CPU at tiny shapes: bench_one_batch (ours + the HF peer,
floors, JSON), the offline-throughput Engine run (overlap on and off, --skip-tokenizer-init), and the
session summary that reads both."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
    on = bench_offline_throughput.main(args)
    off = bench_offline_throughput.main(args + ["--disable-overlap-schedule"])
    for res in (on, off):
        assert res["output_tokens"] == res["expected_output_tokens"] and res["output_tok_s"] > 0
    assert on["overlap"] and not off["overlap"]
    gpu_summary.main(str(tmp_path))
    assert "overlap off" in capsys.readouterr().out
