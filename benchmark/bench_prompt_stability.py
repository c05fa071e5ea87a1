"""Where does your prompt break the prefix match? Stable prompt vs a request id at the start vs at
the end of a long system prompt.

Each case sends `--rounds` rounds of the same chat request (long system prompt + one question,
`--max-new-tokens` answer) one after another, after a cache flush. Only the request id changes
between rounds. Reported per case: prompt tokens, cached_tokens of every round, and the median TTFT
of rounds 2..N (round 1 is cold in every case).

    python benchmark/bench_prompt_stability.py --port 30000 --system-len 2000 --output-file stab.jsonl

Native /generate is the default (the chat template is applied here, as the server would); with
`--backend sglang-oai-chat` the messages go to /v1/chat/completions and cached tokens come from
usage.prompt_tokens_details (the server needs --enable-cache-report).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any, Dict, List, Optional

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serving import server_api
from serving.datasets import load_corpus_ids

CASES = ("stable", "id-at-start", "id-at-end")
QUESTION = "In two sentences, what does the keeper write in her book each night?"


def build_system_prompt(tokenizer: Any, n_tokens: int, corpus: Optional[str]) -> str:
    """The corpus repeated to about n_tokens tokens (cut on a token boundary)."""
    ids = load_corpus_ids(tokenizer, corpus)
    reps = n_tokens // len(ids) + 1
    body = tokenizer.decode((ids * reps)[:n_tokens], skip_special_tokens=True)
    return (
        "You are a helpful assistant for a coastal archive. Reference material follows.\n\n" + body
    )


def system_for(case: str, base: str, rid: str) -> str:
    tag = f"Request id: {rid}"
    if case == "id-at-start":
        return f"{tag}\n{base}"
    if case == "id-at-end":
        return f"{base}\n{tag}"
    return base


def _stream(url: str, body: Dict[str, Any], chat: bool) -> Dict[str, Any]:
    """One streamed request: client TTFT (first chunk with content), prompt and cached tokens."""
    t0 = time.perf_counter()
    ttft = None
    last: Dict[str, Any] = {}
    path = "/v1/chat/completions" if chat else "/generate"
    with requests.post(url + path, json=body, stream=True, timeout=600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            obj = json.loads(data)
            if "error" in obj:
                raise RuntimeError(str(obj["error"]))
            if chat:
                has = any((c.get("delta") or {}).get("content") for c in obj.get("choices") or [])
            else:
                has = bool(obj.get("output_ids"))
            if has and ttft is None:
                ttft = time.perf_counter() - t0
            if chat and obj.get("usage"):
                last = obj
            elif not chat:
                last = obj
    if chat:
        usage = last.get("usage") or {}
        prompt = usage.get("prompt_tokens")
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    else:
        meta = last.get("meta_info", {})
        prompt, cached = meta.get("prompt_tokens"), meta.get("cached_tokens")
    return {
        "ttft": ttft,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "latency": time.perf_counter() - t0,
    }


def run_case(
    url: str, tokenizer: Any, case: str, base: str, args: argparse.Namespace
) -> Dict[str, Any]:
    if not args.no_flush and not server_api.flush_cache(url):
        print("warning: /flush_cache did not succeed", file=sys.stderr)
    chat = args.backend == "sglang-oai-chat"
    rounds: List[Dict[str, Any]] = []
    for _ in range(args.rounds):
        rid = uuid.uuid4().hex
        messages = [
            {"role": "system", "content": system_for(case, base, rid)},
            {"role": "user", "content": QUESTION},
        ]
        if chat:
            body = {
                "model": args.model or server_api.get_model_name(url),
                "messages": messages,
                "max_tokens": args.max_new_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        else:
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            body = {
                "text": text,
                "stream": True,
                "sampling_params": {"max_new_tokens": args.max_new_tokens, "temperature": 0},
            }
        rounds.append(_stream(url, body, chat))
    warm = rounds[1:] or rounds
    return {
        "case": case,
        "prompt_tokens": rounds[0]["prompt_tokens"],
        "cached_tokens": [r["cached_tokens"] for r in rounds],
        "ttft_ms": [round(r["ttft"] * 1000, 1) if r["ttft"] is not None else None for r in rounds],
        "median_cached_tokens_warm": statistics.median(r["cached_tokens"] or 0 for r in warm),
        "median_ttft_ms_warm": statistics.median((r["ttft"] or 0) * 1000 for r in warm),
    }


def format_table(rows: List[Dict[str, Any]]) -> str:
    stable = next((r for r in rows if r["case"] == "stable"), None)
    head = (
        f"{'case':<12} {'prompt tok':>10} {'cached tok per round':<34} {'median cached (2..)':>19} "
        f"{'median TTFT ms (2..)':>20} {'TTFT / stable':>13}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio = (
            r["median_ttft_ms_warm"] / stable["median_ttft_ms_warm"]
            if stable and stable["median_ttft_ms_warm"]
            else float("nan")
        )
        cached = ",".join(str(c) for c in r["cached_tokens"])
        lines.append(
            f"{r['case']:<12} {r['prompt_tokens']:>10} {cached:<34} {r['median_cached_tokens_warm']:>19} "
            f"{r['median_ttft_ms_warm']:>20.1f} {ratio:>13.2f}"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--base-url", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--backend", choices=("sglang", "sglang-oai-chat"), default="sglang")
    p.add_argument("--model", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--corpus", default=None)
    p.add_argument(
        "--system-len", type=int, default=2000, help="Tokens of reference text in the system prompt"
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument(
        "--no-flush", action="store_true", help="Do not flush the cache before each case"
    )
    p.add_argument("--output-file", default=None, help="Append one JSON line with every case")
    args = p.parse_args(argv)

    url = (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")
    server_api.wait_ready(url)
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    info = server_api.get_model_info(url)
    tokenizer = get_tokenizer(args.tokenizer or info.get("tokenizer_path") or info["model_path"])
    base = build_system_prompt(tokenizer, args.system_len, args.corpus)
    rows = [run_case(url, tokenizer, c, base, args) for c in args.cases.split(",")]
    print(format_table(rows), flush=True)
    if args.output_file:
        rec = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "backend": args.backend,
            "loadavg_1m_after": os.getloadavg()[0],
            "system_len": args.system_len,
            "rounds": args.rounds,
            "max_new_tokens": args.max_new_tokens,
            "cases": rows,
        }
        with open(args.output_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
