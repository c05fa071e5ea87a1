"""benchmark/bench_serving.py end to end against the shared server, and its pieces offline.

The server runs are tiny (a handful of prompts, a few output tokens) so they stay fast on a 2-core CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmark", "bench_serving.py")
sys.path.insert(0, os.path.join(ROOT, "benchmark"))

from serving.client import RequestResult  # noqa: E402
from serving.datasets import sample_generated_shared_prefix, sample_random  # noqa: E402
from serving.metrics import peak_concurrency, summarize  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def run_bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, BENCH, "--disable-tqdm", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def table_value(stdout: str, label: str) -> str:
    for line in stdout.splitlines():
        if line.startswith(label):
            return line[len(label) :].strip()
    raise AssertionError(f"{label!r} not in:\n{stdout}")


def last_record(path) -> dict:
    with open(path) as f:
        return json.loads(f.read().splitlines()[-1])


@pytest.fixture(scope="module")
def tokenizer():
    from sglang.srt.utils.embedded_model import embedded_model_path
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    return get_tokenizer(embedded_model_path())


# ---------------------------------------------------------------------------- against the server
def test_random_native_run_writes_table_jsonl_and_plot(server_url, tmp_path):
    out = tmp_path / "runs.jsonl"
    proc = run_bench(
        "--base-url",
        server_url,
        "--dataset-name",
        "random",
        "--num-prompts",
        "6",
        "--random-input-len",
        "48",
        "--random-output-len",
        "8",
        "--max-concurrency",
        "3",
        "--output-file",
        str(out),
        "--tag",
        "smoke",
        "--output-details",
    )
    s = proc.stdout
    assert table_value(s, "Backend:") == "sglang"
    assert table_value(s, "Successful requests:") == "6"
    assert table_value(s, "Failed requests:") == "0"
    assert table_value(s, "Total generated tokens:") == "48"
    retok = int(table_value(s, "Total generated tokens (retokenized):"))
    for label in (
        "Request throughput (req/s):",
        "Input token throughput (tok/s):",
        "Mean TTFT (ms):",
        "Median TPOT (ms):",
        "P99 ITL (ms):",
        "Median E2E Latency (ms):",
        "Server cache hit rate (since start):",
    ):
        float(table_value(s, label))

    rec = last_record(out)
    assert rec["tag"] == "smoke" and rec["backend"] == "sglang" and rec["num_prompts"] == 6
    assert rec["completed"] == 6 and rec["failed"] == 0
    assert rec["total_input_tokens"] == 6 * 48 and rec["total_output_tokens"] == 48
    assert rec["total_output_tokens_retokenized"] == retok and 0 < retok <= 48 + 6
    assert rec["empty_outputs"] == 0
    assert 0 < rec["mean_ttft_ms"] <= rec["mean_e2e_latency_ms"]
    assert 1 <= rec["peak_concurrency"] <= 3
    d = rec["details"]
    assert d["output_lens"] == [8] * 6 and all(len(x) == 7 for x in d["itls"])
    assert all(1 <= f <= 8 for f in d["frames"])
    png = tmp_path / "runs-smoke.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_shared_prefix_run_reports_cache_hits(server_url, tmp_path):
    out = tmp_path / "gsp.jsonl"
    proc = run_bench(
        "--base-url",
        server_url,
        "--dataset-name",
        "generated-shared-prefix",
        "--gsp-num-groups",
        "2",
        "--gsp-prompts-per-group",
        "3",
        "--gsp-system-prompt-len",
        "64",
        "--gsp-question-len",
        "8",
        "--gsp-output-len",
        "2",
        "--gsp-ordered",
        "--max-concurrency",
        "1",
        "--flush-cache",
        "--output-file",
        str(out),
        "--no-plot",
    )
    rec = last_record(out)
    assert rec["completed"] == 6 and rec["gsp"]["system_prompt_len"] == 64
    # One cold prefill per group, then each later prompt of the group reuses its 64-token prefix.
    assert rec["run_cache_hit_rate"] >= (4 * 64) / (6 * 72) - 1e-9
    assert float(table_value(proc.stdout, "Prompt cache hit rate (this run):")) > 0.5


def test_rejected_requests_are_failures_with_their_message(server_url, tmp_path):
    out = tmp_path / "bad.jsonl"
    ctx = requests.get(server_url + "/server_info", timeout=30).json()["context_len"]
    proc = run_bench(
        "--base-url",
        server_url,
        "--dataset-name",
        "random-ids",
        "--num-prompts",
        "2",
        "--random-input-len",
        str(ctx + 10),
        "--random-output-len",
        "4",
        "--warmup-requests",
        "0",
        "--output-file",
        str(out),
        "--no-plot",
    )
    rec = last_record(out)
    assert rec["completed"] == 0 and rec["failed"] == 2
    [(msg, n)] = rec["failures"].items()
    assert n == 2 and msg.startswith("HTTP 400") and "context length" in msg
    assert table_value(proc.stdout, "Failed requests:") == "2"


@pytest.mark.parametrize("backend", ["sglang-oai", "sglang-oai-chat"])
def test_openai_backends_when_present(server_url, tmp_path, backend):
    if requests.get(server_url + "/v1/models", timeout=30).status_code != 200:
        pytest.skip("the server has no OpenAI routes yet")
    out = tmp_path / "oai.jsonl"
    run_bench(
        "--base-url",
        server_url,
        "--backend",
        backend,
        "--dataset-name",
        "random",
        "--num-prompts",
        "3",
        "--random-input-len",
        "32",
        "--random-output-len",
        "6",
        "--output-file",
        str(out),
        "--no-plot",
    )
    rec = last_record(out)
    assert rec["completed"] == 3 and rec["failed"] == 0
    assert rec["total_output_tokens_retokenized"] > 0


# ---------------------------------------------------------------------------- offline pieces
def test_compare_draws_a_chart(tmp_path):
    paths = []
    for tag, dur in (("radix-off", 20.0), ("radix-on", 8.0)):
        p = tmp_path / f"{tag}.jsonl"
        p.write_text(
            json.dumps(
                {
                    "tag": tag,
                    "duration": dur,
                    "request_throughput": 64 / dur,
                    "output_throughput": 100.0,
                    "mean_ttft_ms": dur * 100,
                    "median_ttft_ms": dur * 90,
                    "mean_itl_ms": 30.0,
                    "mean_e2e_latency_ms": dur * 200,
                    "run_cache_hit_rate": 0.0 if tag == "radix-off" else 0.8,
                    "failed": 0,
                }
            )
            + "\n"
        )
        paths.append(str(p))
    png = tmp_path / "cmp.png"
    proc = run_bench("--compare", *paths, "--plot-file", str(png))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("duration"))
    assert line.split()[-1] == "0.40"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_datasets_lengths_and_shared_prefixes(tokenizer):
    rng = np.random.default_rng(0)
    reqs = sample_random(tokenizer, 5, 40, 7, 1.0, rng)
    assert all(
        r.prompt_len == 40 == len(r.prompt_ids) and r.output_len == 7 and r.prompt for r in reqs
    )
    gsp = sample_generated_shared_prefix(tokenizer, 3, 4, 32, 5, 2, np.random.default_rng(1))
    assert len(gsp) == 12 and {r.group for r in gsp} == {0, 1, 2}
    for g in range(3):
        members = [r for r in gsp if r.group == g]
        assert len({tuple(r.prompt_ids[:32]) for r in members}) == 1  # one system prompt per group
        assert len({tuple(r.prompt_ids[32:]) for r in members}) == 4  # distinct questions
        assert all(len(r.prompt_ids) == 37 and r.system and r.user for r in members)
    heads = {tuple(r.prompt_ids[:32]) for r in gsp}
    assert len(heads) == 3
    # Multi-turn users: turn t extends the same user's turn t - 1 prompt; turns are sent in order.
    mt = sample_generated_shared_prefix(
        tokenizer, 2, 3, 16, 4, 2, np.random.default_rng(2), False, 3
    )
    assert len(mt) == 18 and [r.prompt_len for r in mt] == [20] * 6 + [24] * 6 + [28] * 6
    for later in mt[6:]:
        earlier = [r for r in mt if r.prompt_len == later.prompt_len - 4]
        assert any(later.prompt_ids[: len(e.prompt_ids)] == e.prompt_ids for e in earlier)
    special = set(tokenizer.all_special_ids)
    assert not any(t in special for r in gsp for t in r.prompt_ids)


def test_summary_counts_empty_outputs_and_peak_concurrency():
    class Tok:
        def encode(self, text, add_special_tokens=False):
            return text.split()

    rs = [
        RequestResult(
            success=True,
            output_len=3,
            prompt_len=10,
            generated_text="a b c",
            ttft=0.1,
            latency=0.5,
            itl=[0.2, 0.0],
            start=0.0,
            cached_tokens=4,
        ),
        RequestResult(
            success=True,
            output_len=3,
            prompt_len=10,
            generated_text="",
            ttft=0.2,
            latency=0.4,
            itl=[0.1, 0.1],
            start=0.3,
            cached_tokens=0,
        ),
        RequestResult(
            success=False, status=503, error="HTTP 503: The request queue is full.", start=0.9
        ),
    ]
    s = summarize(rs, 1.0, Tok(), {"cache_hit_rate": 0.5})
    assert s["completed"] == 2 and s["failed"] == 1
    assert s["failures"] == {"HTTP 503: The request queue is full.": 1}
    assert s["total_output_tokens"] == 6 and s["total_output_tokens_retokenized"] == 3
    assert s["empty_outputs"] == 1
    assert s["run_cache_hit_rate"] == pytest.approx(0.2)
    assert s["itl_zero_fraction"] == pytest.approx(0.25)
    assert peak_concurrency(rs) == 2
