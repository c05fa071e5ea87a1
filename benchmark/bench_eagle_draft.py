"""What an EAGLE head's drafting costs per round, by batch size: chains or trees.

The real scheduler runs in-process on the plain loop with a random EAGLE / EAGLE-3 head of the
target's shape (dummy weights) and greedy requests of fixed length. Each `EagleProposer.draft` call
is timed and its aten operations counted (a count, unlike a time, does not move with the machine's
load, so it compares trees on a shared CPU). Head passes per round should not grow with the batch.

    python benchmark/bench_eagle_draft.py --model-config tiny-llama --batch-size 1 8 32
    python benchmark/bench_eagle_draft.py --model-config tiny-llama --topk 3 --num-steps 3 \\
        --num-draft-tokens 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from bench_speculative import write_head_config
from inproc_scheduler import dummy_scheduler, submit_greedy
from model_configs import write_model_config
from torch.utils._python_dispatch import TorchDispatchMode


class _OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


class _RoundProfile:
    """torch.profiler over rounds [skip, skip + n) (past the first rounds' compiles); prints the
    ops that take the most self time, host and device."""

    def __init__(self, bs: int, n: int, skip: int = 8):
        self.bs, self.n, self.skip, self.prof = bs, n, skip, None

    def before(self, done: int) -> None:
        if self.n and done == self.skip:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=acts)
            self.prof.__enter__()

    def after(self, done: int) -> None:
        if self.prof is None or done != self.skip + self.n:
            return
        self.prof.__exit__(None, None, None)
        events = self.prof.key_averages()
        print(f"--- bs {self.bs}: {self.n} rounds profiled")
        keys = ["self_cpu_time_total"] + (
            ["self_device_time_total"] if torch.cuda.is_available() else []
        )
        for key in keys:
            print(events.table(sort_by=key, row_limit=18, max_name_column_width=60))
        self.prof = None


def measure(model_path: str, bs: int, args) -> dict:
    sched = dummy_scheduler(
        model_path,
        disable_overlap_schedule=True,
        disable_cuda_graph=not args.cuda_graph,
        max_total_tokens=max(bs * (args.input_len + args.output_len + 16), 4096),
        max_running_requests=bs,
        speculative_algorithm=args.eagle,
        speculative_draft_model_path=write_head_config(model_path, args.eagle),
        speculative_eagle_topk=args.topk,
        speculative_num_steps=args.num_steps,
        speculative_num_draft_tokens=args.num_draft_tokens,
    )
    proposer = sched.spec.proposer
    real_draft, layer = proposer.draft, proposer.head.layer
    stats = dict(rounds=0, seconds=0.0, ops=0, passes=0, times=[])

    def counted_layer(*a):
        stats["passes"] += 1
        return layer(*a)

    prof = _RoundProfile(bs, args.profile_rounds)

    def timed_draft(*a):
        counter = _OpCount() if args.count_ops else None
        prof.before(stats["rounds"])
        t = time.perf_counter()
        if counter is None:
            out = real_draft(*a)
        else:
            with counter:
                out = real_draft(*a)
            stats["ops"] += counter.n
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        stats["seconds"] += time.perf_counter() - t
        stats["times"].append(time.perf_counter() - t)
        stats["rounds"] += 1
        prof.after(stats["rounds"])
        return out

    proposer.draft, proposer.head.layer = timed_draft, counted_layer
    vocab = sched.model_config.vocab_size
    for i in range(bs):
        ids = [(7 * i + 13 * j) % (vocab - 2) + 1 for j in range(args.input_len)]
        submit_greedy(sched, f"e{bs}-{i}", ids, args.output_len)
    while sched.state.rid_to_req:
        sched.step()
    n = max(stats["rounds"], 1)
    return dict(
        bs=bs,
        rounds=stats["rounds"],
        ms_per_round=1e3 * stats["seconds"] / n,
        # The first rounds at a new shape compile kernels: the median is the steady state.
        median_ms=1e3 * statistics.median(stats["times"] or [0.0]),
        # Eager passes run the layer; replayed ones are the head's graph replays.
        head_passes_per_round=(stats["passes"] + _replays(proposer)) / n,
        aten_ops_per_round=stats["ops"] / n if args.count_ops else None,
    )


def _replays(proposer) -> int:
    graphs = getattr(getattr(proposer, "runner", None), "graph_runner", None)
    return 0 if graphs is None else graphs.num_replays


def main(argv=None) -> list:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-config", default="tiny-llama")
    p.add_argument("--eagle", default="EAGLE", choices=["EAGLE", "EAGLE3"])
    p.add_argument("--batch-size", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--input-len", type=int, default=40)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--topk", type=int, default=1)
    p.add_argument("--num-steps", type=int, default=3)
    p.add_argument("--num-draft-tokens", type=int, default=4)
    p.add_argument("--count-ops", action="store_true", help="count aten ops (slows the timing)")
    p.add_argument(
        "--cuda-graph", action="store_true", help="target and head replay CUDA graphs (GPU)"
    )
    p.add_argument(
        "--eager-head",
        action="store_true",
        help="the head keeps per-request caches (SGLANG_EAGLE_EAGER=1), not its paged pool",
    )
    p.add_argument(
        "--profile-rounds", type=int, default=0, help="profile this many rounds per batch size"
    )
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # on a shared CPU, one thread keeps rounds comparable
    if args.eager_head:
        os.environ["SGLANG_EAGLE_EAGER"] = "1"
    model_path = write_model_config(args.model_config)
    rows = [measure(model_path, bs, args) for bs in args.batch_size]
    print(
        f"{'bs':>4} {'rounds':>7} {'ms/round':>9} {'median ms':>10} {'head passes':>12} "
        f"{'aten ops':>9}"
    )
    for r in rows:
        ops = "-" if r["aten_ops_per_round"] is None else f"{r['aten_ops_per_round']:.1f}"
        print(
            f"{r['bs']:>4} {r['rounds']:>7} {r['ms_per_round']:>9.2f} {r['median_ms']:>10.2f} "
            f"{r['head_passes_per_round']:>12.2f} {ops:>9}"
        )
    return rows


if __name__ == "__main__":
    main()
